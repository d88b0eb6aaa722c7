"""The bench's results on disk: results.json (the document), results.csv (a row per case, per
node columns with an inventory), requests.csv (a row per request), and the run's outcome.

results.json is written atomically after every case, so a run that stops keeps what it measured
and a rerun with the same OUT resumes; its `schema` is checked on load.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gx10.errors import Gx10Error

SCHEMA = 1
CASE_COLUMNS = (
    "id",
    "prompt_tokens",
    "concurrency",
    "clock_cap",
    "status",
    "requests",
    "requests_ok",
    "requests_failed",
    "wall_s",
    "aggregate_tps",
    "completion_tokens",
    "ttft_s.mean",
    "ttft_s.p50",
    "ttft_s.p90",
    "ttft_s.p99",
    "prefill_tps.mean",
    "prefill_tps.p50",
    "prefill_tps.p90",
    "prefill_tps.p99",
    "decode_tps.mean",
    "decode_tps.p50",
    "decode_tps.p90",
    "decode_tps.p99",
    "generation_tokens_delta",
    "spec_acceptance_rate",
    "power_w_total",
    "temperature_c_max",
    "sm_clock_mhz_mean",
    "tps_per_w",
    "decode_tps_per_w",
    "cache_hit_source",
    "flags",
    "errors",
)
# Per node (with an inventory), after CASE_COLUMNS: NODE.power_w.mean and so on.
NODE_COLUMNS = (
    "power_w.mean",
    "power_w.max",
    "temperature_c.mean",
    "temperature_c.max",
    "sm_clock_mhz.mean",
    "samples",
)
TELEMETRY_FILE = "telemetry.csv"
REQUEST_COLUMNS = (
    "case",
    "index",
    "ok",
    "error",
    "status",
    "target_tokens",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "finish_reason",
    "sent",
    "first_token",
    "last_token",
    "done",
    "ttft_s",
    "prefill_tps",
    "decode_tps",
    "e2e_s",
    "chunks",
)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class RunOutcome:
    out: Path
    cases: list[dict[str, Any]] = field(default_factory=list)
    ran: int = 0
    skipped: int = 0  # finished earlier and kept (resume)
    notes: list[str] = field(default_factory=list)
    aborted: str | None = None  # why the rest of the sweep was skipped
    restore: dict[str, dict[str, Any]] = field(default_factory=dict)  # per node, with -i

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.cases if c["status"] != "ok"]


def load_results(out: Path) -> dict[str, Any] | None:
    path = out / "results.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Gx10Error(f"{path} is unreadable ({exc}); move it away or use another --out") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise Gx10Error(f"{path} is not a gx10 bench results file (schema {SCHEMA})")
    return data


def write_results(out: Path, document: Mapping[str, Any]) -> None:
    """results.json (atomically), results.csv (per case), requests.csv (per request)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out / "results.json")
    cases = list(document.get("cases", {}).values())
    nodes = [n["name"] for n in document.get("nodes") or []]
    node_columns = [f"{node}.{column}" for node in nodes for column in NODE_COLUMNS]
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CASE_COLUMNS, *node_columns])
        for case in cases:
            row = [_csv_value(case, column) for column in CASE_COLUMNS]
            telemetry = case.get("telemetry") or {}
            for node in nodes:
                figures = (telemetry.get("nodes") or {}).get(node) or {}
                for column in NODE_COLUMNS:
                    key, _, stat = column.partition(".")
                    value = figures.get(key)
                    row.append(_fmt(value.get(stat) if stat and value else value))
            writer.writerow(row)
    with (out / "requests.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(REQUEST_COLUMNS)
        for case in cases:
            for row in case.get("request_results", []):
                writer.writerow(
                    [case["id"] if c == "case" else _fmt(row.get(c)) for c in REQUEST_COLUMNS]
                )


def _csv_value(case: Mapping[str, Any], column: str) -> str:
    if column == "generation_tokens_delta":
        return _fmt(case.get("server", {}).get("delta", {}).get("vllm:generation_tokens_total"))
    if column == "spec_acceptance_rate":
        return _fmt(case.get("server", {}).get("delta", {}).get("spec_acceptance_rate"))
    if column in ("flags", "errors"):
        return "; ".join(case.get(column) or [])
    if column in _TELEMETRY_COLUMNS:
        return _fmt((case.get("telemetry") or {}).get(column))
    key, _, sub = column.partition(".")
    value = case.get(key)
    if sub:
        value = (value or {}).get(sub)
    return _fmt(value)


_TELEMETRY_COLUMNS = frozenset(
    {"power_w_total", "temperature_c_max", "sm_clock_mhz_mean", "tps_per_w", "decode_tps_per_w"}
)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
