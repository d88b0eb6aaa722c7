# SPDX-License-Identifier: Apache-2.0
"""fabric_parse over the tools' own output formats (see fixtures/README.md for their provenance).

The ib_write_bw samples are rendered from perftest's format strings (``RESULT_FMT_G``,
``REPORT_FMT``, ``PERF_GID_FMT`` and the ``ctx_print_test_info`` banner in linux-rdma/perftest) with
the field notes' figures: 92.57 + 97.28 Gb/s on the two rails, 13.26 when the CX-7 is stuck. The
iperf3 samples are captured from iperf 3.12, the lab's version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.fabric_parse import (
    FabricParseError,
    parse_ib_write_bw,
    parse_iperf3_json,
)
from ansible_collections.gx10.cluster.plugins.module_utils.fabric_rules import (
    DEGRADED_REMEDY,
    LOW_REMEDY,
    bandwidth_verdict,
    classify_bandwidth,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# ib_write_bw
# --------------------------------------------------------------------------------------------


def test_both_rails_of_nvidias_reference_run() -> None:
    rail0 = parse_ib_write_bw(_fixture("ib_write_bw/rail0_rocep1s0f0.txt"))
    rail1 = parse_ib_write_bw(_fixture("ib_write_bw/rail1_roceP2p1s0f0.txt"))
    assert rail0.as_dict() == {
        "device": "rocep1s0f0",
        "gid_index": 3,
        "qps": 1,
        "msg_bytes": 65536,
        "iterations": 5000,
        "peak_gbps": 92.63,
        "average_gbps": 92.57,
        "msg_rate_mpps": 0.176563,
    }
    assert (rail1.device, rail1.average_gbps) == ("roceP2p1s0f0", 97.28)
    assert rail0.average_gbps + rail1.average_gbps == pytest.approx(189.85)


def test_the_stuck_state_sample_is_in_the_known_band() -> None:
    stuck = parse_ib_write_bw(_fixture("ib_write_bw/stuck_rocep1s0f0.txt"))
    assert stuck.average_gbps == 13.26
    assert classify_bandwidth(stuck.average_gbps) == "degraded_known"


def test_duration_mode_has_no_peak_and_reads_the_average() -> None:
    result = parse_ib_write_bw(_fixture("ib_write_bw/duration_q4_rocep1s0f0.txt"))
    assert (result.qps, result.peak_gbps, result.average_gbps) == (4, 0.0, 108.33)
    assert result.iterations == 1033115
    assert classify_bandwidth(result.average_gbps) == "ok"


def test_a_banner_with_spaces_and_no_gid_index_still_parses() -> None:
    # Published captures often have the banner's tabs turned into spaces, and rdma_cm runs (-R)
    # print no GID index.
    text = _fixture("ib_write_bw/rail0_rocep1s0f0.txt").replace("\t", "        ")
    text = text.replace(" GID index       : 3\n", "")
    result = parse_ib_write_bw(text)
    assert (result.device, result.gid_index, result.qps) == ("rocep1s0f0", None, 1)
    assert result.average_gbps == 92.57


def test_without_report_gbits_mb_per_sec_is_converted() -> None:
    # perftest's MB is 2**20 bytes: 11035.61 MB/sec is 92.57 Gb/s.
    text = _fixture("ib_write_bw/rail0_rocep1s0f0.txt")
    text = text.replace("[Gb/sec]", "[MB/sec]").replace(
        " 65536      5000             92.63              92.57  ",
        " 65536      5000             11042.76           11035.61",
    )
    result = parse_ib_write_bw(text)
    assert result.average_gbps == pytest.approx(92.57, abs=0.01)
    assert result.peak_gbps == pytest.approx(92.63, abs=0.01)


def test_all_sizes_takes_the_last_row() -> None:
    small = " 2          5000           0.11               0.10  \t\t   6.352817\n"
    text = _fixture("ib_write_bw/rail0_rocep1s0f0.txt").replace(
        " 65536      5000 ", small + " 65536      5000 "
    )
    assert text.count(" 5000 ") == 2
    result = parse_ib_write_bw(text)
    assert (result.msg_bytes, result.average_gbps) == (65536, 92.57)


def test_a_refused_connection_is_an_error_with_the_tools_words() -> None:
    with pytest.raises(FabricParseError, match=r"no result table: Couldn't connect to 192\.168"):
        parse_ib_write_bw(_fixture("ib_write_bw/connect_refused.txt"))


def test_a_header_without_a_row_is_an_error() -> None:
    text = _fixture("ib_write_bw/rail0_rocep1s0f0.txt")
    text = "\n".join(line for line in text.splitlines() if not line.startswith(" 65536"))
    with pytest.raises(FabricParseError, match="header but no result row"):
        parse_ib_write_bw(text)


def test_a_short_row_is_an_error() -> None:
    text = _fixture("ib_write_bw/rail0_rocep1s0f0.txt").replace("  \t\t   0.176563", "")
    with pytest.raises(FabricParseError, match="malformed ib_write_bw result row"):
        parse_ib_write_bw(text)


# --------------------------------------------------------------------------------------------
# iperf3 -J
# --------------------------------------------------------------------------------------------


def test_iperf3_reads_the_receivers_total() -> None:
    result = parse_iperf3_json(_fixture("iperf3/loopback_tcp.json"))
    assert result.bits_per_second == 20306049210.133083
    assert result.gbps == pytest.approx(20.306, abs=0.001)
    assert (result.bytes, result.streams, result.reverse, result.retransmits) == (
        5078974411,
        1,
        False,
        24,
    )
    assert result.seconds == pytest.approx(2.00097)


def test_iperf3_error_key_is_a_failure_even_though_iperf3_exits_0() -> None:
    with pytest.raises(FabricParseError, match="iperf3 failed: unable to connect to server"):
        parse_iperf3_json(_fixture("iperf3/connection_refused.json"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("iperf3: error - unable to connect to server", "not JSON"),
        ("[]", "not an object"),
        ('{"start": {}, "end": {"sum": {"bits_per_second": 1.0}}}', "no end.sum_received"),
    ],
)
def test_iperf3_unusable_output(text: str, match: str) -> None:
    with pytest.raises(FabricParseError, match=match):
        parse_iperf3_json(text)


# --------------------------------------------------------------------------------------------
# Judging a rail
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gbps", "status"),
    [
        (108.33, "ok"),
        (80.0, "ok"),
        (79.9, "low"),
        (40.0, "low"),
        (25.0, "degraded_known"),
        (13.26, "degraded_known"),
        (6.89, "low"),  # one of two processes sharing a stuck device: below the band
        (8.0, "degraded_known"),
        (0.0, "low"),
    ],
)
def test_classify_bandwidth(gbps: float, status: str) -> None:
    assert classify_bandwidth(gbps) == status


def test_thresholds_are_parameters() -> None:
    # The lab's iperf3 runs over veths with its own, lower minimum.
    assert classify_bandwidth(13.26, per_rail_min=10.0) == "ok"
    assert classify_bandwidth(30.0, per_rail_min=40.0, degraded_band=(20.0, 35.0)) == (
        "degraded_known"
    )


def test_the_verdict_carries_the_known_remedy() -> None:
    stuck = bandwidth_verdict(13.26, label="gx10-a rocep1s0f0")
    assert stuck["status"] == "degraded_known"
    assert stuck["remedy"] == DEGRADED_REMEDY
    assert "A reboot does not fix it" in stuck["message"]
    assert "cut AC power" in stuck["message"]
    assert stuck["message"].startswith("gx10-a rocep1s0f0: 13.26 Gb/s, below 80 and in the 8-25")
    low = bandwidth_verdict(45.0)
    assert (low["status"], low["remedy"]) == ("low", LOW_REMEDY)
    assert "outside the 8-25 Gb/s band" in low["message"]
    ok = bandwidth_verdict(92.57)
    assert (ok["status"], ok["remedy"], ok["message"]) == (
        "ok",
        None,
        "rail: 92.57 Gb/s (at least 80)",
    )
