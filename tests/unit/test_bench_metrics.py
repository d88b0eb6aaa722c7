"""gx10.bench metrics: figures from known timestamps, SSE parsing, percentiles, cache-hit flags."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gx10.bench.client import Endpoint, RequestResult, parse_metrics, stream_chat
from gx10.bench.metrics import case_figures, flag_cache_hits, percentile, request_figures


def _result(index: int, sent: float, first: float, last: float, done: float, **kw: Any) -> Any:
    return RequestResult(
        index, 1000, ok=True, sent=sent, first_token=first, last_token=last, done=done, **kw
    )


def test_figures_from_known_timestamps() -> None:
    a = _result(0, 100.0, 100.5, 102.5, 102.6, prompt_tokens=1000, completion_tokens=101)
    b = _result(1, 100.0, 101.0, 102.0, 103.0, prompt_tokens=1000, completion_tokens=51)
    rows = [request_figures(r, 100.0) for r in (a, b)]
    assert rows[0]["ttft_s"] == pytest.approx(0.5)
    assert rows[0]["prefill_tps"] == pytest.approx(2000.0)
    assert rows[0]["decode_tps"] == pytest.approx(50.0)  # (101 - 1) tokens over 2 s
    assert rows[0]["e2e_s"] == pytest.approx(2.6)
    assert rows[1]["decode_tps"] == pytest.approx(50.0)
    case = case_figures(rows)
    assert case["wall_s"] == pytest.approx(3.0)
    assert case["aggregate_tps"] == pytest.approx(152 / 3.0)
    assert case["ttft_s"]["p50"] == pytest.approx(0.75)
    assert case["ttft_s"]["mean"] == pytest.approx(0.75)
    # The record keeps the wall-clock timestamps, as seconds since the case started.
    times = [rows[1][k] for k in ("sent", "first_token", "last_token", "done")]
    assert times == pytest.approx([0.0, 1.0, 2.0, 3.0])


def test_failed_requests_do_not_count_in_rates() -> None:
    ok = _result(0, 0.0, 1.0, 2.0, 2.0, prompt_tokens=10, completion_tokens=11)
    bad = RequestResult(1, 1000, ok=False, error="HTTP 500", sent=0.0, done=4.0)
    case = case_figures([request_figures(r, 0.0) for r in (ok, bad)])
    assert case["requests_ok"] == 1
    assert case["requests_failed"] == 1
    assert case["completion_tokens"] == 11
    assert case["wall_s"] == 2.0  # the completed request's span: a failure adds no time


def test_a_partly_failed_case_is_figured_from_its_completed_requests() -> None:
    """Issue 16 item 2: 1 of 4 failed (its prompt never prepared, so never sent)."""
    origin = 5753.04  # perf_counter seconds at the case start, as on a real run
    done = [
        _result(i, origin + 0.1 * i, origin + 1.0, origin + 3.0, origin + 3.1 + i * 0.1,
                prompt_tokens=512, completion_tokens=32)
        for i in range(3)
    ]  # fmt: skip
    never_sent = RequestResult(3, 512, error="preparing the prompt: could not pad")
    rows = [request_figures(r, origin) for r in (*done, never_sent)]
    failed = rows[3]
    assert (failed["sent"], failed["done"], failed["e2e_s"]) == (None, None, None)
    assert all(r["sent"] is not None and r["sent"] >= 0 for r in rows[:3])
    case = case_figures(rows)
    assert (case["requests"], case["requests_ok"], case["requests_failed"]) == (4, 3, 1)
    assert case["completion_tokens"] == 96
    assert case["wall_s"] == pytest.approx(3.3)  # first sent (0.0) to last done (3.3)
    assert case["aggregate_tps"] == pytest.approx(96 / 3.3)


def test_percentiles_interpolate() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 90) == pytest.approx(90.1)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0


def _case(prompt: int, prefill: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"p{prompt}",
        "prompt_tokens": prompt,
        "concurrency": 1,
        "clock_cap": "unlocked",
        "prefill_tps": {"p50": prefill, "max": prefill},
        **extra,
    }


def test_cache_hit_flags() -> None:
    # The reference notes' case: 2,048 tokens at 9,480 tok/s, five times its neighbours.
    cases = [_case(1024, 1306), _case(2048, 9480), _case(4096, 1933), _case(8192, 1946)]
    flag_cache_hits(cases, factor=3.0, ceiling=20000)
    assert [bool(c["flags"]) for c in cases] == [False, True, False, False]
    assert "5.9x its neighbours' 1,620" in cases[1]["flags"][0]
    # Above one stream prompt / TTFT holds the queue: neighbours are not compared.
    queued = [_case(256, 53, concurrency=12), _case(2048, 204, concurrency=12)]
    flag_cache_hits(queued, factor=3.0, ceiling=20000)
    assert [c["flags"] for c in queued] == [[], []]
    cases = [_case(256, 7000), _case(512, 7100)]
    flag_cache_hits(cases, factor=3.0, ceiling=6000)
    assert all("above the ceiling 6,000" in c["flags"][0] for c in cases)
    counted = _case(
        4096,
        1900,
        prompt_tokens_sent=4096,
        server={"delta": {"vllm:prefix_cache_hits_total": 1024.0}},
    )
    flag_cache_hits([counted], factor=3.0, ceiling=6000)
    assert counted["flags"] == [
        "probable cache hit: the server counted 1,024 prefix-cache hit tokens of 4,096 prompt "
        "tokens"
    ]
    assert counted["cache_hit_source"] == "server"


def test_the_servers_cache_counter_decides_over_the_prefill_ceiling() -> None:
    """Issue 16 item 3: prefill above the ceiling, but the server counted no hit: no flag."""
    zero = {"delta": {"vllm:prefix_cache_hits_total": 0.0}}
    cases = [
        _case(256, 7000, prompt_tokens_sent=256, server=zero),
        _case(512, 30000, prompt_tokens_sent=512, server=zero),  # also 4x its neighbours
        _case(1024, 7100, prompt_tokens_sent=1024, server=zero),
    ]
    flag_cache_hits(cases, factor=3.0, ceiling=6000)
    assert [c["flags"] for c in cases] == [[], [], []]
    assert [c["cache_hit_source"] for c in cases] == ["server"] * 3
    # Without the counter (no /metrics, or a server without it) the ceiling is the fallback.
    fallback = [_case(256, 7000, prompt_tokens_sent=256, server={"delta": {}}), _case(512, 100)]
    flag_cache_hits(fallback, factor=3.0, ceiling=6000)
    assert [c["cache_hit_source"] for c in fallback] == ["ceiling", "ceiling"]
    assert "above the ceiling 6,000" in fallback[0]["flags"][0]
    assert fallback[1]["flags"] == []


def _sse(*events: Any) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def _run_stream(status: int, body: bytes) -> RequestResult:
    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        assert sent["stream_options"] == {"include_usage": True}
        return httpx.Response(status, content=body)

    async def go() -> RequestResult:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            body = {"model": "m", "messages": [], "stream_options": {"include_usage": True}}
            return await stream_chat(
                client, Endpoint.parse("http://x:1/v1"), body, RequestResult(0, 8)
            )

    return asyncio.run(go())


def test_stream_parsing_uses_usage_not_chunks() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_content": "ab"}}]}
    result = _run_stream(
        200,
        _sse(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            chunk,
            chunk,
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 12}},
            "[DONE]",
        ),
    )
    assert result.ok, result.error
    assert result.chunks == 2
    assert result.completion_tokens == 12  # speculative steps: more tokens than chunks
    assert result.finish_reason == "length"
    assert result.first_token is not None
    assert result.last_token is not None


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, b'{"error": {"message": "EngineCore died"}}', "HTTP 500: EngineCore died"),
        (200, _sse({"error": {"message": "boom", "code": 500}}, "[DONE]"), "error event: boom"),
        (
            200,
            _sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}),
            "the stream ended without [DONE]",
        ),
    ],
)
def test_stream_errors_are_recorded(status: int, body: bytes, message: str) -> None:
    result = _run_stream(status, body)
    assert not result.ok
    assert result.error == message


def test_metrics_parsing() -> None:
    text = (
        "# HELP x\n"
        'vllm:generation_tokens_total{engine="0",model_name="m"} 10.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 5.0\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="1024"} 1\n'
    )
    values, info = parse_metrics(text)
    assert values["vllm:generation_tokens_total"] == 15.0
    assert info["vllm:cache_config_info"] == {"block_size": "16", "num_gpu_blocks": "1024"}
