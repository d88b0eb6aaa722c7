"""gx10 doctor evidence: parse_evidence over realistic per-node dicts, and collect over events.

The dicts have the shape playbooks/doctor.yml reports (`gx10_doctor_evidence`); the GID parts are
what roce_gid_info returns for sysfs trees that the lab's RDMA simulator builds from recorded
`ip -j addr show` output, on success and on failure; the container parts follow `docker inspect`.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import random
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gx10._collection import load as module_utils
from gx10.doctor import ContainerEvidence, diagnose
from gx10.doctor import collect as c
from gx10.doctor import engine_metrics as em
from gx10.doctor import rules as r
from gx10.errors import Gx10Error
from gx10.lab.simulators import vllm_sim as sim
from gx10.lab.simulators.rdma_sysfs import sync
from gx10.lab.simulators.vllm_sim.metrics import render_metrics
from gx10.provision import FailedTask, HostStats, ProvisionResult

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "fixtures" / "ip-addr" / "1-rail-ipv4.json"
RAIL0, RAIL1 = "enp1s0f0np0", "enP2p1s0f0np0"
DEV0, DEV1 = "rocep1s0f0", "roceP2p1s0f0"
OCTETS = {"gx10-a": "10", "gx10-b": "11"}
DSPARK = {"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"}
ENV_TEXT = """\
# Managed by Ansible (role nccl_env) for gx10-a: read by docker run --env-file.
NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0
NCCL_IB_GID_INDEX=3
NCCL_IB_DISABLE=0
NCCL_SOCKET_IFNAME=enp1s0f0np0
VLLM_HOST_IP=192.168.100.10
NCCL_DEBUG=WARN
"""


def sysfs(root: Path, octet: str, shift: int = 0, mapping: dict[str, str] | None = None) -> str:
    recorded = RECORDING.read_text(encoding="utf-8")
    sync(
        str(root),
        recorded.replace('"192.168.100.10"', f'"192.168.100.{octet}"').replace(
            '"192.168.101.10"', f'"192.168.101.{octet}"'
        ),
        mapping,
        shift=shift,
        reset=True,
    )
    return str(root)


def planned(node: str) -> list[dict[str, str]]:
    octet = OCTETS[node]
    return [
        {"netdev": RAIL0, "address": f"192.168.100.{octet}"},
        {"netdev": RAIL1, "address": f"192.168.101.{octet}"},
    ]


def gid_section(root: str, node: str) -> dict[str, Any]:
    """roce_gid_info's result in auto mode, as the playbook keeps it (ok, msg, rails)."""
    roce_gid = module_utils("roce_gid")
    try:
        result = roce_gid.resolve_node(root, planned(node), "auto")
    except roce_gid.RoceGidError as exc:
        return {"ok": False, "msg": str(exc), "rails": exc.result.get("rails", [])}
    return {"ok": True, "msg": "", "rails": result["rails"]}


def netdev(octet_rail0: str, octet_rail1: str, **changes: Any) -> dict[str, Any]:
    def state(address: str) -> dict[str, Any]:
        return {
            "present": True,
            "operstate": "up",
            "carrier": True,
            "mtu": 9000,
            "address": "02:9a:00:00:0a:00",
            "speed_mbps": 200000,
            "pcie_width": 4,
            "pcie_speed": "32.0 GT/s PCIe",
            "addresses": [address],
        }

    netdevs = {
        RAIL0: state(f"192.168.100.{octet_rail0}/24"),
        RAIL1: state(f"192.168.101.{octet_rail1}/24"),
    }
    for name, change in changes.items():
        netdevs[{"rail0": RAIL0, "rail1": RAIL1}[name]].update(change)
    return {"ok": True, "msg": "", "netdevs": netdevs}


def container(rank: int, status: str = "running") -> dict[str, Any]:
    return {
        "name": "gx10-vllm",
        "ok": True,
        "msg": "",
        "exists": True,
        "state": {"Status": status, "Running": status == "running", "ExitCode": 0, "Pid": 4242},
        "labels": {"gx10.role": "head" if rank == 0 else "worker", "gx10.rank": str(rank)},
        "devices": [
            {
                "PathOnHost": "/dev/infiniband",
                "PathInContainer": "/dev/infiniband",
                "CgroupPermissions": "rwm",
            }
        ],
        "ulimits": [{"Name": "memlock", "Hard": -1, "Soft": -1}],
    }


