"""Node telemetry during a bench run: SM clock, power, temperature and utilization from one
long-lived `nvidia-smi --query-gpu=... -lms 1000` per node, read by one thread per node.

The query runs through the node's transport (see gx10.bench.nodes) inside a small `sh` wrapper
that ends nvidia-smi when its stdin closes: closing the pipe (or the controller dying) stops the
remote loop even where the transport does not forward signals (`docker exec` does not).
Every sample is stamped with the controller's monotonic and wall clocks when it was read; the
node's own timestamp is kept as text. If the query dies (or stays silent for `stall_s`), a gap is
recorded and it is restarted after a delay, a bounded number of times.

Parsing follows the real format (FIELD_NOTES section 6, ../shared/fixtures/nvidia-smi/h200/):
`2026/12/02 08:10:24.567, 1515, 256.86, 51, 100` with `[N/A]` for a value the GPU does not report
(and units tolerated, should `nounits` be lost).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gx10.bench.nodes import Node, spawn_piped

QUERY_FIELDS = ("timestamp", "clocks.sm", "power.draw", "temperature.gpu", "utilization.gpu")
DEFAULT_INTERVAL_MS = 1000
MAX_SAMPLES = 200_000  # per node: about 55 hours at 1 Hz
# Runs `"$0" "$@"` (nvidia-smi and its arguments) and kills it once stdin reaches EOF: fd 3 keeps
# the original stdin for the watcher, since a background job's stdin is /dev/null in sh.
WRAPPER = (
    'exec 3<&0 </dev/null; "$0" "$@" 3<&- & p=$!; '
    "(cat <&3 >/dev/null 2>&1; kill $p 2>/dev/null) >/dev/null 2>&1 & "
    "exec 3<&-; wait $p"
)
CSV_COLUMNS = (
    "node",
    "wall",
    "node_time",
    "sm_clock_mhz",
    "power_w",
    "temperature_c",
    "utilization_pct",
)


@dataclass(frozen=True, slots=True)
class Sample:
    node: str
    mono: float  # controller time.monotonic() when read
    wall: float  # controller time.time() when read
    node_time: str  # nvidia-smi's timestamp (the node's local time)
    sm_clock_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    utilization_pct: float | None


@dataclass(slots=True)
class Gap:
    """A stretch without samples from a node: its query died or fell silent."""

    node: str
    reason: str
    start_wall: float
    start_mono: float
    end_wall: float | None = None
    end_mono: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.endswith("_mono")}


def parse_value(text: str) -> float | None:
    """One field: a number (units tolerated) or None for `[N/A]`, `[Not Supported]` and the like."""
    value = text.strip()
    if not value or value.startswith("[") or value.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(value.split()[0])
    except ValueError:
        return None


def parse_line(line: str) -> tuple[str, float | None, float | None, float | None, float | None]:
    """(node timestamp, SM clock MHz, power W, temperature C, utilization %) of one CSV line.

    Raises ValueError for a header, a blank line or a line of another shape."""
    parts = [p.strip() for p in line.strip().split(",")]
    if len(parts) != len(QUERY_FIELDS) or not parts[0] or parts[0].startswith("timestamp"):
        raise ValueError(f"not a telemetry line: {line.strip()!r}")
    clock, power, temperature, utilization = (parse_value(p) for p in parts[1:])
    return parts[0], clock, power, temperature, utilization


def query_command(node: Node, interval_ms: int) -> list[str]:
    return node.argv(
        [
            "sh",
            "-c",
            WRAPPER,
            node.nvidia_smi,
            f"--query-gpu={','.join(QUERY_FIELDS)}",
            "--format=csv,noheader,nounits",
            "-lms",
            str(interval_ms),
        ]
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group of a child started with start_new_session (our own child's)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class NodeTelemetry:
    """One node's query process and the samples read from it (thread-safe)."""

    def __init__(
        self,
        node: Node,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        max_samples: int = MAX_SAMPLES,
        restart_delay_s: float = 2.0,
        max_restarts: int = 50,
        stall_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.interval_ms = interval_ms
        self.restart_delay_s = restart_delay_s
        self.max_restarts = max_restarts
        self.stall_s = stall_s if stall_s is not None else max(15.0, 10 * interval_ms / 1000)
        self.clock = clock
        self.samples: collections.deque[Sample] = collections.deque(maxlen=max_samples)
        self.pending: collections.deque[Sample] = collections.deque(maxlen=max_samples)
        self.gaps: list[Gap] = []
        self.restarts = 0
        self.malformed = 0
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=10)
        self.given_up: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._started_mono = 0.0
        self._thread: threading.Thread | None = None

    # -- reading --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"telemetry-{self.node.name}", daemon=True
        )
        self._thread.start()

    def _spawn(self) -> subprocess.Popen[str] | None:
        try:
            proc = spawn_piped(query_command(self.node, self.interval_ms))
        except OSError as exc:
            self._gap(f"cannot start the query: {exc}")
            return None
        stderr = proc.stderr
        assert stderr is not None
        threading.Thread(
            target=self._drain_stderr,
            args=(stderr,),
            name=f"telemetry-err-{self.node.name}",
            daemon=True,
        ).start()
        with self._lock:
            self._proc = proc
            self._started_mono = self.clock()
        if self._stop.is_set():  # stop() came while this started: end it the same way
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()
        return proc

    def _drain_stderr(self, stream: Iterable[str]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in stream:
                if line.strip():
                    self.stderr_tail.append(line.strip()[:300])

    def _run(self) -> None:
        while not self._stop.is_set():
            proc = self._spawn()
            if proc is not None:
                assert proc.stdout is not None
                with contextlib.suppress(OSError, ValueError):
                    for line in proc.stdout:
                        self._take(line)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                if self._stop.is_set():
                    break
                said = "; ".join(list(self.stderr_tail)[-2:])
                self._gap(
                    f"nvidia-smi query ended (exit {proc.returncode})"
                    + (f": {said}" if said else "")
                )
            if self.restarts >= self.max_restarts:
                self.given_up = f"gave up after {self.restarts} restarts"
                break
            self.restarts += 1
            if self._stop.wait(min(self.restart_delay_s * self.restarts, 30.0)):
                break

    def _take(self, line: str) -> None:
        try:
            node_time, clock, power, temperature, utilization = parse_line(line)
        except ValueError:
            if line.strip():
                self.malformed += 1
            return
        sample = Sample(
            self.node.name,
            self.clock(),
            time.time(),
            node_time,
            clock,
            power,
            temperature,
            utilization,
        )
        with self._lock:
            self.samples.append(sample)
            self.pending.append(sample)
            if self.gaps and self.gaps[-1].end_mono is None:
                self.gaps[-1].end_mono = sample.mono
                self.gaps[-1].end_wall = sample.wall

    def _gap(self, reason: str) -> None:
        with self._lock:
            if self.gaps and self.gaps[-1].end_mono is None:
                return  # still in the same gap: one record until samples come back
            self.gaps.append(Gap(self.node.name, reason, time.time(), self.clock()))

    def check_stall(self) -> None:
        """Kill a query that has been silent for stall_s (a hung connection); it restarts."""
        with self._lock:
            proc, started = self._proc, self._started_mono
            last = self.samples[-1].mono if self.samples else None
        if proc is None or proc.poll() is not None or self._stop.is_set():
            return
        since = max(started, last or started)
        if self.clock() - since > self.stall_s:
            self._gap(f"no sample for {self.stall_s:g} s: query restarted")
            _kill_group(proc)

    # -- views ----------------------------------------------------------------------------

    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def window(self, start: float, end: float) -> list[Sample]:
        with self._lock:
            return [s for s in self.samples if start <= s.mono <= end]

    def first_after(self, after: float) -> Sample | None:
        """The earliest sample read at or after `after` (monotonic)."""
        found = None
        with self._lock:
            for sample in reversed(self.samples):
                if sample.mono < after:
                    break
                found = sample
        return found

    def drain(self) -> list[Sample]:
        with self._lock:
            out = list(self.pending)
            self.pending.clear()
        return out

    def describe(self) -> str:
        said = "; ".join(self.stderr_tail) or "no output"
        return f"{self.node.name}: {self.given_up or 'no sample yet'} ({said})"

    # -- stopping -------------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """Close the query's stdin (the wrapper ends nvidia-smi), then kill what is left."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=timeout)
        if self._thread is not None:
            self._thread.join(timeout=timeout)


class TelemetryHub:
    """Every node's telemetry; what the clock controller and the runner read."""

    def __init__(
        self,
        nodes: Sequence[Node],
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        clock: Callable[[], float] = time.monotonic,
        **options: Any,
    ) -> None:
        self.interval_ms = interval_ms
        self.clock = clock
        self.nodes = {
            n.name: NodeTelemetry(n, interval_ms=interval_ms, clock=clock, **options) for n in nodes
        }
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.started = False

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        self._watchdog = threading.Thread(
            target=self._watch, name="telemetry-watchdog", daemon=True
        )
        self._watchdog.start()
        self.started = True

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            for node in self.nodes.values():
                node.check_stall()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for node in self.nodes.values():
            node.stop(timeout)
        if self._watchdog is not None:
            self._watchdog.join(timeout=timeout)

    def latest(self, name: str) -> Sample | None:
        return self.nodes[name].latest()

    def window(self, name: str, start: float, end: float) -> list[Sample]:
        return self.nodes[name].window(start, end)

    def first_after(self, name: str, after: float) -> Sample | None:
        return self.nodes[name].first_after(after)

    def missing_after(self, after: float) -> list[str]:
        """The nodes with no sample read at or after `after` (monotonic)."""
        return [
            name
            for name, node in self.nodes.items()
            if (latest := node.latest()) is None or latest.mono < after
        ]

    def wait_for(self, after: float, timeout: float) -> list[str]:
        """Wait (bounded) until every node has a sample from `after` on; returns the missing."""
        deadline = self.clock() + timeout
        missing = self.missing_after(after)
        while missing and self.clock() < deadline:
            time.sleep(min(0.05, self.interval_ms / 4000))
            missing = self.missing_after(after)
        return missing

    def gaps(self) -> list[Gap]:
        return [gap for node in self.nodes.values() for gap in node.gaps]

    def append_csv(self, path: Path) -> int:
        """Append the samples read since the last call to `path` (the run's timeline)."""
        rows = [s for node in self.nodes.values() for s in node.drain()]
        if not rows:
            return 0
        rows.sort(key=lambda s: s.wall)
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(CSV_COLUMNS)
            for s in rows:
                writer.writerow(
                    [
                        s.node,
                        f"{s.wall:.3f}",
                        s.node_time,
                        *(
                            "" if v is None else f"{v:g}"
                            for v in (s.sm_clock_mhz, s.power_w, s.temperature_c, s.utilization_pct)
                        ),
                    ]
                )
        return len(rows)


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The timeline written by append_csv: rows with floats (None where a value was missing)."""
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                record: dict[str, Any] = {"node": row["node"], "wall": float(row["wall"])}
            except (KeyError, TypeError, ValueError):
                continue
            for key in CSV_COLUMNS[3:]:
                text = row.get(key) or ""
                try:
                    record[key] = float(text) if text else None
                except ValueError:
                    record[key] = None
            out.append(record)
    return out
