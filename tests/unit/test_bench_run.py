"""gx10 bench against a simulator pair on loopback: exact unique prompts, results and resume, the
lock, cache-hit flags, a server error mid-case, validation against the server, and the report.

The pair runs the reference perf model at GX10_SIM_TIME_SCALE=0.02 (50x faster than real time).
The bench knows nothing of it: its figures are wall-clock (a simulated 0.3 s TTFT reads 0.006 s),
so the tests here check how they are derived (the order of a request's times, the spans and sums),
not how long anything took on this machine; their accuracy against the model is
bench/bench_accuracy.py's figure.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_helpers import MAX_MODEL_LEN, MAX_NUM_SEQS, SERVED, sim_pair
from rich.console import Console

from gx10.bench.client import BenchError, Endpoint, PaddingFailed, PromptBuilder
from gx10.bench.matrix import MatrixError, build_config
from gx10.bench.report import TITLES, build_report
from gx10.bench.results import RunOutcome
from gx10.bench.runner import LockHeldError, run_bench, run_lock
from gx10.cli import main

SCALE = 0.02  # GX10_SIM_TIME_SCALE: wall seconds = simulated seconds x SCALE
QUICK = {"max_tokens": 8, "request_timeout_s": 30.0}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_pair(tmp_path_factory.mktemp("sim"), SCALE) as head:
        yield head


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bench.lock"
    monkeypatch.setenv("GX10_BENCH_LOCK", str(path))
    return path


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def bench(url: str, out: Path, lock: Path, **flags: Any) -> RunOutcome:
    transport = flags.pop("_transport", None)
    config = build_config(None, {**QUICK, **flags})
    return run_bench(
        config,
        Endpoint.parse(url),
        out,
        lock_path=lock,
        console=quiet(),
        command=["gx10", "bench", "(test)"],
        transport=transport,
    )


def tokenize_count(url: str, messages: list[dict[str, str]]) -> int:
    body = {"model": SERVED, "messages": messages, "chat_template_kwargs": {"thinking": True}}
    return int(httpx.post(f"{url}/tokenize", json=body, timeout=10).json()["count"])


def test_prompts_are_unique_and_exactly_padded(url: str) -> None:
    async def build(targets: list[int]) -> list[tuple[list[dict[str, str]], str]]:
        async with httpx.AsyncClient(timeout=10) as client:
            builder = PromptBuilder(client, Endpoint.parse(url), SERVED, {"thinking": True})
            return [await builder.build(t) for t in targets]

    targets = [64, 257, 1000, 1000, 4096]
    built = asyncio.run(build(targets))
    for target, (messages, _nonce) in zip(targets, built, strict=True):
        assert tokenize_count(url, messages) == target
    nonces = [nonce for _, nonce in built]
    assert len(set(nonces)) == len(nonces)
    assert all(messages[0]["content"].count(nonce) == 1 for messages, nonce in built)


def test_run_writes_results_and_resumes(url: str, tmp_path: Path, lock: Path) -> None:
    out = tmp_path / "out"
    first = bench(url, out, lock, prompt_lengths="256,512", concurrency="1,2")
    assert (first.ran, first.skipped, first.failed) == (4, 0, [])
    document = json.loads((out / "results.json").read_text())
    case = document["cases"]["p512-c2-unlocked"]
    assert case["status"] == "ok"
    assert case["requests_ok"] == 2
    # Wall-clock figures: a case's requests ran inside the span the runner recorded around it
    # (their prompts prepared first), so its wall_s is shorter (in simulated seconds: 50x longer).
    for c in first.cases:
        assert 0 < c["wall_s"] < c["ended_wall"] - c["started_wall"], c["id"]
    assert "time_scale" not in document["server"]
    assert not [c["id"] for c in first.cases if "time_scale" in c]
    assert document["server"]["max_num_seqs"] == MAX_NUM_SEQS
    assert [r["prompt_tokens"] for r in case["request_results"]] == [512, 512]  # server's usage
    assert case["server"]["delta"]["vllm:generation_tokens_total"] == case["completion_tokens"]
    # TTFT is each request's own first token less its send, in the order its stream saw them;
    # how close the figures come to the simulator's model is bench/bench_accuracy.py's (within
    # 3%), not a timed assertion here.
    rows = case["request_results"]
    for r in rows:
        assert 0 <= r["sent"] < r["first_token"] <= r["last_token"] <= r["done"], r
        assert r["ttft_s"] == pytest.approx(r["first_token"] - r["sent"])
    assert case["ttft_s"]["p50"] == pytest.approx(statistics.median(r["ttft_s"] for r in rows))
    assert (out / "results.csv").read_text().count("\n") == 5
    assert (out / "requests.csv").read_text().count("\n") == 1 + 1 + 1 + 2 + 2
    second = bench(url, out, lock, prompt_lengths="256,512,1024", concurrency="1,2")
    assert (second.ran, second.skipped) == (2, 4)
    document = json.loads((out / "results.json").read_text())
    assert len(document["cases"]) == 6
    assert len(document["commands"]) == 2
    with pytest.raises(Exception, match="holds a run with other settings"):
        bench(url, out, lock, prompt_lengths="256", max_tokens=9)


def test_second_run_is_refused_naming_the_holder(url: str, tmp_path: Path, lock: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import sys, time, pathlib\n"
        "from gx10.bench.runner import run_lock\n"
        f"with run_lock(pathlib.Path({str(lock)!r}), pathlib.Path('elsewhere'), 'holder-cmd'):\n"
        f"    pathlib.Path({str(ready)!r}).write_text('x')\n"
        "    time.sleep(30)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 15
        while not ready.exists() and time.monotonic() < deadline and holder.poll() is None:
            time.sleep(0.05)
        assert ready.exists()
        with pytest.raises(LockHeldError) as error:
            bench(url, tmp_path / "out", lock, prompt_lengths="256")
        assert f"pid {holder.pid}" in str(error.value)
        assert "command: holder-cmd" in str(error.value)
        assert not (tmp_path / "out" / "results.json").exists()
    finally:
        holder.kill()  # this PID only
        holder.wait(timeout=5)
    # Released by the holder's death: the next run goes ahead.
    assert bench(url, tmp_path / "out", lock, prompt_lengths="256").ran == 1
    with run_lock(lock, tmp_path, "again"):
        pass


def test_shared_prompts_are_flagged_as_cache_hits(url: str, tmp_path: Path, lock: Path) -> None:
    lengths = "512,1024,2048"
    clean = bench(url, tmp_path / "unique", lock, prompt_lengths=lengths)
    assert [c["flags"] for c in clean.cases] == [[], [], []]
    bench(url, tmp_path / "shared1", lock, prompt_lengths=lengths, unique_prompts=False)
    again = bench(url, tmp_path / "shared2", lock, prompt_lengths=lengths, unique_prompts=False)
    assert all(c["flags"] for c in again.cases), [c["flags"] for c in again.cases]
    # The server's prefix-cache counter decides, not the prefill figure: at 50x real time the
    # reference prefill (about 1,700 simulated tok/s) reads some 85,000 wall tok/s, far above the
    # ceiling, and a loaded machine skews it besides.
    for runs in (clean, again):
        assert [c["cache_hit_source"] for c in runs.cases] == ["server"] * 3
    for case in again.cases:
        hits = case["server"]["delta"]["vllm:prefix_cache_hits_total"]
        assert hits >= 0.9 * case["prompt_tokens"], case["flags"]
        assert case["flags"] == [
            f"probable cache hit: the server counted {hits:,.0f} prefix-cache hit tokens of "
            f"{case['prompt_tokens_sent']:,} prompt tokens"
        ]
    summary = build_report(tmp_path / "shared2").with_name("summary.md").read_text()
    assert "cache hit?" in summary


class FailSecondChat(httpx.AsyncBaseTransport):
    """Forwards to the server, but the second chat completion gets an HTTP 500."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.chats = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            self.chats += 1
            if self.chats == 2:
                body = {"error": {"message": "injected fault", "code": 500}}
                return httpx.Response(500, json=body)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_server_error_mid_case_is_recorded_and_the_run_goes_on(
    url: str, tmp_path: Path, lock: Path
) -> None:
    out = tmp_path / "out"
    outcome = bench(
        url, out, lock, prompt_lengths="256", concurrency="2,3", _transport=FailSecondChat()
    )
    first, second = outcome.cases
    assert first["status"] == "failed"
    assert first["requests_ok"] == 1
    assert any("HTTP 500: injected fault" in e for e in first["errors"])
    assert second["status"] == "ok"
    assert second["requests_ok"] == 3
    # The failed case runs again on the next run; the finished one is kept.
    rerun = bench(url, out, lock, prompt_lengths="256", concurrency="2,3")
    assert (rerun.ran, rerun.skipped, rerun.failed) == (1, 1, [])


