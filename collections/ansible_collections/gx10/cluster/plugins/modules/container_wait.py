#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.container_wait: wait, bounded, until a container is ready or has died."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_wait
short_description: Wait until a container logs a line or answers HTTP, or fail with its log
description:
  - Polls a Docker container until its log matches I(log_regex) and/or every I(url) answers
    with I(status), within I(timeout) seconds. Fails at once, with the log tail, if the
    container exits or is missing; fails with the log tail on timeout. Read-only; runs the same
    in check mode.
  - The action plugin of the same name waits in slices of I(progress_interval) seconds and
    prints the container's last log lines on the controller between them.
  - Used for the ordered launch, where a headless vLLM worker is "up" once it logs that it is
    joining the head, and the head is ready when C(/health) and C(/v1/models) answer 200.
  - With I(phase_timeouts), it also follows the boot phase the log shows (start, weights,
    compile, graph_capture, api; C(module_utils/boot_phases.py)) and fails as soon as one phase
    has lasted longer than its own timeout, naming the phase; I(timeout) still bounds the whole
    wait. A phase is timed from its marker's own log timestamp.
options:
  container:
    description: Container name or id.
    type: str
    required: true
  log_regex:
    description: A Python regular expression a log line must match.
    type: str
  url:
    description: URLs that must each answer with I(status) (one URL or a list).
    type: list
    elements: str
  api_key:
    description: >-
      Sent as C(Authorization: Bearer) to every I(url) (vLLM's C(--api-key)); never logged.
    type: str
  status:
    description: The HTTP status I(url) must answer with.
    type: int
    default: 200
  timeout:
    description: Seconds to wait in all.
    type: int
    default: 900
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  tail:
    description: Log lines to return.
    type: int
    default: 40
  progress_interval:
    description:
      - Seconds between progress reports while waiting; each prints the container's last
        I(progress_lines) log lines on the controller (the action plugin waits in slices of this
        length). C(0) waits silently.
    type: int
    default: 30
  progress_lines:
    description: Log lines each progress report shows.
    type: int
    default: 5
  missing_ok:
    description: >-
      A missing container is not ready yet (it is about to be started, for example by the pair
      supervisor) rather than a failure; I(timeout) still bounds the wait.
    type: bool
    default: false
  unit:
    description:
      - The systemd unit that runs the container in the foreground (C(docker run --rm)). While
        the container is missing, a unit that is no longer active (its start failed, or the
        container exited and was removed) fails the wait at once with the unit's last journal
        lines, instead of waiting for I(timeout). Implies I(missing_ok) while the unit is active
        (it is starting the container).
    type: str
  phases:
    description: >-
      The boot phases, in order, each C(name) and C(marker) (a regular expression that starts
      it); by default vLLM's.
    type: list
    elements: dict
  phase_timeouts:
    description: >-
      Seconds each named phase may last (phases not named are bounded only by I(timeout)).
    type: dict
  phase_timeouts_name:
    description: The variable that set I(phase_timeouts), named in a failure message.
    type: str
    default: phase_timeouts
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Wait for the head
  gx10.cluster.container_wait:
    container: gx10-vllm
    url: http://127.0.0.1:8000/health
    timeout: 900
"""

RETURN = r"""
elapsed:
  description: Seconds waited.
  returned: always
  type: float
timed_out:
  description: Whether the wait ran out of time (the container was alive but not ready).
  returned: always
  type: bool
phase:
  description: The boot phase the log showed last (null before the first marker or without phases).
  returned: always
  type: str
phase_seconds:
  description: Seconds the rank had been in I(phase) (null when unknown).
  returned: always
  type: float
log_tail:
  description: The last I(tail) log lines.
  returned: always
  type: list
  elements: str
"""

import re
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.boot_phases import (
    PhaseError,
    check_timeouts,
    current_phase,
    overdue,
    parse_stamped,
    phases_from,
)


def _state(container: str) -> str | None:
    proc = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Status}}", container],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.stdout.strip() if proc.returncode == 0 else None


def _logs(container: str, tail: int | None = None, stamped: bool = False) -> list[str]:
    cmd = ["docker", "logs"] + (["--timestamps"] if stamped else [])
    cmd += (["--tail", str(tail)] if tail else []) + [container]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return (proc.stdout + proc.stderr).splitlines()


def _unit_state(unit: str) -> str:
    """The unit's ActiveState (active, activating, deactivating, inactive, failed)."""
    proc = subprocess.run(
        ["systemctl", "show", "--property", "ActiveState", "--value", unit],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.stdout.strip() or "unknown"


def _journal(unit: str, lines: int) -> list[str]:
    """The unit's last journal lines: the rank's own output (the container runs in the
    foreground) and systemd's word on how it ended."""
    proc = subprocess.run(
        ["journalctl", "--unit", unit, "--output", "cat", "--no-pager", "--lines", str(lines)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.stdout.splitlines()


# A unit found ended is looked at once more after this many seconds: journald may still be
# writing the rank's last lines.
JOURNAL_SETTLE = 1.0
# A container that exited: its unit's `docker run --rm` removes it and returns within seconds.
UNIT_END_WAIT = 15.0


def _last_words(unit: str, clock: Any, lines: int) -> list[str]:
    """The unit's journal once its container exited: after the unit has ended (bounded by
    UNIT_END_WAIT, so the client has written the container's last output) and the settle."""
    deadline = clock.monotonic() + UNIT_END_WAIT
    while _unit_state(unit) in ("active", "activating", "deactivating") and (
        clock.monotonic() < deadline
    ):
        clock.sleep(0.5)
    clock.sleep(JOURNAL_SETTLE)
    return _journal(unit, lines)


def _unit_ended(unit: str, container: str, clock: Any) -> str | None:
    """Why the wait is over, when ``unit`` is no longer active and its container still missing
    after the journal's settle (None: the unit is still starting or running it)."""
    unit_state = _unit_state(unit)
    if unit_state in ("active", "activating", "reloading"):
        return None
    clock.sleep(JOURNAL_SETTLE)
    if _state(container) is not None:
        return None
    return f"container {container} is gone and its unit {unit} is {unit_state}"


def _http_status(url: str, api_key: str | None = None) -> int | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5
        ) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def _missing(params: dict[str, Any], elapsed: float, clock: Any) -> tuple[str, list[str]]:
    """Why a wait whose container does not exist is over, with the lines to show ("": not over,
    the container may yet start)."""
    container, unit = params["container"], params.get("unit")
    if unit:
        ended = _unit_ended(unit, container, clock)
        if ended:
            return ended, _journal(unit, max(params["tail"], 1))
    elif not params.get("missing_ok"):
        return f"container {container} does not exist", []
    if elapsed >= params["timeout"]:
        return f"timed out after {params['timeout']} s: container {container} was never started", []
    return "", []


def wait(params: dict[str, Any], clock: Any = time) -> dict[str, Any]:
    """Poll until ready, dead, a phase overdue or the timeout.

    Returns ready, reason (a timeout's starts "timed out", an overdue phase's "stuck in
    phase"), elapsed, phase, phase_seconds and tail.
    """
    container, tail = params["container"], params["tail"]
    pattern = re.compile(params["log_regex"]) if params.get("log_regex") else None
    timeouts_given = params.get("phase_timeouts")
    phases = phases_from(params.get("phases")) if timeouts_given is not None else ()
    limits = check_timeouts(timeouts_given or {}, phases) if phases else {}
    started = clock.monotonic()
    outcome: dict[str, Any] = {"phase": None, "phase_seconds": None}

    def done(ready: bool, reason: str, lines: list[str]) -> dict[str, Any]:
        plain = [parse_stamped(line)[1] for line in lines]
        return {
            **outcome,
            "ready": ready,
            "reason": reason,
            "elapsed": clock.monotonic() - started,
            "tail": plain[-tail:] if tail else plain,
        }

    while True:
        elapsed = clock.monotonic() - started
        state = _state(container)
        if state is None:
            why, lines = _missing(params, elapsed, clock)
            if why:
                return done(False, why, lines)
            clock.sleep(params["interval"])
            continue
        lines = _logs(container, stamped=bool(phases))
        if state == "created" and elapsed < params["timeout"]:
            clock.sleep(params["interval"])  # `docker run` creates, then starts: not yet running
            continue
        if state != "running":
            if params.get("unit"):  # `docker run --rm` is removing it: the journal has it all
                lines = _last_words(params["unit"], clock, max(tail, 1))
            return done(False, f"container {container} is {state}", lines)
        plain = [parse_stamped(line)[1] for line in lines] if phases else lines
        if phases:
            phase, since = current_phase(lines, phases)
            now = clock.time()
            outcome = {
                "phase": phase,
                "phase_seconds": round(now - since, 1) if since is not None else None,
            }
        # Ready first: a rank that serves is done whatever its log's last phase marker says. A
        # head serving for longer than the api phase's limit (a re-apply that restarts nothing)
        # last logged "Starting vLLM API server" long ago; judged overdue first, it would fail.
        log_ok = pattern is None or any(pattern.search(line) for line in plain)
        urls = params.get("url") or []
        pending = [
            url for url in urls if _http_status(url, params.get("api_key")) != params["status"]
        ]
        url_ok = not pending
        if log_ok and url_ok:
            return done(True, "ready", lines)
        if phases:
            stuck = overdue(outcome["phase"], since, now, limits)
            if stuck:
                name = params.get("phase_timeouts_name") or "phase_timeouts"
                return done(False, f"{stuck}: {name}.{outcome['phase']}", lines)
        if elapsed >= params["timeout"]:
            waiting = []
            if not log_ok:
                waiting.append(f"a log line matching {params['log_regex']!r}")
            if not url_ok:
                waiting.append(f"{' and '.join(pending)} to answer {params['status']}")
            reason = f"timed out after {params['timeout']} s waiting for {' and '.join(waiting)}"
            if outcome["phase"]:
                reason += f" (in phase {outcome['phase']})"
            return done(False, reason, lines)
        clock.sleep(params["interval"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "log_regex": {"type": "str"},
            "url": {"type": "list", "elements": "str"},
            "status": {"type": "int", "default": 200},
            "api_key": {"type": "str", "no_log": True},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 2},
            "tail": {"type": "int", "default": 40},
            "progress_interval": {"type": "int", "default": 30},
            "progress_lines": {"type": "int", "default": 5},
            "phases": {"type": "list", "elements": "dict"},
            "phase_timeouts": {"type": "dict"},
            "phase_timeouts_name": {"type": "str", "default": "phase_timeouts"},
            "missing_ok": {"type": "bool", "default": False},
            "unit": {"type": "str"},
        },
        required_one_of=[("log_regex", "url")],
        supports_check_mode=True,
    )
    try:
        waited = wait(module.params)
    except PhaseError as exc:
        module.fail_json(msg=f"{module.params['phase_timeouts_name']}: {exc}")
    result = {
        "changed": False,
        "elapsed": round(waited["elapsed"], 1),
        "log_tail": waited["tail"],
        "timed_out": waited["reason"].startswith("timed out"),
        "phase": waited["phase"],
        "phase_seconds": waited["phase_seconds"],
    }
    if not waited["ready"]:
        module.fail_json(
            msg=f"{waited['reason']}; last log lines:\n" + "\n".join(waited["tail"]), **result
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
