"""`gx10 doctor` and `gx10 status` with four nodes on a switch (the lab4 inventory's gx10-a..d).

Fake evidence and fake agent reports, no docker: each node lists every peer (the head every
worker, a worker the head), the doctor judges every measured link of the fabric report and names
a slow one between two workers by its rail and both ends, and two nodes read as they always did.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from gx10 import status
from gx10.doctor import BandwidthLink, ContainerEvidence, Evidence, diagnose
from gx10.doctor import collect as c
from gx10.doctor import rules as r
from gx10.doctor.pair import PairBreaker, PairReport, parse_pair_report

LAB4 = ["gx10-a", "gx10-b", "gx10-c", "gx10-d"]
RAIL0, RAIL1 = "enp1s0f0np0", "enP2p1s0f0np0"
IMAGE = "gx10-registry:5000/anemll/dspark-vllm-gx10@sha256:" + "0" * 64
TRIPPED = {"tripped": True, "reason": "6 restarts within 3600s (limit 5)", "at": 1_700_000_100.0}


def plan(names: list[str]) -> dict[str, Any]:
    return {
        "head": names[0],
        "workers": names[1:],
        "topology": "switch",
        "nodes": [
            {"name": n, "rank": i, "role": "head" if i == 0 else "worker"}
            for i, n in enumerate(names)
        ],
        "hosts": {n: {"rails": []} for n in names},
    }


def node(name: str, rank: int, *, running: bool = True, **changes: Any) -> Evidence:
    state = "running" if running else "exited"
    container = ContainerEvidence("gx10-vllm", rank, state, True, True, image=IMAGE)
    return Evidence(
        node=name,
        containers=(container,),
        endpoint=f"http://{name}:8000/v1" if rank == 0 else None,
        **changes,
    )


def agent_status(name: str, names: list[str], **extra: Any) -> dict[str, Any]:
    """`gx10-pair status --json` of a schema-2 agent: the head's peers are every worker (the
    stalest one in ``peer``), a worker's the head."""
    head = name == names[0]
    peers = names[1:] if head else [names[0]]
    listed = [
        {"name": p, "state": "serving", "last_seen_at": 1.0, "age": 1.5 + i}
        for i, p in enumerate(peers)
    ]
    document: dict[str, Any] = {
        "node": name,
        "role": "head" if head else "worker",
        "state": "serving",
        "generation": 3,
        "rank_active": True,
        "gid": [{"netdev": RAIL0, "pinned": 3, "current": 3}],
        "gid_error": None,
        "peer": {"name": peers[-1], "last_seen_at": 1.0, "age": listed[-1]["age"]},
        "peers": listed,
        "restarts_in_window": 0,
        "last_restart": None,
        "breaker": {"tripped": False, "reason": None, "at": None},
        "source": "local" if head else "head",
    }
    document.update(extra)
    return document


def supervised(names: list[str], **extra: Any) -> list[Evidence]:
    return [
        node(
            n,
            i,
            supervisor_installed=True,
            pair=parse_pair_report(agent_status(n, names, **(extra if i == 0 else {}))),
        )
        for i, n in enumerate(names)
    ]


def render(state: status.ClusterStatus) -> str:
    out = io.StringIO()
    status.print_status(Console(file=out, width=250, highlight=False), state)
    return out.getvalue()


@pytest.fixture
def healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "_health", lambda endpoint, timeout: 200)


# --- the agent's peers -----------------------------------------------------------------------


def test_the_heads_report_lists_every_worker_and_a_workers_the_head() -> None:
    head = parse_pair_report(agent_status("gx10-a", LAB4))
    assert [(p.name, p.state, p.age) for p in head.peers] == [
        ("gx10-b", "serving", 1.5),
        ("gx10-c", "serving", 2.5),
        ("gx10-d", "serving", 3.5),
    ]
    assert head.peer == "gx10-d"  # the stalest, as the agent names it
    worker = parse_pair_report(agent_status("gx10-c", LAB4))
    assert [p.name for p in worker.peers] == ["gx10-a"]


