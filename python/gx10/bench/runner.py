"""Run a bench matrix against an OpenAI-compatible vLLM endpoint.

One runner at a time on the controller (a file lock; a second run is refused with the holder's
pid, start time and command). Results are written after every case (OUT/results.json, per-case
OUT/results.csv, per-request OUT/requests.csv); rerunning with the same OUT skips the cases that
finished and retries the failed ones. A request that fails is recorded, its case marked failed,
and the run goes on.

With an inventory (`gx10 bench -i`), the run also drives the nodes (gx10.bench.clocks): each
node's benchmark lock and clock cap through a `gx10-gpu-clock session`, cool-down and abort
limits, and nvidia-smi telemetry (gx10.bench.telemetry) summarized per case and kept as a timeline
in OUT/telemetry.csv. Whatever ends the run, the nodes' caps are restored and the restore is
recorded in results.json (the last command's `clock`).

Every figure is wall-clock time on the controller (time.perf_counter), whatever the server; the
per-request timeout (`request_timeout_s`, `--timeout`) and the clock-sweep waits are wall seconds
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock
import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from gx10.bench.client import (
    Endpoint,
    PaddingFailed,
    PromptBuilder,
    RequestFailed,
    RequestResult,
    ServerInfo,
    request_body,
    sample_counters,
    server_info,
    stream_chat,
)

# Re-exported (the `as` tells mypy so): the controller's lock and the nodes' raise the same error.
from gx10.bench.clocks import LockHeldError as LockHeldError  # noqa: PLC0414
from gx10.bench.clocks import (
    SweepAborted,
    Terminated,
    terminate_as_exception,
)
from gx10.bench.guard import NodeGuard
from gx10.bench.matrix import (
    Case,
    Limits,
    MatrixError,
    RunConfig,
    inventory_problems,
    server_problems,
)
from gx10.bench.metrics import (
    case_figures,
    counter_delta,
    flag_cache_hits,
    request_figures,
)
from gx10.bench.nodes import Cluster
from gx10.bench.results import SCHEMA, RunOutcome, load_results, now, write_results
from gx10.errors import Gx10Error

LOCK_ENV = "GX10_BENCH_LOCK"


def default_lock_path() -> Path:
    env = os.environ.get(LOCK_ENV)
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gx10" / "bench.lock"


@contextlib.contextmanager
def run_lock(path: Path, out: Path, command: str) -> Iterator[None]:
    """Hold the controller's bench lock; refuse, naming the holder, when another run has it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = path.with_name(path.name + ".holder")
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        try:
            who = json.loads(holder.read_text(encoding="utf-8"))
            desc = (
                f"pid {who.get('pid')}, started {who.get('started')}, "
                f"command: {who.get('command')} (out: {who.get('out')})"
            )
        except (OSError, ValueError):
            desc = "holder unknown"
        raise LockHeldError(
            f"another bench run holds {path}: {desc}; one runner at a time (runs in parallel "
            "disturb each other's figures)"
        ) from None
    try:
        holder.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "started": now(),
                    "command": command,
                    "out": str(out),
                }
            ),
            encoding="utf-8",
        )
        yield
    finally:
        with contextlib.suppress(OSError):
            holder.unlink()
        lock.release()


# --------------------------------------------------------------------------------------------


@dataclass
class LoadWindow:
    """When a case's requests were in flight (time.monotonic()); None until they were sent."""

    start: float | None = None
    end: float | None = None


async def run_case(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: ServerInfo,
    config: RunConfig,
    case: Case,
    *,
    window: LoadWindow | None = None,
) -> dict[str, Any]:
    """Prepare the case's prompts, send them together, and return the case record.

    `window`, when given, is set to the stretch the requests were in flight: the telemetry
    figures cover that, not the prompt preparation (tokenize calls, an idle GPU) before it.
    """
    record: dict[str, Any] = {
        "id": case.id,
        "prompt_tokens": case.prompt_tokens,
        "concurrency": case.concurrency,
        "clock_cap": case.clock_cap,
        "started_at": now(),
        "errors": [],
        "flags": [],
    }
    settings = config.settings()
    builder = PromptBuilder(
        client,
        endpoint,
        info.model,
        {"thinking": config.thinking},
        unique=config.unique_prompts,
    )
    results = [RequestResult(i, case.prompt_tokens) for i in range(case.concurrency)]
    bodies: list[dict[str, Any] | None] = []
    for result in results:
        try:
            messages, result.nonce = await builder.build(case.prompt_tokens)
            bodies.append(request_body(info.model, messages, settings))
        except (RequestFailed, PaddingFailed) as exc:
            result.error = f"preparing the prompt: {exc}"
            bodies.append(None)
    record["tokenize_calls"] = builder.calls
    before = await sample_counters(client, endpoint)
    origin = time.perf_counter()
    if window is not None:
        window.start = time.monotonic()

    async def send(result: RequestResult, body: dict[str, Any] | None) -> RequestResult:
        if body is None:
            return result
        return await stream_chat(client, endpoint, body, result)

    await asyncio.gather(*(send(r, b) for r, b in zip(results, bodies, strict=True)))
    if window is not None:
        window.end = time.monotonic()
    after = await sample_counters(client, endpoint)
    rows = [request_figures(r, origin) for r in results]
    record.update(case_figures(rows))
    record["prompt_tokens_sent"] = sum(case.prompt_tokens for r in results if r.sent is not None)
    record["server"] = {"before": before, "after": after, "delta": counter_delta(before, after)}
    record["request_results"] = rows
    mismatched = [
        r.index for r in results if r.ok and r.prompt_tokens not in (None, case.prompt_tokens)
    ]
    if mismatched:
        record["errors"].append(
            f"requests {mismatched}: the server counted a different prompt length than /tokenize"
        )
    failures = [r for r in results if not r.ok]
    for r in failures:
        record["errors"].append(f"request {r.index}: {r.error}")
    record["status"] = "failed" if failures or mismatched else "ok"
    return record