def raw_node(tmp_path: Path, node: str, *, shift: int = 0) -> dict[str, Any]:
    """A healthy node's gx10_doctor_evidence, as the playbook reports it."""
    octet = OCTETS[node]
    root = sysfs(tmp_path / node / "sys", octet, shift=shift)
    env = ENV_TEXT.replace("gx10-a", node).replace("192.168.100.10", f"192.168.100.{octet}")
    return {
        "schema": 1,
        "node": node,
        "reachable": True,
        "unreachable_msg": "",
        "gid_mode": "pinned",
        "rails": planned(node),
        "netdev": netdev(octet, octet),
        "gid": gid_section(root, node),
        "env_file": {
            "path": "/etc/gx10/nccl.env",
            "ok": True,
            "msg": "",
            "content_b64": base64.b64encode(env.encode()).decode(),
        },
        "container": container(0 if node == "gx10-a" else 1),
        "clocks": {"rc": 0, "stdout": "2418, 3003", "msg": ""},
        "clock_lock": {"rc": 0, "stdout": "Not Active"},
        "bandwidth_gbps": {},
        "sm_clock_policy_mhz": None,
        "endpoint": f"http://192.168.1.{octet}:8000/v1",
        "speculative_config": dict(DSPARK),
    }


@pytest.fixture
def plan() -> dict[str, Any]:
    cluster_plan = module_utils("cluster_plan")
    return dict(
        cluster_plan.build_plan(
            {"head": ["gx10-a"], "workers": ["gx10-b"]},
            {"gx10-a": {"gx10_allow_unauthenticated": True}},
        )
    )


def test_healthy_node_parses_completely(tmp_path: Path, plan: dict[str, Any]) -> None:
    ev = c.parse_evidence("gx10-a", raw_node(tmp_path, "gx10-a"))
    assert ev.reachable
    assert ev.problems == ()
    rail0 = ev.rail(RAIL0)
    assert rail0 is not None
    assert (rail0.present, rail0.carrier, rail0.mtu) == (True, True, 9000)
    assert rail0.addresses == ("192.168.100.10/24",)
    assert rail0.link_local == ()
    assert (rail0.pcie_width, rail0.pcie_speed, rail0.rdma_dev) == (4, "32.0 GT/s PCIe", DEV0)
    assert set(ev.gid_tables) == {DEV0, DEV1}
    assert [e["index"] for e in ev.gid_tables[DEV0]] == [0, 1, 2, 3]
    assert ev.env is not None
    assert ev.env["NCCL_IB_GID_INDEX"] == "3"
    assert ev.env["NCCL_IB_HCA"] == f"{DEV0},{DEV1}"
    assert ev.containers == (ContainerEvidence("gx10-vllm", 0, "running", True, True),)
    assert ev.sm_clock_cap_mhz is None
    assert ev.gid_mode == "pinned"

    evidences = [c.parse_evidence(n, raw_node(tmp_path, n)) for n in OCTETS]
    assert diagnose(evidences, plan) == []


def test_unreachable_node(plan: dict[str, Any]) -> None:
    raw = {
        "schema": 1,
        "node": "gx10-b",
        "reachable": False,
        "unreachable_msg": "Failed to connect to the host via ssh: ssh: connect to host "
        "10.0.0.11 port 22: No route to host",
        # The skipped tasks' results: nothing to read.
        "netdev": {"ok": False, "msg": "", "netdevs": {}},
        "container": {"ok": False, "exists": False},
    }
    ev = c.parse_evidence("gx10-b", raw)
    assert not ev.reachable
    assert ev.rails == ()
    assert "No route to host" in ev.problems[0]
    findings = [f for f in diagnose([ev], plan) if f.code == r.NODE_UNREACHABLE]
    assert "No route to host" in findings[0].evidence
    assert not c.parse_evidence("gx10-b", None).reachable


