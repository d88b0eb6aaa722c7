"""The vllm_supervisor role's inputs: its defaults agree with the agent's table, and its filters
build a valid agent config and install the collection's own modules beside the agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from gx10._collection import load as module_utils

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "vllm_supervisor"
pair_config = module_utils("pair_config")
cluster_plan = module_utils("cluster_plan")


def _filters() -> dict[str, Any]:
    from ansible_collections.gx10.cluster.plugins.filter.pair_config import (  # noqa: PLC0415
        FilterModule,
    )

    return FilterModule().filters()


def test_the_role_defaults_are_the_agents_defaults() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    for key, timing in pair_config.TIMINGS.items():
        assert defaults[pair_config.variable(key)] == timing.default, key
    assert defaults["vllm_supervisor_enabled"] is cluster_plan.DEFAULT_SUPERVISED
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert {pair_config.variable(key) for key in pair_config.TIMINGS} <= set(options)


SETTINGS: dict[str, Any] = {
    "node": "gx10-b",
    "role": "worker",
    "listen_address": "172.31.240.11",
    "listen_port": 8471,
    "peer_name": "gx10-a",
    "peer_address": "172.31.240.10",
    "peer_port": 8471,
    "token_file": "/etc/gx10/pair.token",
    "state_dir": "/var/lib/gx10/pair",
    "rank": {
        "container": "gx10-vllm",
        "health_urls": ["http://127.0.0.1:8000/health", "http://127.0.0.1:8000/v1/models"],
        "model": "deepseek-v4-flash",
        "api_key_file": None,
    },
    "gid": {
        "mode": "pinned",
        "sysfs_root": "/run/gx10-sim/sys",
        "rails": [
            {"netdev": "enp1s0f0np0", "address": "192.168.100.11", "rdma_dev": None},
            {"netdev": "enP2p1s0f0np0", "address": "192.168.101.11", "rdma_dev": None},
        ],
        "env_file": "/run/gx10/pair/gid.env",
    },
    "timings": {"heartbeat_interval": 1, "heartbeat_timeout": 6},
}


def test_the_config_filter_builds_a_file_the_agent_accepts() -> None:
    config = _filters()["pair_config"](SETTINGS)
    assert pair_config.validate_config(config) == []
    assert config["schema"] == 1
    assert config["timings"]["heartbeat_timeout"] == 6
    assert config["timings"]["probe_interval"] == pair_config.TIMINGS["probe_interval"].default


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"peer_address": ""}, "peer.address"),
        ({"role": "observer"}, "role"),
        ({"timings": {"heartbeat_interval": 10, "heartbeat_timeout": 12}}, "heartbeat_timeout"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_the_config_filter_names_what_is_wrong(change: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        _filters()["pair_config"]({**SETTINGS, **change})


def test_the_agents_modules_are_the_collections_own_files() -> None:
    source = _filters()["module_utils_source"]
    assert source("roce_gid") == Path(module_utils("roce_gid").__file__).read_text()
    assert "TIMINGS" in source("pair_config")
    with pytest.raises(AnsibleFilterError, match="is not one of pair_config, roce_gid"):
        source("cluster_plan")


def test_the_config_filter_builds_a_head_of_four_as_the_role_renders_it() -> None:
    """The role passes ``peers`` (vars/main.yml): the head's lists every worker in rank order."""
    workers = [
        {"name": f"gx10-{letter}", "address": f"172.31.240.{11 + index}", "port": 8471}
        for index, letter in enumerate("bcd")
    ]
    legacy = ("peer_name", "peer_address", "peer_port")
    settings = {k: v for k, v in SETTINGS.items() if k not in legacy}
    head = {**settings, "node": "gx10-a", "role": "head", "peers": workers}
    config = _filters()["pair_config"](head)
    assert config["schema"] == 2
    assert config["peers"] == workers
    worker = {**settings, "peers": [{"name": "gx10-a", "address": "172.31.240.10", "port": 8471}]}
    assert _filters()["pair_config"](worker)["schema"] == 2
    with pytest.raises(AnsibleFilterError, match="list the head alone"):
        _filters()["pair_config"]({**settings, "peers": workers})


ARGV = ["/usr/bin/docker", "run", "--rm", "--name", "gx10-vllm", "--entrypoint", "vllm", "img"]


def test_the_rank_filter_builds_the_file_the_runner_reads() -> None:
    """One launch path: the rank file holds all the rank unit runs from, without pair.json."""
    spec = _filters()["rank_spec"](
        {"node": "gx10-b", "role": "worker", "gid": SETTINGS["gid"], "argv": ARGV}
    )
    assert pair_config.validate_rank(spec) == []
    assert spec["schema"] == pair_config.RANK_SCHEMA == 2
    assert spec["argv"] == ARGV
    assert spec["state_dir"] == pair_config.DEFAULT_STATE_DIR
    assert spec["gid"]["port"] == 1  # the default filled in
    assert spec["gid"]["env_file"] == "/run/gx10/pair/gid.env"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"argv": []}, "argv is \\[\\]: it must be a non-empty list"),
        ({"argv": ["docker", ""]}, "argv is .*non-empty strings"),
        ({"role": "observer"}, "role is 'observer'"),
        ({"state_dir": "var/lib"}, "state_dir is 'var/lib': it must be an absolute path"),
        ({"gid": {**SETTINGS["gid"], "mode": "guess"}}, "gid.mode is 'guess'"),
        ({"surprise": 1}, "unexpected keyword argument 'surprise'"),
    ],
)
def test_the_rank_filter_names_what_is_wrong(change: dict[str, Any], message: str) -> None:
    settings = {"node": "gx10-b", "role": "worker", "gid": SETTINGS["gid"], "argv": ARGV}
    with pytest.raises(AnsibleFilterError, match=message):
        _filters()["rank_spec"]({**settings, **change})


def test_the_rank_file_refuses_an_older_schema() -> None:
    errors = pair_config.validate_rank({"schema": 1, "argv": ["true"]})
    assert any("render the file again with the serve stage" in e for e in errors), errors
    assert any(e.startswith("gid is missing") for e in errors), errors


def test_every_role_names_the_same_rank_unit() -> None:
    """The unit the vllm_supervisor role installs and stops, the one the vllm_serve role's waits
    follow, and the agent's default: one name."""
    supervisor = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    serve = yaml.safe_load((ROOT / "roles" / "vllm_serve" / "vars" / "main.yml").read_text())
    names = {
        supervisor["__vllm_supervisor_rank_unit"],
        serve["__vllm_serve_rank_unit"],
        pair_config.DEFAULT_RANK_UNIT,
    }
    assert names == {"gx10-vllm-rank.service"}
    stage = (ROOT / "playbooks" / "stages" / "serve.yml").read_text()
    assert "argv: [systemctl, is-active, gx10-vllm-rank.service]" in stage
