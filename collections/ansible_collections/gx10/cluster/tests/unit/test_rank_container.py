# SPDX-License-Identifier: Apache-2.0
"""One rank's docker run command line: the container the launch starts, and refusals by key."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.rank_container import (
    RankContainerError,
    docker_run_argv,
)

SPEC: dict[str, Any] = {
    "name": "gx10-vllm",
    "image": "ghcr.io/anemll/dspark-vllm-gx10@sha256:" + "a" * 64,
    "entrypoint": ["vllm"],
    "command": ["serve", "/srv/models/m", "--speculative-config", '{"method": "dspark"}'],
    "devices": ["/dev/infiniband"],
    "gpus": "all",
    "memlock": -1,
    "shm_size": "64g",
    "env_files": ["/etc/gx10/vllm.env", "/run/gx10/rank-gid.env"],
    "volumes": ["/srv/models/m:/srv/models/m:ro"],
    "labels": {"gx10.role": "head", "gx10.config": "abc", "gx10.rank": "0"},
}


def test_the_head_on_hardware() -> None:
    assert docker_run_argv(SPEC, "/usr/bin/docker") == [
        "/usr/bin/docker", "run", "--rm", "--name", "gx10-vllm",
        "--network", "host", "--ipc", "host",
        "--device", "/dev/infiniband:/dev/infiniband",
        "--gpus", "all",
        "--ulimit", "memlock=-1:-1",
        "--shm-size", "64g",
        "--env-file", "/etc/gx10/vllm.env", "--env-file", "/run/gx10/rank-gid.env",
        "--volume", "/srv/models/m:/srv/models/m:ro",
        "--label", "gx10.config=abc", "--label", "gx10.rank=0", "--label", "gx10.role=head",
        "--entrypoint", "vllm", SPEC["image"],
        "serve", "/srv/models/m", "--speculative-config", '{"method": "dspark"}',
    ]  # fmt: skip


def test_the_lab_without_gpus_or_devices() -> None:
    spec = {**SPEC, "gpus": "", "devices": [], "memlock": 8388608, "shm_size": "1g"}
    argv = docker_run_argv(spec)
    assert argv[0] == "docker"
    assert "--gpus" not in argv
    assert "--device" not in argv
    assert argv[argv.index("--ulimit") + 1] == "memlock=8388608:8388608"


def test_an_entrypoint_of_several_words_goes_before_the_command() -> None:
    argv = docker_run_argv({**SPEC, "entrypoint": ["python3", "-m", "vllm"], "command": ["serve"]})
    assert argv[argv.index("--entrypoint") :] == [
        "--entrypoint", "python3", SPEC["image"], "-m", "vllm", "serve",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"name": ""}, "name: ''"),
        ({"name": "-bad"}, "name: '-bad' is not a container name"),
        ({"image": None}, "image: None"),
        ({"entrypoint": []}, "entrypoint: the list is empty"),
        ({"command": "serve x"}, "command: 'serve x' is not a list of strings"),
        ({"devices": ["dev/infiniband"]}, "devices: 'dev/infiniband' is not an absolute host path"),
        ({"gpus": "2"}, "gpus: '2' is not one of"),
        ({"memlock": "unlimited"}, "memlock: 'unlimited' is not a byte count"),
        ({"memlock": -2}, "memlock: -2"),
        ({"shm_size": "64 GB"}, "shm_size: '64 GB' is not a size"),
        ({"volumes": ["models:/m"]}, "volumes: 'models:/m' is not SOURCE:TARGET"),
        ({"volumes": ["/a:/b:ro:x"]}, "volumes: '/a:/b:ro:x'"),
        ({"labels": {"a=b": "c"}}, "labels: 'a=b' is not a label key"),
        ({"env_files": [""]}, "env_files: [''] holds an empty string"),
    ],
)
def test_bad_settings_are_refused_by_key(change: dict[str, Any], named: str) -> None:
    with pytest.raises(RankContainerError) as caught:
        docker_run_argv({**SPEC, **change})
    assert named in str(caught.value)
