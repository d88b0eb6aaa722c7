"""gx10 doctor rules: each known fault found on realistic evidence, and not on a healthy cluster.

The GID tables are what the collection's resolver reads from sysfs trees that the lab's RDMA
simulator builds from recorded `ip -j addr show` output (tests/fixtures/ip-addr); the plan is the
one `gx10.cluster.validate_cluster` computes for the default rails; the bandwidth figures are the
field notes' (92.57/97.28 healthy, 13.26 stuck).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from gx10._collection import load as module_utils
from gx10.doctor import (
    ContainerEvidence,
    Evidence,
    Finding,
    RailEvidence,
    diagnose,
    findings_json,
    print_findings,
)
from gx10.doctor import rules as r
from gx10.doctor.engine_metrics import SpecDecodeCounters
from gx10.doctor.pair import PairBreaker, PairGid, PairReport, PairRestart
from gx10.lab.simulators.rdma_sysfs import sync

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "tests" / "fixtures" / "ip-addr"
RAIL0, RAIL1 = "enp1s0f0np0", "enP2p1s0f0np0"
DEV0, DEV1 = "rocep1s0f0", "roceP2p1s0f0"
OCTETS = {"gx10-a": "10", "gx10-b": "11"}
# The serve stage's draft (roles/vllm_serve defaults) and the head's counters over 2,000 drafts.
DSPARK = {"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"}


def spec(accepted: float, draft_tokens: float = 10000.0) -> SpecDecodeCounters:
    """Counters of k=5 drafts with `accepted` of `draft_tokens` taken, front positions first."""
    drafts = draft_tokens / 5
    per_position = tuple(min(max(accepted - i * drafts, 0.0), drafts) for i in range(5))
    return SpecDecodeCounters(drafts, draft_tokens, accepted, per_position)


def _recording(name: str, octet: str) -> str:
    text = (RECORDINGS / f"{name}.json").read_text(encoding="utf-8")
    return text.replace('"192.168.100.10"', f'"192.168.100.{octet}"').replace(
        '"192.168.101.10"', f'"192.168.101.{octet}"'
    )


def gid_tables(root: Path, octet: str, recording: str = "1-rail-ipv4", shift: int = 0) -> Any:
    roce_gid = module_utils("roce_gid")
    sync(str(root), _recording(recording, octet), shift=shift, reset=True)
    return {
        dev: [e.as_dict() for e in roce_gid.read_gid_table(str(root), dev)] for dev in (DEV0, DEV1)
    }


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    cluster_plan = module_utils("cluster_plan")
    return dict(
        cluster_plan.build_plan(
            {"head": ["gx10-a"], "workers": ["gx10-b"]},
            {"gx10-a": {"gx10_allow_unauthenticated": True}},
        )
    )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {
        node: gid_tables(tmp_path_factory.mktemp(node), octet) for node, octet in OCTETS.items()
    }


def node_evidence(node: str, tables: dict[str, Any], **changes: Any) -> Evidence:
    octet = OCTETS[node]
    rails = (
        RailEvidence(
            RAIL0, True, True, 9000, (f"192.168.100.{octet}/24",), (), 4, "32.0 GT/s PCIe", DEV0
        ),
        RailEvidence(
            RAIL1, True, True, 9000, (f"192.168.101.{octet}/24",), (), 4, "32.0 GT/s PCIe", DEV1
        ),
    )
    base = Evidence(
        node=node,
        rails=rails,
        gid_tables=tables[node],
        env={"NCCL_IB_HCA": f"{DEV0},{DEV1}", "NCCL_IB_GID_INDEX": "3"},
        gid_mode="pinned",
        containers=(
            ContainerEvidence("gx10-vllm", 0 if node == "gx10-a" else 1, "running", True, True),
        ),
        bandwidth_gbps={RAIL0: 92.57, RAIL1: 97.28},
        sm_clock_cap_mhz=None,
        sm_clock_policy_mhz=None,
    )
    return dataclasses.replace(base, **changes)


def cluster(tables: dict[str, Any], node: str = "", **changes: Any) -> list[Evidence]:
    return [node_evidence(n, tables, **(changes if n == node else {})) for n in OCTETS]


def rail(
    ev_tables: dict[str, Any], node: str, index: int, **changes: Any
) -> tuple[RailEvidence, ...]:
    rails = list(node_evidence(node, ev_tables).rails)
    rails[index] = dataclasses.replace(rails[index], **changes)
    return tuple(rails)


def pair_report(
    node: str,
    pinned: int | None = 3,
    current: int | None = 3,
    state: str = "serving",
    breaker: PairBreaker | None = None,
) -> PairReport:
    """What a node's `gx10-pair status` says (test_pair_status reads the agents' own output)."""
    head = node == "gx10-a"
    return PairReport(
        node=node,
        role="head" if head else "worker",
        state=state,
        generation=2,
        rank_active=state == "serving",
        restarts_in_window=1,
        last_restart=PairRestart(1_700_000_000.0, "worker-rank-inactive"),
        breaker=breaker or PairBreaker("closed", None, None),
        gid=(PairGid(RAIL0, pinned, current), PairGid(RAIL1, 3, 3)),
        gid_error=None,
        source="local" if head else "head",
        peer="gx10-b" if head else "gx10-a",
        peer_age=1.0,
        agent="/usr/local/lib/gx10/pair/gx10-pair",
    )


TRIPPED = PairBreaker(
    "open", "6 restarts within 3600s (limit 5); last: head-not-ready:/health", 1_700_000_100.0
)


def supervised(tables: dict[str, Any], **reports: PairReport) -> list[Evidence]:
    """Both nodes supervised (their agents' reports), the others as in `cluster`."""
    return [
        node_evidence(n, tables, supervisor_installed=True, pair=reports.get(n) or pair_report(n))
        for n in OCTETS
    ]


def codes(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.node) for f in findings]


