"""The lab's fault injectors on the real lab: a node reboot and a power cut, rails and all.

The network stage is applied first, so each node has its netplan: after the fault, each rail
must have carrier again, carry the node's netplan address (re-applied by the node's own
NetworkManager, nothing re-run from here) and pass a full-size ping (9000-byte MTU, do not
fragment) to the peer. Waits are bounded and generous: the machine is shared.

The stall mode and kill-rank need a serving pair; they are tested at unit level against the
simulator run locally (tests/unit/test_vllm_sim_stall.py) and the docker calls mocked
(tests/unit/test_lab_faults.py), to keep the serving stage out of this file's budget.
"""

from __future__ import annotations

import json
import time

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import lab, provision

pytestmark = pytest.mark.lab

A, B = "gx10-a", "gx10-b"
RAILS = {"enp1s0f0np0": "192.168.100", "enP2p1s0f0np0": "192.168.101"}
HOST_NUMBER = {A: 10, B: 11}
RAIL_TIMEOUT = 180.0  # seconds for NetworkManager to re-apply both rails after a boot


@pytest.fixture(scope="module")
def networked(lab_up: lab.LabStatus) -> None:
    result = provision(LAB_INVENTORY, "network.yml")
    assert result.ok, result.failed_tasks


def _rail_problems(node: str) -> list[str]:
    """What keeps the node's rails from being as its netplan says (empty: all well)."""
    problems = []
    links = {
        link["ifname"]: link
        for link in json.loads(node_sh(node, "ip -j addr show", check=False) or "[]")
    }
    for netdev, prefix in RAILS.items():
        link = links.get(netdev)
        if link is None:
            problems.append(f"{node} {netdev}: missing")
            continue
        if link.get("operstate") != "UP":
            problems.append(f"{node} {netdev}: {link.get('operstate')}")
        want = f"{prefix}.{HOST_NUMBER[node]}"
        have = [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]
        if want not in have:
            problems.append(f"{node} {netdev}: addresses {have}, not {want}")
        if link.get("mtu") != 9000:
            problems.append(f"{node} {netdev}: MTU {link.get('mtu')}")
    return problems


def _wait_rails(nodes: tuple[str, ...]) -> None:
    deadline = time.monotonic() + RAIL_TIMEOUT
    problems: list[str] = ["not checked"]
    for _ in range(int(RAIL_TIMEOUT)):  # bounded in count and in time
        problems = [p for node in nodes for p in _rail_problems(node)]
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert problems == [], f"rails not back within {RAIL_TIMEOUT:.0f} s"


def _jumbo_pings(source: str, target: str) -> None:
    for netdev, prefix in RAILS.items():
        address = f"{prefix}.{HOST_NUMBER[target]}"
        # 8972 bytes of payload + 28 of headers = a full 9000-byte frame, not fragmented.
        out = node_sh(source, f"ping -c 3 -W 5 -M do -s 8972 -I {netdev} {address}", check=False)
        assert " 0% packet loss" in out, f"{source} -> {address} on {netdev}: {out}"


def test_reboot_of_gx10_b_brings_its_rails_back(networked: None) -> None:
    _wait_rails((A, B))
    started = node_sh(B, "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    result = lab.reboot(B, log=lambda line: print(f"lab: {line}"))
    assert result.method[B] == "rebooted (systemctl reboot)", result.method
    assert result.systemd[B] in ("running", "degraded")
    assert result.status.running, result.status.problems
    # It booted again: its units started again (monotonic stamps are the shared kernel's).
    assert node_sh(B, "systemctl is-active docker.service gx10-sim-rdma.service").split() == [
        "active",
        "active",
    ]
    assert started != node_sh(B, "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    _wait_rails((A, B))
    _jumbo_pings(B, A)


def test_power_cut_of_both_nodes_brings_both_back(networked: None) -> None:
    _wait_rails((A, B))
    result = lab.power_cut(log=lambda line: print(f"lab: {line}"))
    assert result.nodes == (A, B)
    assert all(result.systemd[node] in ("running", "degraded") for node in (A, B)), result.systemd
    assert result.status.running, result.status.problems
    _wait_rails((A, B))
    _jumbo_pings(A, B)
    _jumbo_pings(B, A)
