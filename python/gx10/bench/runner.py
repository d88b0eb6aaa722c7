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
import functools
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
from gx10.bench.clocks import (
    ClockController,
    SweepAborted,
    Terminated,
    Thresholds,
    default_owner,
    terminate_as_exception,
)

# Re-exported (the `as` tells mypy so): the controller's lock and the nodes' raise the same error.
from gx10.bench.clocks import LockHeldError as LockHeldError  # noqa: PLC0414
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
    case_telemetry,
    counter_delta,
    flag_cache_hits,
    request_figures,
)
from gx10.bench.nodes import Cluster
from gx10.bench.telemetry import TelemetryHub
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
    "requests_failed",
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
    "power_w_total",
    "temperature_c_max",
    "sm_clock_mhz_mean",
    "tps_per_w",
    "decode_tps_per_w",
    "cache_hit_source",
    "flags",
    "errors",
)
# Per node (with an inventory), after CASE_COLUMNS: NODE.power_w.mean and so on.
NODE_COLUMNS = (
    "power_w.mean",
    "power_w.max",
    "temperature_c.mean",
    "temperature_c.max",
    "sm_clock_mhz.mean",
    "samples",
)
TELEMETRY_FILE = "telemetry.csv"
WATCH_INTERVAL_S = 0.5  # how often a running case checks the temperatures
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
    skipped: int = 0  # finished earlier and kept (resume)
    scale: float = 1.0
    notes: list[str] = field(default_factory=list)
    aborted: str | None = None  # why the rest of the sweep was skipped
    restore: dict[str, dict[str, Any]] = field(default_factory=dict)  # per node, with -i

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
    nodes = [n["name"] for n in document.get("nodes") or []]
    node_columns = [f"{node}.{column}" for node in nodes for column in NODE_COLUMNS]
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CASE_COLUMNS, *node_columns])
        for case in cases:
            row = [_csv_value(case, column) for column in CASE_COLUMNS]
            telemetry = case.get("telemetry") or {}
            for node in nodes:
                figures = (telemetry.get("nodes") or {}).get(node) or {}
                for column in NODE_COLUMNS:
                    key, _, stat = column.partition(".")
                    value = figures.get(key)
                    row.append(_fmt(value.get(stat) if stat and value else value))
            writer.writerow(row)
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
    if column in _TELEMETRY_COLUMNS:
        return _fmt((case.get("telemetry") or {}).get(column))
    key, _, sub = column.partition(".")
    value = case.get(key)
    if sub:
        value = (value or {}).get(sub)
    return _fmt(value)


_TELEMETRY_COLUMNS = frozenset(
    {"power_w_total", "temperature_c_max", "sm_clock_mhz_mean", "tps_per_w", "decode_tps_per_w"}
)


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
        except (RequestFailed, PaddingFailed) as exc:
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


def _skipped_case(case: Case, reason: str) -> dict[str, Any]:
    record = _failed_case(case, f"skipped: {reason}")
    record.update(status="skipped", skip_reason=reason, started_at=_now())
    return record