def test_healthy_cluster_has_no_finding(plan: dict[str, Any], tables: dict[str, Any]) -> None:
    assert diagnose(cluster(tables), plan) == []


def test_healthy_supervised_cluster_has_no_finding(
    plan: dict[str, Any], tables: dict[str, Any]
) -> None:
    assert diagnose(supervised(tables), plan) == []


# Each case: (build the faulty evidence from the tables, code, node, a piece of the fix).
Case = tuple[Callable[[dict[str, Any], Path], list[Evidence]], str, str, str]
FAULTS: dict[str, Case] = {
    "unreachable": (
        lambda t, _p: cluster(t, "gx10-b", reachable=False, containers=()),
        r.NODE_UNREACHABLE,
        "gx10-b",
        "ansible -m ping",
    ),
    "rail missing": (
        lambda t, _p: cluster(t, "gx10-a", rails=rail(t, "gx10-a", 1, present=False, addresses=())),
        r.RAIL_MISSING,
        "gx10-a",
        "ip -br link",
    ),
    "same subnet": (
        lambda t, _p: cluster(
            t,
            "gx10-a",
            rails=rail(t, "gx10-a", 1, addresses=("192.168.101.10/24", "192.168.100.20/24")),
        ),
        r.RAILS_SAME_SUBNET,
        "gx10-a",
        "own subnet",
    ),
    "rail ip missing": (
        lambda t, p: cluster(
            gid_t := {**t, "gx10-b": gid_tables(p, "11", "3-rail0-ipv4-removed")},
            "gx10-b",
            rails=rail(
                gid_t, "gx10-b", 0, addresses=("169.254.23.7/16",), link_local=("169.254.23.7/16",)
            ),
        ),
        r.RAIL_IP_MISSING,
        "gx10-b",
        "network stage",
    ),
    "link local": (
        lambda t, p: cluster(
            gid_t := {**t, "gx10-a": gid_tables(p, "10", "2-plus-link-local")},
            "gx10-a",
            rails=rail(
                gid_t,
                "gx10-a",
                0,
                addresses=("192.168.100.10/24", "169.254.23.7/16"),
                link_local=("169.254.23.7/16",),
            ),
        ),
        r.RAIL_LINK_LOCAL,
        "gx10-a",
        "link-local: []",
    ),
    "gid missing": (
        lambda t, p: cluster(
            {**t, "gx10-b": gid_tables(p, "11", "0-no-ipv4")}, "gx10-b", env=None, gid_mode="auto"
        ),
        r.GID_MISSING,
        "gx10-b",
        "rdma link show",
    ),
    "gid index mismatch": (
        # The worker's table moved (stale slots in front: v2 at 6); its file still says 3, for
        # the next start (no rank runs now).
        lambda t, p: cluster(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)}, "gx10-b", containers=()
        ),
        r.GID_INDEX_MISMATCH,
        "gx10-b",
        "nccl.yml",
    ),
    "gid moved under an unsupervised rank": (
        # The same, with the worker's rank running on nccl.env's 3: nothing repairs it.
        lambda t, p: cluster({**t, "gx10-b": gid_tables(p, "11", shift=5)}),
        r.GID_MOVED,
        "gx10-b",
        "then the serve stage",
    ),
    "gid moved under a supervised rank": (
        lambda t, p: supervised(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)}, **{"gx10-b": pair_report("gx10-b", 3, 6)}
        ),
        r.GID_MOVED,
        "gx10-b",
        "restarts the pair",
    ),
    "gid moved, the agent stopped (an unsupervised serve after a supervised one)": (
        lambda t, p: supervised(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)},
            **{"gx10-b": pair_report("gx10-b", 3, 6, state="stopped")},
        ),
        r.GID_MOVED,
        "gx10-b",
        "nothing restarts the ranks",
    ),
    "supervision tripped": (
        lambda t, _p: [
            node_evidence(n, t, containers=(), supervisor_installed=True, pair=report)
            for n, report in (
                ("gx10-a", pair_report("gx10-a", state="tripped", breaker=TRIPPED)),
                ("gx10-b", pair_report("gx10-b", state="waiting", breaker=TRIPPED)),
            )
        ],
        r.SUPERVISION_TRIPPED,
        "gx10-a",
        "gx10-pair reset",
    ),
    "pinned literal": (
        lambda t, p: cluster({**t, "gx10-b": gid_tables(p, "11", shift=5)}),
        r.GID_PINNED_LITERAL,
        r.CLUSTER,
        "do not set NCCL_IB_GID_INDEX by hand",
    ),
    "rails disagree": (
        lambda t, p: [
            node_evidence("gx10-a", t),
            node_evidence(
                "gx10-b",
                {"gx10-b": {DEV0: gid_tables(p, "11", shift=5)[DEV0], DEV1: t["gx10-b"][DEV1]}},
                env={"NCCL_IB_HCA": f"{DEV0},{DEV1}"},
            ),
        ],
        r.GID_RAILS_DISAGREE,
        "gx10-b",
        "clean reboot",
    ),
    "degraded band": (
        lambda t, _p: cluster(t, "gx10-a", bandwidth_gbps={RAIL0: 13.26, RAIL1: 97.28}),
        r.BANDWIDTH_DEGRADED,
        "gx10-a",
        "cut AC power",
    ),
    "low bandwidth": (
        lambda t, _p: cluster(t, "gx10-a", bandwidth_gbps={RAIL0: 45.0, RAIL1: 97.28}),
        r.BANDWIDTH_LOW,
        "gx10-a",
        "PCIe link width",
    ),
    "pcie x2": (
        lambda t, _p: cluster(t, "gx10-b", rails=rail(t, "gx10-b", 1, pcie_width=2)),
        r.PCIE_WIDTH_LOW,
        "gx10-b",
        "BIOS",
    ),
    "mtu": (
        lambda t, _p: cluster(t, "gx10-b", rails=rail(t, "gx10-b", 0, mtu=1500)),
        r.MTU_MISMATCH,
        "gx10-b",
        "MTU 9000",
    ),
    "no /dev/infiniband": (
        lambda t, _p: cluster(
            t, "gx10-a", containers=(ContainerEvidence("gx10-vllm", 0, "running", False, True),)
        ),
        r.CONTAINER_NO_INFINIBAND,
        "gx10-a",
        "--device /dev/infiniband",
    ),
    "memlock": (
        lambda t, _p: cluster(
            t, "gx10-b", containers=(ContainerEvidence("gx10-vllm", 1, "running", True, False),)
        ),
        r.CONTAINER_NO_MEMLOCK,
        "gx10-b",
        "memlock=-1",
    ),
    "worker gone": (
        lambda t, _p: cluster(
            t, "gx10-b", containers=(ContainerEvidence("gx10-vllm", 1, "exited", True, True),)
        ),
        r.WORKER_GONE,
        "gx10-b",
        "workers first",
    ),
    "head gone": (
        lambda t, _p: cluster(t, "gx10-a", containers=()),
        r.HEAD_GONE,
        "gx10-a",
        "workers first",
    ),
    "clock cap": (
        lambda t, _p: cluster(t, "gx10-a", sm_clock_cap_mhz=1400),
        r.CLOCK_CAP_LEFT,
        "gx10-a",
        "gx10-gpu-clock apply",
    ),
    "draft acceptance far below the field's": (
        lambda t, _p: cluster(t, "gx10-a", speculative=DSPARK, spec_decode=spec(4000.0)),
        r.SPEC_ACCEPTANCE_LOW,
        "gx10-a",
        "--speculative-config",
    ),
    "known-bad kernel build": (
        lambda t, _p: cluster(t, "gx10-b", known_faults=kho_fault()),
        r.KNOWN_BAD_BUILD,
        "gx10-b",
        "kho=off",
    ),
}