ProgressHook = Callable[[int, int, dict[str, Any]], None]


def _check_server(
    config: RunConfig, cases: Sequence[Case], info: ServerInfo, outcome: RunOutcome
) -> None:
    """Validate the matrix against the server's limits; notes what could not be checked."""
    source = {"max_model_len": "from /v1/models"}
    if info.max_num_seqs is not None:
        source["max_num_seqs"] = "from /metrics"
    problems = server_problems(config, cases, Limits(info.max_model_len, info.max_num_seqs, source))
    if problems:
        raise MatrixError("invalid bench matrix for this server:\n  - " + "\n  - ".join(problems))
    if (config.max_num_seqs or info.max_num_seqs) is None:
        outcome.notes.append(
            "max_num_seqs unknown (the server does not export it; pass --max-num-seqs): "
            "concurrency not checked against it"
        )


def _open_document(
    config: RunConfig, endpoint: Endpoint, info: ServerInfo, out: Path, outcome: RunOutcome
) -> dict[str, Any]:
    """The results document: the previous one in OUT when its settings match (resume)."""
    previous = load_results(out)
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": "gx10 bench",
        "endpoint": endpoint.root,
        "model": info.model,
        "server": {
            "max_model_len": info.max_model_len,
            "max_num_seqs": config.max_num_seqs or info.max_num_seqs,
            "metrics": info.metrics,
        },
        "settings": config.settings(),
        "config": config.to_dict(),
        "notes": outcome.notes,
        "commands": [],
        "cases": {},
    }
    if previous is not None:
        if previous.get("settings") != config.settings() or previous.get("model") != info.model:
            raise Gx10Error(
                f"{out / 'results.json'} holds a run with other settings "
                f"({previous.get('model')}, {previous.get('settings')}); its cases are not "
                "comparable: use another --out"
            )
        document["cases"] = dict(previous.get("cases", {}))
        document["commands"] = list(previous.get("commands", []))
    return document


def _failed_case(case: Case, error: str) -> dict[str, Any]:
    return {
        "id": case.id,
        "prompt_tokens": case.prompt_tokens,
        "concurrency": case.concurrency,
        "clock_cap": case.clock_cap,
        "status": "failed",
        "errors": [error],
        "flags": [],
        "request_results": [],
    }


def _skipped_case(case: Case, reason: str) -> dict[str, Any]:
    record = _failed_case(case, f"skipped: {reason}")
    record.update(status="skipped", skip_reason=reason, started_at=now())
    return record


async def _measure(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: ServerInfo,
    config: RunConfig,
    case: Case,
    *,
    guard: NodeGuard | None,
) -> dict[str, Any]:
    """One case: with an inventory, its cap and cool-down first and the limits watched."""
    if guard is not None:
        if guard.aborted is not None:
            return _skipped_case(case, guard.aborted)
        try:
            await guard.before_case(case)
        except SweepAborted as exc:
            guard.aborted = str(exc)
            return _skipped_case(case, guard.aborted)
    start, started_wall = time.monotonic(), time.time()
    load = LoadWindow()
    task = asyncio.ensure_future(run_case(client, endpoint, info, config, case, window=load))
    watcher = asyncio.ensure_future(guard.watch(case, task)) if guard is not None else None
    try:
        record = await task
    except asyncio.CancelledError:
        if guard is not None and guard.pending is not None:
            raise guard.pending from None
        if guard is None or guard.aborted is None or not task.cancelled():
            raise
        record = _skipped_case(case, guard.aborted)
    except httpx.HTTPError as exc:
        record = _failed_case(case, f"{type(exc).__name__}: {exc}")
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    end = time.monotonic()
    record["started_wall"], record["ended_wall"] = started_wall, time.time()
    if guard is not None and record["status"] != "skipped":
        # The GPUs' figures while the requests ran; the whole case if none was sent.
        if load.start is not None and load.end is not None:
            start, end = load.start, load.end
        record["telemetry"] = await guard.case_telemetry(start, end, record)
    return record