class NodeGuard:
    """The nodes' side of a run with an inventory: clock sessions, caps, telemetry, limits."""

    def __init__(
        self,
        cluster: Cluster,
        config: RunConfig,
        out: Path,
        console: Console,
        *,
        owner: str | None = None,
        telemetry_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.cluster = cluster
        self.out = out
        self.console = console
        interval = config.telemetry_interval_ms
        self.thresholds = Thresholds(
            cool_down_c=config.cool_down_c,
            abort_c=config.abort_c,
            cool_down_timeout_s=config.cool_down_timeout_s,
            session_max_s=config.session_max_s,
            poll_s=min(1.0, interval / 1000),
            stale_s=max(15.0, 10 * interval / 1000),
        )
        self.hub = TelemetryHub(cluster.nodes, interval_ms=interval, **(telemetry_options or {}))
        self.clocks = ClockController(
            cluster.nodes,
            self.hub,
            self.thresholds,
            owner or default_owner(out),
            log=self._log,
        )
        self.aborted: str | None = None
        self.pending: BaseException | None = None  # raised in the watcher, for the case
        self.document: dict[str, Any] | None = None
        self.entry: dict[str, Any] | None = None  # this invocation's `commands` entry

    def _log(self, message: str) -> None:
        self.console.print(f"[cyan]clock:[/] {escape(message)}")

    def describe(self) -> dict[str, Any]:
        return {
            "inventory": list(self.cluster.sources),
            "nodes": [
                {"name": n.name, "group": n.group, "via": n.describe()} for n in self.cluster.nodes
            ],
            "safety": {
                "cool_down_c": self.thresholds.cool_down_c,
                "abort_c": self.thresholds.abort_c,
                "cool_down_timeout_s": self.thresholds.cool_down_timeout_s,
                "session_max_s": self.thresholds.session_max_s,
                "telemetry_interval_ms": self.hub.interval_ms,
            },
        }

    def start(self) -> None:
        """Take every node's lock (refused if held), then start the telemetry."""
        self.clocks.open()
        since = self.hub.clock()
        self.hub.start()
        wait = max(15.0, 5 * self.hub.interval_ms / 1000)
        missing = self.hub.wait_for(since, wait)
        if missing:
            said = "; ".join(self.hub.nodes[name].describe() for name in missing)
            raise Gx10Error(
                f"no nvidia-smi telemetry within {wait:g} s from {', '.join(missing)} ({said}): "
                "the clock sweep's temperature limits cannot be watched without it"
            )

    async def before_case(self, case: Case) -> None:
        """Set the case's cap, cool down, check the limits (SweepAborted when it cannot run)."""
        self.clocks.set_cap(case.clock_cap)
        for pause in self.clocks.cool_down_steps():
            await asyncio.sleep(pause)
        hazard = self.clocks.hazard()
        if hazard:
            raise SweepAborted(hazard)

    async def watch(self, case: Case, task: asyncio.Future[Any]) -> None:
        """Cancel the running case if a node crosses the abort limit (or a session is lost)."""
        try:
            while not task.done():
                await asyncio.sleep(WATCH_INTERVAL_S)
                hazard = self.clocks.hazard()
                if hazard:
                    self.aborted = f"during {case.id}: {hazard}"
                    task.cancel()
                    return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SIGTERM landing here: hand it over to the case
            self.pending = exc
            task.cancel()

    async def case_telemetry(
        self, start: float, end: float, record: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The case's telemetry figures (waiting, bounded, for the reading that covers its end)."""
        deadline = self.hub.clock() + 2.5 * self.hub.interval_ms / 1000
        while self.hub.missing_after(end) and self.hub.clock() < deadline:
            await asyncio.sleep(0.05)
        per_node = {}
        approximate = []
        for name in self.hub.nodes:
            samples = self.hub.window(name, start, end)
            if not samples:
                after = self.hub.first_after(name, end)
                samples = [after] if after is not None else []
                approximate.append(name)
            per_node[name] = samples
        decode = (record.get("decode_tps") or {}).get("p50")
        figures = case_telemetry(per_node, record.get("aggregate_tps"), decode, approximate)
        figures["gaps"] = [
            gap.to_dict()
            for gap in self.hub.gaps()
            if gap.start_mono <= end and (gap.end_mono is None or gap.end_mono >= start)
        ]
        self.hub.append_csv(self.out / TELEMETRY_FILE)
        return figures

    def finish(self, outcome: RunOutcome | None) -> None:
        """Restore the caps and end the sessions, stop the telemetry, record both."""
        restore: dict[str, dict[str, Any]] = {}
        try:
            restore = self.clocks.close()
        finally:
            self.hub.stop()
            if self.document is not None and self.entry is not None:
                self.hub.append_csv(self.out / TELEMETRY_FILE)
                self.entry["clock"] = {
                    "owner": self.clocks.owner,
                    "sessions": {
                        name: {"original": s.original, "policy": s.policy}
                        for name, s in self.clocks.sessions.items()
                    },
                    "caps_set": [cap for node, cap in self.clocks.sets if node == self._head],
                    "aborted": self.aborted,
                    "restore": restore,
                    "telemetry_gaps": [gap.to_dict() for gap in self.hub.gaps()],
                }
                self.entry["ended"] = _now()
                write_results(self.out, self.document)
        if outcome is not None:
            outcome.restore = restore
            outcome.aborted = self.aborted

    @property
    def _head(self) -> str:
        return self.cluster.nodes[0].name


async def _measure(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: ServerInfo,
    config: RunConfig,
    case: Case,
    *,
    scale: float,
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
    task = asyncio.ensure_future(run_case(client, endpoint, info, config, case, scale=scale))
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
        outcome.scale = _check_server(config, cases, info, outcome)
        document = _open_document(config, endpoint, info, out, outcome)
        todo = [c for c in cases if document["cases"].get(c.id, {}).get("status") != "ok"]
        if guard is not None and todo:
            # The nodes' locks (refused if held) before anything is written. In a thread, so a
            # Ctrl-C is not held up by a slow connection (asyncio.run waits for it to return,
            # then the sessions it opened are closed).
            await asyncio.to_thread(guard.start)
            document.update(guard.describe())
            guard.document = document
        entry = {"started": _now(), "command": command}
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
                record = await _measure(
                    client, endpoint, info, config, case, scale=outcome.scale, guard=guard
                )
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