def kho_fault() -> tuple[r.KnownFault, ...]:
    """What the collection's own table says of a 7.0 build booted without kho=off."""
    host_faults = module_utils("host_faults")
    found = host_faults.known_faults({"release": "7.0.0-1019-nvidia", "cmdline": ["ro"]})
    return tuple(r.KnownFault(**{**f, "sources": tuple(f["sources"])}) for f in found)


@pytest.mark.parametrize("case", FAULTS.values(), ids=FAULTS.keys())
def test_each_fault_is_found_with_its_node_and_fix(
    case: Case, plan: dict[str, Any], tables: dict[str, Any], tmp_path: Path
) -> None:
    build, code, node, fix = case
    findings = diagnose(build(tables, tmp_path), plan)
    found = [f for f in findings if f.code == code]
    assert found, codes(findings)
    assert {f.node for f in found} == {node}, codes(findings)
    assert fix in found[0].fix
    assert found[0].evidence


# Near misses: healthy variations that must not raise the rule's code.
NEAR_MISSES: dict[str, tuple[Callable[[dict[str, Any], Path], list[Evidence]], str]] = {
    "rail present": (lambda t, _p: cluster(t), r.RAIL_MISSING),
    "subnets apart": (lambda t, _p: cluster(t), r.RAILS_SAME_SUBNET),
    "extra address, own still there": (
        lambda t, _p: cluster(
            t, "gx10-a", rails=rail(t, "gx10-a", 0, addresses=("192.168.100.10/24", "10.9.9.9/8"))
        ),
        r.RAIL_IP_MISSING,
    ),
    "no link-local": (lambda t, _p: cluster(t), r.RAIL_LINK_LOCAL),
    "each node pins its own index": (
        lambda t, p: cluster(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)},
            "gx10-b",
            env={"NCCL_IB_HCA": f"{DEV0},{DEV1}", "NCCL_IB_GID_INDEX": "6"},
        ),
        r.GID_INDEX_MISMATCH,
    ),
    "same literal, same tables": (lambda t, _p: cluster(t), r.GID_PINNED_LITERAL),
    # Supervised, each rank runs with the index its agent resolved at its start (6 after the
    # shift): nccl.env's 3 is only a default, neither a mismatch nor a literal for all nodes.
    "supervised, nccl.env's index is a default": (
        lambda t, p: supervised(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)}, **{"gx10-b": pair_report("gx10-b", 6, 6)}
        ),
        r.GID_INDEX_MISMATCH,
    ),
    "supervised, no literal for all": (
        lambda t, p: supervised(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)}, **{"gx10-b": pair_report("gx10-b", 6, 6)}
        ),
        r.GID_PINNED_LITERAL,
    ),
    "supervised, pinned as the table": (lambda t, _p: supervised(t), r.GID_MOVED),
    "supervised, moved while no rank runs": (
        lambda t, _p: [
            node_evidence(n, t, containers=(), supervisor_installed=True, pair=report)
            for n, report in (
                ("gx10-a", pair_report("gx10-a", state="waiting")),
                ("gx10-b", pair_report("gx10-b", 3, 6, state="waiting")),
            )
        ],
        r.GID_MOVED,
    ),
    "unsupervised auto mode: NCCL resolved its own": (
        lambda t, p: cluster(
            {**t, "gx10-b": gid_tables(p, "11", shift=5)},
            "gx10-b",
            env={"NCCL_IB_HCA": f"{DEV0},{DEV1}"},
            gid_mode="auto",
        ),
        r.GID_MOVED,
    ),
    "breaker closed": (lambda t, _p: supervised(t), r.SUPERVISION_TRIPPED),
    "auto mode, rails differ": (
        lambda t, p: [
            node_evidence("gx10-a", t),
            node_evidence(
                "gx10-b",
                {"gx10-b": {DEV0: gid_tables(p, "11", shift=5)[DEV0], DEV1: t["gx10-b"][DEV1]}},
                env={"NCCL_IB_HCA": f"{DEV0},{DEV1}"},
                gid_mode="auto",
            ),
        ],
        r.GID_RAILS_DISAGREE,
    ),
    "after the power cycle": (
        lambda t, _p: cluster(t, "gx10-a", bandwidth_gbps={RAIL0: 108.33, RAIL1: 96.0}),
        r.BANDWIDTH_DEGRADED,
    ),
    "not measured": (lambda t, _p: cluster(t, "gx10-a", bandwidth_gbps={}), r.BANDWIDTH_LOW),
    "pcie unknown": (
        lambda t, _p: cluster(t, "gx10-b", rails=rail(t, "gx10-b", 1, pcie_width=None)),
        r.PCIE_WIDTH_LOW,
    ),
    "mtu as planned": (lambda t, _p: cluster(t), r.MTU_MISMATCH),
    "stopped container not judged": (
        lambda t, _p: [
            node_evidence(n, t, containers=(ContainerEvidence("old", 0, "exited", False, False),))
            for n in OCTETS
        ],
        r.CONTAINER_NO_INFINIBAND,
    ),
    "inventory opts out of RDMA devices and memlock (the lab)": (
        lambda t, _p: [
            node_evidence(
                n,
                t,
                containers=(
                    ContainerEvidence(
                        "gx10-vllm",
                        0 if n == "gx10-a" else 1,
                        "running",
                        False,
                        False,
                        expects_infiniband=False,
                        expects_memlock_unlimited=False,
                    ),
                ),
            )
            for n in OCTETS
        ],
        r.CONTAINER_NO_MEMLOCK,
    ),
    "both stopped": (
        lambda t, _p: [node_evidence(n, t, containers=()) for n in OCTETS],
        r.WORKER_GONE,
    ),
    "draft acceptance in the field's range": (
        lambda t, _p: cluster(t, "gx10-a", speculative=DSPARK, spec_decode=spec(8500.0)),
        r.SPEC_ACCEPTANCE_LOW,
    ),
    "too few draft tokens to judge": (
        lambda t, _p: cluster(t, "gx10-a", speculative=DSPARK, spec_decode=spec(100.0, 999.0)),
        r.SPEC_ACCEPTANCE_LOW,
    ),
    "counters not read": (
        lambda t, _p: cluster(t, "gx10-a", speculative=DSPARK, spec_decode=None),
        r.SPEC_ACCEPTANCE_LOW,
    ),
    "no figure for this draft config": (
        lambda t, _p: cluster(
            t,
            "gx10-a",
            speculative={**DSPARK, "num_speculative_tokens": 3},
            spec_decode=spec(1000.0, 6000.0),
        ),
        r.SPEC_ACCEPTANCE_LOW,
    ),
    "speculative decoding off": (
        lambda t, _p: cluster(t, "gx10-a", speculative={}, spec_decode=spec(4000.0)),
        r.SPEC_ACCEPTANCE_LOW,
    ),
    "cap as the policy wants": (
        lambda t, _p: cluster(t, "gx10-a", sm_clock_cap_mhz=1400, sm_clock_policy_mhz=1400),
        r.CLOCK_CAP_LEFT,
    ),
}