async def _run(
    config: RunConfig,
    endpoint: Endpoint,
    out: Path,
    *,
    command: str,
    console: Console,
    on_case: ProgressHook | None,
    transport: httpx.AsyncBaseTransport | None = None,
    guard: NodeGuard | None = None,
) -> RunOutcome:
    outcome = RunOutcome(out)
    cases = config.cases()
    widest = max(c.concurrency for c in cases)
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=widest + 4, max_keepalive_connections=widest + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport) as client:
        info = await server_info(client, endpoint)
        _check_server(config, cases, info, outcome)
        document = _open_document(config, endpoint, info, out, outcome)
        todo = [c for c in cases if document["cases"].get(c.id, {}).get("status") != "ok"]
        if guard is not None and todo:
            # The nodes' locks (refused if held) before anything is written. In a thread, so a
            # Ctrl-C is not held up by a slow connection (asyncio.run waits for it to return,
            # then the sessions it opened are closed).
            await asyncio.to_thread(guard.start)
            document.update(guard.describe())
            guard.document = document
        entry = {"started": now(), "command": command}
        document["commands"].append(entry)
        if guard is not None:
            guard.entry = entry
        outcome.skipped = len(cases) - len(todo)
        if outcome.skipped:
            console.print(f"resuming: {outcome.skipped} finished case(s) kept and skipped")
        progress = Progress(
            TextColumn("[bold]case[/]"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        )
        with progress:
            task = progress.add_task("", total=len(cases), completed=outcome.skipped)
            for i, case in enumerate(todo, start=outcome.skipped + 1):
                progress.update(task, description=case.id)
                aborted = guard.aborted if guard is not None else None
                record = await _measure(client, endpoint, info, config, case, guard=guard)
                document["cases"][case.id] = record
                flag_cache_hits(
                    document["cases"].values(), config.cache_hit_factor, config.prefill_ceiling_tps
                )
                write_results(out, document)
                outcome.ran += 1
                progress.advance(task)
                if guard is not None and guard.aborted and not aborted:
                    progress.console.print(
                        f"[red]clock sweep aborted:[/] {escape(guard.aborted)}; the remaining "
                        "cases are recorded as skipped (rerun with the same --out to resume)"
                    )
                if record["status"] != "skipped" or not aborted:
                    progress.console.print(describe_case(i, len(cases), record))
                if on_case is not None:
                    on_case(i, len(cases), record)
    outcome.cases = [document["cases"][c.id] for c in cases]
    return outcome


def describe_case(i: int, total: int, case: Mapping[str, Any]) -> str:
    def p50(key: str) -> float:
        value = (case.get(key) or {}).get("p50")
        return float(value) if value is not None else float("nan")

    head = f"[{i}/{total}] {case['id']}: {case['status']}"
    if case["status"] == "skipped":
        return f"{head} ({case.get('skip_reason')})"
    figures = (
        f" TTFT {p50('ttft_s'):.2f} s, prefill {p50('prefill_tps'):,.0f} tok/s, "
        f"decode {p50('decode_tps'):.1f} tok/s/session, "
        f"aggregate {case.get('aggregate_tps') or float('nan'):.1f} tok/s"
    )
    if case.get("requests_failed"):
        figures += (
            f" (from the {case.get('requests_ok')} completed requests; "
            f"{case['requests_failed']} of {case.get('requests')} failed)"
        )
    extra = "".join(f"\n    ! {f}" for f in case.get("flags", []))
    extra += "".join(f"\n    x {e}" for e in case.get("errors", [])[:3])
    return head + figures + extra


def run_bench(
    config: RunConfig,
    endpoint: Endpoint,
    out: Path,
    *,
    lock_path: Path | None = None,
    console: Console | None = None,
    command: Sequence[str] | None = None,
    on_case: ProgressHook | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    cluster: Cluster | None = None,
    owner: str | None = None,
    telemetry_options: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """Run the matrix under the controller lock; returns the outcome (results are on disk).

    With `cluster` (an inventory), the nodes are locked, capped, watched and restored too (see
    NodeGuard); `owner` is how their locks name this run. `transport` replaces httpx's network
    transport (tests inject faults through it); `telemetry_options` go to TelemetryHub."""
    problems = inventory_problems(config, cluster is not None)
    if problems:
        raise MatrixError("invalid bench matrix:\n  - " + "\n  - ".join(problems))
    cmd = shlex.join(command if command is not None else sys.argv)
    err = console or Console(stderr=True, highlight=False)
    with run_lock(lock_path or default_lock_path(), out, cmd):
        run = functools.partial(
            _run, config, endpoint, out, command=cmd, console=err, on_case=on_case,
            transport=transport,
        )  # fmt: skip
        if cluster is None:
            return asyncio.run(run())
        guard = NodeGuard(
            cluster, config, out, err, owner=owner, telemetry_options=telemetry_options
        )
        with terminate_as_exception():
            try:
                outcome = asyncio.run(run(guard=guard))
            except BaseException:
                guard.finish(None)
                raise
            guard.finish(outcome)
        # A Ctrl-C or SIGTERM that came while the caps were being restored: act on it now.
        if signal.SIGTERM in guard.clocks.deferred_signals:
            raise Terminated("SIGTERM received while restoring the clock caps")
        if signal.SIGINT in guard.clocks.deferred_signals:
            raise KeyboardInterrupt
        return outcome