def test_a_case_with_one_of_four_failed_is_figured_from_the_other_three(
    url: str, tmp_path: Path, lock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 item 2: the fourth prompt cannot be prepared, so that request is never sent."""
    real_build = PromptBuilder.build
    builds = 0

    async def fourth_fails(self: PromptBuilder, target: int) -> Any:
        nonlocal builds
        builds += 1
        if builds == 4:
            raise PaddingFailed(f"injected: no prompt of {target} tokens")
        return await real_build(self, target)

    monkeypatch.setattr(PromptBuilder, "build", fourth_fails)
    out = tmp_path / "out"
    outcome = bench(url, out, lock, prompt_lengths="256", concurrency="4", max_tokens=32)
    (case,) = outcome.cases
    assert case["status"] == "failed"
    assert (case["requests_ok"], case["requests_failed"]) == (3, 1)
    assert case["completion_tokens"] == 96  # 3 x 32, as the case
    done = [r for r in case["request_results"] if r["ok"]]
    wall = max(r["done"] for r in done) - min(r["sent"] for r in done)
    assert case["wall_s"] == pytest.approx(wall)
    assert case["aggregate_tps"] == pytest.approx(96 / wall)
    rows = list(csv.DictReader(io.StringIO((out / "requests.csv").read_text())))
    failed = [r for r in rows if r["ok"] != "True"]
    assert len(failed) == 1
    assert failed[0]["sent"] == failed[0]["done"] == failed[0]["e2e_s"] == ""
    assert all(float(r["sent"]) >= 0 for r in rows if r["ok"] == "True")
    cases = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert cases[0]["requests_failed"] == "1"


def test_matrix_is_checked_against_the_server(url: str, tmp_path: Path, lock: Path) -> None:
    with pytest.raises(MatrixError) as error:
        bench(url, tmp_path / "a", lock, prompt_lengths=str(MAX_MODEL_LEN))
    assert f"exceed the model's max_model_len {MAX_MODEL_LEN} (from /v1/models)" in str(error.value)
    with pytest.raises(MatrixError) as error:
        bench(url, tmp_path / "b", lock, prompt_lengths="256", concurrency="5")
    assert f"above max_num_seqs {MAX_NUM_SEQS} (from /metrics)" in str(error.value)
    queued = bench(
        url, tmp_path / "c", lock, prompt_lengths="256", concurrency="5", allow_queueing=True
    )
    assert queued.failed == []
    with pytest.raises(BenchError, match=r"cannot reach http://127\.0\.0\.1:9/v1/models"):
        bench("http://127.0.0.1:9", tmp_path / "d", lock, prompt_lengths="256")
    with pytest.raises(MatrixError) as error:
        bench(url, tmp_path / "e", lock, prompt_lengths="256", clock_caps="2000,unlocked")
    assert "clock caps ['2000'] need an inventory (gx10 bench -i INV)" in str(error.value)
    assert not (tmp_path / "e").exists()
    only_unlocked = bench(url, tmp_path / "f", lock, prompt_lengths="256", clock_caps="Unlocked")
    assert [c["id"] for c in only_unlocked.cases] == ["p256-c1-unlocked"]


def test_cli_run_and_report(
    url: str, tmp_path: Path, lock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["bench", "--endpoint", f"{url}/v1", "--out", str(out), "--json"]
    argv += ["--prompt-lengths", "256,1024", "--concurrency", "1,2", "--max-tokens", "8"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cases"] == 4
    assert document["failed"] == []
    html = (out / "report.html").read_text()
    for key in ("decode", "ttft", "concurrency", "clock", "thermal"):
        assert TITLES[key] in html
    assert html.count("<svg aria-label=") == 3
    assert "Not measured: needs node telemetry" in html
    (out / "report.html").unlink()
    assert main(["bench", "--report", str(out)]) == 0
    assert "TTFT vs prompt length" in (out / "report.html").read_text()
    assert "| 1,024 |" in (out / "summary.md").read_text()
    assert main(["bench", "--endpoint", url, "--out", str(out), "--concurrency", "0"]) == 1
    assert "concurrency levels must be positive" in capsys.readouterr().err
    # No simulator knob on the product's command line (issue 12): figures are wall-clock.
    with pytest.raises(SystemExit):
        main(["bench", "--endpoint", url, "--out", str(out), "--time-scale", "0.02"])
    assert "unrecognized arguments: --time-scale 0.02" in capsys.readouterr().err
