# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.docker_run_argv: one rank's `docker run --rm ...` argument list."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.rank_container import (
    RankContainerError,
    docker_run_argv,
)

DOCUMENTATION = r"""
name: docker_run_argv
short_description: One vLLM rank's docker run argument list, for its supervised unit
description:
  - Builds C(docker run --rm --name NAME --network host --ipc host ... --entrypoint EP IMAGE ARGS)
    as a list from the rank's container settings, the same container the unsupervised launch
    starts. The rank unit runs it in the foreground from a JSON file, so no shell or unit-file
    quoting stands between the settings and the container.
options:
  _input:
    description: The container settings (name, image, entrypoint, command, devices, gpus,
      memlock, shm_size, env_files, volumes, labels).
    type: dict
    required: true
  docker:
    description: The docker client to run.
    type: str
    default: docker
"""

EXAMPLES = r"""
argv: "{{ rank_spec | gx10.cluster.docker_run_argv('/usr/bin/docker') }}"
"""

RETURN = r"""
_value:
  description: The argument list, the docker client first.
  type: list
  elements: str
"""


def _docker_run_argv(spec: Any, docker: str = "docker") -> list[str]:
    if not isinstance(spec, dict):
        raise AnsibleFilterError(f"gx10.cluster.docker_run_argv: expects a mapping, got {spec!r}")
    try:
        return docker_run_argv(spec, docker)
    except RankContainerError as exc:
        raise AnsibleFilterError(f"gx10.cluster.docker_run_argv: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"docker_run_argv": _docker_run_argv}