def test_an_agent_from_before_n_nodes_reads_as_one_peer() -> None:
    old = agent_status("gx10-a", ["gx10-a", "gx10-b"])
    del old["peers"]
    report = parse_pair_report(old)
    assert [(p.name, p.state, p.age) for p in report.peers] == [("gx10-b", None, 1.5)]


# --- gx10 status -----------------------------------------------------------------------------


def test_status_with_four_nodes_lists_every_peer(healthy: None) -> None:
    state = status.judge(supervised(LAB4), plan(LAB4))
    assert state.ok, state.problems
    assert [(n.node, n.peers) for n in state.nodes] == [
        ("gx10-a", ("gx10-b", "gx10-c", "gx10-d")),
        ("gx10-b", ("gx10-a",)),
        ("gx10-c", ("gx10-a",)),
        ("gx10-d", ("gx10-a",)),
    ]
    text = render(state)
    assert "peers (state, last heard)" in text
    for line in ("gx10-b serving (1.5 s ago)", "gx10-c serving (2.5 s ago)"):
        assert line in text
    assert "gx10-d serving (3.5 s ago)" in text
    assert text.count("gx10-a serving (1.5 s ago)") == 3  # each worker's one peer, the head
    document = json.loads(json.dumps(state.to_dict()))
    head = document["nodes"][0]
    assert head["peers"] == ["gx10-b", "gx10-c", "gx10-d"]
    assert [p["name"] for p in head["supervision"]["peers"]] == ["gx10-b", "gx10-c", "gx10-d"]


def test_status_with_four_unsupervised_nodes_lists_the_plans_peers(healthy: None) -> None:
    state = status.judge([node(n, i) for i, n in enumerate(LAB4)], plan(LAB4))
    assert state.ok, state.problems
    text = render(state)
    assert "peers (state, last heard)" in text
    assert "not supervised" in text


def test_a_peer_the_agent_does_not_know_is_marked(healthy: None) -> None:
    """A head agent still configured for two nodes (its pair.json lists gx10-b only)."""
    evidences = supervised(LAB4)
    stale = agent_status("gx10-a", ["gx10-a", "gx10-b"])
    evidences[0] = node("gx10-a", 0, supervisor_installed=True, pair=parse_pair_report(stale))
    text = render(status.judge(evidences, plan(LAB4)))
    assert "gx10-c not in this agent's peers" in text


def test_status_with_two_nodes_keeps_its_table(healthy: None) -> None:
    two = LAB4[:2]
    state = status.judge(supervised(two), plan(two))
    assert [n.peers for n in state.nodes] == [("gx10-b",), ("gx10-a",)]
    text = render(state)
    assert "peers" not in text
    assert "serving (1.5 s ago)" not in text


def test_an_open_breaker_on_four_nodes_stops_all_four(healthy: None) -> None:
    state = status.judge(supervised(LAB4, breaker=TRIPPED), plan(LAB4))
    assert not state.ok
    assert any("all 4 ranks stay stopped until it is reset" in p for p in state.problems)
    two = status.judge(supervised(LAB4[:2], breaker=TRIPPED), plan(LAB4[:2]))
    assert any("the pair stays stopped until it is reset" in p for p in two.problems)


# --- gx10 doctor: the peers ------------------------------------------------------------------


def test_a_head_gone_under_three_workers_is_one_finding_naming_them_all() -> None:
    evidences = [node(n, i, running=i != 0) for i, n in enumerate(LAB4)]
    findings = [f for f in diagnose(evidences, plan(LAB4)) if f.code == r.HEAD_GONE]
    assert [(f.node, f.summary) for f in findings] == [
        (
            "gx10-a",
            "workers gx10-b, gx10-c, gx10-d run but the head gx10-a has no running container",
        )
    ]
    assert findings[0].fix.startswith("the workers wait for a head that is gone: ")


