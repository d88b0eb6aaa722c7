"""The bench report: OUT/report.html (self-contained, figures embedded as PNG) and OUT/summary.md
(the summary tables, in the reference notes' layout), rebuilt from OUT/results.json alone."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from gx10.bench.metrics import flag_cache_hits
from gx10.bench.runner import load_results
from gx10.errors import Gx10Error

TITLES = {
    "decode": "Decode vs context",
    "ttft": "TTFT vs prompt length",
    "concurrency": "Throughput vs concurrency",
    "clock": "Clock sweep: tok/s, power, temperature, tok/s/W",
    "thermal": "Temperature timeline",
}
NOT_MEASURED = (
    "Not measured: needs node telemetry (nvidia-smi SM clock, power, temperature) and clock caps, "
    "which need an inventory (gx10 bench -i INV); this run used a bare endpoint."
)


def _p50(case: Mapping[str, Any], key: str) -> float | None:
    value = (case.get(key) or {}).get("p50")
    return float(value) if value is not None else None


def _ok(cases: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for c in cases if c.get("status") == "ok"]


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _series(
    cases: Sequence[Mapping[str, Any]], group: str, x: str, y: str
) -> dict[Any, list[tuple[float, float]]]:
    out: dict[Any, list[tuple[float, float]]] = {}
    for case in cases:
        value = case.get(y) if y == "aggregate_tps" else _p50(case, y)
        if value is None:
            continue
        out.setdefault(case[group], []).append((float(case[x]), float(value)))
    return {k: sorted(v) for k, v in sorted(out.items())}


def _flagged(case: Mapping[str, Any]) -> bool:
    return bool(case.get("flags"))


def figure_decode(cases: Sequence[Mapping[str, Any]]) -> str | None:
    single = [c for c in _ok(cases) if c["concurrency"] == 1]
    points = _series(single, "concurrency", "prompt_tokens", "decode_tps").get(1)
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="per session, c=1")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context (prompt tokens)")
    ax.set_ylabel("decode tok/s (p50)")
    ax.set_title(TITLES["decode"])
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _png(fig)


def figure_ttft(cases: Sequence[Mapping[str, Any]]) -> str | None:
    series = _series(_ok(cases), "concurrency", "prompt_tokens", "ttft_s")
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for conc, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"c={conc}")
    flagged = [c for c in _ok(cases) if _flagged(c) and _p50(c, "ttft_s")]
    if flagged:
        ax.scatter(
            [c["prompt_tokens"] for c in flagged],
            [_p50(c, "ttft_s") or 0.0 for c in flagged],
            s=120,
            facecolors="none",
            edgecolors="red",
            label="probable cache hit",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT s (p50)")
    ax.set_title(TITLES["ttft"] + " (log-log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _png(fig)


def figure_concurrency(cases: Sequence[Mapping[str, Any]]) -> str | None:
    agg = _series(_ok(cases), "prompt_tokens", "concurrency", "aggregate_tps")
    session = _series(_ok(cases), "prompt_tokens", "concurrency", "decode_tps")
    agg = {k: v for k, v in agg.items() if len(v) > 1}
    if not agg:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for prompt, points in agg.items():
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{prompt}")
        s = session.get(prompt, [])
        right.plot([p[0] for p in s], [p[1] for p in s], marker="o", label=f"{prompt}")
    left.set_title("aggregate tok/s")
    right.set_title("per-session decode tok/s (p50)")
    for ax in (left, right):
        ax.set_xlabel("concurrent streams")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(title="prompt tokens", fontsize=8)
    fig.suptitle(TITLES["concurrency"])
    return _png(fig)


def _num(value: Any, digits: int = 1, comma: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if comma else f"{value:.{digits}f}"


def summary_tables(document: Mapping[str, Any]) -> str:
    cases = list(document.get("cases", {}).values())
    lines = [f"# Bench summary: {document.get('model')} at {document.get('endpoint')}", ""]
    settings = document.get("settings", {})
    lines.append(
        "Settings: "
        + ", ".join(f"{k} {v}" for k, v in settings.items())
        + f"; time scale {document.get('server', {}).get('time_scale', 1)}"
    )
    lines.append("")
    single = sorted((c for c in cases if c["concurrency"] == 1), key=lambda c: c["prompt_tokens"])
    if single:
        lines += [
            "Single-stream context sweep (concurrency 1): prompt -> aggregate t/s, per-session "
            "t/s, prefill t/s, TTFT",
            "",
            "| prompt | agg | session | prefill | TTFT s | status |",
            "|---|---|---|---|---|---|",
        ]
        for c in single:
            lines.append(
                f"| {c['prompt_tokens']:,} | {_num(c.get('aggregate_tps'))} | "
                f"{_num(_p50(c, 'decode_tps'))} | {_num(_p50(c, 'prefill_tps'), 0, True)} | "
                f"{_num(_p50(c, 'ttft_s'), 2)} | {_status(c)} |"
            )
        lines.append("")
    multi = sorted(cases, key=lambda c: (c["prompt_tokens"], c["concurrency"]))
    by_prompt: dict[int, list[Mapping[str, Any]]] = {}
    for c in multi:
        by_prompt.setdefault(c["prompt_tokens"], []).append(c)
    concurrency = {p: cs for p, cs in by_prompt.items() if len(cs) > 1}
    if concurrency:
        lines += [
            "Concurrency: streams -> aggregate t/s / per-session t/s (TTFT p50 s)",
            "",
            "| prompt | streams | agg | session | TTFT s | status |",
            "|---|---|---|---|---|---|",
        ]
        for prompt, cs in concurrency.items():
            for c in cs:
                lines.append(
                    f"| {prompt:,} | {c['concurrency']} | {_num(c.get('aggregate_tps'))} | "
                    f"{_num(_p50(c, 'decode_tps'))} | {_num(_p50(c, 'ttft_s'), 2)} | "
                    f"{_status(c)} |"
                )
        lines.append("")
    flagged = [c for c in cases if c.get("flags")]
    failed = [c for c in cases if c.get("status") != "ok"]
    for c in flagged:
        lines += [f"- {c['id']}: {f}" for f in c["flags"]]
    for c in failed:
        lines += [f"- {c['id']} failed: {e}" for e in c.get("errors", [])[:3]]
    lines += [f"- note: {n}" for n in document.get("notes", [])]
    lines.append("- clock sweep and temperature timeline: not measured (need telemetry and -i)")
    return "\n".join(lines) + "\n"


def _status(case: Mapping[str, Any]) -> str:
    if case.get("status") != "ok":
        return "FAILED"
    return "cache hit?" if case.get("flags") else "ok"


def _md_table_to_html(markdown: str) -> str:
    """The summary's markdown, as plain HTML (tables, bullet lines, paragraphs)."""
    out: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            head, *body = rows
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head))
            out.extend(
                "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                for row in body
            )
            out.append("</table>")
            rows.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                rows.append(cells)
            continue
        flush()
        if line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("- "):
            out.append(f"<p class='note'>{html.escape(line[2:])}</p>")
        elif line:
            out.append(f"<p>{html.escape(line)}</p>")
    flush()
    return "\n".join(out)


STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}.note{color:#555}.missing{border:1px dashed #aaa;
padding:1em;color:#666}img{max-width:100%}
"""


def build_report(out: Path) -> Path:
    """Write OUT/report.html and OUT/summary.md from OUT/results.json; returns the HTML path."""
    document = load_results(out)
    if document is None:
        raise Gx10Error(f"no results in {out} (expected {out / 'results.json'})")
    cases = list(document.get("cases", {}).values())
    config = document.get("config") or {}
    flag_cache_hits(
        cases, config.get("cache_hit_factor", 3.0), config.get("prefill_ceiling_tps", 6000.0)
    )
    markdown = summary_tables(document)
    (out / "summary.md").write_text(markdown, encoding="utf-8")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>gx10 bench: {html.escape(str(document.get('model')))}</title>",
        f"<style>{STYLE}</style></head><body>",
        _md_table_to_html(markdown),
    ]
    figures = (
        ("decode", figure_decode(cases)),
        ("ttft", figure_ttft(cases)),
        ("concurrency", figure_concurrency(cases)),
        ("clock", None),
        ("thermal", None),
    )
    for key, png in figures:
        parts.append(f"<h2>{html.escape(TITLES[key])}</h2>")
        if png is not None:
            alt = html.escape(TITLES[key])
            parts.append(f"<img alt='{alt}' src='data:image/png;base64,{png}'>")
        elif key in ("clock", "thermal"):
            parts.append(f"<p class='missing'>{html.escape(NOT_MEASURED)}</p>")
        else:
            parts.append("<p class='missing'>Not enough successful cases for this figure.</p>")
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
