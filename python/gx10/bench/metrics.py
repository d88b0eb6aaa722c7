"""Figures from timestamps: per request, per case, and the cache-hit flags across cases.

Definitions (all durations in wall-clock seconds on the controller, time.perf_counter):
- TTFT: first token received - request sent. Prefill tok/s: prompt tokens / TTFT (a prefill
  rate at one stream; above one stream TTFT also holds the wait behind the other prompts).
- Per-session decode tok/s: (completion tokens - 1) / (last token - first token), with the token
  counts from the server's usage (speculative decoding sends several tokens per chunk, so SSE
  chunks are not tokens). The first token comes out of the prefill, hence the -1 (vLLM's TPOT).
- Aggregate tok/s: completion tokens of the case's completed requests / their wall time (first
  of them sent to last of them done). A failed request adds nothing to the figures; the case
  records how many failed (`requests_failed`) beside them.
- Node telemetry (with an inventory): per node, mean and max of the power, temperature and SM
  clock readings taken during the case (nvidia-smi's power.draw is itself a ~1 s average).
  Efficiency, tok/s/W: aggregate tok/s / the sum of the nodes' mean power; decode tok/s/W: the
  per-session decode p50 / the same power (the reference notes' figure, at one stream).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from gx10.bench.client import RequestResult
from gx10.bench.telemetry import Sample

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        "mean": statistics.fmean(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(values, q)
    return out


def request_figures(result: RequestResult, origin: float) -> dict[str, Any]:
    """One request's record: its timestamps relative to the case start, and its rates."""
    row: dict[str, Any] = result.to_dict()
    for key in ("sent", "first_token", "last_token", "done"):
        value = row[key]
        row[key] = None if value is None else value - origin
    row["ttft_s"] = row["prefill_tps"] = row["decode_tps"] = row["e2e_s"] = None
    if row["sent"] is None:  # never sent: no times at all
        row["first_token"] = row["last_token"] = row["done"] = None
        return row
    if row["done"] is not None:
        row["e2e_s"] = row["done"] - row["sent"]
    if result.ok and row["first_token"] is not None:
        ttft = row["first_token"] - row["sent"]
        row["ttft_s"] = ttft
        if result.prompt_tokens and ttft > 0:
            row["prefill_tps"] = result.prompt_tokens / ttft
        decode = (row["last_token"] or 0.0) - row["first_token"]
        if result.completion_tokens and result.completion_tokens > 1 and decode > 0:
            row["decode_tps"] = (result.completion_tokens - 1) / decode
    return row


