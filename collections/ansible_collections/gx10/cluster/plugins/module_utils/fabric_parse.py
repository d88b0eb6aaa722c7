# SPDX-License-Identifier: Apache-2.0
"""Parse what the fabric bandwidth tools print (the judgments are in fabric_rules.py).

Pure Python (standard library only). Formats, as the tools print them:

* ``ib_write_bw`` (perftest) text. The result table is a header line (perftest's ``RESULT_FMT_G``
  with ``--report_gbits``, ``RESULT_FMT`` in MB/sec without it) and one row per message size
  (``REPORT_FMT``: ``#bytes #iterations BW-peak BW-average MsgRate``), between dashed lines. The
  average is the 4th column. In duration mode (``-D``) perftest measures no peak and prints 0.00.
* ``iperf3 -J`` JSON: ``end.sum_received.bits_per_second`` (the receiver's view, all streams).
  A failed run still prints JSON, with an ``error`` key, and iperf3 3.12 (Debian bookworm) exits 0
  then: the ``error`` key, not the exit code, says whether the run worked.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

# perftest's MB is 2**20 bytes (format_factor 0x100000); its Gb is 10**9 bits.
_MB_PER_SEC_TO_GBPS = 0x100000 * 8 / 1e9
_COLUMN_SPLIT = re.compile(r"\s{2,}|\t+")


class FabricParseError(ValueError):
    """Tool output without a result (the tool failed, or this is not its output)."""


@dataclass(frozen=True)
class IbWriteBwResult:
    """The result row of an ``ib_write_bw`` run (the last one when ``-a`` printed several)."""

    device: str | None
    gid_index: int | None
    qps: int | None
    msg_bytes: int
    iterations: int
    peak_gbps: float  # 0.0 in duration mode (-D)
    average_gbps: float
    msg_rate_mpps: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Iperf3Result:
    """The receiver's total of an ``iperf3 -J`` run."""

    bits_per_second: float
    gbps: float
    seconds: float
    bytes: int
    streams: int | None
    reverse: bool
    retransmits: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tail(text: str, lines: int = 5) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _info_value(text: str, key: str) -> str | None:
    """A ``Key : value`` field of perftest's banner (two fields can share a line)."""
    # Older perftest prints "Gid index", newer "GID index".
    match = re.search(rf"(?mi)(?:^|\t|  )\s*{re.escape(key)}\s*:\s*(\S+)", text)
    return match.group(1) if match else None


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def parse_ib_write_bw(text: str) -> IbWriteBwResult:
    """Parse ``ib_write_bw`` output (client side, or a server that prints the report)."""
    lines = text.splitlines()
    header_at = next(
        (i for i, line in enumerate(lines) if "#bytes" in line and "BW average[" in line), None
    )
    if header_at is None:
        raise FabricParseError(f"ib_write_bw printed no result table: {_tail(text)}")
    columns = [c for c in _COLUMN_SPLIT.split(lines[header_at].strip()) if c]
    try:
        average_col = next(i for i, c in enumerate(columns) if c.startswith("BW average["))
        peak_col = next(i for i, c in enumerate(columns) if c.startswith("BW peak["))
        iter_col = columns.index("#iterations")
        rate_col = next(i for i, c in enumerate(columns) if c.startswith("MsgRate["))
    except (StopIteration, ValueError):
        raise FabricParseError(
            f"unexpected ib_write_bw result header: {lines[header_at].strip()!r}"
        ) from None
    unit = columns[average_col][len("BW average[") : -1]
    if unit == "Gb/sec":
        factor = 1.0
    elif unit == "MB/sec":
        factor = _MB_PER_SEC_TO_GBPS
    else:
        raise FabricParseError(f"unknown ib_write_bw bandwidth unit {unit!r}")
    rows: list[list[str]] = []
    for line in lines[header_at + 1 :]:
        fields = line.split()
        if not fields or not fields[0].isdigit():
            if rows:
                break
            continue
        rows.append(fields)
    if not rows:
        raise FabricParseError(f"ib_write_bw printed a header but no result row: {_tail(text)}")
    row = rows[-1]
    try:
        return IbWriteBwResult(
            device=_info_value(text, "Device"),
            gid_index=_int_or_none(_info_value(text, "GID index")),
            qps=_int_or_none(_info_value(text, "Number of qps")),
            msg_bytes=int(row[0]),
            iterations=int(row[iter_col]),
            peak_gbps=float(row[peak_col]) * factor,
            average_gbps=float(row[average_col]) * factor,
            msg_rate_mpps=float(row[rate_col]),
        )
    except (IndexError, ValueError):
        raise FabricParseError(f"malformed ib_write_bw result row: {' '.join(row)!r}") from None


def parse_iperf3_json(text: str) -> Iperf3Result:
    """Parse ``iperf3 -J`` output; a run that reports an ``error`` raises FabricParseError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise FabricParseError(
            f"iperf3 output is not JSON (run it with -J): {_tail(text)}"
        ) from None
    if not isinstance(data, dict):
        raise FabricParseError("iperf3 JSON is not an object")
    if data.get("error"):
        raise FabricParseError(f"iperf3 failed: {data['error']}")
    end = data.get("end") or {}
    received = end.get("sum_received")
    if not isinstance(received, dict) or "bits_per_second" not in received:
        raise FabricParseError(
            "iperf3 JSON has no end.sum_received.bits_per_second (a UDP test reports end.sum; "
            "the bandwidth checks run TCP)"
        )
    test_start = (data.get("start") or {}).get("test_start") or {}
    sent = end.get("sum_sent") or {}
    bps = float(received["bits_per_second"])
    return Iperf3Result(
        bits_per_second=bps,
        gbps=bps / 1e9,
        seconds=float(received.get("seconds", 0.0)),
        bytes=int(received.get("bytes", 0)),
        streams=test_start.get("num_streams"),
        reverse=bool(test_start.get("reverse", 0)),
        retransmits=sent.get("retransmits"),
    )
