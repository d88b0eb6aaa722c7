"""Run a bench matrix against an OpenAI-compatible vLLM endpoint.

One runner at a time on the controller (a file lock; a second run is refused with the holder's
pid, start time and command). Results are written after every case (OUT/results.json, per-case
OUT/results.csv, per-request OUT/requests.csv); rerunning with the same OUT skips the cases that
finished and retries the failed ones. A request that fails is recorded, its case marked failed,
and the run goes on.

Time scale: the lab simulator can run its clock fast (GX10_SIM_TIME_SCALE=S: a wall second is 1/S
simulated seconds) and exports S in /metrics; durations are divided by S so that every figure
reads in simulated time. Client overheads grow by 1/S too, so accuracy needs S = 1; fast scales
are for tests. Real servers export no scale: S = 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock
import httpx
from rich.console import Console
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
    PromptBuilder,
    RequestFailed,
    RequestResult,
    ServerInfo,
    request_body,
    sample_counters,
    server_info,
    stream_chat,
)
from gx10.bench.matrix import UNLOCKED, Case, Limits, MatrixError, RunConfig, server_problems
from gx10.bench.metrics import case_figures, counter_delta, flag_cache_hits, request_figures
from gx10.errors import Gx10Error

SCHEMA = 1
LOCK_ENV = "GX10_BENCH_LOCK"
CASE_COLUMNS = (
    "id",
    "prompt_tokens",
    "concurrency",
    "clock_cap",
    "status",
    "requests",
    "requests_ok",
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
    "flags",
    "errors",
)
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


class LockHeldError(Gx10Error):
    """Another bench run holds the controller lock."""


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
                    "started": _now(),
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


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class RunOutcome:
    out: Path
    cases: list[dict[str, Any]] = field(default_factory=list)
    ran: int = 0
    skipped: int = 0
    scale: float = 1.0
    notes: list[str] = field(default_factory=list)

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
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CASE_COLUMNS)
        for case in cases:
            writer.writerow([_csv_value(case, column) for column in CASE_COLUMNS])
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
    key, _, sub = column.partition(".")
    value = case.get(key)
    if sub:
        value = (value or {}).get(sub)
    return _fmt(value)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# --------------------------------------------------------------------------------------------


async def run_case(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: ServerInfo,
    config: RunConfig,
    case: Case,
    *,
    scale: float,
) -> dict[str, Any]:
    """Prepare the case's prompts, send them together, and return the case record."""
    record: dict[str, Any] = {
        "id": case.id,
        "prompt_tokens": case.prompt_tokens,
        "concurrency": case.concurrency,
        "clock_cap": case.clock_cap,
        "started_at": _now(),
        "time_scale": scale,
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
        except RequestFailed as exc:
            result.error = f"preparing the prompt: {exc}"
            bodies.append(None)
    record["tokenize_calls"] = builder.calls
    before = await sample_counters(client, endpoint)
    origin = time.perf_counter()

    async def send(result: RequestResult, body: dict[str, Any] | None) -> RequestResult:
        if body is None:
            return result
        return await stream_chat(client, endpoint, body, result)

    await asyncio.gather(*(send(r, b) for r, b in zip(results, bodies, strict=True)))
    after = await sample_counters(client, endpoint)
    rows = [request_figures(r, origin, scale) for r in results]
    record.update(case_figures(rows))
    record["prompt_tokens_sent"] = sum(case.prompt_tokens for r in results if r.sent)
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


def _unlocked_only(cases: list[Case], outcome: RunOutcome, console: Console) -> list[Case]:
    skipped_clocks = sorted({c.clock_cap for c in cases if c.clock_cap != UNLOCKED})
    if skipped_clocks:
        note = (
            f"clock caps {skipped_clocks} need an inventory (-i) to set and restore the nodes' "
            "clocks: not run; only the 'unlocked' cases run against a bare endpoint"
        )
        outcome.notes.append(note)
        console.print(f"[yellow]note:[/] {note}")
        cases = [c for c in cases if c.clock_cap == UNLOCKED]
    if not cases:
        raise MatrixError("no case left to run (every case needs a clock cap, which needs -i)")
    return cases


def _check_server(
    config: RunConfig, cases: Sequence[Case], info: ServerInfo, outcome: RunOutcome
) -> float:
    """Validate the matrix against the server's limits; returns the time scale."""
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
    scale = config.time_scale or info.time_scale or 1.0
    if scale != 1.0:
        outcome.notes.append(
            f"time scale {scale:g} (lab simulator): figures are in simulated seconds; client "
            f"overheads count {1 / scale:g}x, so use scale 1 for accuracy"
        )
    return scale


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
            "time_scale": outcome.scale,
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


async def _run(
    config: RunConfig,
    endpoint: Endpoint,
    out: Path,
    *,
    command: str,
    console: Console,
    on_case: ProgressHook | None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> RunOutcome:
    outcome = RunOutcome(out)
    cases = _unlocked_only(config.cases(), outcome, console)
    widest = max(c.concurrency for c in cases)
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=widest + 4, max_keepalive_connections=widest + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport) as client:
        info = await server_info(client, endpoint)
        outcome.scale = _check_server(config, cases, info, outcome)
        document = _open_document(config, endpoint, info, out, outcome)
        document["commands"].append({"started": _now(), "command": command})
        todo = [c for c in cases if document["cases"].get(c.id, {}).get("status") != "ok"]
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
                try:
                    record = await run_case(
                        client, endpoint, info, config, case, scale=outcome.scale
                    )
                except httpx.HTTPError as exc:
                    record = _failed_case(case, f"{type(exc).__name__}: {exc}")
                document["cases"][case.id] = record
                flag_cache_hits(
                    document["cases"].values(), config.cache_hit_factor, config.prefill_ceiling_tps
                )
                write_results(out, document)
                outcome.ran += 1
                progress.advance(task)
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
    figures = (
        f" TTFT {p50('ttft_s'):.2f} s, prefill {p50('prefill_tps'):,.0f} tok/s, "
        f"decode {p50('decode_tps'):.1f} tok/s/session, "
        f"aggregate {case.get('aggregate_tps') or float('nan'):.1f} tok/s"
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
) -> RunOutcome:
    """Run the matrix under the controller lock; returns the outcome (results are on disk).

    `transport` replaces httpx's network transport (tests inject faults through it)."""
    cmd = shlex.join(command if command is not None else sys.argv)
    err = console or Console(stderr=True, highlight=False)
    with run_lock(lock_path or default_lock_path(), out, cmd):
        return asyncio.run(
            _run(
                config,
                endpoint,
                out,
                command=cmd,
                console=err,
                on_case=on_case,
                transport=transport,
            )
        )
