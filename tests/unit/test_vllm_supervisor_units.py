"""The vllm_supervisor role's systemd units render to what the pair's rules need."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "roles" / "vllm_supervisor" / "templates"
VARS = {
    "ansible_managed": "Ansible managed",
    "vllm_supervisor_python": "/usr/bin/python3",
    "vllm_supervisor_lib_dir": "/usr/local/lib/gx10/pair",
    "vllm_supervisor_config_path": "/etc/gx10/pair.json",
    "vllm_supervisor_rank_path": "/etc/gx10/rank.json",
    "vllm_supervisor_docker": "/usr/bin/docker",
    "vllm_supervisor_container": "gx10-vllm",
    "vllm_supervisor_stop_timeout": 60,
}


def render(name: str) -> dict[str, dict[str, list[str]]]:
    """The unit as {section: {key: [values in order]}} (systemd keys may repeat)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.from_string((TEMPLATES / name).read_text()).render(**VARS)
    units: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            units[section] = {}
            continue
        key, _, value = line.partition("=")
        units[section].setdefault(key, []).append(value)
    return units


def test_the_rank_unit_runs_run_rank_and_stops_the_container_in_bounded_time() -> None:
    unit = render("gx10-vllm-rank.service.j2")
    after = unit["Unit"]["After"][0].split()
    assert "docker.service" in after
    assert "network-online.target" in after
    service = unit["Service"]
    assert service["ExecStart"] == ["/usr/bin/python3 /usr/local/lib/gx10/pair/gx10-pair run-rank"]
    assert service["ExecStop"] == ["-/usr/bin/docker stop -t 60 gx10-vllm"]
    assert service["ExecStartPre"] == ["-/usr/bin/docker rm -f gx10-vllm"]
    assert service["Restart"] == ["no"]  # the agent (or the next serve run) restarts it
    assert int(service["TimeoutStopSec"][0]) > 60  # longer than docker stop's own bound
    assert service["KillMode"] == ["mixed"]
    assert "GX10_PAIR_RANK=/etc/gx10/rank.json" in service["Environment"]
    # The rank file alone: no agent config (unsupervised nodes have none).
    assert not any(e.startswith("GX10_PAIR_CONFIG=") for e in service["Environment"])
    assert "Install" not in unit  # never enabled: the serve stage or the agent starts it in order


def test_the_agent_unit_restarts_always_and_starts_at_boot() -> None:
    unit = render("gx10-pair.service.j2")
    assert "docker.service" in unit["Unit"]["After"][0].split()
    assert unit["Unit"]["StartLimitIntervalSec"] == ["0"]
    service = unit["Service"]
    assert service["ExecStart"] == ["/usr/bin/python3 /usr/local/lib/gx10/pair/gx10-pair serve"]
    assert service["Restart"] == ["always"]
    assert service["RestartPreventExitStatus"] == ["2"]  # a refused config
    assert service["KillMode"] == ["mixed"]
    assert "GX10_PAIR_CONFIG=/etc/gx10/pair.json" in service["Environment"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("name", ["gx10-pair.service.j2", "gx10-vllm-rank.service.j2"])
def test_a_missing_variable_fails_the_render(name: str) -> None:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    template = env.from_string((TEMPLATES / name).read_text())
    with pytest.raises(jinja2.UndefinedError):
        template.render(**{k: v for k, v in VARS.items() if k != "vllm_supervisor_lib_dir"})
