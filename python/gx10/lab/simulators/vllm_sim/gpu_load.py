"""GPU load for the nvidia-smi simulator (its `load` state file)."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .log import Log

LOAD_FILE = "load"
LOAD_BUSY_FLOOR = 0.7  # the GPU load as soon as one sequence runs
LOAD_MIN_INTERVAL_S = 0.25  # at most four writes a second


def engine_load(running: int, max_num_seqs: int) -> float:
    """The GPU load the engine puts on its node: 0 idle, 0.7 + 0.3 x running/max_num_seqs."""
    if running <= 0:
        return 0.0
    share = min(running / max(max_num_seqs, 1), 1.0)
    return round(LOAD_BUSY_FLOOR + (1.0 - LOAD_BUSY_FLOOR) * share, 3)


class GpuLoad:
    """Publishes a rank's GPU load: this node's `load` file, then every sink (the workers).

    Both GPUs work in tensor parallel, so the head sends its load to the workers and each rank
    writes its own node's file. A value is published when it changes, at most once per
    `min_interval` (the latest value wins, published when the interval has passed), by a
    background thread so the engine never waits on a file. Writes are atomic (temporary file,
    then rename); a failing one (no state directory, read-only) is logged once, then ignored.
    The interval is measured on `clock` (monotonic seconds).
    """

    def __init__(
        self,
        state_dir: Path,
        log: Log,
        min_interval: float = LOAD_MIN_INTERVAL_S,
        sinks: Sequence[Callable[[float], None]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = state_dir / LOAD_FILE
        self.log = log
        self.min_interval = min_interval
        self.sinks = list(sinks)
        self.clock = clock
        self._cond = threading.Condition()
        self._pending: float | None = None
        self._published: float | None = None
        self._last = -math.inf
        self._closed = False
        self._warned = False
        self._thread: threading.Thread | None = None

    def set(self, load: float) -> None:
        """Ask for `load` to be published (soon, if one was published less than an interval ago)."""
        with self._cond:
            if self._closed:
                return
            self._pending = load
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-load")
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                value = self._pending
                if value is None or value == self._published:
                    self._cond.wait()
                    continue
                wait = self._last + self.min_interval - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._pending = None
                self._published = value
                self._last = self.clock()
            self._publish(value)

    def _publish(self, value: float) -> None:
        self.write(value)
        for sink in self.sinks:
            sink(value)

    def write(self, value: float) -> None:
        """Replace this node's load file with `value`; a failure is logged once."""
        tmp = self.path.with_name(f".{LOAD_FILE}.{os.getpid()}")
        try:
            tmp.write_text(f"{value:.3f}\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if not self._warned:
                self._warned = True
                self.log.warning_at(
                    "gx10_sim.py:1",
                    f"[gx10-sim] cannot write the GPU load to {self.path} ({error}); "
                    "nvidia-smi on this node will not see this engine's load",
                )

    def close(self) -> None:
        """Stop publishing; publish 0 if anything was (the engine is gone, the GPU idles)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:  # never started: nothing of ours to take back
            return
        thread.join(timeout=5.0)
        self._published = 0.0
        self._publish(0.0)
