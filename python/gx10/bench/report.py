"""The bench report: OUT/report.html and OUT/summary.md (the summary tables, in the reference
notes' layout), rebuilt from OUT/results.json and, for the temperature timeline, OUT/telemetry.csv
(runs with an inventory).

report.html is self-contained and works offline: the figures are inline SVG (matplotlib's), each
plotted point and each case's span in the temperature timeline overlaid with a focusable target
that carries its case id; a small inline script shows that case's full figures (per node SM clock,
power, temperature; tok/s, TTFT, failed requests) while the pointer rests on it or it has the
keyboard focus. A Content-Security-Policy refuses anything external (only that script runs).
The page is templates/report.html.j2 (Jinja2, autoescaped); the summary's markdown goes into it
through markdown-it-py."""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from markdown_it import MarkdownIt
from matplotlib.figure import Figure

from gx10.bench.matrix import UNLOCKED
from gx10.bench.metrics import flag_cache_hits
from gx10.bench.results import TELEMETRY_FILE, load_results
from gx10.bench.telemetry import read_csv
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
ONE_CAP = (
    "Only one clock cap has measured cases: a sweep needs two or more (--clock-caps "
    "2000,2400,unlocked with -i)."
)


def _p50(case: Mapping[str, Any], key: str) -> float | None:
    value = (case.get(key) or {}).get("p50")
    return float(value) if value is not None else None


def _ok(cases: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for c in cases if c.get("status") == "ok"]


@dataclass
class Marks:
    """A figure's hover targets: (axes, x, y, case id) points, (axes, x0, x1, case id) spans."""

    points: list[tuple[Any, float, float, str]] = field(default_factory=list)
    spans: list[tuple[Any, float, float, str]] = field(default_factory=list)

    def plot(self, ax: Any, points: Sequence[tuple[float, float, str]], **style: Any) -> None:
        """A line through `points` (x, y, case id), each point a hover target."""
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", **style)
        self.points += [(ax, p[0], p[1], p[2]) for p in points]


def _svg(fig: Figure, marks: Marks, key: str) -> str:
    """The figure as inline SVG, with a focusable target over each mark (in SVG user units:
    matplotlib writes 72 units per inch; its display coordinates are fig.dpi pixels per inch,
    y upwards)."""
    fig.tight_layout()
    fig.canvas.draw()
    scale = 72.0 / fig.dpi
    height = fig.bbox.height

    def at(px: float, py: float) -> tuple[float, float]:
        return px * scale, (height - py) * scale

    overlay: list[str] = []
    frames: dict[int, int] = {}
    for ax, *_ in marks.points + marks.spans:
        if id(ax) in frames:
            continue
        frames[id(ax)] = len(frames)
        box = ax.get_window_extent()
        x0, y1 = at(box.x0, box.y0)
        x1, y0 = at(box.x1, box.y1)
        xlim, ylim = ax.get_xlim(), ax.get_ylim()
        overlay.append(
            f'<rect class="axes" data-axes="{frames[id(ax)]}" x="{x0:.2f}" y="{y0:.2f}" '
            f'width="{x1 - x0:.2f}" height="{y1 - y0:.2f}" data-xscale="{ax.get_xscale()}" '
            f'data-yscale="{ax.get_yscale()}" data-xlim="{float(xlim[0])!r},{float(xlim[1])!r}" '
            f'data-ylim="{float(ylim[0])!r},{float(ylim[1])!r}"/>'
        )
    for ax, x0, x1, case_id in marks.spans:
        box = ax.get_window_extent()
        left, _ = at(ax.transData.transform((x0, 0))[0], 0)
        right, _ = at(ax.transData.transform((x1, 0))[0], 0)
        _, top = at(0, box.y1)
        _, bottom = at(0, box.y0)
        name = html.escape(case_id, quote=True)
        overlay.append(
            f'<rect class="hot span" tabindex="0" data-case="{name}" data-axes="{frames[id(ax)]}" '
            f'x="{left:.2f}" y="{top:.2f}" width="{max(right - left, 2.0):.2f}" '
            f'height="{bottom - top:.2f}"><title>{name}</title></rect>'
        )
    for ax, x, y, case_id in marks.points:
        cx, cy = at(*ax.transData.transform((x, y)))
        name = html.escape(case_id, quote=True)
        overlay.append(
            f'<circle class="hot pt" tabindex="0" data-case="{name}" data-axes="{frames[id(ax)]}" '
            f'data-x="{x!r}" data-y="{y!r}" cx="{cx:.2f}" cy="{cy:.2f}" r="6">'
            f"<title>{name}</title></circle>"
        )
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"gx10-{key}"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = text.replace("<svg ", f'<svg class="figure" id="fig-{key}" role="img" ', 1)
    return text.replace("</svg>", "<g>" + "".join(overlay) + "</g></svg>")


