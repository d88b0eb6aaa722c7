# SPDX-License-Identifier: Apache-2.0
"""fabric_rules (and the filters over it) against what the role's former Jinja computed.

fixtures/fabric_rules/recorded.json is the Jinja's output over a set of scenarios (healthy,
degraded band, below the minimum, a narrow PCIe link, MTU mismatch, no carrier, several workers,
no tool, veth), recorded by record_fabric_rules.py. The one deliberate difference is a defect of
the Jinja: with several workers it judged the bandwidth of the first worker only.

The bandwidth was measured from the head only then; it is over node pairs now (the
``fabric_pair_*`` filters, module_utils/fabric_pairs.py): the head's pairs of the schedule are the
recorded head -> worker runs, and give the recorded figures and checks.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter import fabric
from ansible_collections.gx10.cluster.plugins.module_utils import fabric_pairs as pairs
from ansible_collections.gx10.cluster.plugins.module_utils import fabric_rules as rules
from ansible_collections.gx10.cluster.tests.unit.record_fabric_rules import record

RECORDED = json.loads(
    (Path(__file__).parent / "fixtures" / "fabric_rules" / "recorded.json").read_text()
)
SCENARIOS: dict[str, Any] = RECORDED["scenarios"]
# The Jinja's `for worker in workers if checks | length == 0` stopped after the first worker.
FIRST_WORKER_ONLY = {"multi-a"}


def _vars(host: str) -> dict[str, Any]:
    merged = {**RECORDED["defaults"], "fabric_rdma_devices": {}}
    merged.update(copy.deepcopy(SCENARIOS[host]["hostvars"]))
    return merged


HOSTVARS = {host: _vars(host) for host in SCENARIOS}


def _is_head(host: str) -> bool:
    return bool(HOSTVARS[host]["gx10_plan"]["head"] == host)


def _rails(host: str) -> list[dict[str, Any]]:
    rails: list[dict[str, Any]] = HOSTVARS[host]["gx10_plan"]["hosts"][host]["rails"]
    return rails


def _schedule(host: str) -> dict[str, Any]:
    """Every pair of the scenario's plan (the head's pairs first, as the schedule orders them)."""
    return fabric.fabric_pair_schedule(HOSTVARS[host]["gx10_plan"])


def _bandwidth_checks(host: str) -> list[dict[str, Any]]:
    """The head's recorded measurements (head -> worker, no ``client``: the head's) judged over
    node pairs."""
    v = HOSTVARS[host]
    if not v["fabric_bandwidth"]:
        return []
    return fabric.fabric_pair_bandwidth_checks(
        v.get("__fabric_measurements", []),
        v["gx10_plan"],
        _schedule(host),
        HOSTVARS,
        v["fabric_bandwidth_tool"],
        v["fabric_min_rail_gbps"],
        v["fabric_min_total_gbps"],
        v["fabric_degraded_band_gbps"],
    )


def _without(mapping: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if key not in keys}


def _sorted_runs(runs: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(run, sort_keys=True) for run in runs)


def _head_runs(runs: list[dict[str, Any]], head: str) -> list[str]:
    """Runs over node pairs as the head -> worker runs of before: the head's pairs of each run,
    without the pair runs' ``client``, ``round`` and ``ends``, with the run's ``worker``."""
    found: list[dict[str, Any]] = []
    for run in runs:
        mine = [
            {k: v for k, v in pair.items() if k != "client"}
            for pair in run["pairs"]
            if pair["client"] == head
        ]
        if mine:
            rest = {k: v for k, v in run.items() if k not in {"round", "ends", "pairs"}}
            found.append({**rest, "worker": mine[0]["worker"], "pairs": mine})
    return _sorted_runs(found)


@pytest.mark.parametrize("host", sorted(SCENARIOS))
def test_link_judgments_match_the_recorded_jinja(host: str) -> None:
    v = HOSTVARS[host]
    out = SCENARIOS[host]["outputs"]
    rails = _rails(host)
    assert fabric.fabric_gid_rails(rails, v["fabric_rdma_devices"]) == out["__fabric_gid_rails"]
    assert (
        fabric.fabric_not_checked(rails, v["__fabric_links"]["netdevs"])
        == (out["__fabric_not_checked"])
    )
    checks = fabric.fabric_link_checks(
        rails,
        host,
        HOSTVARS,
        v["gx10_plan"]["mtu"],
        v["fabric_min_link_speed_mbps"],
        v["fabric_min_pcie_width"],
    )
    assert checks == out["__fabric_link_checks"]


@pytest.mark.parametrize("host", sorted(h for h in SCENARIOS if _is_head(h)))
def test_bandwidth_judgments_match_the_recorded_jinja(host: str) -> None:
    v = HOSTVARS[host]
    out = SCENARIOS[host]["outputs"]
    plan = v["gx10_plan"]
    schedule = _schedule(host)
    runs = fabric.fabric_pair_runs(
        schedule,
        plan,
        HOSTVARS,
        v["fabric_bandwidth_tool"],
        v["fabric_iperf3_reverse"],
        v["fabric_bandwidth_port"],
    )
    assert _head_runs(runs, host) == _sorted_runs(out["__fabric_runs"])
    if len(plan["workers"]) == 1:  # one pair, one round: the runs of before, in their order
        assert [
            {
                **_without(run, "round", "ends"),
                "pairs": [_without(p, "client") for p in run["pairs"]],
            }
            for run in runs
        ] == [_without(run, "worker") for run in out["__fabric_runs"]]
        assert {run["ends"] for run in runs} == {f"{host} <-> {plan['workers'][0]}"}
    measurements = v.get("__fabric_measurements", [])
    folded = fabric.fabric_pair_bandwidth(measurements, plan, schedule, v["fabric_min_rail_gbps"])
    assert {k: folded[k] for k in ("per_rail", "total")} == out["__fabric_bandwidth"]
    # Measurements naming their client (as the pair merge keeps them) read the same.
    named = [{**m, "client": host} for m in measurements]
    assert fabric.fabric_pair_bandwidth(named, plan, schedule, v["fabric_min_rail_gbps"]) == folded
    checks = _bandwidth_checks(host)
    if host in FIRST_WORKER_ONLY:
        assert checks[: len(out["__fabric_bandwidth_checks"])] == out["__fabric_bandwidth_checks"]
    else:
        assert checks == out["__fabric_bandwidth_checks"]


def test_every_worker_bandwidth_is_judged() -> None:
    """Defect of the Jinja: the second worker's 20 Gb/s rail (the stuck band) went unjudged."""
    checks = _bandwidth_checks("multi-a")
    second = [c for c in checks if "multi-a" in c["name"] and "<-> multi-c" in c["name"]]
    assert [c["ok"] for c in second] == [False, True, True]
    assert "the known degraded state" in second[0]["value"]
    assert second[0]["fix"] == rules.DEGRADED_REMEDY
    recorded = SCENARIOS["multi-a"]["outputs"]["__fabric_bandwidth_checks"]
    assert not [c for c in recorded if "<-> multi-c" in c["name"]]


