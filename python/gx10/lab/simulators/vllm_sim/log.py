"""vLLM's log format, and the glog-style stamp torch's C++ side prints."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


class Log:
    """vLLM's log format: `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message` on stdout;
    uvicorn's own lines on stderr, as the real engine writes them (a log read from one stream
    alone misses its ready line: bench/boot_cache.py reads both). With `out` given and no
    `err`, everything goes to `out`."""

    _lock = threading.Lock()

    def __init__(
        self,
        prefix: str = "",
        level: str = "INFO",
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.prefix = prefix
        self.level = LEVELS.get(level, 20)
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else (self.out if out is not None else sys.stderr)

    def child(self, prefix: str) -> Log:
        log = Log(prefix, "INFO", self.out, self.err)
        log.level = self.level
        return log

    def raw(self, text: str, stream: TextIO | None = None) -> None:
        target = self.out if stream is None else stream
        with self._lock:
            for line in text.splitlines() or [""]:
                target.write(f"{self.prefix}{line}\n")
            target.flush()

    def _emit(self, level: str, where: str, message: str) -> None:
        if LEVELS[level] < self.level:
            return
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw("\n".join(f"{level} {stamp} [{where}] {part}" for part in message.split("\n")))

    def debug_at(self, where: str, message: str) -> None:
        self._emit("DEBUG", where, message)

    def info_at(self, where: str, message: str) -> None:
        self._emit("INFO", where, message)

    def warning_at(self, where: str, message: str) -> None:
        self._emit("WARNING", where, message)

    def error_at(self, where: str, message: str) -> None:
        self._emit("ERROR", where, message)

    def uvicorn(self, message: str) -> None:
        """uvicorn's own lines (`INFO:     Application startup complete.`)."""
        self.raw(f"INFO:     {message}", self.err)


def torch_stamp() -> str:
    """The glog-style stamp torch's C++ side prints: W1020 12:00:00.123456."""
    now = time.time()
    return time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