def test_a_head_gone_under_one_worker_reads_as_before() -> None:
    evidences = [node("gx10-a", 0, running=False), node("gx10-b", 1)]
    findings = [f for f in diagnose(evidences, plan(LAB4[:2])) if f.code == r.HEAD_GONE]
    assert [(f.node, f.summary) for f in findings] == [
        ("gx10-a", "worker gx10-b runs but the head gx10-a has no running container")
    ]
    assert findings[0].fix.startswith("the worker waits for a head that is gone: ")


def test_a_worker_gone_among_four_is_named() -> None:
    evidences = [node(n, i, running=n != "gx10-c") for i, n in enumerate(LAB4)]
    findings = [f for f in diagnose(evidences, plan(LAB4)) if f.code == r.WORKER_GONE]
    assert [f.node for f in findings] == ["gx10-c"]


def test_a_tripped_breaker_counts_the_ranks() -> None:
    four = [f for f in diagnose(supervised(LAB4, breaker=TRIPPED), plan(LAB4))]
    tripped = [f for f in four if f.code == r.SUPERVISION_TRIPPED]
    assert [f.node for f in tripped] == ["gx10-a"]
    assert "all 4 ranks are stopped" in tripped[0].summary
    assert "on every node" in tripped[0].fix
    two = diagnose(supervised(LAB4[:2], breaker=TRIPPED), plan(LAB4[:2]))
    tripped = [f for f in two if f.code == r.SUPERVISION_TRIPPED]
    assert "both ranks are stopped" in tripped[0].summary
    assert "on both nodes" in tripped[0].fix


# --- gx10 doctor: every measured link --------------------------------------------------------


def switch_report(gbps: dict[tuple[str, str, str], float | None]) -> dict[str, Any]:
    """The head's gx10_fabric_bandwidth on four nodes; every link 9.5 Gb/s unless ``gbps``
    names it by (rail, node, peer)."""
    links = []
    for i, one in enumerate(LAB4):
        for other in LAB4[i + 1 :]:
            for rail, netdev, subnet in (("rail0", RAIL0, 100), ("rail1", RAIL1, 101)):
                figure = gbps.get((rail, one, other), 9.5)
                links.append(
                    {
                        "rail": rail,
                        "netdev": netdev,
                        "node": one,
                        "peer": other,
                        "address": f"192.168.{subnet}.{10 + LAB4.index(other)}",
                        "gbps": figure,
                        "min_gbps": 2.0,
                        "ok": figure is not None and figure >= 2.0,
                    }
                )
    return {
        "schema": 1,
        "per_rail": {w: {RAIL0: 9.5, RAIL1: 9.5} for w in LAB4[1:]},
        "total": {w: 15.0 for w in LAB4[1:]},
        "links": links,
        "bad_links": [],
        "skipped_pairs": [],
    }


def judged(report: dict[str, Any]) -> tuple[list[Evidence], list[r.Finding]]:
    parsed = c.parse_bandwidth_report(report)
    evidences = parsed.attach(
        [node(n, i, bandwidth_degraded_band=(0.1, 0.5)) for i, n in enumerate(LAB4)]
    )
    return evidences, diagnose(evidences, plan(LAB4))


def test_a_slow_link_between_two_workers_is_named_by_both_ends_and_its_rail() -> None:
    evidences, findings = judged(switch_report({("rail1", "gx10-b", "gx10-c"): 1.2}))
    assert [(f.code, f.node, f.summary, f.evidence) for f in findings] == [
        (
            r.BANDWIDTH_LOW,
            "gx10-c",
            "rail1 gx10-b -> gx10-c 192.168.101.12 runs at 1.20 Gb/s, below 2",
            f"rail1 gx10-b -> gx10-c 192.168.101.12: 1.20 Gb/s < 2 Gb/s ({RAIL1})",
        )
    ]
    # Each link sits on its peer end: gx10-b has its link with the head, gx10-d three.
    assert [len(ev.bandwidth_links) for ev in evidences] == [0, 2, 4, 6]