def test_no_container_and_no_env_file(tmp_path: Path, plan: dict[str, Any]) -> None:
    raw = raw_node(tmp_path, "gx10-b")
    raw["container"] = {
        "name": "gx10-vllm",
        "ok": True,
        "msg": "",
        "exists": False,
        "state": {},
        "labels": {},
        "devices": [],
        "ulimits": [],
    }
    raw["env_file"] = {
        "path": "/etc/gx10/nccl.env",
        "ok": False,
        "msg": "file not found: /etc/gx10/nccl.env",
        "content_b64": "",
    }
    ev = c.parse_evidence("gx10-b", raw)
    assert ev.containers == (ContainerEvidence("gx10-vllm", None, "missing", False, False),)
    assert ev.env is None
    assert ev.problems == (
        "no NCCL env file /etc/gx10/nccl.env: file not found: /etc/gx10/nccl.env",
    )
    head = c.parse_evidence("gx10-a", raw_node(tmp_path, "gx10-a"))
    found = {(f.code, f.node) for f in diagnose([head, ev], plan)}
    assert found == {(r.WORKER_GONE, "gx10-b"), (r.EVIDENCE_INCOMPLETE, "gx10-b")}


def test_gid_read_failed_without_tables(tmp_path: Path) -> None:
    # The RDMA driver is not loaded: the rails have no RDMA device, roce_gid_info fails.
    raw = raw_node(tmp_path, "gx10-a")
    empty = tmp_path / "empty-sys"
    (empty / "class" / "net" / RAIL0).mkdir(parents=True)
    (empty / "class" / "net" / RAIL1).mkdir(parents=True)
    raw["gid"] = gid_section(str(empty), "gx10-a")
    assert raw["gid"]["ok"] is False
    ev = c.parse_evidence("gx10-a", raw)
    assert ev.gid_tables == {}
    assert ev.rail(RAIL0) is not None
    assert ev.problems[0].startswith(
        "GID tables not read: rail enp1s0f0np0: netdev enp1s0f0np0 has"
    )


def test_gid_read_failed_with_tables_is_judged(tmp_path: Path, plan: dict[str, Any]) -> None:
    # auto mode fails when a rail has no RoCE v2 entry for its address, but returns the tables:
    # here the worker's rail1 carries another address, so its table lacks 192.168.101.11.
    raw = raw_node(tmp_path, "gx10-b")
    root = tmp_path / "other"
    sysfs(root, "99")
    wrong = gid_section(str(root), "gx10-b")
    assert wrong["ok"] is False
    raw["gid"] = wrong
    ev = c.parse_evidence("gx10-b", raw)
    assert set(ev.gid_tables) == {DEV0, DEV1}
    assert ev.problems == ()
    codes = {f.code for f in diagnose([ev], plan) if f.node == "gx10-b"}
    assert r.GID_MISSING in codes


def test_gid_shift_on_one_rail(tmp_path: Path, plan: dict[str, Any]) -> None:
    raw = raw_node(tmp_path, "gx10-a")
    root = sysfs(tmp_path / "shifted", "10", shift=7, mapping={RAIL0: DEV0})
    sync_other = sysfs(tmp_path / "rail1", "10", mapping={RAIL1: DEV1})
    rails = (
        gid_section(root, "gx10-a")["rails"][:1] + gid_section(sync_other, "gx10-a")["rails"][1:]
    )
    raw["gid"] = {"ok": True, "msg": "", "rails": rails}
    ev = c.parse_evidence("gx10-a", raw)
    codes = {f.code for f in diagnose([ev], plan)}
    # Its rank runs (unsupervised) with nccl.env's 3: the index moved under it.
    assert {r.GID_RAILS_DISAGREE, r.GID_MOVED} <= codes
    assert r.GID_INDEX_MISMATCH not in codes


