"""The fabric checks on the lab: healthy rails pass; a throttled rail is the known degraded state.

The lab's rails are veth pairs, so the bandwidth runs through iperf3 with the lab inventory's
thresholds; `gx10.lab.throttle` (tc tbf, 300 mbit) on one rail end stands in for the ConnectX-7
stuck state. Uses the lab as it is (no `lab up`: the lab may be shared) and changes nothing on it
but the throttle, which is always cleared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import lab
from gx10.provision import ProvisionResult, provision

# The lab inventory leaves the bandwidth measurement out of site.yml; these tests ask for it.
BANDWIDTH = {"fabric_bandwidth": True}

NODE, RAIL1 = "gx10-b", "enP2p1s0f0np0"
RAIL0 = "enp1s0f0np0"
DOCTOR_FLAGS = ("--measure-bandwidth", "--json")


@pytest.fixture(scope="module")
def lab_running() -> None:
    state = lab.status()
    if not state.running:
        pytest.skip("the lab is not running: " + "; ".join(state.problems))
    for node in lab.LabConfig().nodes:
        for rail in (RAIL0, RAIL1):
            qdisc = node_sh(node, f"tc qdisc show dev {rail} root")
            if "tbf" in qdisc or "netem" in qdisc:
                pytest.skip(f"{node} {rail} is already shaped by someone else: {qdisc.strip()}")


@pytest.fixture
def throttled(lab_running: None) -> Iterator[str]:
    lab.throttle(NODE, RAIL1, "300mbit", log=print)
    try:
        yield RAIL1
    finally:
        lab.throttle(NODE, RAIL1, None, log=print)


def _messages(result: ProvisionResult) -> str:
    return "\n".join(f"{t.host} {t.task}: {t.message}" for t in result.failed_tasks)


def test_healthy_lab_passes_every_rail_and_both_at_once(lab_running: None) -> None:
    reports: list[dict] = []

    def keep(event: dict) -> None:
        res = (event.get("event_data") or {}).get("res") or {}
        if event.get("event") == "runner_on_ok" and "gx10_fabric_bandwidth" in res:
            reports.append(res["gx10_fabric_bandwidth"])

    result = provision(LAB_INVENTORY, "fabric.yml", extravars=BANDWIDTH, on_event=keep)
    assert result.ok, _messages(result)
    assert len(reports) == 1
    report = reports[0]
    print("measured:", json.dumps(report))
    assert set(report["per_rail"][NODE]) == {RAIL0, RAIL1}
    assert all(gbps >= report["min_rail_gbps"] for gbps in report["per_rail"][NODE].values())
    assert report["total"][NODE] >= report["min_total_gbps"]


def test_a_throttled_rail_is_the_known_degraded_state(throttled: str) -> None:
    result = provision(LAB_INVENTORY, "fabric.yml", extravars=BANDWIDTH)
    assert not result.ok
    text = _messages(result)
    degraded = [
        line
        for line in text.splitlines()
        if line.lstrip(" -").startswith("gx10-a: rail1") and "bandwidth" in line
    ]
    assert len(degraded) == 1, text
    line = degraded[0]
    assert f"{RAIL1} 192.168.101.10 <-> {NODE} 192.168.101.11" in line
    assert "the known degraded state" in line
    assert "cut AC power" in line
    assert "A reboot does not fix it" in line
    # rail0 is healthy: no bandwidth failure names it, and the jumbo pings still pass on rail1.
    assert "rail0" not in text.replace("rail0 + rail1", "")
    assert "ping" not in text


def test_doctor_measures_and_names_the_throttled_rail(throttled: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gx10", "doctor", "-i", str(LAB_INVENTORY), *DOCTOR_FLAGS],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == 2, report
    bandwidth = [f for f in report["findings"] if f["code"].startswith("BANDWIDTH")]
    assert [(f["code"], f["node"]) for f in bandwidth] == [("BANDWIDTH_DEGRADED", NODE)], bandwidth
    assert RAIL1 in bandwidth[0]["summary"]
    assert "AC power" in bandwidth[0]["fix"]