def test_a_link_in_the_stuck_state_band_and_one_without_a_result() -> None:
    _, findings = judged(
        switch_report({("rail0", "gx10-c", "gx10-d"): 0.3, ("rail1", "gx10-a", "gx10-b"): None})
    )
    assert [(f.code, f.node) for f in findings] == [
        (r.BANDWIDTH_DEGRADED, "gx10-d"),
        (r.EVIDENCE_INCOMPLETE, "gx10-b"),
    ]
    assert findings[0].summary.startswith("rail0 gx10-c -> gx10-d 192.168.100.13 measured 0.30")
    assert findings[1].evidence == (
        f"bandwidth of rail1 gx10-a -> gx10-b 192.168.101.11 ({RAIL1}) not measured: the tool "
        "gave no result"
    )


def test_a_pair_the_budget_skipped_is_named() -> None:
    report = switch_report({})
    report["skipped_pairs"] = [["gx10-b", "gx10-d"]]
    _, findings = judged(report)
    assert [(f.code, f.node) for f in findings] == [(r.EVIDENCE_INCOMPLETE, "gx10-d")]
    assert "between gx10-b and gx10-d not measured" in findings[0].evidence


def test_a_link_outside_the_limit_is_left_out() -> None:
    link = BandwidthLink("rail1", RAIL1, "gx10-c", "gx10-d", "192.168.101.13", 0.3, 2.0)
    evidences = c.attach_bandwidth_links([node("gx10-a", 0), node("gx10-b", 1)], [link])
    assert all(not ev.bandwidth_links for ev in evidences)


def test_a_report_without_links_is_judged_by_the_heads_figures_as_before() -> None:
    """Two nodes on cables (and collections from before N nodes): per_rail only."""
    report = {"schema": 1, "per_rail": {"gx10-b": {RAIL0: 9.79, RAIL1: "0.28"}}, "total": {}}
    parsed = c.parse_bandwidth_report(report)
    assert parsed.links is None
    assert parsed.extravars == {"doctor_bandwidth_gbps": {"gx10-b": {RAIL0: 9.79, RAIL1: 0.28}}}
    evidences = [node("gx10-a", 0), node("gx10-b", 1)]
    assert parsed.attach(evidences) == evidences
    # doctor.yml gives each node its figures; the findings read as they always did.
    worker = node(
        "gx10-b",
        1,
        bandwidth_gbps={RAIL0: 9.79, RAIL1: 0.28},
        bandwidth_min_gbps=2.0,
        bandwidth_degraded_band=(0.1, 0.5),
    )
    findings = diagnose([node("gx10-a", 0), worker], plan(LAB4[:2]))
    assert [(f.code, f.node, f.summary) for f in findings] == [
        (
            r.BANDWIDTH_DEGRADED,
            "gx10-b",
            f"rail {RAIL1} measured 0.28 Gb/s, in the 0.1-0.5 Gb/s band of the known ConnectX-7 "
            "stuck state",
        )
    ]


def test_a_switch_report_gives_the_evidence_play_no_figures() -> None:
    parsed = c.parse_bandwidth_report(switch_report({}))
    assert parsed.links is not None
    assert len(parsed.links) == 12  # 6 pairs x 2 rails
    assert parsed.extravars == {}
    assert parsed.figures["gx10-d"] == {RAIL0: 9.5, RAIL1: 9.5}


def test_the_pair_report_type_is_unchanged_for_its_readers() -> None:
    report = parse_pair_report(agent_status("gx10-b", LAB4))
    assert isinstance(report, PairReport)
    assert report.breaker == PairBreaker("closed", None, None)
    assert report.peer == "gx10-a"