def case_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A case's figures from its request records (see request_figures)."""
    ok = [r for r in rows if r["ok"] and r["sent"] is not None and r["done"] is not None]
    wall = (max(r["done"] for r in ok) - min(r["sent"] for r in ok)) if ok else None
    completion = sum(int(r["completion_tokens"] or 0) for r in ok)
    return {
        "requests": len(rows),
        "requests_ok": len(ok),
        "requests_failed": len(rows) - len(ok),
        "wall_s": wall,
        "completion_tokens": completion,
        "prompt_tokens_ok": sum(int(r["prompt_tokens"] or 0) for r in ok),
        "aggregate_tps": completion / wall if wall and ok else None,
        "ttft_s": spread([r["ttft_s"] for r in ok if r["ttft_s"] is not None]),
        "prefill_tps": spread([r["prefill_tps"] for r in ok if r["prefill_tps"] is not None]),
        "decode_tps": spread([r["decode_tps"] for r in ok if r["decode_tps"] is not None]),
    }


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    delta = {k: after[k] - before[k] for k in after if k in before}
    drafts = delta.get("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta.get("vllm:spec_decode_num_accepted_tokens_total")
    if drafts and accepted is not None:
        delta["spec_acceptance_rate"] = accepted / drafts
    return delta


def _prefill(case: Mapping[str, Any], stat: str = "p50") -> float | None:
    value = (case.get("prefill_tps") or {}).get(stat)
    return float(value) if value is not None else None


def _server_hits(case: Mapping[str, Any]) -> float | None:
    """The server's prefix-cache hit tokens during the case, when it was recorded."""
    delta = (case.get("server") or {}).get("delta") or {}
    hits = delta.get("vllm:prefix_cache_hits_total")
    return float(hits) if hits is not None and case.get("prompt_tokens_sent") else None


def flag_cache_hits(
    cases: Iterable[MutableMapping[str, Any]], factor: float, ceiling: float
) -> None:
    """Set `flags` on each case when it was probably served from the prefix cache.

    When the server's `vllm:prefix_cache_hits_total` delta for the case was recorded, it decides
    (`cache_hit_source: "server"`): a hit when the server counted hits for a tenth of the case's
    prompt tokens or more. Otherwise the prefill figures decide (`cache_hit_source: "ceiling"`):
    - any request's prefill (prompt / TTFT) above `ceiling`;
    - at one stream, the case's median prefill above `factor` times the median of its neighbours
      (the next shorter and longer prompts at one stream and the same clock). Above one stream
      TTFT includes the wait behind the other prompts' prefill, so prompt / TTFT there is not a
      prefill rate and neighbours legitimately differ several-fold: not compared.
    A case with neither (no prefill figure, no counter) has `cache_hit_source: None`.
    """
    groups: dict[tuple[Any, Any], list[MutableMapping[str, Any]]] = {}
    for case in cases:
        case["flags"] = []
        case["cache_hit_source"] = None
        groups.setdefault((case["concurrency"], case["clock_cap"]), []).append(case)
    for group in groups.values():
        for case in group:
            hits = _server_hits(case)
            if hits is None:
                continue
            case["cache_hit_source"] = "server"
            prompt = case["prompt_tokens_sent"]
            if hits >= 0.1 * prompt:
                case["flags"].append(
                    f"probable cache hit: the server counted {hits:,.0f} prefix-cache hit tokens "
                    f"of {prompt:,} prompt tokens"
                )
    for (concurrency, _clock), group in groups.items():
        measured = sorted(
            (c for c in group if _prefill(c) is not None), key=lambda c: c["prompt_tokens"]
        )
        for i, case in enumerate(measured):
            if case["cache_hit_source"] == "server":
                continue
            case["cache_hit_source"] = "ceiling"
            value = _prefill(case)
            assert value is not None
            fastest = _prefill(case, "max") or value
            if fastest > ceiling:
                case["flags"].append(
                    f"probable cache hit: prefill {fastest:,.0f} tok/s is above the ceiling "
                    f"{ceiling:,.0f} (the server's prefix-cache counter was not available)"
                )
            if concurrency != 1:
                continue
            neighbours = [
                v
                for v in (_prefill(c) for c in measured[max(i - 1, 0) : i + 2] if c is not case)
                if v is not None
            ]
            if neighbours:
                typical = statistics.median(neighbours)
                if typical > 0 and value > factor * typical:
                    case["flags"].append(
                        f"probable cache hit: prefill {value:,.0f} tok/s is "
                        f"{value / typical:.1f}x its neighbours' {typical:,.0f}"
                    )


def _mean_max(values: Sequence[float | None]) -> dict[str, float | None]:
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "max": max(present) if present else None,
    }


def node_telemetry(samples: Sequence[Sample]) -> dict[str, Any]:
    """One node's figures over a case's samples."""
    return {
        "samples": len(samples),
        "power_w": _mean_max([s.power_w for s in samples]),
        "temperature_c": _mean_max([s.temperature_c for s in samples]),
        "sm_clock_mhz": _mean_max([s.sm_clock_mhz for s in samples]),
        "utilization_pct": _mean_max([s.utilization_pct for s in samples]),
    }


def case_telemetry(
    per_node: Mapping[str, Sequence[Sample]],
    aggregate_tps: float | None,
    decode_tps: float | None = None,
    approximate: Iterable[str] = (),
) -> dict[str, Any]:
    """A case's telemetry: per node figures, the total power and the efficiency.

    `approximate` names the nodes whose figures come from the first reading after the case (it
    was shorter than the sampling interval). The total power (and so efficiency) is None unless
    every node reported a power."""
    rough = set(approximate)
    nodes = {
        name: {**node_telemetry(samples), "approximate": name in rough}
        for name, samples in per_node.items()
    }
    powers = [n["power_w"]["mean"] for n in nodes.values()]
    total = sum(powers) if powers and all(p is not None for p in powers) else None
    temps = [n["temperature_c"]["max"] for n in nodes.values() if n["temperature_c"]["max"]]
    clocks = [n["sm_clock_mhz"]["mean"] for n in nodes.values() if n["sm_clock_mhz"]["mean"]]
    return {
        "nodes": nodes,
        "power_w_total": total,
        "temperature_c_max": max(temps) if temps else None,
        "sm_clock_mhz_mean": statistics.fmean(clocks) if clocks else None,
        "tps_per_w": aggregate_tps / total if aggregate_tps is not None and total else None,
        "decode_tps_per_w": decode_tps / total if decode_tps is not None and total else None,
    }
