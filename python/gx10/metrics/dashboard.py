"""The Grafana dashboard of the service: built here, written by `gx10 metrics config`.

Grafana's dashboard JSON (schemaVersion 39; Grafana 10 and later import it) with two variables:
`datasource` (pick the Prometheus that scrapes the config `gx10 metrics config` wrote) and `node`
(the `node` label the config puts on every target). Each panel's PromQL uses only:

- vLLM's own metric names (vllm/v1/metrics/loggers.py, PrometheusStatLogger; the speculative
  decoding counters of vllm/v1/spec_decode/metrics.py, SpecDecodingProm, whose docstring gives
  the acceptance-rate query used here), as served by the head's `/metrics`. Only the head serves
  them: the headless worker runs no API server (`vllm serve --headless` starts the workers of
  the multi-node executor only) and its engine's statistics reach the head's front end;
- the `gx10_gpu_*` gauges the metrics_exporter role's gx10-gpu-metrics writes on every node;
- node exporter's `node_memory_MemTotal_bytes` and `node_memory_MemAvailable_bytes` (GB10's memory
  is unified: nvidia-smi reports none for the GPU), and Prometheus' own `up`.

`tests/unit/test_metrics_dashboard.py` checks every expression against those names (the lab's
vLLM simulator's `/metrics`, the node tool's output, the node exporter binary's where it is
installed) and with promtool where it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

UID = "gx10-vllm"
TITLE = "gx10: DeepSeek V4 Flash on GB10"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
NODE = 'node=~"$node"'
# The node exporter metrics the dashboard reads (the meminfo collector, on by default).
NODE_EXPORTER_METRICS = frozenset({"node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"})
# The field notes' thermal marks (FIELD_NOTES section 5): throttling from 82 C; `gx10 bench`
# aborts a sweep above 84 C.
THROTTLE_C = 82
ABORT_C = 84
# Speculative acceptance: the field's 83-87 % at k=5; below 0.94 x 0.83 a warning and below
# 0.70 x 0.83 a broken draft, as gx10 doctor judges it (gx10.doctor.engine_metrics).
ACCEPTANCE_WARNING = 0.78
ACCEPTANCE_ERROR = 0.58


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    min: float | None = 0
    max: float | None = None
    # The color below every threshold, then (value, color) steps upward.
    base: str = "green"
    thresholds: tuple[tuple[float, str], ...] = ()
    width: int = 12


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _rate(metric: str, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"sum{group}(rate({metric}[{RATE}]))"


ROWS: tuple[Row, ...] = (
    Row(
        "Service (the head's /metrics)",
        (
            Panel(
                "Throughput",
                "Tokens per second through the engine: prompt tokens prefilled and tokens "
                "generated (vllm:prompt_tokens_total, vllm:generation_tokens_total).",
                "suffix: tok/s",
                (
                    Query(_rate("vllm:prompt_tokens_total"), "prompt (prefill)"),
                    Query(_rate("vllm:generation_tokens_total"), "generation (decode)"),
                ),
            ),
            Panel(
                "Time to first token",
                "From vLLM's TTFT histogram (vllm:time_to_first_token_seconds). The reference "
                "deployment: about 0.5 s per 1,000 prompt tokens.",
                "s",
                (
                    *(
                        Query(
                            f"histogram_quantile({q}, "
                            f"{_rate('vllm:time_to_first_token_seconds_bucket', 'le')})",
                            f"p{round(q * 100)}",
                        )
                        for q in (0.5, 0.95)
                    ),
                    Query(
                        f"{_rate('vllm:time_to_first_token_seconds_sum')} / "
                        f"{_rate('vllm:time_to_first_token_seconds_count')}",
                        "mean",
                    ),
                ),
            ),
            Panel(
                "Requests running and waiting",
                "The scheduler's queue: requests in the running batch (at most max_num_seqs) "
                "and waiting for a slot.",
                "short",
                (
                    Query("sum(vllm:num_requests_running)", "running"),
                    Query("sum(vllm:num_requests_waiting)", "waiting"),
                ),
            ),
            Panel(
                "KV cache use",
                "Share of the KV cache blocks in use (vllm:kv_cache_usage_perc, 1 = full).",
                "percentunit",
                (Query("max(vllm:kv_cache_usage_perc)", "KV cache"),),
                max=1,
                thresholds=((0.9, "orange"), (0.98, "red")),
            ),
            Panel(
                "Speculative decoding acceptance",
                "Accepted over proposed draft tokens, and per draft position the share of steps "
                "that accepted it (SpecDecodingProm's own queries). The field: 83-87 % at k=5; "
                "far below, the draft is loaded wrong (answers stay right, decode slows).",
                "percentunit",
                (
                    Query(
                        f"{_rate('vllm:spec_decode_num_accepted_tokens_total')} / "
                        f"{_rate('vllm:spec_decode_num_draft_tokens_total')}",
                        "acceptance rate",
                    ),
                    Query(
                        f"{_rate('vllm:spec_decode_num_accepted_tokens_per_pos_total', 'position')}"
                        f" / scalar({_rate('vllm:spec_decode_num_drafts_total')})",
                        "position {{position}}",
                    ),
                ),
                max=1,
                base="red",
                thresholds=((ACCEPTANCE_ERROR, "orange"), (ACCEPTANCE_WARNING, "green")),
            ),
            Panel(
                "Requests finished",
                "Requests ended per second, by reason (stop, length, abort).",
                "reqps",
                (
                    Query(
                        _rate("vllm:request_success_total", "finished_reason"),
                        "{{finished_reason}}",
                    ),
                ),
            ),
        ),
    ),
    Row(
        "Nodes (nvidia-smi through gx10-gpu-metrics, node exporter)",
        (
            Panel(
                "GPU power",
                "Power draw per node (gx10_gpu_power_draw_watts). The reference: idle about "
                "8 W, 21 W at a 2000 MHz cap, 43 W unlocked.",
                "watt",
                (Query(f"gx10_gpu_power_draw_watts{{{NODE}}}", "{{node}}"),),
            ),
            Panel(
                "GPU temperature",
                f"Per node (gx10_gpu_temperature_celsius). Throttling starts at {THROTTLE_C} C; "
                f"gx10 bench aborts a clock sweep above {ABORT_C} C.",
                "celsius",
                (Query(f"gx10_gpu_temperature_celsius{{{NODE}}}", "{{node}}"),),
                min=None,
                thresholds=((THROTTLE_C, "orange"), (ABORT_C, "red")),
            ),
            Panel(
                "SM clock",
                "Per node (gx10_gpu_sm_clock_hertz), with the thermal slowdown flag on the right "
                "axis. Under load a GB10 stops near 2480 MHz whatever the cap above it.",
                "hertz",
                (
                    Query(f"gx10_gpu_sm_clock_hertz{{{NODE}}}", "{{node}}"),
                    Query(
                        f"max by (node) (gx10_gpu_thermal_slowdown{{{NODE}}})",
                        "{{node}} thermal slowdown",
                    ),
                ),
            ),
            Panel(
                "GPU utilization",
                "Share of time a kernel ran (gx10_gpu_utilization_ratio). High utilization at "
                "low power (about 22-26 W) for minutes is the signature of a hung collective.",
                "percentunit",
                (Query(f"gx10_gpu_utilization_ratio{{{NODE}}}", "{{node}}"),),
                max=1,
            ),
            Panel(
                "Unified memory in use",
                "Per node, from node exporter's meminfo: the GB10's memory is shared by CPU and "
                "GPU (nvidia-smi reports none for the GPU).",
                "bytes",
                (
                    Query(
                        f"node_memory_MemTotal_bytes{{{NODE}}} - "
                        f"node_memory_MemAvailable_bytes{{{NODE}}}",
                        "{{node}}",
                    ),
                ),
            ),
            Panel(
                "Generation tokens per watt",
                "Tokens generated per second over the GPUs' power: the reference measured 1.41 "
                "at a 2000 MHz cap and 0.70 unlocked.",
                "suffix: tok/s/W",
                (
                    Query(
                        f"{_rate('vllm:generation_tokens_total')} / sum(gx10_gpu_power_draw_watts)",
                        "cluster",
                    ),
                ),
            ),
            Panel(
                "Targets up",
                "Prometheus' scrape of every target: the head's vLLM and each node's exporter.",
                "short",
                (Query("up", "{{job}} {{node}}"),),
                kind="stat",
                max=1,
                base="red",
                thresholds=((1, "green"),),
                width=24,
            ),
        ),
    ),
)


def panels() -> Iterator[Panel]:
    for row in ROWS:
        yield from row.panels


def queries() -> list[tuple[str, str]]:
    """(panel title, expression) for every query of every panel."""
    return [(panel.title, query.expr) for panel in panels() for query in panel.queries]


def _thresholds(panel: Panel) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": panel.base, "value": None}]
    steps += [{"color": color, "value": value} for value, color in panel.thresholds]
    return {"mode": "absolute", "steps": steps}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": _thresholds(panel)}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    overrides: list[dict[str, Any]] = []
    if any("thermal slowdown" in q.legend for q in panel.queries):
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": ".*thermal slowdown"},
                "properties": [
                    {"id": "unit", "value": "bool_on_off"},
                    {"id": "custom.axisPlacement", "value": "right"},
                    {"id": "max", "value": 1},
                ],
            }
        )
    options: dict[str, Any]
    if panel.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "textMode": "value_and_name",
        }
    else:
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        }
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "targets": [
            {
                "datasource": DATASOURCE,
                "refId": chr(ord("A") + index),
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
            }
            for index, query in enumerate(panel.queries)
        ],
    }


def _layout(rows: Sequence[Row]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for row in rows:
        out.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id, y, x = panel_id + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            out.append(_panel_json(panel, panel_id, x, y))
            panel_id, x = panel_id + 1, x + panel.width
        y += 8
    return out


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (import it, or provision it from a file)."""
    node_query = 'label_values(up{job="node"}, node)'
    return {
        "uid": UID,
        "title": TITLE,
        "description": (
            "DeepSeek V4 Flash on two GB10 nodes (vLLM, tensor parallel 2): the head's vLLM "
            "metrics and each node's GPU telemetry, as scraped with the Prometheus config of "
            "`gx10 metrics config`."
        ),
        "tags": ["gx10", "vllm", "gb10"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "hide": 0,
                    "current": {},
                    "options": [],
                    "refresh": 1,
                },
                {
                    "name": "node",
                    "label": "Node",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": node_query,
                    "query": {"query": node_query, "refId": "node"},
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {},
                    "options": [],
                    "refresh": 2,
                    "sort": 1,
                    "hide": 0,
                },
            ]
        },
        "panels": _layout(ROWS),
    }
