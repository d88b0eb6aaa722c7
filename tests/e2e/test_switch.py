"""Four nodes on a switch (issue 15): `gx10 lab up --nodes 4`, then the whole pipeline.

One bring-up for the file (conftest's `four_node_lab` and `four_node_converge`): the lab is
reshaped to four nodes on the switch stand-in (a bridge per rail) and site.yml converges
`inventories/lab4` (tensor parallel 4, `gx10_topology: switch`). It runs after every two-node
file, and nothing after it needs two nodes on cables (test_lab.py, last, brings a fresh lab up),
so the lab is not put back.

Bandwidth over every pair of a switch, a slow node named on each of its links, is checked where
it costs least: the scheduling over four hosts with a stand-in iperf3
(collections/.../tests/unit/test_fabric_pairs_playbook.py), and real iperf3 through a rail shaped
with tc on the lab's two nodes (tests/e2e/test_fabric.py). Here the switch's own fault, a bad
port, is named by the fabric check's pings.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from labtools import ROOT, auth, node_sh, rank_container, task_results

from gx10 import ProvisionResult, lab, provision

LAB4 = ROOT / "inventories" / "lab4"
CFG4 = lab.LabConfig.sized(4)
HEAD, WORKERS = CFG4.nodes[0], CFG4.nodes[1:]
CONTAINER = "gx10-vllm"
_HOSTS4 = yaml.safe_load((LAB4 / "hosts.yml").read_text(encoding="utf-8"))
_HEAD_VARS = _HOSTS4["all"]["children"]["gx10"]["children"]["head"]["hosts"][HEAD]
HEAD_API = f"http://{_HEAD_VARS['gx10_api_host']}:8000"  # the head's address, the API's port
RAIL1 = CFG4.rails[1]


_container = rank_container


def _messages(result: ProvisionResult) -> str:
    return "\n".join(f"{t.host} {t.task}: {t.message}" for t in result.failed_tasks)


@pytest.fixture(scope="module")
def four(four_node_lab: lab.LabStatus) -> lab.LabStatus:
    return four_node_lab


@pytest.fixture(scope="module")
def converged(four_node_converge: ProvisionResult) -> ProvisionResult:
    assert four_node_converge.ok, _messages(four_node_converge)
    return four_node_converge


def test_the_lab_is_four_nodes_on_one_bridge_per_rail(four: lab.LabStatus) -> None:
    assert four.running, four.problems
    assert [n.name for n in four.nodes] == list(CFG4.nodes)
    for node in four.nodes:
        assert {r.peer_node for r in node.rails} == {"gx10-switch rail0", "gx10-switch rail1"}
    # `bridge link show`: "7: gx10-c-r1@if6: <...> master rail1 state forwarding ...", or
    # "7: gx10-c-r1: <...>" when the veth's far end has no name in the switch's namespace.
    ports = {
        found.group(1): found.group(2)
        for line in node_sh(CFG4.switch_name, "bridge link show").splitlines()
        if (found := re.match(r"\d+: ([^@:\s]+).* master (\S+)", line))
    }
    assert ports == {
        CFG4.port(node, rail): CFG4.bridge(rail) for node in CFG4.nodes for rail in CFG4.rails
    }


def test_site_converges_every_node_and_serves_tp4(converged: ProvisionResult) -> None:
    """The converge ran site.yml's every stage, the smoke stage last: its four checks through
    the head passed (converged.ok), as again in the re-apply below."""
    assert set(converged.hosts) >= set(CFG4.nodes)
    smoke = task_results(converged, "Run the four smoke checks")
    assert smoke["localhost"]["rc"] == 0, smoke
    for node in CFG4.nodes:
        assert converged.hosts[node].failed == 0
    for rank, node in enumerate(CFG4.nodes):
        args = node_sh(node, f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}")
        assert '"--nnodes","4"' in args, args
        assert f'"--node-rank","{rank}"' in args, args
        assert '"--master-addr","192.168.100.10"' in args, args
        assert ('"--headless"' in args) == (rank > 0), args
    # The converge restarted all four with the new group; ranks 1..3 were up before the head
    # (StartedAt is RFC 3339 UTC: it sorts as text).
    ranks = {node: _container(node) for node in CFG4.nodes}
    assert all(ranks[w]["started"] < ranks[HEAD]["started"] for w in WORKERS), ranks
    # Every node reaches every other on both rails with full frames (rail_network verified it;
    # here the worker pair the head never talks to).
    node_sh("gx10-c", "ping -M do -s 8972 -c 1 -W 2 -I enP2p1s0f0np0 192.168.101.13")


# Stages whose work is each node's own, the same on two nodes as on four: their re-apply's
# changed=0 is the two-node lab's (test_network.py), so the four-node re-apply skips them.
PER_NODE_STAGES = ["preflight", "clock", "metrics", "smoke"]


def test_reapply_changes_nothing(converged: ProvisionResult) -> None:
    """site.yml again on the four nodes: nothing changes and no rank restarts, in every stage
    whose work depends on the topology or the node count (addresses per subnet, GIDs, the
    fabric's pairs, the chain copy, the launch order of four)."""
    before = {node: _container(node) for node in CFG4.nodes}
    again = provision(LAB4, "site.yml", skip_tags=PER_NODE_STAGES)
    assert again.ok, _messages(again)
    assert again.changed_total == 0, {h: s.changed for h, s in again.hosts.items()}
    assert {node: _container(node) for node in CFG4.nodes} == before


def test_bench_telemetry_comes_from_every_node(converged: ProvisionResult, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    run = subprocess.run(
        [
            sys.executable, "-m", "gx10", "bench", "-i", str(LAB4), "--out", str(out),
            "--prompt-lengths", "256", "--max-tokens", "96", "--ignore-eos", "--concurrency", "2",
            "--cool-down-timeout", "120",
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (case,) = json.loads((out / "results.json").read_text())["cases"].values()
    assert case["status"] == "ok", case
    assert set(case["telemetry"]["nodes"]) == set(CFG4.nodes)
    for node in CFG4.nodes:
        assert case["telemetry"]["nodes"][node]["power_w"]["mean"] > 0, node


@pytest.fixture
def narrow_port(converged: ProvisionResult) -> Iterator[str]:
    """gx10-c's rail1 port on the switch left at MTU 1500: a switch port without jumbo frames."""
    port = CFG4.port("gx10-c", RAIL1)
    node_sh(CFG4.switch_name, f"ip link set {port} mtu 1500")
    try:
        yield port
    finally:
        node_sh(CFG4.switch_name, f"ip link set {port} mtu {CFG4.switch_mtu}")


def test_a_bad_switch_port_is_named_by_the_fabric_check(narrow_port: str) -> None:
    result = provision(LAB4, "fabric.yml")
    assert not result.ok
    text = _messages(result)
    # Every jumbo ping to or from gx10-c on rail1 fails, named by its ends; no other link.
    pings = {line for line in text.splitlines() if "no-fragment" in line and "ping" in line}
    assert any("ping gx10-a -> gx10-c 192.168.101.12" in line for line in pings), text
    assert any("ping gx10-c -> gx10-d 192.168.101.13" in line for line in pings), text
    assert "rail0" not in text, text
    assert not any("gx10-b -> gx10-d" in line for line in pings), text


def test_the_workers_copy_down_the_chain_the_head_sending_the_checkpoint_once(
    converged: ProvisionResult,
) -> None:
    """bench/sync_chain.py: the workers' copies removed, `gx10 model sync` copies the checkpoint
    head -> gx10-b -> gx10-c -> gx10-d (a star would have the head send it three times)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sync_chain.py"), "-i", str(LAB4), "--yes"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    # The ranks still run on the replaced copies: the next test's ordered restart of all four
    # starts them on the new ones.


# The last test of the file: four supervised nodes (gx10-pair agents, the lab's fast timings).
AGENT = "/usr/local/lib/gx10/pair/gx10-pair"


def _agent_state(node: str) -> dict[str, Any]:
    out = node_sh(node, f"python3 {AGENT} status --json", check=False)
    try:
        return dict(json.loads(out))
    except ValueError:
        return {}


def _group_serving() -> bool:
    """The head's agent says serving, all four ranks run, and nothing changed over 3 s."""
    first = {node: _container(node) for node in CFG4.nodes}
    if _agent_state(HEAD).get("state") != "serving" or not all(first.values()):
        return False
    time.sleep(3)
    return {node: _container(node) for node in CFG4.nodes} == first


def _until(what: str, test: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if test():
            return
        time.sleep(1.0)
    states = {node: _agent_state(node).get("state") for node in CFG4.nodes}
    raise AssertionError(f"not {what} within {timeout:.0f} s; agents: {states}")


def test_supervised_a_crashed_rank_restarts_all_four_workers_first(
    converged: ProvisionResult,
) -> None:
    """inventories/lab4 runs supervised from its converge (the production shape): the agents
    own the four ranks. Left so: the file is the last before test_lab.py, which takes the lab
    down."""
    for node in CFG4.nodes:
        assert node_sh(node, "systemctl is-active gx10-pair.service").strip() == "active", node
    _until("serving", _group_serving, 120)
    before = {node: _container(node) for node in CFG4.nodes}
    lab.kill_rank("gx10-d", CFG4, log=lambda line: None)

    def restarted() -> bool:
        now = {node: _container(node) for node in CFG4.nodes}
        changed = all(now[n] and now[n]["id"] != before[n]["id"] for n in CFG4.nodes)
        return changed and _group_serving()

    _until("all four restarted and serving", restarted, 240)
    after = {node: _container(node) for node in CFG4.nodes}
    assert all(after[w]["started"] < after[HEAD]["started"] for w in WORKERS), after
    last = json.dumps(_agent_state(HEAD).get("last_restart"))
    assert "worker-rank-inactive" in last, last
    assert "gx10-d" in last, last
    # gx10 status: the head's agent lists every worker as a peer, each worker the head.
    status = subprocess.run(
        [sys.executable, "-m", "gx10", "status", "-i", str(LAB4), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert status.returncode == 0, status.stdout + status.stderr
    peers = {n["node"]: n["peers"] for n in json.loads(status.stdout)["nodes"]}
    assert peers == {HEAD: list(WORKERS), **{w: [HEAD] for w in WORKERS}}, peers
    # The group answers again through the head (the smoke stage's checks ran in the converge).
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(
        f"{HEAD_API}/v1/chat/completions",
        json={**body, "max_tokens": 4},
        headers=auth(LAB4),
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] > 0