def _series(
    cases: Sequence[Mapping[str, Any]], group: str, x: str, y: str
) -> dict[tuple[Any, str], list[tuple[float, float, str]]]:
    """(case[group], clock cap) -> sorted (x, y, case id) points: figures never mix clock caps."""
    out: dict[tuple[Any, str], list[tuple[float, float, str]]] = {}
    for case in cases:
        value = case.get(y) if y == "aggregate_tps" else _p50(case, y)
        if value is None:
            continue
        key = (case[group], str(case["clock_cap"]))
        out.setdefault(key, []).append((float(case[x]), float(value), str(case["id"])))
    return {k: sorted(out[k]) for k in sorted(out, key=lambda k: (k[0], _cap_key(k[1])))}


def _name(text: str, key: tuple[Any, str], cases: Sequence[Mapping[str, Any]]) -> str:
    """A series' label, with its clock cap when the run has several."""
    several = len({c["clock_cap"] for c in cases}) > 1
    return f"{text}, {_cap_label(key[1])}" if several else text


def _flagged(case: Mapping[str, Any]) -> bool:
    return bool(case.get("flags"))


def figure_decode(cases: Sequence[Mapping[str, Any]]) -> str | None:
    single = [c for c in _ok(cases) if c["concurrency"] == 1]
    series = _series(single, "concurrency", "prompt_tokens", "decode_tps")
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    marks = Marks()
    for key, points in series.items():
        marks.plot(ax, points, label=_name("per session, c=1", key, single))
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context (prompt tokens)")
    ax.set_ylabel("decode tok/s (p50)")
    ax.set_title(TITLES["decode"])
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _svg(fig, marks, "decode")


def figure_ttft(cases: Sequence[Mapping[str, Any]]) -> str | None:
    series = _series(_ok(cases), "concurrency", "prompt_tokens", "ttft_s")
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    marks = Marks()
    for key, points in series.items():
        marks.plot(ax, points, label=_name(f"c={key[0]}", key, _ok(cases)))
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
    return _svg(fig, marks, "ttft")


def figure_concurrency(cases: Sequence[Mapping[str, Any]]) -> str | None:
    agg = _series(_ok(cases), "prompt_tokens", "concurrency", "aggregate_tps")
    session = _series(_ok(cases), "prompt_tokens", "concurrency", "decode_tps")
    agg = {k: v for k, v in agg.items() if len(v) > 1}
    if not agg:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    marks = Marks()
    for key, points in agg.items():
        label = _name(f"{key[0]}", key, _ok(cases))
        marks.plot(left, points, label=label)
        marks.plot(right, session.get(key, []), label=label)
    left.set_title("aggregate tok/s")
    right.set_title("per-session decode tok/s (p50)")
    for ax in (left, right):
        ax.set_xlabel("concurrent streams")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(title="prompt tokens", fontsize=8)
    fig.suptitle(TITLES["concurrency"])
    return _svg(fig, marks, "concurrency")


def _cap_key(cap: str) -> tuple[int, int]:
    """Caps in MHz order, 'unlocked' last."""
    return (1, 0) if cap == UNLOCKED else (0, int(cap) if cap.isdigit() else 0)


def _cap_label(cap: str) -> str:
    return cap if cap == UNLOCKED else f"{cap} MHz"


