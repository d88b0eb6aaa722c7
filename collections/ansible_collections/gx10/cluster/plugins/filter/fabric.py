# SPDX-License-Identifier: Apache-2.0
"""Filters gx10.cluster.fabric_iperf3, fabric_ib_write_bw and fabric_verdict: bandwidth checks.

Documented in fabric_iperf3.yml, fabric_ib_write_bw.yml and fabric_verdict.yml next to this file;
the parsing and the judgement are in module_utils/fabric_parse.py.

The two parse filters never fail on what a tool printed: a run that produced no result (refused
connection, a tool error, empty output) gives ``ok: false`` with the reason in ``error``, so a
check can report it with the rail and both ends named instead of a templating error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.fabric_parse import (
    DEGRADED_BAND_GBPS,
    PER_RAIL_MIN_GBPS,
    FabricParseError,
    bandwidth_verdict,
    parse_ib_write_bw,
    parse_iperf3_json,
)


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise AnsibleFilterError(
            f"gx10.cluster.{name} expects the tool's output as a string, got {type(value).__name__}"
        )
    return value


def fabric_iperf3(output: Any) -> dict[str, Any]:
    """stdout | gx10.cluster.fabric_iperf3: {ok, error, gbps, ...} from ``iperf3 -J``."""
    try:
        result = parse_iperf3_json(_text(output, "fabric_iperf3"))
    except FabricParseError as error:
        return {"ok": False, "error": str(error), "gbps": None}
    return {"ok": True, "error": None, **result.as_dict()}


def fabric_ib_write_bw(output: Any) -> dict[str, Any]:
    """stdout | gx10.cluster.fabric_ib_write_bw: {ok, error, gbps, ...} from ``ib_write_bw``."""
    try:
        result = parse_ib_write_bw(_text(output, "fabric_ib_write_bw"))
    except FabricParseError as error:
        return {"ok": False, "error": str(error), "gbps": None}
    return {"ok": True, "error": None, "gbps": result.average_gbps, **result.as_dict()}


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: {what} must be a number, got {value!r}"
        )
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: {what} must be a number, got {value!r}"
        ) from None


def fabric_verdict(
    gbps: Any,
    minimum: Any = PER_RAIL_MIN_GBPS,
    degraded_band: Sequence[Any] = DEGRADED_BAND_GBPS,
    label: str = "rail",
) -> dict[str, Any]:
    """gbps | gx10.cluster.fabric_verdict(minimum, degraded_band, label): status and remedy."""
    if not isinstance(degraded_band, Sequence) or isinstance(degraded_band, str):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band must be [low, high], got {degraded_band!r}"
        )
    if len(degraded_band) != 2:
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band must be [low, high], got {degraded_band!r}"
        )
    low, high = (_number(v, "degraded_band") for v in degraded_band)
    if low > high:
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band [{low:g}, {high:g}] is upside down"
        )
    return bandwidth_verdict(
        _number(gbps, "the bandwidth"), _number(minimum, "minimum"), str(label), (low, high)
    )


class FilterModule:
    """gx10.cluster fabric bandwidth filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "fabric_iperf3": fabric_iperf3,
            "fabric_ib_write_bw": fabric_ib_write_bw,
            "fabric_verdict": fabric_verdict,
        }
