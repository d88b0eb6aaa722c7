"""The Prometheus /metrics text: vLLM's counters, gauges and histograms."""

from __future__ import annotations

from collections.abc import Sequence

from .deepseek_v4_encoding import LOADED_SHA256
from .engine import Engine, Histogram


def _metric(
    lines: list[str], name: str, kind: str, help_text: str, samples: Sequence[tuple[str, float]]
) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines += [f"{name}{{{labels}}} {float(value)}" for labels, value in samples]


def _histogram(lines: list[str], name: str, help_text: str, labels: str, hist: Histogram) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    counts = hist.counts or [0] * len(hist.buckets)
    for bound, count in zip(hist.buckets, counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(count)}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.count)}')
    lines.append(f"{name}_count{{{labels}}} {float(hist.count)}")
    lines.append(f"{name}_sum{{{labels}}} {hist.total}")


def render_metrics(engine: Engine, model_name: str) -> str:
    labels = f'engine="0",model_name="{model_name}"'
    c = engine.counters
    lines: list[str] = []
    with engine.cond:
        _metric(
            lines,
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [(labels, engine.running)],
        )
        _metric(
            lines,
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [(labels, engine.waiting)],
        )
        usage_perc = min(engine.running / max(engine.max_num_seqs, 1), 1.0) * 0.1
        _metric(
            lines,
            "gx10_sim_info",
            "gauge",
            "The simulator's settings (not a vLLM metric): rates are in simulated seconds.",
            [
                (
                    f'max_num_seqs="{engine.max_num_seqs}",block_size="{engine.block_size}",'
                    f'time_scale="{engine.env.time_scale}",perf_model="{engine.env.perf_model}",'
                    f'encoding_sha256="{LOADED_SHA256}"',
                    1,
                )
            ],
        )
        _metric(
            lines,
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [(labels, usage_perc)],
        )
        _metric(
            lines,
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(labels, c.prefix_queries)],
        )
        _metric(
            lines,
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(labels, c.prefix_hits)],
        )
        _metric(
            lines,
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [(labels, c.prompt_tokens)],
        )
        _metric(
            lines,
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [(labels, c.generation_tokens)],
        )
        _metric(
            lines,
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                (f'{labels},finished_reason="{r}"', c.success.get(r, 0))
                for r in ("stop", "length", "abort")
            ],
        )
        if engine.spec_tokens > 0:
            _metric(
                lines,
                "vllm:spec_decode_num_drafts_total",
                "counter",
                "Number of spec decoding drafts.",
                [(labels, c.spec_drafts)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                [(labels, c.spec_draft_tokens)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                [(labels, c.spec_accepted)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "counter",
                "Accepted tokens per draft position.",
                [(f'{labels},position="{i}"', n) for i, n in enumerate(c.spec_accepted_per_pos)],
            )
        _histogram(
            lines,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            c.ttft,
        )
        _histogram(
            lines,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            c.e2e,
        )
    return "\n".join(lines) + "\n"