def _measured(cases: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The successful cases with node telemetry."""
    return [c for c in _ok(cases) if c.get("telemetry")]


def sweep_groups(
    cases: Sequence[Mapping[str, Any]],
) -> dict[tuple[int, int], list[Mapping[str, Any]]]:
    """(prompt, concurrency) -> its measured cases in cap order, for the points run at 2+ caps."""
    groups: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for case in _measured(cases):
        groups.setdefault((case["prompt_tokens"], case["concurrency"]), []).append(case)
    return {
        key: sorted(group, key=lambda c: _cap_key(str(c["clock_cap"])))
        for key, group in sorted(groups.items())
        if len({c["clock_cap"] for c in group}) > 1
    }


def _node_value(case: Mapping[str, Any], node: str, key: str, stat: str) -> float | None:
    figures = ((case.get("telemetry") or {}).get("nodes") or {}).get(node) or {}
    value = (figures.get(key) or {}).get(stat)
    return float(value) if value is not None else None


def _node_names(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for case in cases:
        for name in (case.get("telemetry") or {}).get("nodes") or {}:
            if name not in names:
                names.append(name)
    return names


def _line(
    marks: Marks,
    ax: Any,
    group: Sequence[Mapping[str, Any]],
    xs: Sequence[int],
    ys: Sequence[float | None],
    *,
    name: str,
    **style: Any,
) -> None:
    points = [
        (float(x), y, str(c["id"])) for c, x, y in zip(group, xs, ys, strict=True) if y is not None
    ]
    if points:
        marks.plot(ax, points, label=name, **style)


def figure_clock(cases: Sequence[Mapping[str, Any]]) -> str | None:
    """Decode, prefill, power and temperature per node, tok/s/W and SM clock against the cap."""
    groups = sweep_groups(cases)
    if not groups:
        return None
    caps = sorted({str(c["clock_cap"]) for g in groups.values() for c in g}, key=_cap_key)
    position = {cap: i for i, cap in enumerate(caps)}
    nodes = _node_names([c for g in groups.values() for c in g])
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    marks = Marks()
    panels = [
        (axes[0][0], "decode tok/s per session (p50)"),
        (axes[0][1], "prefill tok/s (p50)"),
        (axes[0][2], "tok/s/W (aggregate tok/s / total W)"),
        (axes[1][0], "power W (mean, per node)"),
        (axes[1][1], "temperature C (mean; max dashed)"),
        (axes[1][2], "SM clock MHz (mean, per node)"),
    ]
    for (prompt, conc), group in groups.items():
        label = f"p{prompt} c{conc}"
        xs = [position[str(c["clock_cap"])] for c in group]
        _line(marks, axes[0][0], group, xs, [_p50(c, "decode_tps") for c in group], name=label)
        _line(marks, axes[0][1], group, xs, [_p50(c, "prefill_tps") for c in group], name=label)
        efficiency = [(c.get("telemetry") or {}).get("tps_per_w") for c in group]
        _line(marks, axes[0][2], group, xs, efficiency, name=label)
        for node in nodes:
            name = f"{node} {label}" if len(groups) > 1 else node
            power = [_node_value(c, node, "power_w", "mean") for c in group]
            _line(marks, axes[1][0], group, xs, power, name=name)
            temps = [_node_value(c, node, "temperature_c", "mean") for c in group]
            _line(marks, axes[1][1], group, xs, temps, name=name)
            peaks = [_node_value(c, node, "temperature_c", "max") for c in group]
            color = axes[1][1].get_lines()[-1].get_color() if axes[1][1].get_lines() else None
            style = {"linestyle": "--", "color": color, "alpha": 0.6}
            _line(marks, axes[1][1], group, xs, peaks, name=f"{name} max", **style)
            clocks = [_node_value(c, node, "sm_clock_mhz", "mean") for c in group]
            _line(marks, axes[1][2], group, xs, clocks, name=name)
    for ax, title in panels:
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(caps)), [_cap_label(c) for c in caps], fontsize=8)
        ax.set_xlabel("SM clock cap", fontsize=8)
        ax.grid(True, alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=7)
    fig.suptitle(TITLES["clock"])
    return _svg(fig, marks, "clock")


def figure_thermal(document: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Temperature per node across the run, the cases shaded, the cool-down and abort limits."""
    rows = [r for r in rows if r.get("temperature_c") is not None]
    if not rows:
        return None
    origin = min(r["wall"] for r in rows)
    span = max(r["wall"] for r in rows) - origin
    unit, unit_name = (60.0, "minutes") if span > 600 else (1.0, "seconds")
    fig, ax = plt.subplots(figsize=(11, 4))
    marks = Marks()
    by_node: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(((r["wall"] - origin) / unit, r["temperature_c"]))
    for node, points in by_node.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=1, label=node)
    cases = sorted(
        (c for c in document.get("cases", {}).values() if c.get("started_wall")),
        key=lambda c: c["started_wall"],
    )
    previous_cap = None
    for i, case in enumerate(cases):
        start = (case["started_wall"] - origin) / unit
        end = (case.get("ended_wall", case["started_wall"]) - origin) / unit
        color = "tab:red" if case.get("status") == "skipped" else "tab:gray"
        ax.axvspan(start, end, color=color, alpha=0.08 if i % 2 else 0.16, linewidth=0)
        marks.spans.append((ax, start, end, str(case["id"])))
        if case.get("clock_cap") != previous_cap:
            ax.axvline(start, color="black", linewidth=0.6, alpha=0.5)
            ax.annotate(
                _cap_label(str(case.get("clock_cap"))),
                (start, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                rotation=90,
                va="top",
                ha="right",
            )
            previous_cap = case.get("clock_cap")
    safety = document.get("safety") or {}
    for key, name, color in (("cool_down_c", "cool-down", "tab:blue"), ("abort_c", "abort", "r")):
        if safety.get(key) is not None:
            label = f"{name} {safety[key]:g} C"
            ax.axhline(safety[key], color=color, linestyle="--", linewidth=0.8, label=label)
    ax.set_xlabel(f"{unit_name} since the first reading (cases shaded, cap changes marked)")
    ax.set_ylabel("GPU temperature C")
    ax.set_title(TITLES["thermal"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _svg(fig, marks, "thermal")


def _num(value: Any, digits: int = 1, comma: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if comma else f"{value:.{digits}f}"


def summary_tables(document: Mapping[str, Any]) -> str:
    cases = list(document.get("cases", {}).values())
    lines = [f"# Bench summary: {document.get('model')} at {document.get('endpoint')}", ""]
    settings = document.get("settings", {})
    lines.append("Settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    lines.append("")
    # With several clock caps, every row says which (the figures differ by cap).
    caps = len({c["clock_cap"] for c in cases}) > 1
    cap_head, cap_rule = ("cap | ", "---|") if caps else ("", "")

    def cap_cell(c: Mapping[str, Any]) -> str:
        return f"{_cap_label(str(c['clock_cap']))} | " if caps else ""

    def by_cap(c: Mapping[str, Any]) -> tuple[int, int]:
        return _cap_key(str(c["clock_cap"]))

    single = sorted(
        (c for c in cases if c["concurrency"] == 1), key=lambda c: (c["prompt_tokens"], by_cap(c))
    )
    if single:
        lines += [
            "Single-stream context sweep (concurrency 1): prompt -> aggregate t/s, per-session "
            "t/s, prefill t/s, TTFT",
            "",
            f"| prompt | {cap_head}agg | session | prefill | TTFT s | status |",
            f"|---|{cap_rule}---|---|---|---|---|",
        ]
        for c in single:
            lines.append(
                f"| {c['prompt_tokens']:,} | {cap_cell(c)}{_num(c.get('aggregate_tps'))} | "
                f"{_num(_p50(c, 'decode_tps'))} | {_num(_p50(c, 'prefill_tps'), 0, True)} | "
                f"{_num(_p50(c, 'ttft_s'), 2)} | {_status(c)} |"
            )
        lines.append("")
    groups: dict[tuple[int, tuple[int, int]], list[Mapping[str, Any]]] = {}
    for c in sorted(cases, key=lambda c: (c["prompt_tokens"], by_cap(c), c["concurrency"])):
        groups.setdefault((c["prompt_tokens"], by_cap(c)), []).append(c)
    concurrency = [cs for cs in groups.values() if len(cs) > 1]
    if concurrency:
        lines += [
            "Concurrency: streams -> aggregate t/s / per-session t/s (TTFT p50 s)",
            "",
            f"| prompt | {cap_head}streams | agg | session | TTFT s | status |",
            f"|---|{cap_rule}---|---|---|---|---|",
        ]
        for cs in concurrency:
            for c in cs:
                lines.append(
                    f"| {c['prompt_tokens']:,} | {cap_cell(c)}{c['concurrency']} | "
                    f"{_num(c.get('aggregate_tps'))} | {_num(_p50(c, 'decode_tps'))} | "
                    f"{_num(_p50(c, 'ttft_s'), 2)} | {_status(c)} |"
                )
        lines.append("")
    lines += sweep_tables(cases)
    flagged = [c for c in cases if c.get("flags")]
    failed = [c for c in cases if c.get("status") not in ("ok", "skipped")]
    skipped = [c for c in cases if c.get("status") == "skipped"]
    for c in flagged:
        lines += [f"- {c['id']}: {f}" for f in c["flags"]]
    for c in failed:
        lines += [f"- {c['id']} failed: {e}" for e in c.get("errors", [])[:3]]
    if skipped:
        reason = skipped[0].get("skip_reason") or "-"
        lines.append(f"- {len(skipped)} case(s) skipped (clock sweep aborted): {reason}")
    lines += [f"- note: {n}" for n in document.get("notes", [])]
    lines += _restore_lines(document)
    if not _measured(cases):
        lines.append("- clock sweep and temperature timeline: not measured (need telemetry and -i)")
    return "\n".join(lines) + "\n"


def sweep_tables(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """The clock sweep in the reference notes' terms, one table per (prompt, streams) point."""
    lines: list[str] = []
    for (prompt, conc), group in sweep_groups(cases).items():
        nodes = _node_names(group)
        names = " / ".join(nodes)
        lines += [
            f"Clock sweep at {prompt:,} prompt tokens, {conc} stream(s): cap -> decode t/s, "
            f"prefill t/s, power W and temperature C (mean, max) of {names}, tok/s/W (decode "
            "t/s / total W, as the reference notes give it; and aggregate t/s / total W)",
            "",
            "| cap | decode | prefill | power W | temp C | max C | SM MHz | tok/s/W "
            "| agg tok/s/W |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in group:
            telemetry = c.get("telemetry") or {}

            cells = [
                _cap_label(str(c["clock_cap"])),
                _num(_p50(c, "decode_tps")),
                _num(_p50(c, "prefill_tps"), 0, True),
                _per_node(c, nodes, "power_w", "mean"),
                _per_node(c, nodes, "temperature_c", "mean"),
                _per_node(c, nodes, "temperature_c", "max"),
                _per_node(c, nodes, "sm_clock_mhz", "mean"),
                _num(telemetry.get("decode_tps_per_w"), 2),
                _num(telemetry.get("tps_per_w"), 2),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _per_node(case: Mapping[str, Any], nodes: Sequence[str], key: str, stat: str) -> str:
    return "/".join(_num(_node_value(case, n, key, stat), 1) for n in nodes)


def _restore_lines(document: Mapping[str, Any]) -> list[str]:
    commands = document.get("commands") or []
    clock = (commands[-1].get("clock") if commands else None) or {}
    restore = clock.get("restore") or {}
    parts = []
    for node, entry in restore.items():
        ended = entry.get("ended") or {}
        state = f"restored {ended.get('restored')}" if ended else "end not seen"
        parts.append(f"{node} -> {entry.get('restore_to')} (set {entry.get('set')}; {state})")
    return [f"- clock caps after the last run: {'; '.join(parts)}"] if parts else []


def _status(case: Mapping[str, Any]) -> str:
    if case.get("status") == "skipped":
        return "SKIPPED"
    if case.get("status") != "ok":
        return "FAILED"
    return "cache hit?" if case.get("flags") else "ok"


# The summary's markdown in HTML: its blocks (heading, paragraphs, tables, the notes' list) only.
# Its text comes from results.json (model, endpoint, errors, notes), so it is shown as it is: no
# raw HTML, no links or images, no emphasis, code spans, entities or backslash escapes.
_VERBATIM = [
    "reference",
    "escape",
    "backticks",
    "emphasis",
    "link",
    "image",
    "autolink",
    "html_inline",
    "entity",
]


@functools.cache
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable("table").disable(_VERBATIM)


def summary_html(markdown: str) -> str:
    """The summary's markdown as HTML, the notes (its bullet lines) of class "note"."""
    md = _markdown()
    tokens = md.parse(markdown)
    for token in tokens:
        if token.type == "list_item_open":
            token.attrSet("class", "note")
    rendered: str = md.renderer.render(tokens, md.options, {})
    return rendered


@functools.cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gx10.bench", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    # tojson escapes <, >, & and ' (nothing in the data can end its <script> block); compact.
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":")}
    return env


def _failed(case: Mapping[str, Any]) -> int | None:
    """Failed requests: the case's `requests_failed`, else requests - requests_ok."""
    if case.get("requests_failed") is not None:
        return int(case["requests_failed"])
    if case.get("requests") is None or case.get("requests_ok") is None:
        return None
    return int(case["requests"]) - int(case["requests_ok"])


def case_figures(case: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """A case's full figures as (key, label, text) rows: what hovering its marks shows."""
    telemetry = case.get("telemetry") or {}
    failed = _failed(case)
    rows = [
        ("clock_cap", "clock cap", _cap_label(str(case.get("clock_cap")))),
        ("prompt_tokens", "prompt tokens", f"{case.get('prompt_tokens', 0):,}"),
        ("concurrency", "streams", str(case.get("concurrency"))),
        ("status", "status", _status(case)),
        ("requests", "requests", str(case.get("requests", "-"))),
        ("requests_failed", "failed requests", "-" if failed is None else str(failed)),
        ("aggregate_tps", "aggregate tok/s", _num(case.get("aggregate_tps"))),
        ("decode_tps", "decode tok/s per session (p50)", _num(_p50(case, "decode_tps"))),
        ("prefill_tps", "prefill tok/s (p50)", _num(_p50(case, "prefill_tps"), 0, True)),
        ("ttft_s", "TTFT s (p50)", _num(_p50(case, "ttft_s"), 3)),
    ]
    if telemetry:
        rows += [
            ("power_w_total", "power W (total)", _num(telemetry.get("power_w_total"))),
            ("tps_per_w", "tok/s/W", _num(telemetry.get("tps_per_w"), 2)),
        ]
    for node in _node_names([case]):
        rows += [
            (
                f"{node}.sm_clock_mhz",
                f"{node} SM clock MHz (mean)",
                _node_text(case, node, "sm_clock_mhz"),
            ),
            (f"{node}.power_w", f"{node} power W (mean)", _node_text(case, node, "power_w")),
            (
                f"{node}.temperature_c",
                f"{node} temperature C (mean)",
                _node_text(case, node, "temperature_c"),
            ),
            (
                f"{node}.temperature_c_max",
                f"{node} temperature C (max)",
                _num(_node_value(case, node, "temperature_c", "max")),
            ),
        ]
    rows += [("flag", "flag", f) for f in case.get("flags") or []]
    return rows


def _node_text(case: Mapping[str, Any], node: str, key: str) -> str:
    return _num(_node_value(case, node, key, "mean"))


# Shows the figures of the case under the pointer or the keyboard focus (data: #gx10-cases).
SCRIPT = """(()=>{
const data=JSON.parse(document.getElementById('gx10-cases').textContent);
const tip=document.getElementById('tip');
function show(el){const c=data[el.dataset.case];if(!c)return;
tip.replaceChildren();const h=document.createElement('b');h.textContent=el.dataset.case;
tip.append(h);
const t=document.createElement('table');
for(const [k,label,v] of c){const r=t.insertRow();r.dataset.k=k;
const th=document.createElement('th');th.textContent=label;r.append(th);
r.insertCell().textContent=v;}
tip.append(t);tip.dataset.case=el.dataset.case;tip.hidden=false;
const b=el.getBoundingClientRect(),w=tip.offsetWidth;
const x=b.right+8+w>innerWidth?b.left-8-w:b.right+8;
const y=Math.max(0,Math.min(b.top,innerHeight-tip.offsetHeight));
tip.style.left=Math.max(0,x+scrollX)+'px';tip.style.top=(y+scrollY)+'px';}
function hide(el){if(tip.dataset.case===el.dataset.case)tip.hidden=true;}
for(const el of document.querySelectorAll('.hot')){
el.addEventListener('pointerenter',()=>show(el));el.addEventListener('pointerleave',()=>hide(el));
el.addEventListener('focus',()=>show(el));el.addEventListener('blur',()=>hide(el));}
document.addEventListener('keydown',e=>{if(e.key==='Escape')tip.hidden=true;});
})();"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode("ascii")
# Nothing external: no fetch, font, frame or image from anywhere; only SCRIPT runs (matplotlib's
# SVG needs inline style attributes).
CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)


def _missing(key: str, measured: bool) -> str:
    """What a figure's place says when it has no figure."""
    if key in ("clock", "thermal") and not measured:
        return NOT_MEASURED
    if key == "clock":
        return ONE_CAP
    return "Not enough successful cases for this figure."


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
    measured = bool(_measured(cases))
    figures = (
        ("decode", figure_decode(cases)),
        ("ttft", figure_ttft(cases)),
        ("concurrency", figure_concurrency(cases)),
        ("clock", figure_clock(cases)),
        ("thermal", figure_thermal(document, read_csv(out / TELEMETRY_FILE))),
    )
    shown: list[dict[str, str | None]] = []
    for key, svg in figures:
        labelled = (
            svg.replace("<svg ", f"<svg aria-label='{html.escape(TITLES[key])}' ", 1)
            if svg is not None
            else None
        )
        missing = None if svg is not None else _missing(key, measured)
        shown.append({"title": TITLES[key], "svg": labelled, "missing": missing})
    template = _templates().get_template("report.html.j2")
    page = template.render(
        csp=CSP,
        model=str(document.get("model")),
        summary=summary_html(markdown),
        figures=shown,
        cases={str(c["id"]): case_figures(c) for c in cases},
        script=SCRIPT,
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
