"""gx10 doctor on the lab: silent when healthy, names the fault when the GID table shifts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import lab, provision


def _doctor() -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "gx10", "doctor", "-i", str(LAB_INVENTORY), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def converged(lab_up: lab.LabStatus) -> None:
    result = provision(LAB_INVENTORY, "site.yml")
    assert result.ok, result.failed_tasks


@pytest.fixture
def gid_shift(converged: None) -> Iterator[str]:
    """The lab's fault switch: gx10-b's IPv4 GID entries move to index 5 (a stale table)."""
    node = "gx10-b"
    node_sh(node, "mkdir -p /run/gx10-sim/rdma && echo 5 > /run/gx10-sim/rdma/shift")
    gid = "/run/gx10-sim/sys/class/infiniband/rocep1s0f0/ports/1/gids/6"
    deadline = time.monotonic() + 10
    while "ffff" not in node_sh(node, f"cat {gid} 2>/dev/null || true"):
        assert time.monotonic() < deadline, "the RDMA simulator did not apply the shift"
        time.sleep(0.2)
    try:
        yield node
    finally:
        node_sh(node, "rm -f /run/gx10-sim/rdma/shift; touch /run/gx10-sim/rdma/reset")


def test_healthy_lab_has_no_finding(converged: None) -> None:
    rc, report = _doctor()
    assert rc == 0, report
    assert report["ok"] is True
    assert report["findings"] == []


def test_a_shifted_gid_table_is_named_with_its_fix(gid_shift: str) -> None:
    """The lab serves unsupervised (site.yml): the worker's rank runs on nccl.env's index 3,
    which moved under it (GID_MOVED; GID_INDEX_MISMATCH is for a file no rank runs with)."""
    rc, report = _doctor()
    assert rc == 2
    codes = {(f["code"], f["node"]) for f in report["findings"]}
    assert ("GID_MOVED", gid_shift) in codes, report["findings"]
    assert ("GID_INDEX_MISMATCH", gid_shift) not in codes, report["findings"]
    finding = next(f for f in report["findings"] if f["code"] == "GID_MOVED")
    assert "NCCL_IB_GID_INDEX=3" in finding["summary"]
    assert "enp1s0f0np0 3 -> 6" in finding["summary"]
    assert "rerun the NCCL stage" in finding["fix"]
    assert "then the serve stage" in finding["fix"]
