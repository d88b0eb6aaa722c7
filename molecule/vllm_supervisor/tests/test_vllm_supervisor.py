"""testinfra: the supervised pair as the nodes show it after converge."""

from __future__ import annotations

import json
import time

import testinfra

AGENT = "/usr/local/lib/gx10/pair/gx10-pair"
CONTAINER = "gx10-vllm"


def _started(host: testinfra.host.Host) -> str:
    return host.check_output(f"docker inspect -f '{{{{.State.StartedAt}}}}' {CONTAINER}")


def _status(host: testinfra.host.Host) -> dict[str, object]:
    status: dict[str, object] = json.loads(host.check_output(f"python3 {AGENT} status --json"))
    return status


def test_the_agent_is_enabled_and_owns_the_rank(nodes: list[testinfra.host.Host]) -> None:
    for host in nodes:
        agent = host.service("gx10-pair.service")
        assert agent.is_enabled
        assert agent.is_running
        assert host.service("gx10-vllm-rank.service").is_running
        pid = host.check_output("systemctl show -p MainPID --value gx10-vllm-rank.service")
        cmd = host.check_output(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert cmd.startswith(f"/usr/bin/docker run --rm --name {CONTAINER} "), cmd


def test_the_workers_rank_started_before_the_heads(
    head: testinfra.host.Host, workers: list[testinfra.host.Host]
) -> None:
    for worker in workers:
        assert _started(worker) < _started(head)


def test_the_head_serves_under_its_agent(head: testinfra.host.Host) -> None:
    deadline = time.monotonic() + 60
    while _status(head).get("state") != "serving" and time.monotonic() < deadline:
        time.sleep(1)
    status = _status(head)
    assert status["state"] == "serving", status
    assert status["breaker"]["tripped"] is False  # type: ignore[index]
    assert host_answers(head)


HEALTH = "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=5)"


def host_answers(head: testinfra.host.Host) -> bool:
    return bool(head.run(f'python3 -c "{HEALTH}"').rc == 0)


def test_config_token_and_rank_command(nodes: list[testinfra.host.Host]) -> None:
    for host in nodes:
        assert host.run(f"python3 {AGENT} check-config").rc == 0
        token = host.file("/etc/gx10/pair.token")
        assert (token.user, token.mode) == ("root", 0o600)
        rank = json.loads(host.file("/etc/gx10/rank.json").content_string)
        argv = rank["argv"]
        env_files = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--env-file"]
        assert env_files[-1] == "/run/gx10/pair/gid.env", env_files
    tokens = {host.file("/etc/gx10/pair.token").content_string for host in nodes}
    assert len(tokens) == 1  # one token for the pair


def test_each_config_lists_its_peers(
    head: testinfra.host.Host, workers: list[testinfra.host.Host]
) -> None:
    """Schema 2 (issue 15): the head's agent lists every worker's, each worker's the head's."""
    config = json.loads(head.file("/etc/gx10/pair.json").content_string)
    assert config["schema"] == 2
    names = [peer["name"] for peer in config["peers"]]
    assert len(names) == len(workers), names
    assert config["node"] not in names
    for worker in workers:
        own = json.loads(worker.file("/etc/gx10/pair.json").content_string)
        assert [peer["name"] for peer in own["peers"]] == [config["node"]]
        assert own["node"] in names