@pytest.mark.parametrize("case", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_near_misses_raise_no_finding(
    case: tuple[Callable[[dict[str, Any], Path], list[Evidence]], str],
    plan: dict[str, Any],
    tables: dict[str, Any],
    tmp_path: Path,
) -> None:
    build, code = case
    findings = diagnose(build(tables, tmp_path), plan)
    assert code not in {f.code for f in findings}, codes(findings)


def test_the_simulator_tables_are_what_the_rules_expect(
    tables: dict[str, Any], tmp_path: Path
) -> None:
    # Guards the fixtures: index 3 normally, 6 after a shift of 5 (v1 at 5, v2 at 6).
    assert r._v2_index(tables["gx10-b"][DEV0], "192.168.100.11") == 3
    assert r._v2_index(gid_tables(tmp_path, "11", shift=5)[DEV0], "192.168.100.11") == 6


def test_renderers(plan: dict[str, Any], tables: dict[str, Any]) -> None:
    findings = diagnose(
        cluster(tables, "gx10-a", sm_clock_cap_mhz=1400, bandwidth_gbps={RAIL0: 13.26}), plan
    )
    assert [f.severity for f in findings] == ["error", "warning"]  # errors first
    document = json.loads(findings_json(findings))
    assert document["ok"] is False
    assert (document["errors"], document["warnings"]) == (1, 1)
    assert document["findings"][0]["code"] == r.BANDWIDTH_DEGRADED
    console = Console(record=True, width=200)
    print_findings(console, findings)
    text = console.export_text()
    assert "BANDWIDTH_DEGRADED" in text
    assert "1 error(s), 1 warning(s)" in text
    console = Console(record=True, width=200)
    print_findings(console, [])
    assert "no known fault found" in console.export_text()


def test_clock_cap_within_the_clock_step_is_the_policy(tables: Any, plan: Any) -> None:
    read = cluster(tables, "gx10-a", sm_clock_cap_mhz=1996, sm_clock_policy_mhz=2000)
    assert not [f for f in diagnose(read, plan) if f.code == r.CLOCK_CAP_LEFT]
    # The tool's record is exact: no tolerance.
    recorded = cluster(
        tables,
        "gx10-a",
        sm_clock_cap_mhz=1996,
        sm_clock_policy_mhz=2000,
        sm_clock_cap_recorded=True,
    )
    assert [f.node for f in diagnose(recorded, plan) if f.code == r.CLOCK_CAP_LEFT] == ["gx10-a"]


def test_policy_reset_is_reported_when_the_tool_recorded_it(tables: Any, plan: Any) -> None:
    evs = cluster(
        tables,
        "gx10-b",
        sm_clock_cap_mhz=None,
        sm_clock_policy_mhz=2000,
        sm_clock_cap_recorded=True,
    )
    found = [f for f in diagnose(evs, plan) if f.code == r.CLOCK_CAP_LEFT]
    assert [f.node for f in found] == ["gx10-b"]
    assert "without the policy's 2000 MHz cap" in found[0].summary


def test_a_benchmark_session_is_named_not_blamed(tables: Any, plan: Any) -> None:
    evs = cluster(
        tables,
        "gx10-a",
        sm_clock_cap_mhz=2800,
        sm_clock_policy_mhz=2000,
        sm_clock_cap_recorded=True,
        clock_session="gx10 bench me@ctl (pid 42)",
    )
    found = [f for f in diagnose(evs, plan) if f.code == r.CLOCK_CAP_LEFT]
    assert len(found) == 1
    assert "a benchmark holds the GPU clock at 2800 MHz" in found[0].summary
    assert "gx10 bench me@ctl (pid 42)" in found[0].evidence


def test_pcie_width_is_judged_by_the_inventorys_threshold(tables: Any, plan: Any) -> None:
    """The fabric role's fabric_min_pcie_width, as the evidence carries it; x4 when absent."""
    x2 = rail(tables, "gx10-b", 1, pcie_width=2)
    assert (r.PCIE_WIDTH_LOW, "gx10-b") in codes(
        diagnose(cluster(tables, "gx10-b", rails=x2), plan)
    )
    allowed = cluster(tables, "gx10-b", rails=x2, pcie_min_width=2)
    assert (r.PCIE_WIDTH_LOW, "gx10-b") not in codes(diagnose(allowed, plan))
    x4 = cluster(tables, "gx10-b", pcie_min_width=8)
    finding = next(f for f in diagnose(x4, plan) if f.code == r.PCIE_WIDTH_LOW)
    assert "below x8" in finding.summary


def test_doctor_and_the_fabric_role_share_the_thresholds() -> None:
    fabric = module_utils("fabric_rules")
    defaults = yaml.safe_load((ROOT / "roles" / "fabric" / "defaults" / "main.yml").read_text())
    assert defaults["fabric_min_pcie_width"] == fabric.MIN_PCIE_WIDTH
    assert defaults["fabric_min_rail_gbps"] == fabric.PER_RAIL_MIN_GBPS
    assert defaults["fabric_min_total_gbps"] == fabric.MIN_TOTAL_GBPS
    assert list(fabric.DEGRADED_BAND_GBPS) == defaults["fabric_degraded_band_gbps"]
    assert defaults["fabric_min_link_speed_mbps"] == fabric.MIN_LINK_SPEED_MBPS


@pytest.mark.parametrize(
    ("accepted", "severity"),
    [(7800.0, None), (7799.0, "warning"), (5800.0, "warning"), (5799.0, "error"), (0.0, "error")],
)
def test_draft_acceptance_bands(
    tables: Any, plan: Any, accepted: float, severity: str | None
) -> None:
    """ok from 0.78 (0.94 x the field's low 0.83), a warning down to 0.58 (0.70 x), an error."""
    evs = cluster(tables, "gx10-a", speculative=DSPARK, spec_decode=spec(accepted))
    found = [f for f in diagnose(evs, plan) if f.code == r.SPEC_ACCEPTANCE_LOW]
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_low_draft_acceptance_names_rate_counters_range_and_causes(tables: Any, plan: Any) -> None:
    evs = cluster(
        tables,
        "gx10-a",
        speculative=DSPARK,
        spec_decode=spec(4000.0),
        metrics_url="http://gx10-a:8000/metrics",
    )
    (finding,) = [f for f in diagnose(evs, plan) if f.code == r.SPEC_ACCEPTANCE_LOW]
    assert (finding.severity, finding.node) == ("error", "gx10-a")
    assert finding.summary == (
        "speculative decoding accepts 40.0% of its draft tokens, expected 83%-87%: a decode step "
        "yields 3.00 tokens instead of 5.15-5.35"
    )
    assert finding.evidence.startswith(
        "vllm:spec_decode_num_accepted_tokens_total 4000 / "
        "vllm:spec_decode_num_draft_tokens_total 10000 = 0.400 over "
        "vllm:spec_decode_num_drafts_total 2000; accepted per position 1.00, 1.00, 0.00, 0.00, "
        "0.00 (from http://gx10-a:8000/metrics); expected 83%-87% for dspark k=5 (FIELD_NOTES "
        "section 1"
    )
    assert "warning below 0.78" in finding.evidence
    assert "error below 0.58" in finding.evidence
    for cause in ("draft (MTP) weights", "-p model.yml", "--speculative-config", "image"):
        assert cause in finding.fix
    assert "method dspark, num_speculative_tokens 5" in finding.fix
    assert "gx10 provision -i INV -t serve" in finding.fix


def test_a_server_drafting_another_k_than_the_inventory_is_named(tables: Any, plan: Any) -> None:
    three = SpecDecodeCounters(2000.0, 6000.0, 2000.0, (1500.0, 400.0, 100.0))
    evs = cluster(tables, "gx10-a", speculative=DSPARK, spec_decode=three)
    (finding,) = [f for f in diagnose(evs, plan) if f.code == r.SPEC_ACCEPTANCE_LOW]
    assert "the server drafts 3 tokens per step, the inventory's config 5" in finding.evidence