@pytest.mark.parametrize("name", sorted(RECORDED["measure"]))
def test_merge_matches_the_recorded_jinja(name: str) -> None:
    case = RECORDED["measure"][name]["case"]
    merged = fabric.fabric_pair_merge_measurements(
        case["measurements"], case["run"], case["done"], case["tool"]
    )
    assert merged == RECORDED["measure"][name]["result"]


@pytest.mark.parametrize("name", sorted(RECORDED["again"]))
def test_retry_matches_the_recorded_jinja(name: str) -> None:
    case = RECORDED["measure"][name]["case"]
    again = fabric.fabric_pair_runs_without_result(RECORDED["retry_runs"], case["measurements"])
    assert again == RECORDED["again"][name]


# --- each branch of the pure functions -------------------------------------------------------

RAIL = {
    "name": "rail1",
    "netdev": "enP2p1s0f0np0",
    "address": "192.168.101.10",
    "peers": {"b": "192.168.101.11"},
}
GOOD = {
    "present": True,
    "carrier": True,
    "mtu": 9000,
    "speed_mbps": 200000,
    "pcie_width": 4,
    "pcie_speed": "32.0 GT/s PCIe",
}


def _check(checks: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return next(c for c in checks if c["name"].endswith(suffix))


@pytest.mark.parametrize(
    ("width", "minimum", "ok"), [(2, 4, False), (4, 4, True), (8, 4, True), (1, 1, True)]
)
def test_pcie_width(width: int, minimum: int, ok: bool) -> None:
    assert rules.pcie_width_ok(width, minimum) is ok
    checks = rules.link_checks(
        "a",
        [RAIL],
        {RAIL["netdev"]: {**GOOD, "pcie_width": width}},
        mtu=9000,
        min_pcie_width=minimum,
    )
    check = _check(checks, "PCIe link width of the CX-7 function")
    assert check["ok"] is ok
    assert check["value"] == f"x{width} 32.0 GT/s PCIe"
    assert check["expected"] == f"at least x{minimum}"
    assert check["fix"] == rules.PCIE_REMEDY


def test_no_pcie_link_and_no_speed_are_not_checked_and_say_so() -> None:
    state = {**GOOD, "pcie_width": None, "speed_mbps": None}
    checks = rules.link_checks("a", [RAIL], {RAIL["netdev"]: state}, mtu=9000)
    assert not [c for c in checks if "PCIe" in c["name"] or "link speed" in c["name"]]
    assert rules.not_checked([RAIL], {RAIL["netdev"]: state}) == [
        "rail1 enP2p1s0f0np0: no link speed in sysfs (veth or a down link): speed not checked",
        "rail1 enP2p1s0f0np0: no PCIe link in sysfs (veth, virtual function): PCIe width not "
        "checked",
    ]
    assert rules.not_checked([RAIL], {}) == []


@pytest.mark.parametrize(("speed", "ok"), [(100000, False), (200000, True)])
def test_link_speed(speed: int, ok: bool) -> None:
    checks = rules.link_checks(
        "a", [RAIL], {RAIL["netdev"]: {**GOOD, "speed_mbps": speed}}, mtu=9000
    )
    assert _check(checks, ": link speed")["ok"] is ok


@pytest.mark.parametrize(
    ("state", "ok", "value"),
    [
        (GOOD, True, "carrier True"),
        ({**GOOD, "carrier": False}, False, "carrier False"),
        ({**GOOD, "carrier": None}, False, "carrier None"),
        (None, False, "no such netdev"),
    ],
)
def test_carrier(state: dict[str, Any] | None, ok: bool, value: str) -> None:
    netdevs = {RAIL["netdev"]: state} if state else {}
    check = _check(rules.link_checks("a", [RAIL], netdevs, mtu=9000), "present and carrier")
    assert (check["ok"], check["value"]) == (ok, value)


@pytest.mark.parametrize(
    ("mine", "peer", "value"),
    [
        (9000, 9000, ""),
        (1500, 9000, "a enP2p1s0f0np0 MTU 1500"),
        (9000, 1500, "b enP2p1s0f0np0 MTU 1500"),
        (9000, None, "b enP2p1s0f0np0 MTU unknown"),
    ],
)
def test_mtu_on_both_ends(mine: int, peer: int | None, value: str) -> None:
    peers = {"b": {RAIL["netdev"]: {**GOOD, "mtu": peer}}} if peer else {}
    checks = rules.link_checks(
        "a", [RAIL], {RAIL["netdev"]: {**GOOD, "mtu": mine}}, mtu=9000, peer_netdevs=peers
    )
    check = _check(checks, "MTU on both ends")
    assert (check["ok"], check["value"]) == (value == "", value)
    assert rules.mtu_ok(mine, 9000) is (mine == 9000)


def test_ping_and_route() -> None:
    item = [RAIL, "b"]
    checks = rules.link_checks(
        "a",
        [RAIL],
        {RAIL["netdev"]: GOOD},
        mtu=9000,
        ping=[
            {"netdev": RAIL["netdev"], "peer": "b", "ok": False, "message": "message too long"},
            {"netdev": "other", "peer": "b", "ok": True, "message": "rtt"},
        ],
        route=[
            {"item": item, "rc": 0, "stdout": '[{"dev": "eth0"}]', "stderr": ""},
            {"item": item, "rc": 2, "stdout": "", "stderr": "unreachable"},
        ],
    )
    ping = _check(checks, "-byte ping a -> b 192.168.101.11")
    assert ping["name"].endswith("no-fragment 8972-byte ping a -> b 192.168.101.11")
    assert (ping["ok"], ping["value"]) == (False, "message too long")
    assert ping["expected"] == "answers to ping -M do -s 8972 -I enP2p1s0f0np0"
    routes = [c for c in checks if ": route to b" in c["name"]]
    assert [(c["ok"], c["value"]) for c in routes] == [
        (False, "leaves through eth0"),
        (False, "leaves through none (unreachable)"),
    ]


@pytest.mark.parametrize(
    ("gbps", "status"),
    [
        (92.5, "ok"),
        (80.0, "ok"),
        (13.2, "degraded_known"),
        (45.0, "low"),
        (3.0, "low"),
        (8.0, "degraded_known"),
        (25.0, "degraded_known"),
    ],
)
def test_classify_bandwidth(gbps: float, status: str) -> None:
    assert rules.classify_bandwidth(gbps) == status
    assert rules.bandwidth_verdict(gbps)["remedy"] == rules.bandwidth_remedy(status)


def _meas(worker: str, mode: str, reverse: bool, netdev: str, gbps: float | None) -> dict[str, Any]:
    return {
        "worker": worker,
        "mode": mode,
        "reverse": reverse,
        "netdev": netdev,
        "ok": gbps is not None,
        "gbps": gbps,
        "error": "" if gbps is not None else "boom",
    }


RAILS2 = [
    {"name": "rail0", "netdev": "n0", "address": "10.0.0.1", "peers": {"b": "10.0.0.2"}},
    {"name": "rail1", "netdev": "n1", "address": "10.0.1.1", "peers": {"b": "10.0.1.2"}},
]


def test_fold_takes_the_slower_direction_and_drops_failed_rails() -> None:
    measurements = [
        _meas("b", "single", False, "n0", 90.0),
        _meas("b", "single", True, "n0", 85.12345),
        _meas("b", "single", False, "n1", None),
        _meas("b", "both", False, "n0", 90.0),
        _meas("b", "both", False, "n1", 91.0),
        _meas("b", "both", True, "n0", 80.0),
        _meas("b", "both", True, "n1", 81.0),
    ]
    assert rules.fold_bandwidth(measurements, ["b"], RAILS2) == {
        "per_rail": {"b": {"n0": 85.123}},
        "total": {"b": 161.0},
    }
    failed_total = [*measurements[:3], _meas("b", "both", False, "n0", None)]
    assert rules.fold_bandwidth(failed_total, ["b"], RAILS2)["total"] == {}


def test_bandwidth_checks_branches() -> None:
    measurements = [
        _meas("b", "single", False, "n0", 95.0),
        _meas("b", "single", False, "n1", None),
    ]
    checks = rules.bandwidth_checks(
        "a", ["b"], RAILS2, measurements, tool="ib_write_bw", tool_rc={"a": 0, "b": 0}
    )
    assert [(c["ok"], c["value"]) for c in checks] == [
        (True, "95.0 Gb/s"),
        (False, "no result: boom"),
        (False, "no result: not measured"),
    ]
    assert checks[2]["name"] == "all rails at once a <-> b (rail0 + rail1, ib_write_bw)"
    missing = rules.bandwidth_checks(
        "a", ["b"], RAILS2, measurements, tool="ib_write_bw", tool_rc={"a": 0, "b": None}
    )
    assert [c["name"] for c in missing] == ["bandwidth tool on b"]
    assert missing[0]["fix"] == "install perftest (ib_write_bw) on the nodes"


def test_runs_pair_the_gid_of_both_ends() -> None:
    b_rail = {**RAILS2[0], "address": "10.0.0.2", "peers": {"a": "10.0.0.1"}}
    runs = pairs.pair_runs(
        [[["a", "b"]]],
        {"a": RAILS2[:1], "b": [b_rail]},
        tool="ib_write_bw",
        iperf3_reverse=True,
        port=100,
        gid={
            "a": [{"netdev": "n0", "rdma_dev": "r0", "gid_index": 3}],
            "b": [{"netdev": "n0", "rdma_dev": "s0", "gid_index": 5}],
        },
    )
    assert len(runs) == 1  # one rail: no "all rails at once"; ib_write_bw: one direction
    pair = runs[0]["pairs"][0]
    assert (pair["client"], pair["worker"]) == ("a", "b")
    assert (pair["client_rdma_dev"], pair["client_gid_index"]) == ("r0", 3)
    assert (pair["server_rdma_dev"], pair["server_gid_index"], pair["port"]) == ("s0", 5, 100)


def test_the_filters_reject_what_is_not_a_list() -> None:
    plan = HOSTVARS["healthy-a"]["gx10_plan"]
    schedule = _schedule("healthy-a")
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        fabric.fabric_pair_bandwidth("x", plan, schedule)
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        fabric.fabric_gid_rails([], ["x"])
    with pytest.raises(AnsibleFilterError, match=r"\[low, high\]"):
        fabric.fabric_pair_bandwidth_checks([], plan, schedule, {}, "iperf3", 1, 2, [1])


# --- the role, through ansible-playbook -------------------------------------------------------


def test_the_role_renders_what_the_jinja_did(tmp_path: Path) -> None:
    """The role's vars and set_fact expressions as checked out, rendered by ansible-playbook over
    the recorded scenarios: the same outputs, plus the second worker's bandwidth checks (and,
    with three nodes, the workers' pair); the runs and figures are over node pairs now, the
    head's the same as before."""
    now = record("WORKTREE", tmp_path / "now.json")
    for host, scenario in SCENARIOS.items():
        for name, recorded in scenario["outputs"].items():
            got = now["scenarios"][host]["outputs"][name]
            if name == "__fabric_runs":
                # Runs over node pairs (fabric_pairs): the head's pairs are the runs of before.
                assert _head_runs(got, host) == _sorted_runs(recorded), host
            elif name == "__fabric_bandwidth":
                assert got.pop("links", None) is not None, host
                assert got.pop("bad_links", None) is not None, host
                assert got == recorded, host
            elif host in FIRST_WORKER_ONLY and name == "__fabric_bandwidth_checks":
                assert got[: len(recorded)] == recorded
                assert [c["name"] for c in got[len(recorded) :] if "<-> multi-c" in c["name"]]
            else:
                assert got == recorded, (host, name)
    assert now["measure"] == RECORDED["measure"]
    assert now["again"] == RECORDED["again"]


def test_gid_rails_take_the_plans_rdma_device_unless_a_role_overrides_it() -> None:
    planned = [
        {**RAILS2[0], "rdma_dev": "rocep1s0f0"},
        {**RAILS2[1], "rdma_dev": None},
    ]
    assert rules.gid_rails(planned) == [
        {"netdev": "n0", "address": "10.0.0.1", "rdma_dev": "rocep1s0f0"},
        {"netdev": "n1", "address": "10.0.1.1"},
    ]
    assert rules.gid_rails(planned, {"n1": "roceP2p1s0f0", "n0": "mlx5_0"}) == [
        {"netdev": "n0", "address": "10.0.0.1", "rdma_dev": "mlx5_0"},
        {"netdev": "n1", "address": "10.0.1.1", "rdma_dev": "roceP2p1s0f0"},
    ]


def test_the_ping_payload_is_the_plans() -> None:
    checks = rules.link_checks(
        "a",
        [{**RAIL, "ping_payload": 1472}],
        {RAIL["netdev"]: GOOD},
        mtu=1500,
        ping=[{"netdev": RAIL["netdev"], "peer": "b", "ok": True, "message": "ok"}],
    )
    assert _check(checks, "192.168.101.11")["name"].endswith(
        "no-fragment 1472-byte ping a -> b 192.168.101.11"
    )
    assert rules.ping_payload(9000) == 8972


def test_on_a_switch_every_peer_is_pinged_and_the_bad_link_is_named() -> None:
    """Four nodes on a switch: node a's rail has three peers; one of them does not answer."""
    rail = {**RAIL, "peers": {"b": "192.168.101.11", "c": "192.168.101.12", "d": "192.168.101.13"}}
    ping = [
        {"netdev": rail["netdev"], "peer": peer, "ok": peer != "c", "message": message}
        for peer, message in (("b", ""), ("c", "Destination Host Unreachable"), ("d", ""))
    ]
    checks = rules.link_checks("a", [rail], {rail["netdev"]: GOOD}, mtu=9000, ping=ping)
    pings = [check for check in checks if "no-fragment" in check["name"]]
    assert [(c["name"].split(": ", 1)[1], c["ok"]) for c in pings] == [
        ("no-fragment 8972-byte ping a -> b 192.168.101.11", True),
        ("no-fragment 8972-byte ping a -> c 192.168.101.12", False),
        ("no-fragment 8972-byte ping a -> d 192.168.101.13", True),
    ]
    assert pings[1]["value"] == "Destination Host Unreachable"
    assert pings[1]["name"].startswith("rail1 a enP2p1s0f0np0 192.168.101.10 <-> b ")
