# SPDX-License-Identifier: Apache-2.0
"""The fabric filters over the tools' real output (fixtures/, see fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter import fabric
from ansible_collections.gx10.cluster.plugins.module_utils.fabric_rules import (
    DEGRADED_REMEDY,
    LOW_REMEDY,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_the_filters_are_registered() -> None:
    assert set(fabric.FilterModule().filters()) == {
        "fabric_iperf3",
        "fabric_ib_write_bw",
        "fabric_verdict",
        "fabric_gid_rails",
        "fabric_not_checked",
        "fabric_link_checks",
        "fabric_pair_schedule",
        "fabric_pair_runs",
        "fabric_pair_merge_measurements",
        "fabric_pair_runs_without_result",
        "fabric_pair_bandwidth",
        "fabric_pair_bandwidth_checks",
    }


def test_iperf3_gives_the_receivers_gbps() -> None:
    result = fabric.fabric_iperf3(_fixture("iperf3/loopback_tcp.json"))
    assert result["ok"] is True
    assert result["error"] is None
    assert result["gbps"] == pytest.approx(result["bits_per_second"] / 1e9)
    assert result["gbps"] > 0


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (_fixture("iperf3/connection_refused.json"), "Connection refused"),
        ("", "not JSON"),
        (None, "not JSON"),
        ("iperf3: error - unable to connect", "not JSON"),
    ],
)
def test_iperf3_failures_are_data_not_errors(output: str | None, reason: str) -> None:
    result = fabric.fabric_iperf3(output)
    assert result["ok"] is False
    assert result["gbps"] is None
    assert reason in result["error"]


def test_iperf3_rejects_a_non_string() -> None:
    with pytest.raises(AnsibleFilterError, match="fabric_iperf3 expects the tool's output"):
        fabric.fabric_iperf3({"end": {}})


def test_ib_write_bw_gives_the_average_as_gbps() -> None:
    result = fabric.fabric_ib_write_bw(_fixture("ib_write_bw/rail0_rocep1s0f0.txt"))
    assert result["ok"] is True
    assert result["gbps"] == result["average_gbps"] == 92.57
    assert result["device"] == "rocep1s0f0"
    assert result["gid_index"] == 3


def test_ib_write_bw_without_a_result_is_reported() -> None:
    result = fabric.fabric_ib_write_bw(_fixture("ib_write_bw/connect_refused.txt"))
    assert result["ok"] is False
    assert result["gbps"] is None
    assert "no result table" in result["error"]


def test_ib_write_bw_accepts_bytes() -> None:
    text = _fixture("ib_write_bw/stuck_rocep1s0f0.txt").encode()
    assert fabric.fabric_ib_write_bw(text)["gbps"] == 13.26


def test_verdict_ok_with_the_defaults() -> None:
    verdict = fabric.fabric_verdict(92.57)
    assert verdict["status"] == "ok"
    assert verdict["remedy"] is None
    assert verdict["minimum"] == 80.0


def test_verdict_names_the_known_degraded_state_and_its_remedy() -> None:
    verdict = fabric.fabric_verdict(13.26, 80, [8, 25], "rail1 gx10-a <-> gx10-b")
    assert verdict["status"] == "degraded_known"
    assert verdict["remedy"] == DEGRADED_REMEDY
    assert "AC power" in verdict["message"]
    assert "reboot does not fix it" in verdict["message"]
    assert verdict["message"].startswith("rail1 gx10-a <-> gx10-b: 13.26 Gb/s")


def test_verdict_low_outside_the_band() -> None:
    verdict = fabric.fabric_verdict("40.5", "80", ["8", "25"])
    assert verdict["status"] == "low"
    assert verdict["remedy"] == LOW_REMEDY
    assert "outside the 8-25 Gb/s band" in verdict["message"]


def test_verdict_with_lab_thresholds() -> None:
    # The lab's veth rails: a 300 mbit tc throttle lands in the lab's band.
    assert fabric.fabric_verdict(0.28, 1.0, [0.05, 0.6])["status"] == "degraded_known"
    assert fabric.fabric_verdict(0.8, 1.0, [0.05, 0.6])["status"] == "low"
    assert fabric.fabric_verdict(9.5, 1.0, [0.05, 0.6])["status"] == "ok"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((None,), "the bandwidth must be a number"),
        ((True,), "the bandwidth must be a number"),
        ((10, "many"), "minimum must be a number"),
        ((10, 80, [8]), r"degraded_band must be \[low, high\]"),
        ((10, 80, "8-25"), r"degraded_band must be \[low, high\]"),
        ((10, 80, [25, 8]), "upside down"),
    ],
)
def test_verdict_rejects_bad_arguments(args: tuple[object, ...], match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        fabric.fabric_verdict(*args)  # type: ignore[arg-type]
