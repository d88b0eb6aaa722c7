"""Four nodes on a switch (issue 15): `gx10 lab up --nodes 4`, then the whole pipeline.

One bring-up for the file: the lab is reshaped to four nodes on the switch stand-in (a bridge per
rail), site.yml converges `inventories/lab4` (tensor parallel 4, `gx10_topology: switch`), and at
the end the lab is put back to its two nodes on cables for whatever runs next. The file name sorts
it after every two-node file, so a full run reshapes the lab once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from labtools import ROOT, node_sh, rank_container

from gx10 import ProvisionResult, lab, provision

LAB4 = ROOT / "inventories" / "lab4"
CFG4 = lab.LabConfig.sized(4)
HEAD, WORKERS = CFG4.nodes[0], CFG4.nodes[1:]
CONTAINER = "gx10-vllm"
RAIL1 = CFG4.rails[1]


_container = rank_container


def _messages(result: ProvisionResult) -> str:
    return "\n".join(f"{t.host} {t.task}: {t.message}" for t in result.failed_tasks)


@pytest.fixture(scope="module")
def four() -> Iterator[lab.LabStatus]:
    started = time.monotonic()
    status = lab.up(CFG4, log=lambda line: print(f"lab: {line}"))
    print(f"lab up --nodes 4: {time.monotonic() - started:.1f} s")
    try:
        yield status
    finally:
        lab.up(log=lambda line: print(f"lab: {line}"))


@pytest.fixture(scope="module")
def converged(four: lab.LabStatus) -> ProvisionResult:
    started = time.monotonic()
    result = provision(LAB4, "site.yml")
    print(f"site.yml on four nodes: {time.monotonic() - started:.1f} s")
    assert result.ok, _messages(result)
    return result


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
    assert set(converged.hosts) >= set(CFG4.nodes)
    for node in CFG4.nodes:
        assert converged.hosts[node].failed == 0
    for rank, node in enumerate(CFG4.nodes):
        args = node_sh(node, f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}")
        assert '"--nnodes","4"' in args, args
        assert f'"--node-rank","{rank}"' in args, args
        assert '"--master-addr","192.168.100.10"' in args, args
        assert ('"--headless"' in args) == (rank > 0), args
    # Every node reaches every other on both rails with full frames (rail_network verified it;
    # here the worker pair the head never talks to).
    node_sh("gx10-c", "ping -M do -s 8972 -c 1 -W 2 -I enP2p1s0f0np0 192.168.101.13")


def test_reapply_changes_nothing(converged: ProvisionResult) -> None:
    before = {node: _container(node) for node in CFG4.nodes}
    again = provision(LAB4, "site.yml")
    assert again.ok, _messages(again)
    assert again.changed_total == 0, {h: s.changed for h, s in again.hosts.items()}
    assert {node: _container(node) for node in CFG4.nodes} == before


def test_smoke_through_the_head(converged: ProvisionResult) -> None:
    result = provision(LAB4, "smoke.yml")
    assert result.ok, _messages(result)


def test_a_dead_rank_restarts_all_four_workers_first(converged: ProvisionResult) -> None:
    before = {node: _container(node) for node in CFG4.nodes}
    node_sh("gx10-c", f"docker kill {CONTAINER} >/dev/null")
    result = provision(LAB4, "serve.yml")
    assert result.ok, _messages(result)
    after = {node: _container(node) for node in CFG4.nodes}
    assert all(after[n] and after[n]["id"] != before[n]["id"] for n in CFG4.nodes), after
    # Ranks 1..3 were up before the head started (StartedAt is RFC 3339 UTC: it sorts as text).
    assert all(after[w]["started"] < after[HEAD]["started"] for w in WORKERS), after


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
