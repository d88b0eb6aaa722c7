"""The supervised pair on the lab (issue 11): the nodes' gx10-pair agents own the ranks.

The file starts from the session's shared converge (an unsupervised pair serving), runs
serve.yml with supervision on (vllm_supervisor_enabled, the lab's fast timings from its
inventory), and ends by turning supervision off again: serve.yml without it takes the agents away
and serves the pair unsupervised, as the file found it. Each fault ends with the pair serving
again (the smoke stage passes), within a bound.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml
from labtools import (
    AGENT,
    LAB_INVENTORY,
    LoneWatch,
    agent_status,
    auth,
    jumbo_pings,
    node_sh,
    rank_container,
    until,
    wait_rails,
)

from gx10 import ProvisionResult, lab, provision

CONTAINER = "gx10-vllm"
# The head's management address (the lab's fixed one, from the inventory), the API's default port.
_HOSTS = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text(encoding="utf-8"))
HEAD_API = "http://{}:8000".format(
    _HOSTS["all"]["children"]["gx10"]["children"]["head"]["hosts"]["gx10-a"]["gx10_api_host"]
)
NODES = ("gx10-a", "gx10-b")
SUPERVISED = {"vllm_supervisor_enabled": True}
RECOVERY = 120.0  # seconds a fault may take to be repaired on the lab (boots in ~10 s)
REBOOT_RECOVERY = 240.0  # a node's own boot (systemd, its Docker engine) comes first
LONE_BOUND = 30.0  # seconds one rank may run without the other (a start, a stop in progress)
SHIFT = "/run/gx10-sim/rdma"  # the RDMA simulator's control dir (shift, reset)
RAILS = {"enp1s0f0np0", "enP2p1s0f0np0"}


def _provision(playbook: str, **extravars: object) -> ProvisionResult:
    return provision(LAB_INVENTORY, playbook, extravars={**SUPERVISED, **extravars})


_container = rank_container


_status = agent_status


def _until(what: str, test: Callable[[], bool], timeout: float = RECOVERY) -> None:
    until(what, test, timeout)


def _serving() -> bool:
    """Settled: the head's agent says serving, both ranks run, and nothing changed over 3 s
    (an agent notices a dead rank within its 1 s heartbeat)."""
    first = {node: _container(node) for node in NODES}
    if _status("gx10-a").get("state") != "serving" or not all(first.values()):
        return False
    time.sleep(3)
    again = {node: _container(node) for node in NODES}
    return again == first and _status("gx10-a").get("state") == "serving"


def _smoke() -> None:
    result = provision(LAB_INVENTORY, "smoke.yml")
    assert result.ok, result.failed_tasks


def _answers() -> None:
    """The pair serves again after a fault: the head answers a chat completion (the smoke
    stage's own checks run once, after the supervised launch, and in tests/e2e/test_serve.py)."""
    body = {
        "model": "deepseek-v4-flash",
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 4,
    }
    reply = httpx.post(f"{HEAD_API}/v1/chat/completions", json=body, headers=auth(), timeout=60)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert len(answer["choices"]) == 1, answer
    assert answer["usage"]["completion_tokens"] > 0, answer


def _agent_installed(node: str) -> bool:
    probe = "test -e /etc/systemd/system/gx10-pair.service && echo yes"
    return node_sh(node, probe, check=False).strip() == "yes"


@pytest.fixture(scope="module")
def supervised(serving_lab: ProvisionResult) -> Iterator[ProvisionResult]:
    result = _provision("serve.yml")
    assert result.ok, result.failed_tasks
    yield result
    # The last test turns supervision off; after a failure before it, do it here.
    if any(_agent_installed(node) for node in NODES):
        restored = provision(LAB_INVENTORY, "serve.yml")
        assert restored.ok, restored.failed_tasks


def test_each_rank_is_a_unit_of_its_nodes_agent(supervised: ProvisionResult) -> None:
    for node in NODES:
        enabled = node_sh(node, "systemctl is-enabled gx10-pair.service", check=False).strip()
        assert enabled == "enabled"
        active = node_sh(node, "systemctl is-active gx10-pair.service gx10-vllm-rank.service")
        assert active.split() == ["active", "active"]
        pid = node_sh(node, "systemctl show -p MainPID --value gx10-vllm-rank.service").strip()
        command = node_sh(node, f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert command.startswith(f"/usr/bin/docker run --rm --name {CONTAINER} "), command
        mode = node_sh(node, "stat -c %a /etc/gx10/pair.token").strip()
        assert mode == "600"
    _until("serving", _serving, 60)
    head = _status("gx10-a")
    assert head["role"] == "head"
    assert head["breaker"]["tripped"] is False  # type: ignore[index]
    _smoke()


def _gx10(*args: str) -> tuple[int, dict[str, Any]]:
    """`gx10 ARGS -i LAB --json` from the controller: exit code and document."""
    proc = subprocess.run(
        [sys.executable, "-m", "gx10", *args, "-i", str(LAB_INVENTORY), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    document: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, document


def test_status_shows_both_nodes_supervised_with_the_gids_they_pinned(
    supervised: ProvisionResult,
) -> None:
    """`gx10 status --json` reads each node's agent: serving, breaker closed, and per rail the
    GID index its rank started with is the node's current one; `gx10 doctor` finds nothing."""
    _until("serving", _serving, 60)
    rc, document = _gx10("status")
    assert rc == 0, document
    nodes = {n["node"]: n for n in document["nodes"]}
    assert set(nodes) == set(NODES)
    for name, node in nodes.items():
        assert node["supervision_state"] == "serving", (name, node)
        supervision = node["supervision"]
        assert supervision["breaker"]["state"] == "closed", (name, supervision)
        rails = {g["netdev"]: (g["pinned"], g["current"]) for g in supervision["gid"]}
        assert set(rails) == RAILS, (name, rails)
        assert all(p is not None and p == c for p, c in rails.values()), (name, rails)
    assert nodes["gx10-a"]["supervision"]["source"] == "local"
    assert nodes["gx10-b"]["supervision"]["source"] == "head"
    rc, report = _gx10("doctor")
    assert (rc, report["findings"]) == (0, []), report


# The supervised re-apply (changed=0, nothing restarted) is the role pipeline's idempotence step
# of molecule/vllm_supervisor: the same serve stage, inventory and vllm_supervisor_enabled, on
# the same lab, just before this stage (docs/PERFORMANCE.md, "What moved where").


def _restarted_both(before: dict[str, dict[str, str]]) -> Callable[[], bool]:
    def test() -> bool:
        now = {node: _container(node) for node in NODES}
        return all(now[n] and now[n]["id"] != before[n]["id"] for n in NODES) and _serving()

    return test


def _last_reason() -> str:
    return json.dumps(_status("gx10-a").get("last_restart"))


def test_a_crashed_head_rank_restarts_both_worker_first(supervised: ProvisionResult) -> None:
    _until("serving", _serving, 60)
    before = {node: _container(node) for node in NODES}
    lab.kill_rank("gx10-a", log=lambda line: None)
    _until("restarted and serving", _restarted_both(before))
    after = {node: _container(node) for node in NODES}
    assert after["gx10-b"]["started"] < after["gx10-a"]["started"], after
    assert "head-rank-inactive" in _last_reason()
    _answers()


def test_a_stalled_engine_is_restarted_by_the_watchdog(supervised: ProvisionResult) -> None:
    """HTTP up, no tokens: the head's probes (every 10 s in the lab) fail twice in a row."""
    _until("serving", _serving, 60)
    before = {node: _container(node) for node in NODES}
    lab.stall("gx10-a", log=lambda line: None)
    _until("restarted and serving", _restarted_both(before))
    assert "stall:" in _last_reason()
    _answers()


def test_the_breaker_trips_stop_keeps_the_pair_stopped_and_serve_starts_it_again(
    supervised: ProvisionResult,
) -> None:
    """The worker's rank command is broken on the node: every start fails at once. After the
    lab's 3 restarts the breaker trips, both ranks stay stopped, and the reason is recorded.
    stop.yml then keeps the pair stopped (the agents disabled; nothing comes back past the lab's
    heartbeat timeout and backoff), and a serve run, which rewrites the command and resets the
    breaker, brings the pair back. One serve run for both: each costs a launch."""
    _until("serving", _serving, 60)
    node_sh(
        "gx10-b",
        "python3 -c \"import json; p = '/etc/gx10/rank.json'; d = json.load(open(p)); "
        "d['argv'].append('--no-such-flag'); json.dump(d, open(p, 'w'))\"",
    )
    lab.kill_rank("gx10-b", log=lambda line: None)
    _until("tripped", lambda: _status("gx10-a").get("state") == "tripped", 180)
    breaker = _status("gx10-a")["breaker"]
    assert breaker["tripped"] is True, breaker  # type: ignore[index]
    assert not _container("gx10-a")
    assert not _container("gx10-b")

    stopped = _provision("stop.yml")
    assert stopped.ok, stopped.failed_tasks
    time.sleep(8)  # tripped, then stopped: longer than the heartbeat timeout and backoff
    for node in NODES:
        assert not _container(node)
        state = node_sh(node, "systemctl is-enabled gx10-pair.service", check=False).strip()
        assert state == "disabled"
    again = _provision("serve.yml")
    assert again.ok, again.failed_tasks
    _until("serving", _serving, 60)
    assert _status("gx10-a")["breaker"]["tripped"] is False  # type: ignore[index]
    _answers()


# --------------------------------------------------------------------------------------------
# Node-level faults: reboots, a power cut, a GID shift. Each starts with the breaker closed (the
# earlier faults' restarts are in its window), checks that no rank ever ran alone for longer
# than LONE_BOUND, and ends serving with the breaker closed.
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _fault(name: str) -> Iterator[dict[str, dict[str, str]]]:
    _until("serving", _serving, 60)
    node_sh("gx10-a", f"python3 {AGENT} reset", check=False)  # a fresh breaker window
    before = {node: _container(node) for node in NODES}
    watch = LoneWatch()
    watch.start()
    try:
        yield before
    finally:
        watch.done.set()
        watch.join(timeout=30)
    assert watch.samples > 5, f"{name}: the lone-rank watch took {watch.samples} samples"
    assert watch.longest <= LONE_BOUND, f"{name}: one rank ran alone for {watch.longest:.0f} s"
    assert _status("gx10-a")["breaker"]["tripped"] is False  # type: ignore[index]
    _answers()


MARKERS = {"gx10-faults-kept": "unless-stopped", "gx10-faults-once": "no"}


@contextlib.contextmanager
def _markers(node: str) -> Iterator[None]:
    """Two containers in the node's engine: one Docker restarts after a boot, one it does not."""
    image = node_sh(node, f"docker inspect -f '{{{{.Config.Image}}}}' {CONTAINER}").strip()
    for name, policy in MARKERS.items():
        node_sh(
            node,
            f"docker rm -f {name} >/dev/null 2>&1; docker run -d --name {name} "
            f"--restart {policy} --entrypoint sleep {image} infinity >/dev/null",
        )
    try:
        yield
    finally:
        node_sh(node, f"docker rm -f {' '.join(MARKERS)} >/dev/null 2>&1", check=False)


def test_the_pair_comes_back_after_the_worker_node_reboots(supervised: ProvisionResult) -> None:
    """The lab's reboot is a real one (test equipment, checked here too): the node's units start
    again, Docker honours each container's restart policy, and networkd puts the rails back."""
    started = node_sh("gx10-b", "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    with _markers("gx10-b"):
        with _fault("worker reboot") as before:
            result = lab.reboot("gx10-b", log=lambda line: None)
            _until("restarted and serving", _restarted_both(before), REBOOT_RECOVERY)
        assert result.method["gx10-b"] == "rebooted (systemctl reboot)", result.method
        assert result.systemd["gx10-b"] in ("running", "degraded")
        active = node_sh("gx10-b", "systemctl is-active docker.service gx10-sim-rdma.service")
        assert active.split() == ["active", "active"]
        again = node_sh("gx10-b", "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
        assert started != again  # it booted: monotonic stamps are the shared kernel's
        states = {
            name: node_sh("gx10-b", f"docker inspect -f '{{{{.State.Status}}}}' {name}").strip()
            for name in MARKERS
        }
        assert states == {"gx10-faults-kept": "running", "gx10-faults-once": "exited"}
    # The head sees its worker go (no heartbeat, its rank gone), or first the rail its cable
    # shared with the worker lose its GID with the carrier: either way an ordered restart.
    reason = _last_reason()
    assert any(cause in reason for cause in ("worker-lost", "worker-rank-inactive", "->None")), (
        reason
    )
    wait_rails()
    jumbo_pings("gx10-b", "gx10-a")


def test_the_pair_comes_back_after_the_head_node_reboots(supervised: ProvisionResult) -> None:
    with _fault("head reboot") as before:
        lab.reboot("gx10-a", log=lambda line: None)
        _until("restarted and serving", _restarted_both(before), REBOOT_RECOVERY)
        after = {node: _container(node) for node in NODES}
        assert after["gx10-b"]["started"] < after["gx10-a"]["started"], after


def test_the_pair_comes_back_after_a_power_cut_of_both(supervised: ProvisionResult) -> None:
    with _fault("power cut") as before:
        result = lab.power_cut(log=lambda line: None)
        _until("restarted and serving", _restarted_both(before), REBOOT_RECOVERY)
        after = {node: _container(node) for node in NODES}
        assert after["gx10-b"]["started"] < after["gx10-a"]["started"], after
    assert result.nodes == NODES
    assert all(result.systemd[node] in ("running", "degraded") for node in NODES), result.systemd
    wait_rails()
    jumbo_pings("gx10-a", "gx10-b")
    jumbo_pings("gx10-b", "gx10-a")


def _worker_gids() -> list[dict[str, object]]:
    gids: list[dict[str, object]] = _status("gx10-b").get("gid", [])  # type: ignore[assignment]
    return gids


def test_a_gid_shift_while_serving_restarts_the_pair_on_the_new_index(
    supervised: ProvisionResult,
) -> None:
    """Both of the worker's rails move 3 -> 5 while serving (the field report: 3 to 4 within
    30 minutes); the pair restarts, pinned to 5, then to 3 again when the table is put back."""
    with _fault("gid shift") as before:
        node_sh("gx10-b", f"mkdir -p {SHIFT} && echo 4 > {SHIFT}/shift")
        try:
            _until("restarted and serving", _restarted_both(before))
            assert "gid-changed:" in _last_reason()
            _until("pinned to 5", lambda: {g["pinned"] for g in _worker_gids()} == {5}, 30)
            assert {g["current"] for g in _worker_gids()} == {5}
            assert node_sh("gx10-b", "cat /run/gx10/pair/gid.env").strip() == "NCCL_IB_GID_INDEX=5"
        finally:
            node_sh("gx10-b", f"rm -f {SHIFT}/shift; touch {SHIFT}/reset")
        _until("pinned to 3 again", lambda: {g["pinned"] for g in _worker_gids()} == {3})
        _until("serving", _serving, 60)
        assert "gid-changed:" in _last_reason()


def test_a_rank_killed_by_the_memory_guard_restarts_the_pair_with_its_reason(
    supervised: ProvisionResult,
) -> None:
    """As earlyoom acts on a GB10 under memory pressure (issue 13): the worker's rank process is
    killed, and earlyoom's hook (gx10-memory-guard: no argument, the victim in EARLYOOM_*) runs
    right after it. The pair restarts, worker first, with the memory guard's reason at the head;
    the evidence is in the worker's log and journal, and each new rank began from a dropped page
    cache (its unit's ExecStartPre). This is also the file's crashed worker rank: a kill without
    the hook differs only in the reason the head records (worker-rank-inactive; test_gx10_pair's
    unit tests choose between them, and test_engine.py kills a real engine's worker)."""
    tool, log = "/usr/local/sbin/gx10-memory-guard", "/var/log/gx10/memory-guard.jsonl"
    with _fault("memory guard") as before:
        # kill-rank's kill, and the hook, in one exec: the hook follows as closely as earlyoom's.
        script = (
            f"pid=$(docker inspect -f '{{{{.State.Pid}}}}' {CONTAINER}); "
            "name=$(cat /proc/$pid/comm); "
            'kill -KILL "$pid"; i=0; while [ -d "/proc/$pid" ] && [ $i -lt 100 ]; do '
            "sleep 0.1; i=$((i + 1)); done; "
            f'EARLYOOM_PID=$pid EARLYOOM_NAME="$name" EARLYOOM_UID=0 {tool} && echo "$pid $name"'
        )
        pid, name = node_sh("gx10-b", script).split()

        def restarted() -> bool:
            now = {node: _container(node) for node in NODES}
            return all(now[n] and now[n]["id"] != before[n]["id"] for n in NODES) and _serving()

        _until("restarted and serving", restarted)
    after = {node: _container(node) for node in NODES}
    assert after["gx10-b"]["started"] < after["gx10-a"]["started"], after
    reason = json.dumps(_status("gx10-a").get("last_restart"))
    assert f"memory-guard:{name} MemAvailable " in reason, reason

    kills = node_sh("gx10-b", f'grep \'"kind":"kill"\' {log}').splitlines()
    kill = json.loads(kills[-1])
    assert kill["victim"] == {"pid": int(pid), "name": name, "uid": 0}
    assert kill["memory"]["mem_available_mib"] > 0
    assert kill["top_rss"]
    assert kill["pair_event_file"] == "/var/lib/gx10/pair/memory-event.json"
    taken = json.loads(node_sh("gx10-b", "cat /var/lib/gx10/pair/memory-event.handled.json"))
    assert taken["at"] == kill["at"]
    journal = node_sh("gx10-b", "journalctl -t gx10-memory-guard -b --no-pager -n 100")
    assert f"earlyoom killed {name} (pid {pid}" in journal
    for node in NODES:
        drops = node_sh(node, f'grep \'"kind":"drop-caches"\' {log}').splitlines()
        assert json.loads(drops[-1])["at"] > kill["at"], node
        assert json.loads(drops[-1])["ok"] is True, node


def test_turning_supervision_off_takes_the_agents_away_and_serves_unsupervised(
    supervised: ProvisionResult,
) -> None:
    """serve.yml without vllm_supervisor_enabled after a supervised pair: the agents are stopped
    and removed before the launch (left running, an agent would restart its rank beside the
    stage's own starts until its breaker tripped), and the pair serves from the same rank units,
    started by the stage (the one launch path)."""
    _until("serving", _serving, 60)
    result = provision(LAB_INVENTORY, "serve.yml")
    assert result.ok, result.failed_tasks
    for node in NODES:
        assert not _agent_installed(node), node
        units = node_sh(node, "systemctl list-units 'gx10-pair*' 'gx10-vllm-rank*' --all --plain")
        assert "gx10-pair.service" not in units, units
        active = node_sh(node, "systemctl is-active gx10-vllm-rank.service", check=False)
        assert active.strip() == "active", f"{node}: the rank does not run as its unit"
        listing = node_sh(node, "ls /etc/gx10").split()
        assert "pair.token" not in listing, listing
        assert "pair.json" not in listing, listing
        assert "rank.json" in listing, listing
        assert _container(node), f"{node}: no rank runs after the unsupervised launch"
    _answers()
    again = provision(LAB_INVENTORY, "serve.yml")
    assert again.ok, again.failed_tasks
    assert again.changed_total == 0
