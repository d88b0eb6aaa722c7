"""The Prometheus /metrics text: vLLM's counters, gauges and histograms.

As prometheus_client's text exposition (version 0.0.4) writes vLLM's: a counter's family and
samples carry the name with ``_total``, and every counter and histogram is followed by its
``_created`` gauge family (the time its series started). The speculative-decoding counters are
vLLM V1's (vllm/v1/spec_decode/metrics.py, SpecDecodingProm), present only with a speculative
config, as in vLLM. vllm:kv_cache_usage_perc is the share of the KV pool's blocks the running
requests hold (memory.py sizes the pool), and vllm:cache_config_info carries CacheConfig's fields
as labels (with num_gpu_blocks), as vLLM's PrometheusStatLogger.log_metrics_info exports them.
"""

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


def _created(
    lines: list[str], name: str, help_text: str, label_sets: Sequence[str], started: float
) -> None:
    """prometheus_client's `<name>_created` gauge family after a counter or histogram."""
    _metric(lines, f"{name}_created", "gauge", help_text, [(ls, started) for ls in label_sets])


def _counter(
    lines: list[str],
    name: str,
    help_text: str,
    samples: Sequence[tuple[str, float]],
    started: float,
) -> None:
    """A counter `name` (without _total) as prometheus_client exposes it, then its _created."""
    _metric(lines, f"{name}_total", "counter", help_text, samples)
    _created(lines, name, help_text, [labels for labels, _value in samples], started)


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
    started = engine.created
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
        if engine.cache_config:
            info = ",".join(f'{key}="{value}"' for key, value in engine.cache_config.items())
            _metric(
                lines,
                "vllm:cache_config_info",
                "gauge",
                "Information of the LLMEngine CacheConfig",
                [(info, 1)],
            )
        _metric(
            lines,
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [(labels, engine.kv_usage())],
        )
        _counter(
            lines,
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(labels, c.prefix_queries)],
            started,
        )
        _counter(
            lines,
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(labels, c.prefix_hits)],
            started,
        )
        _counter(
            lines,
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            [(labels, c.prompt_tokens)],
            started,
        )
        _counter(
            lines,
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            [(labels, c.generation_tokens)],
            started,
        )
        _counter(
            lines,
            "vllm:request_success",
            "Count of successfully processed requests.",
            [
                (f'{labels},finished_reason="{r}"', c.success.get(r, 0))
                for r in ("stop", "length", "abort")
            ],
            started,
        )
        if engine.spec_tokens > 0:
            # SpecDecodingProm's four counters, with its help texts; k per-position series.
            _counter(
                lines,
                "vllm:spec_decode_num_drafts",
                "Number of spec decoding drafts.",
                [(labels, c.spec_drafts)],
                started,
            )
            _counter(
                lines,
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                [(labels, c.spec_draft_tokens)],
                started,
            )
            _counter(
                lines,
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                [(labels, c.spec_accepted)],
                started,
            )
            _counter(
                lines,
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [(f'{labels},position="{i}"', n) for i, n in enumerate(c.spec_accepted_per_pos)],
                started,
            )
        _histogram(
            lines,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            c.ttft,
        )
        _created(
            lines,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            [labels],
            started,
        )
        _histogram(
            lines,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            c.e2e,
        )
        _created(
            lines,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            [labels],
            started,
        )
    return "\n".join(lines) + "\n"