Change = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Change:
    def change(raw: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target = raw
        for key in keys:
            target = target[key]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (_set("container.devices", []), r.CONTAINER_NO_INFINIBAND),
        (
            _set("container.ulimits", [{"Name": "memlock", "Hard": 8388608, "Soft": 8388608}]),
            r.CONTAINER_NO_MEMLOCK,
        ),
        (_set("netdev.netdevs.enP2p1s0f0np0.pcie_width", 2), r.PCIE_WIDTH_LOW),
        (_set("netdev.netdevs.enP2p1s0f0np0.mtu", 1500), r.MTU_MISMATCH),
        (
            _set("netdev.netdevs.enP2p1s0f0np0.addresses", ["192.168.101.10/24", "169.254.3.7/16"]),
            r.RAIL_LINK_LOCAL,
        ),
        (_set("netdev.netdevs.enP2p1s0f0np0", {"present": False}), r.RAIL_MISSING),
        (_set("bandwidth_gbps", {RAIL0: 13.26, RAIL1: "97.28"}), r.BANDWIDTH_DEGRADED),
        (_set("clock_lock.stdout", "Active"), r.CLOCK_CAP_LEFT),
    ],
)
def test_faults_reach_the_rules(
    tmp_path: Path, plan: dict[str, Any], change: Change, code: str
) -> None:
    raw = raw_node(tmp_path, "gx10-a")
    change(raw)
    ev = c.parse_evidence("gx10-a", raw)
    assert code in {f.code for f in diagnose([ev], plan)}


def test_clock_lock_and_policy() -> None:
    problems: list[str] = []
    held = {"rc": 0, "stdout": "2000, 3003\n", "msg": ""}
    assert c._clock_cap(held, {"rc": 0, "stdout": "Active"}, problems) == 2000
    assert c._clock_cap(held, {"rc": 0, "stdout": "Not Active"}, problems) is None
    # an old driver that knows no such field: no lock evidence, no complaint
    assert c._clock_cap(held, {"rc": 2, "stdout": ""}, problems) is None
    assert (
        c._clock_cap({"rc": 0, "stdout": "[N/A], [N/A]"}, {"rc": 0, "stdout": "Active"}, problems)
        is None
    )
    assert problems == []
    assert (
        c._clock_cap({"rc": 2, "stdout": "", "msg": "Error executing command."}, {}, problems)
        is None
    )
    assert problems == ["GPU clock not read (nvidia-smi: Error executing command.)"]


def test_netdev_read_failure_and_other_schema(tmp_path: Path) -> None:
    raw = raw_node(tmp_path, "gx10-a")
    raw["netdev"] = {"ok": False, "msg": "`ip -j addr show` failed (rc 1): boom", "netdevs": {}}
    ev = c.parse_evidence("gx10-a", raw)
    assert ev.rails == ()
    assert ev.problems == ("rails not read: `ip -j addr show` failed (rc 1): boom",)
    with pytest.raises(Gx10Error, match="schema 2"):
        c.parse_evidence("gx10-a", {**raw, "schema": 2})


def test_env_file_as_docker_reads_it() -> None:
    text = "# comment\n\n  NCCL_DEBUG=WARN\nEXTRA=a=b \nBARE\n=nokey\n"
    assert c.parse_env_file(text) == {"NCCL_DEBUG": "WARN", "EXTRA": "a=b "}


# --- collect over runner events ---------------------------------------------------------------


def _event(kind: str, host: str, res: dict[str, Any], action: str = "") -> dict[str, Any]:
    return {
        "event": kind,
        "event_data": {"host": host, "task": "t", "task_action": action, "res": res},
    }


def _result(hosts: dict[str, HostStats], failed: tuple[FailedTask, ...] = ()) -> ProvisionResult:
    return ProvisionResult(
        ok=not failed,
        status="successful" if not failed else "failed",
        rc=0 if not failed else 2,
        hosts=hosts,
        failed_tasks=failed,
        artifact_dir=Path("/tmp/artifacts"),
    )


