"""The battery's break switch (test equipment): make one tool-call battery case fail on purpose.

`gx10 smoke --battery` (gx10.battery) checks what a coding agent relies on; each of its cases has
a break mode here that reproduces, in the simulator, the field failure the case guards against,
so a test can see that case fail, and only that one:

  parallel       a whole (non-streamed) answer keeps only the first of several calls
  nested         object and array argument values arrive as JSON text (strings)
  long-argument  string arguments are cut at LONG_ARGUMENT_CUT characters
  stream         one argument fragment of the last streamed call is lost
  tool-choice    tool_choice is ignored (everything is "auto")
  reasoning      the reasoning stays in the content, as without a reasoning parser
  agent-loop     the FizzBuzz the model writes tests 3 before 15
  messages       /v1/messages answers the call as raw DSML text (stop_reason end_turn)

The modes come from GX10_SIM_BREAK (comma-separated, read at start) and from a file
(GX10_SIM_BREAK_FILE, default env.DEFAULT_BREAK_FILE) read at every request, so a test can flip
it on a running head with `docker exec`. The file sits outside the read-only /run/gx10-sim mount, as
the stall file does; a (re)started head removes a leftover one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from pathlib import Path

from .log import Log

CASES = (
    "parallel",
    "nested",
    "long-argument",
    "stream",
    "tool-choice",
    "reasoning",
    "agent-loop",
    "messages",
)
LONG_ARGUMENT_CUT = 2048


def parse(text: str) -> frozenset[str]:
    """Mode names from text: separated by commas or whitespace, case-insensitive."""
    return frozenset(part.lower() for part in re.split(r"[,\s]+", text) if part)


class BreakSwitch:
    """The active break modes: the fixed ones (GX10_SIM_BREAK) and the file's, read per call."""

    def __init__(self, fixed: Iterable[str], path: Path, log: Log) -> None:
        self.fixed = frozenset(fixed)
        self.path = path
        self.log = log
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def active(self) -> frozenset[str]:
        try:
            from_file = parse(self.path.read_text(encoding="utf-8", errors="replace"))
        except OSError:  # no file (the usual case), or unreadable: nothing broken by it
            from_file = frozenset()
        modes = self.fixed | from_file
        unknown = modes - set(CASES)
        with self._lock:
            for name in sorted(unknown - self._warned):
                self._warned.add(name)
                self.log.warning_at(
                    "gx10_sim.py:1",
                    f"unknown break mode {name!r} ignored; known: {', '.join(CASES)}",
                )
        return modes & frozenset(CASES)
