# SPDX-License-Identifier: Apache-2.0
"""fabric_pairs: the pair schedule, the runs over it and the judgments naming the bad link.

The recorded head -> worker scenarios (fixtures/fabric_rules/recorded.json) are checked in
test_fabric_rules: the head's pairs give the same runs, figures and checks (two nodes: the same
runs in the same order), so `gx10_topology: direct` behaves and reads as before.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.filter import fabric
from ansible_collections.gx10.cluster.plugins.module_utils import fabric_pairs as pairs
from ansible_collections.gx10.cluster.plugins.module_utils import fabric_rules as rules

# --- the schedule ---------------------------------------------------------------------------


def _nodes(count: int) -> list[str]:
    return [f"gx10-{chr(ord('a') + index)}" for index in range(count)]


@pytest.mark.parametrize(
    ("count", "rounds", "per_round"), [(2, 1, 1), (3, 3, 1), (4, 3, 2), (5, 5, 2), (8, 7, 4)]
)
def test_every_pair_once_in_rounds_of_disjoint_pairs(
    count: int, rounds: int, per_round: int
) -> None:
    nodes = _nodes(count)
    schedule = pairs.pair_schedule(nodes)
    assert len(schedule["rounds"]) == rounds
    assert all(len(one_round) == per_round for one_round in schedule["rounds"])
    for one_round in schedule["rounds"]:
        in_round = [node for pair in one_round for node in pair]
        assert len(in_round) == len(set(in_round)), one_round  # disjoint: run at the same time
    measured = [tuple(pair) for pair in schedule["pairs"]]
    assert sorted(measured) == sorted(itertools.combinations(nodes, 2))  # each once, ordered
    assert schedule["total_pairs"] == count * (count - 1) // 2
    assert (schedule["skipped"], schedule["note"]) == ([], None)


@pytest.mark.parametrize(("count", "total"), [(2, 1), (4, 6), (8, 28)])
def test_pair_counts_of_the_brief(count: int, total: int) -> None:
    assert len(pairs.pair_schedule(_nodes(count))["pairs"]) == total


def test_two_nodes_are_the_head_and_its_worker_whatever_the_bound() -> None:
    for bound in (None, 0, 1, 5):
        schedule = pairs.pair_schedule(["head", "worker"], bound)
        assert schedule["rounds"] == [[["head", "worker"]]]
        assert schedule["skipped"] == []


def test_the_head_is_the_client_of_its_pairs() -> None:
    schedule = pairs.pair_schedule(_nodes(8))
    assert all(pair[1] != "gx10-a" for pair in schedule["pairs"])


@pytest.mark.parametrize(("count", "bound"), [(4, 1), (8, 2), (8, 1), (5, 2), (6, 3)])
def test_a_bound_keeps_every_node_and_names_the_skipped_pairs(count: int, bound: int) -> None:
    nodes = _nodes(count)
    schedule = pairs.pair_schedule(nodes, bound)
    assert len(schedule["rounds"]) == bound
    assert {node for pair in schedule["pairs"] for node in pair} == set(nodes)
    every = sorted(itertools.combinations(nodes, 2))
    measured = [tuple(p) for p in schedule["pairs"]]
    skipped = [tuple(p) for p in schedule["skipped"]]
    assert sorted(measured + skipped) == every
    assert not set(measured) & set(skipped)
    assert schedule["note"] is None


@pytest.mark.parametrize(("count", "floor"), [(4, 1), (8, 1), (5, 2), (3, 2)])
def test_a_bound_below_covering_is_raised_and_says_so(count: int, floor: int) -> None:
    nodes = _nodes(count)
    schedule = pairs.pair_schedule(nodes, 0)
    assert len(schedule["rounds"]) == floor
    assert {node for pair in schedule["pairs"] for node in pair} == set(nodes)
    assert schedule["note"] == (
        f"the bound allows 0 round(s); {floor} are measured so that every node is in at least one "
        "pair"
    )


@pytest.mark.parametrize(
    ("case", "rounds"),
    [
        ((0, 5, 2, "iperf3", True), None),  # no bound
        ((600, 5, 2, "ib_write_bw", True), 20),  # 3 runs x 10 s = 30 s a round
        ((600, 5, 2, "iperf3", True), 10),  # 6 runs x 10 s
        ((600, 5, 2, "iperf3", False), 20),
        ((600, 5, 1, "iperf3", True), 30),  # one rail: no "all rails at once"
        ((59, 5, 2, "iperf3", True), 0),
    ],
)
def test_rounds_within_the_budget(
    case: tuple[int, int, int, str, bool], rounds: int | None
) -> None:
    """case: budget, seconds, rails, tool, iperf3_reverse."""
    assert pairs.rounds_within(*case) == rounds


# --- a plan of N nodes on a switch ----------------------------------------------------------

NETDEVS = ("enp1s0f0np0", "enP2p1s0f0np0")


def _plan(count: int) -> dict[str, Any]:
    nodes = _nodes(count)

    def rails(node: str) -> list[dict[str, Any]]:
        return [
            {
                "name": f"rail{k}",
                "netdev": netdev,
                "address": f"192.168.10{k}.{10 + nodes.index(node)}",
                "peers": {
                    peer: f"192.168.10{k}.{10 + nodes.index(peer)}"
                    for peer in nodes
                    if peer != node
                },
            }
            for k, netdev in enumerate(NETDEVS)
        ]

    return {
        "head": nodes[0],
        "workers": nodes[1:],
        "topology": "switch",
        "hosts": {node: {"rails": rails(node)} for node in nodes},
    }


def _tool_ok(plan: dict[str, Any]) -> dict[str, Any]:
    return {node: {"__fabric_tool": {"rc": 0}} for node in plan["hosts"]}


def _measurements(runs: list[dict[str, Any]], slow: dict[tuple[str, str, str], float]) -> list[Any]:
    """A measurement per client of every run: 9 Gb/s, or ``slow[(client, server, netdev)]``
    for single-rail runs of that link (both directions)."""
    found: list[dict[str, Any]] = []
    for run in runs:
        for pair in run["pairs"]:
            gbps = 9.0
            if run["mode"] == "single":
                gbps = slow.get((pair["client"], pair["worker"], pair["netdev"]), gbps)
            found.append(
                {
                    "worker": pair["worker"],
                    "client": pair["client"],
                    "mode": run["mode"],
                    "reverse": run["reverse"],
                    "rail": pair["rail"],
                    "netdev": pair["netdev"],
                    "client_ip": pair["client_ip"],
                    "server_ip": pair["server_ip"],
                    "ok": True,
                    "gbps": gbps,
                    "error": None,
                }
            )
    return found


def test_runs_of_a_round_measure_its_pairs_at_once_each_on_its_own_nodes() -> None:
    plan = _plan(4)
    schedule = fabric.fabric_pair_schedule(plan, 0, 3, "iperf3", True)
    runs = fabric.fabric_pair_runs(schedule, plan, _tool_ok(plan), "iperf3", True, 18515)
    assert len(runs) == 3 * 6  # 3 rounds x (2 rails + both) x 2 directions
    first = runs[0]
    assert (first["round"], first["mode"], first["label"], first["reverse"]) == (
        1,
        "single",
        "rail0",
        False,
    )
    assert first["ends"] == "gx10-a <-> gx10-d, gx10-b <-> gx10-c"
    assert [(p["client"], p["worker"], p["client_ip"], p["server_ip"]) for p in first["pairs"]] == [
        ("gx10-a", "gx10-d", "192.168.100.10", "192.168.100.13"),
        ("gx10-b", "gx10-c", "192.168.100.11", "192.168.100.12"),
    ]
    both = runs[4]
    assert both["mode"] == "both"
    assert [(p["client"], p["netdev"], p["port"]) for p in both["pairs"]] == [
        ("gx10-a", NETDEVS[0], 18515),
        ("gx10-a", NETDEVS[1], 18516),
        ("gx10-b", NETDEVS[0], 18515),
        ("gx10-b", NETDEVS[1], 18516),
    ]


def test_the_judge_names_the_bad_link() -> None:
    plan = _plan(4)
    hostvars = _tool_ok(plan)
    schedule = fabric.fabric_pair_schedule(plan, 0, 3, "iperf3", True)
    runs = fabric.fabric_pair_runs(schedule, plan, hostvars, "iperf3", True, 18515)
    found = _measurements(runs, {("gx10-b", "gx10-c", NETDEVS[1]): 0.28})
    checks = fabric.fabric_pair_bandwidth_checks(
        found, plan, schedule, hostvars, "iperf3", 2, 3, [0.1, 0.5]
    )
    # 6 pairs x (2 rails + all rails at once)
    assert len(checks) == 18
    bad = [c for c in checks if not c["ok"]]
    assert [c["name"] for c in bad] == [
        "rail1 gx10-b enP2p1s0f0np0 192.168.101.11 <-> gx10-c 192.168.101.12: bandwidth (iperf3)"
    ]
    assert bad[0]["value"].startswith("0.28 Gb/s (slower of 0.28 / 0.28): the known degraded")
    assert bad[0]["fix"] == rules.DEGRADED_REMEDY
    report = fabric.fabric_pair_bandwidth(found, plan, schedule, 2)
    assert report["bad_links"] == ["rail1 gx10-b -> gx10-c 192.168.101.12: 0.28 Gb/s < 2 Gb/s"]
    assert len(report["links"]) == 12
    # per_rail and total stay the head's pairs, keyed by the worker (gx10 doctor reads them).
    assert report["per_rail"] == {w: {n: 9.0 for n in NETDEVS} for w in plan["workers"]}
    assert report["total"] == {w: 18.0 for w in plan["workers"]}


def test_a_link_without_a_result_is_named_too() -> None:
    plan = _plan(4)
    schedule = pairs.pair_schedule(["gx10-a", "gx10-b", "gx10-c", "gx10-d"], 1)
    runs = fabric.fabric_pair_runs(schedule, plan, _tool_ok(plan), "ib_write_bw", False, 1)
    found = [
        m for m in _measurements(runs, {}) if (m["client"], m["netdev"]) != ("gx10-b", NETDEVS[0])
    ]
    report = fabric.fabric_pair_bandwidth(found, plan, schedule, 80)
    assert "rail0 gx10-b -> gx10-c 192.168.100.12: no result < 80 Gb/s" in report["bad_links"]


def test_a_missing_tool_is_reported_once_per_node_before_any_pair() -> None:
    plan = _plan(4)
    hostvars = {**_tool_ok(plan), "gx10-c": {"__fabric_tool": {"rc": 1}}}
    schedule = pairs.pair_schedule(_nodes(4))
    checks = fabric.fabric_pair_bandwidth_checks([], plan, schedule, hostvars, "iperf3")
    assert [c["name"] for c in checks] == ["bandwidth tool on gx10-c"]


def test_measurements_of_a_round_keep_each_pair_and_a_repeat_replaces_them() -> None:
    plan = _plan(4)
    schedule = pairs.pair_schedule(_nodes(4))
    runs = fabric.fabric_pair_runs(schedule, plan, _tool_ok(plan), "iperf3", False, 1)
    run = runs[0]
    done = [
        {"item": {"item": pair}, "finished": True, "stdout": "", "stderr": ""}
        for pair in run["pairs"]
    ]
    first = fabric.fabric_pair_merge_measurements([], run, done, "iperf3")
    assert [(m["client"], m["worker"], m["ok"]) for m in first] == [
        ("gx10-a", "gx10-d", False),
        ("gx10-b", "gx10-c", False),
    ]
    assert fabric.fabric_pair_runs_without_result(runs, first) == [run]
    fixed = [{**m, "ok": True, "gbps": 5.0} for m in first]
    merged = pairs.merge_pair_measurements(first, run, fixed)
    assert merged == fixed
    assert fabric.fabric_pair_runs_without_result(runs, merged) == []
