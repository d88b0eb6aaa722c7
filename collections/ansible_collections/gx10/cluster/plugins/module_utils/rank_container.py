# SPDX-License-Identifier: Apache-2.0
"""The `docker run` command line of one vLLM rank, for a supervised rank unit on its node.

Pure Python (standard library only), shared by the ``gx10.cluster.docker_run_argv`` filter and
unit tested. The rank's systemd unit runs the container in the foreground (``docker run --rm``,
so its output reaches the journal and the unit's state is the container's), from an argument
list the controller renders here and writes as JSON: no shell and no unit-file quoting stand
between the settings and the container, so a JSON-valued vLLM flag arrives intact.

The container is the one the unsupervised launch starts with ``community.docker.docker_container``:
host network and IPC (NCCL over the rails, the mp executor's shared memory), the RDMA devices,
every GPU (``--gpus all``, Docker's request of the ``nvidia`` driver for all devices, or none),
an unlimited (or given) locked-memory limit for RDMA registration, a shared-memory size, the
environment files (NCCL settings, extras and the API key; the GID index resolved at rank start),
the model directory read-only, and the labels that identify the rank and its configuration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# A container name as Docker accepts it.
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# A shm size as Docker accepts it: a number with an optional b/k/m/g unit.
_SIZE = re.compile(r"^[0-9]+[bkmgBKMG]?$")
# A label key: no '=' (it would end the key).
_LABEL_KEY = re.compile(r"^[^=\s]+$")
GPUS = ("all", "")


class RankContainerError(ValueError):
    """A container setting Docker would refuse, or that would start another container."""


def docker_run_argv(spec: Mapping[str, Any], docker: str = "docker") -> list[str]:
    """``docker run --rm ...`` for the rank described by ``spec`` (see the module docstring).

    Keys: name, image, entrypoint (list), command (list), devices (host paths), gpus (``all`` or
    ``""``), memlock (an int, -1 for unlimited), shm_size, env_files, volumes
    (``SOURCE:TARGET[:OPTIONS]``), labels (mapping). Raises RankContainerError naming the key.
    """
    errors: list[str] = []
    name = _text(spec, "name", errors)
    if name and not _NAME.match(name):
        errors.append(f"name: {name!r} is not a container name (letters, digits, _ . -)")
    image = _text(spec, "image", errors)
    entrypoint = _strings(spec, "entrypoint", errors, required=True)
    command = _strings(spec, "command", errors)
    devices = _strings(spec, "devices", errors)
    for device in devices:
        if not device.startswith("/") or ":" in device:
            errors.append(f"devices: {device!r} is not an absolute host path")
    gpus = spec.get("gpus", "")
    if gpus not in GPUS:
        errors.append(f"gpus: {gpus!r} is not one of 'all' or '' (no GPU)")
    memlock = spec.get("memlock", -1)
    if isinstance(memlock, bool) or not isinstance(memlock, int) or memlock < -1:
        errors.append(f"memlock: {memlock!r} is not a byte count or -1 (unlimited)")
    shm = str(spec.get("shm_size", "") or "")
    if shm and not _SIZE.match(shm):
        errors.append(f"shm_size: {shm!r} is not a size such as 64g")
    env_files = _strings(spec, "env_files", errors)
    volumes = _strings(spec, "volumes", errors)
    for volume in volumes:
        if len(volume.split(":")) not in (2, 3) or not volume.startswith("/"):
            errors.append(f"volumes: {volume!r} is not SOURCE:TARGET[:OPTIONS], SOURCE absolute")
    labels = spec.get("labels") or {}
    if not isinstance(labels, Mapping):
        errors.append(f"labels: {labels!r} is not a mapping")
        labels = {}
    for key in labels:
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            errors.append(f"labels: {key!r} is not a label key")
    if errors:
        raise RankContainerError("; ".join(errors))

    argv = [docker, "run", "--rm", "--name", name, "--network", "host", "--ipc", "host"]
    for device in devices:
        argv += ["--device", f"{device}:{device}"]
    if gpus == "all":
        argv += ["--gpus", "all"]
    argv += ["--ulimit", f"memlock={memlock}:{memlock}"]
    if shm:
        argv += ["--shm-size", shm]
    for env_file in env_files:
        argv += ["--env-file", env_file]
    for volume in volumes:
        argv += ["--volume", volume]
    for key in sorted(labels):
        argv += ["--label", f"{key}={labels[key]}"]
    argv += ["--entrypoint", entrypoint[0], image, *entrypoint[1:], *command]
    return argv


def _text(spec: Mapping[str, Any], key: str, errors: list[str]) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value:
        errors.append(f"{key}: {value!r} is not a non-empty string")
        return ""
    return value


def _strings(
    spec: Mapping[str, Any], key: str, errors: list[str], required: bool = False
) -> list[str]:
    value = spec.get(key) or []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        errors.append(f"{key}: {value!r} is not a list of strings")
        return []
    items = [str(v) for v in value]
    if required and not items:
        errors.append(f"{key}: the list is empty")
    if any(not item for item in items):
        errors.append(f"{key}: {list(value)!r} holds an empty string")
    return items
