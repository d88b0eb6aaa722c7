# SPDX-License-Identifier: Apache-2.0
"""A vLLM rank's boot, phase by phase, read from its log: where it is, and since when.

Pure Python (standard library only), used by the ``gx10.cluster.container_wait`` module (the
serve stage's readiness wait) and unit tested against vLLM's own log lines.

A first boot of DeepSeek V4 Flash on GB10 with empty JIT caches has taken over 30 minutes, most of
it compiling, while a hung boot must still be caught. One timeout for the whole boot cannot do
both, so the wait tracks the phase the log shows and bounds each phase on its own:

* ``start``: the API server parsed its arguments (``vLLM API server version``, ``non-default
  args``) and the engine is being set up (the TP rendezvous, NCCL init);
* ``weights``: ``Starting to load model`` / ``Loading weights from`` until the weights are in;
* ``compile``: torch.compile (``Dynamo bytecode transform time``, ``Compiling a graph``), or the
  compiled graph loaded from the cache (``Directly load the compiled graph``);
* ``graph_capture``: ``Capturing CUDA graphs`` until ``Graph capturing finished``;
* ``api``: ``Starting vLLM API server`` until the health URLs answer.

The phase is the latest one whose marker the log shows, timed from the marker's own timestamp
(``docker logs --timestamps``), so a wait that starts late still times a phase from its start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Phase:
    name: str
    marker: str  # a regular expression; the phase begins at the first line it matches

    def starts(self, line: str) -> bool:
        return re.search(self.marker, line) is not None


# vLLM's own log lines (vllm/entrypoints/openai/api_server.py, model_executor/model_loader,
# compilation/backends.py and monitor.py, v1/worker/gpu_model_runner.py), in boot order.
VLLM_PHASES: tuple[Phase, ...] = (
    Phase("start", r"vLLM API server version|non-default args"),
    Phase("weights", r"Starting to load model|Loading weights from|Loading safetensors"),
    Phase(
        "compile",
        r"Dynamo bytecode transform time|Compiling a graph for|torch\.compile takes"
        r"|Directly load the compiled graph",
    ),
    Phase("graph_capture", r"Capturing CUDA graphs|Capturing cudagraphs"),
    Phase("api", r"Starting vLLM API server"),
)
PHASE_NAMES = tuple(phase.name for phase in VLLM_PHASES)

# docker logs --timestamps: RFC 3339 with nanoseconds, then one space, then the line.
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2}) ")


class PhaseError(ValueError):
    """A phase table or timeout that cannot be used."""


def parse_stamped(line: str) -> tuple[float | None, str]:
    """(epoch seconds, the line) of one ``docker logs --timestamps`` line; None when unstamped."""
    found = _STAMP.match(line)
    if not found:
        return None, line
    whole, fraction, zone = found.groups()
    zone = "+00:00" if zone == "Z" else zone
    moment = datetime.fromisoformat(f"{whole}{zone}")
    seconds = moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)
    return seconds, line[found.end() :]


def phases_from(spec: Sequence[Mapping[str, Any]] | None) -> tuple[Phase, ...]:
    """A phase table from ``[{name, marker}]``; None or empty: vLLM's."""
    if not spec:
        return VLLM_PHASES
    table = []
    for position, entry in enumerate(spec):
        name, marker = entry.get("name"), entry.get("marker")
        if not isinstance(name, str) or not name or not isinstance(marker, str) or not marker:
            raise PhaseError(f"phases[{position}] needs a name and a marker, got {dict(entry)!r}")
        try:
            re.compile(marker)
        except re.error as exc:
            raise PhaseError(f"phases[{position}] ({name}): marker {marker!r}: {exc}") from None
        table.append(Phase(name, marker))
    return tuple(table)


def current_phase(
    lines: Sequence[str], phases: Sequence[Phase] = VLLM_PHASES
) -> tuple[str | None, float | None]:
    """The latest phase the log has reached and when its marker was logged (None: unstamped).

    Phases only move forward: a marker of an earlier phase after a later one (a retried load)
    does not take the boot back. (None, None) before the first marker.
    """
    reached, since = -1, None
    for raw in lines:
        stamp, line = parse_stamped(raw)
        for index in range(len(phases) - 1, reached, -1):
            if phases[index].starts(line):
                reached, since = index, stamp
                break
    if reached < 0:
        return None, None
    return phases[reached].name, since


def check_timeouts(
    timeouts: Mapping[str, Any], phases: Sequence[Phase] = VLLM_PHASES
) -> dict[str, int]:
    """Per-phase timeouts in seconds, each a positive int, for phases the table has."""
    names = [phase.name for phase in phases]
    checked: dict[str, int] = {}
    for name, value in timeouts.items():
        if name not in names:
            raise PhaseError(f"phase_timeouts: {name!r} is no phase (phases: {', '.join(names)})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PhaseError(f"phase_timeouts.{name}: {value!r} is not a number of seconds >= 1")
        checked[name] = value
    return checked


def phase_errors(timeouts: Any) -> list[str]:
    """One message per problem of a phase -> seconds mapping (check_timeouts' each), for the
    validate stage (serve_plan), which reports them all at once."""
    if not isinstance(timeouts, Mapping):
        return [f"{timeouts!r} is not a mapping of phase to seconds"]
    errors = []
    for name, value in timeouts.items():
        try:
            check_timeouts({name: value})
        except PhaseError as exc:
            errors.append(str(exc).removeprefix("phase_timeouts").lstrip(": ."))
    return errors


def overdue(phase: str | None, since: float | None, now: float, timeouts: Mapping[str, int]) -> str:
    """Why the boot is stuck (its phase ran longer than its timeout), or '' while it is not."""
    if phase is None or since is None or phase not in timeouts:
        return ""
    spent = now - since
    limit = timeouts[phase]
    if spent <= limit:
        return ""
    return f"stuck in phase {phase} for {spent:.0f} s (its limit is {limit} s)"