def test_collect_reads_plan_and_evidence_from_events(
    tmp_path: Path, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    head = raw_node(tmp_path, "gx10-a")
    calls: list[dict[str, Any]] = []
    seen: list[str] = []

    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        calls.append({"inventory": inventory, "playbook": playbook, **kwargs})
        on_event = kwargs["on_event"]
        on_event(
            _event(
                "runner_on_ok",
                "localhost",
                {"plan": copy.deepcopy(plan)},
                "gx10.cluster.validate_cluster",
            )
        )
        on_event(
            _event(
                "runner_on_ok",
                "gx10-a",
                {"gx10_doctor_evidence": head, "changed": False},
                "ansible.builtin.debug",
            )
        )
        on_event(_event("runner_on_failed", "gx10-b", {"msg": "The plan did not reach gx10-b"}))
        return _result({"gx10-a": HostStats(ok=9), "gx10-b": HostStats(failed=1)})

    monkeypatch.setattr(c, "provision", fake_provision)
    evidences, got_plan, result = c.collect("inv", on_event=lambda e: seen.append(e["event"]))
    assert calls[0]["playbook"] == "doctor.yml"
    assert calls[0]["limit"] is None
    assert got_plan == plan
    assert [ev.node for ev in evidences] == ["gx10-a", "gx10-b"]
    assert evidences[0].reachable
    assert not evidences[1].reachable
    assert evidences[1].problems == ("t: The plan did not reach gx10-b",)
    assert len(seen) == 3
    assert result.hosts["gx10-a"].ok == 9

    c.collect("inv", limit="gx10-a")
    assert calls[-1]["limit"] == "gx10-a"  # provision() adds localhost (test_provision)


def test_collect_leaves_out_nodes_outside_the_limit(
    tmp_path: Path, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        kwargs["on_event"](
            _event("runner_on_ok", "localhost", {"plan": plan}, "gx10.cluster.validate_cluster")
        )
        kwargs["on_event"](
            _event("runner_on_ok", "gx10-b", {"gx10_doctor_evidence": raw_node(tmp_path, "gx10-b")})
        )
        return _result({"localhost": HostStats(ok=2), "gx10-b": HostStats(ok=9)})

    monkeypatch.setattr(c, "provision", fake_provision)
    evidences, _plan, _run = c.collect("inv", limit="gx10-b")
    assert [ev.node for ev in evidences] == ["gx10-b"]


def test_collect_without_a_plan_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = FailedTask(
        "localhost", "Check the inventory shape and the rail plan", "rails overlap", "Validate"
    )

    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        return _result({"localhost": HostStats(failed=1)}, (failure,))

    monkeypatch.setattr(c, "provision", fake_provision)
    with pytest.raises(Gx10Error, match=r"no cluster plan.*rails overlap"):
        c.collect("inv")


def test_collect_names_evidence_that_was_not_rendered(
    plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        validate = {"plan": plan}
        kwargs["on_event"](_event("runner_on_ok", "localhost", validate, "validate_cluster"))
        for node in ("gx10-a", "gx10-b"):
            res = {"gx10_doctor_evidence": "VARIABLE IS NOT DEFINED!"}
            kwargs["on_event"](_event("runner_on_ok", node, res, "ansible.builtin.debug"))
        return _result({"gx10-a": HostStats(ok=9), "gx10-b": HostStats(ok=9)})

    monkeypatch.setattr(c, "provision", fake_provision)
    evidences, _plan, _run = c.collect("inv")
    assert [ev.reachable for ev in evidences] == [False, False]
    assert evidences[0].problems == ("evidence not rendered: VARIABLE IS NOT DEFINED!",)


# --- measured bandwidth (gx10 doctor --measure-bandwidth) -----------------------------------


def test_lab_thresholds_turn_a_throttled_rail_into_the_known_degraded_state(
    tmp_path: Path, plan: dict[str, Any]
) -> None:
    raw = raw_node(tmp_path, "gx10-b")
    raw["bandwidth_gbps"] = {RAIL0: 9.8, RAIL1: "0.28"}
    raw["bandwidth_thresholds"] = {"min_rail_gbps": "2.0", "degraded_band_gbps": ["0.1", 0.5]}
    ev = c.parse_evidence("gx10-b", raw)
    assert ev.bandwidth_min_gbps == 2.0
    assert ev.bandwidth_degraded_band == (0.1, 0.5)
    found = [f for f in diagnose([ev], plan) if f.code.startswith("BANDWIDTH")]
    assert [(f.code, f.node) for f in found] == [(r.BANDWIDTH_DEGRADED, "gx10-b")]
    assert RAIL1 in found[0].summary
    assert "0.1-0.5 Gb/s" in found[0].summary
    assert "AC power" in found[0].fix


@pytest.mark.parametrize("band", [None, "8-25", [25, 8], [1], ["x", 2]])
def test_malformed_thresholds_fall_back_to_the_defaults(
    tmp_path: Path, plan: dict[str, Any], band: Any
) -> None:
    raw = raw_node(tmp_path, "gx10-a")
    raw["bandwidth_gbps"] = {RAIL0: 13.26}
    raw["bandwidth_thresholds"] = {"min_rail_gbps": None, "degraded_band_gbps": band}
    ev = c.parse_evidence("gx10-a", raw)
    assert (ev.bandwidth_min_gbps, ev.bandwidth_degraded_band) == (None, None)
    assert r.BANDWIDTH_DEGRADED in {f.code for f in diagnose([ev], plan)}


def test_measure_bandwidth_reads_the_heads_report(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    report = {
        "schema": 1,
        "tool": "iperf3",
        "per_rail": {"gx10-b": {RAIL0: 9.79, RAIL1: "0.28", "bad": "n/a"}},
        "total": {},
    }

    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        calls.append({"playbook": playbook, **kwargs})
        kwargs["on_event"](_event("runner_on_ok", "gx10-a", {"gx10_fabric_bandwidth": report}))
        return _result({"gx10-a": HostStats(ok=9)})

    monkeypatch.setattr(c, "provision", fake_provision)
    figures = c.measure_bandwidth_report("inv", limit="gx10-b").figures
    assert figures == {"gx10-b": {RAIL0: 9.79, RAIL1: 0.28}}
    assert calls[0]["playbook"] == "fabric.yml"
    assert calls[0]["tags"] == "fabric_bandwidth"
    assert calls[0]["limit"] == "gx10-b"  # provision() adds localhost (test_provision)


def test_measure_bandwidth_without_a_report_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_provision(inventory: str, playbook: str, **kwargs: Any) -> ProvisionResult:
        failed = (FailedTask("gx10-a", "Check the bandwidth settings", "bad band", "fabric"),)
        return _result({"gx10-a": HostStats(failed=1)}, failed)

    monkeypatch.setattr(c, "provision", fake_provision)
    with pytest.raises(Gx10Error, match=r"reported nothing .*gx10-a Check the bandwidth settings"):
        c.measure_bandwidth_report("inv")


def test_the_clock_tools_record_is_exact() -> None:
    def show(applied: object, session: object = None, rc: int = 0) -> dict[str, object]:
        body = {"policy": 2000, "applied": applied, "session": session, "clocks": {}}
        return {"rc": rc, "stdout": json.dumps(body)}

    assert c._clock_record(show(2000)) == (True, 2000, None)
    assert c._clock_record(show("unlocked")) == (True, None, None)
    assert c._clock_record(show(None)) == (False, None, None)
    assert c._clock_record(show(2800, {"owner": "gx10 bench", "pid": 7})) == (
        True,
        2800,
        "gx10 bench (pid 7)",
    )
    assert c._clock_record(show(2000, rc=127)) == (False, None, None)
    assert c._clock_record({"rc": 0, "stdout": "not json"}) == (False, None, None)


def test_the_pcie_width_threshold_is_read_from_the_evidence(tmp_path: Path) -> None:
    raw = raw_node(tmp_path, "gx10-b")
    assert c.parse_evidence("gx10-b", raw).pcie_min_width is None
    raw["pcie_thresholds"] = {"min_width": "2"}
    assert c.parse_evidence("gx10-b", raw).pcie_min_width == 2


def test_the_known_bad_builds_the_node_matched_are_kept(tmp_path: Path) -> None:
    raw = raw_node(tmp_path, "gx10-b")
    fault = {
        "id": "kho-cma-pinning",
        "summary": "Linux 7.0 with Kexec HandOver",
        "evidence": "kernel 7.0.0-1019-nvidia booted without kho=off",
        "fix": "add kho=off",
        "sources": ["NVIDIA/NV-Kernels#591"],
    }
    raw["kernel"] = {"ok": True, "msg": "", "release": "7.0.0-1019-nvidia", "faults": [fault]}
    ev = c.parse_evidence("gx10-b", raw)
    assert ev.kernel_release == "7.0.0-1019-nvidia"
    assert ev.known_faults == (
        r.KnownFault(
            "kho-cma-pinning",
            "Linux 7.0 with Kexec HandOver",
            "kernel 7.0.0-1019-nvidia booted without kho=off",
            "add kho=off",
            ("NVIDIA/NV-Kernels#591",),
        ),
    )
    assert ev.problems == ()
    raw["kernel"] = {"ok": False, "msg": "ignore: kho is no known fault", "faults": []}
    ev = c.parse_evidence("gx10-b", raw)
    assert ev.known_faults == ()
    assert ev.problems == ("kernel build: ignore: kho is no known fault",)


# --- the head engine's counters (read on the controller) -------------------------------------


def test_the_speculative_config_is_parsed(tmp_path: Path) -> None:
    raw = raw_node(tmp_path, "gx10-a")
    assert c.parse_evidence("gx10-a", raw).speculative == DSPARK
    for off in ({}, None, "", []):
        raw["speculative_config"] = off
        assert c.parse_evidence("gx10-a", raw).speculative is None


def _scraped(monkeypatch: pytest.MonkeyPatch, got: em.EngineScrape) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    def fake(endpoint: str, *, api_key: str | None = None, timeout: float = 5.0) -> Any:
        calls.append((endpoint, api_key))
        return got

    monkeypatch.setattr(em, "scrape", fake)
    return calls


def _cluster(tmp_path: Path) -> list[Any]:
    return [c.parse_evidence(n, raw_node(tmp_path, n)) for n in OCTETS]


def test_only_the_serving_head_is_scraped(
    tmp_path: Path, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    counters = em.SpecDecodeCounters(2000.0, 10000.0, 8500.0)
    calls = _scraped(monkeypatch, em.EngineScrape("http://192.168.1.10:8000/metrics", counters))
    head, worker = c.read_engine_metrics(_cluster(tmp_path), plan, api_key="k")
    assert calls == [("http://192.168.1.10:8000/v1", "k")]
    assert (head.spec_decode, head.metrics_url) == (counters, "http://192.168.1.10:8000/metrics")
    assert head.problems == ()
    assert worker.spec_decode is None
    stopped = [dataclasses.replace(ev, containers=()) for ev in _cluster(tmp_path)]
    calls.clear()
    assert c.read_engine_metrics(stopped, plan) == stopped
    assert calls == []


def test_unread_metrics_are_named_and_the_rule_stays_silent(
    tmp_path: Path, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    why = "http://192.168.1.10:8000/metrics did not answer (ConnectError: refused)"
    _scraped(monkeypatch, em.EngineScrape("http://192.168.1.10:8000/metrics", problem=why))
    evidences = c.read_engine_metrics(_cluster(tmp_path), plan)
    assert evidences[0].problems == (f"engine metrics not read: {why}",)
    found = {(f.code, f.node) for f in diagnose(evidences, plan)}
    assert found == {(r.EVIDENCE_INCOMPLETE, "gx10-a")}


def test_a_configured_draft_without_counters_is_named(
    tmp_path: Path, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scraped(monkeypatch, em.EngineScrape("http://192.168.1.10:8000/metrics"))
    head, _worker = c.read_engine_metrics(_cluster(tmp_path), plan)
    (problem,) = head.problems
    assert problem.startswith(
        "engine metrics: http://192.168.1.10:8000/metrics exports no "
        "vllm:spec_decode_num_draft_tokens_total although vllm_serve_speculative_config sets "
    )
    assert "'method': 'dspark'" in problem


@pytest.fixture
def simulated_head() -> Iterator[str]:
    """A loopback /metrics serving what the vLLM simulator exports after a badly drafting run."""
    engine = sim.Engine(sim.SimEnv(spec_acceptance=0.4), 12, 5, sim.Log())
    rng = random.Random(7)
    for _ in range(1000):
        engine.spec_step(rng)
    text = render_metrics(engine, "deepseek-v4-flash").encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(text)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_a_badly_drafting_head_is_named_end_to_end(
    tmp_path: Path, plan: dict[str, Any], simulated_head: str
) -> None:
    raws = {n: raw_node(tmp_path, n) for n in OCTETS}
    raws["gx10-a"]["endpoint"] = simulated_head
    evidences = [c.parse_evidence(n, raw) for n, raw in raws.items()]
    evidences = c.read_engine_metrics(evidences, plan, timeout=10.0)
    head = evidences[0]
    assert head.problems == ()
    assert head.spec_decode is not None
    assert head.spec_decode.draft_tokens == 5000
    findings = diagnose(evidences, plan)
    assert [(f.code, f.severity, f.node) for f in findings] == [
        (r.SPEC_ACCEPTANCE_LOW, "error", "gx10-a")
    ]
    assert simulated_head.removesuffix("/v1") + "/metrics" in findings[0].evidence
