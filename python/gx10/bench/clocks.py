"""The clock sweep's safety controller: node locks, caps, cool-down, abort, and restore.

One `gx10-gpu-clock session` per node (roles/gpu_clock/files/gx10-gpu-clock) is opened at the
start and its stdin kept open for the whole run. It holds the node's benchmark lock (a second
runner is refused, naming the holder) and is the on-node safety net: when the controller dies
or its connection drops, the pipe closes and the node restores the cap it had by itself.

On every exit path of the controller (normal end, exception, Ctrl-C, SIGTERM: see
`terminate_as_exception`) `close()` first sets each node back to its session's original cap
explicitly (the policy when none was recorded), then closes the sessions and waits, bounded, for
each to print its `ended` line. Ctrl-C and SIGTERM are deferred while that runs (bounded by the
command timeouts): a second Ctrl-C cannot cut the restore short.

Before each case: every session must still be alive (a lost connection ends the sweep), the
cap is set when it changes (cases are grouped by cap: each is set once), and every node must be
below the cool-down temperature (waiting up to a timeout). Above the abort limit, before or
during a case, the remaining sweep is abandoned (recorded as skipped, with the reason).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from gx10.bench.nodes import Node, spawn_piped
from gx10.bench.telemetry import Sample
from gx10.errors import Gx10Error

EXIT_LOCKED = 75
READY_TIMEOUT_S = 60.0  # a session's first line (connection, sudo, python start)
COMMAND_TIMEOUT_S = 90.0  # set/show: the tool allows nvidia-smi 60 s
END_TIMEOUT_S = 30.0  # all sessions' `ended` lines after their stdin closes


class LockHeldError(Gx10Error):
    """Another bench run holds the controller's lock or a node's benchmark lock."""


class ClockError(Gx10Error):
    """A node's clock tool failed (not installed, no sudo, nvidia-smi refused)."""


class SweepAborted(Gx10Error):
    """The sweep cannot go on safely; the remaining cases are skipped with this reason."""


class Terminated(BaseException):
    """SIGTERM, as an exception: the run unwinds and restores the caps (not an Exception, so
    no `except Exception` on the way swallows it)."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    cool_down_c: float = 70.0  # before each case, every node below this
    abort_c: float = 84.0  # above this, the remaining sweep is abandoned
    cool_down_timeout_s: float = 900.0  # how long a cool-down may take
    session_max_s: float = 86400.0  # the node sessions' own deadline (the safety net's)
    poll_s: float = 1.0
    stale_s: float = 15.0  # a temperature older than this is no temperature


class TemperatureSource(Protocol):
    def latest(self, name: str) -> Sample | None: ...


# --------------------------------------------------------------------------------------------
# Signals
# --------------------------------------------------------------------------------------------


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """While inside, SIGTERM raises Terminated (the previous handler comes back after)."""
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Terminated(f"{signal.Signals(signum).name} received")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """SIGINT and SIGTERM are recorded, not acted on, inside; yields the list they land in."""
    received: list[int] = []
    if not _in_main_thread():
        yield received
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def default_owner(out: Path) -> str:
    """How a node names this run to a second runner: user@host and the results directory."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"gx10 bench {user}@{socket.gethostname()} {out.resolve()}"


# --------------------------------------------------------------------------------------------
# One node's session
# --------------------------------------------------------------------------------------------


def _tool_message(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return text.removeprefix("gx10-gpu-clock: ")


@dataclass
class Session:
    """An open `gx10-gpu-clock session` on one node (the controller holds its stdin)."""

    node: Node
    proc: subprocess.Popen[str]
    token: str
    original: Any  # the cap applied when the session began (None: nothing recorded)
    lines: queue.Queue[str | None]
    stderr_tail: list[str] = field(default_factory=list)
    policy: Any = None
    show: dict[str, Any] = field(default_factory=dict)
    ended: dict[str, Any] | None = None
    eof: bool = False  # its output has ended

    @property
    def restore_target(self) -> Any:
        return self.original if self.original is not None else self.policy

    def read_line(self, timeout: float | None = None) -> bool:
        """Take one line the session printed (its `ended` line, at the end); False if none came
        (within `timeout`; None: do not wait) or the output has ended."""
        if self.eof:
            return False
        try:
            line = self.lines.get(timeout=timeout) if timeout else self.lines.get_nowait()
        except queue.Empty:
            return False
        if line is None:
            self.eof = True
            return False
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and "ended" in data:
                self.ended = data
        return True

    def poll_lines(self) -> None:
        while self.read_line():
            pass

    def alive(self) -> bool:
        self.poll_lines()
        return self.proc.poll() is None and self.ended is None

    def why_ended(self) -> str:
        self.poll_lines()
        if self.ended is not None:
            return f"it ended ({self.ended.get('ended')}) and restored {self.ended.get('restored')}"
        said = _tool_message("\n".join(self.stderr_tail))
        return f"its connection ended (exit {self.proc.returncode})" + (f": {said}" if said else "")


def _pump(stream: Any, sink: Callable[[str | None], None]) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in stream:
            sink(line.rstrip("\n"))
    sink(None)


# --------------------------------------------------------------------------------------------
# The controller
# --------------------------------------------------------------------------------------------


class ClockController:
    """Sessions, caps, cool-down, abort and restore for the nodes of one run."""

    def __init__(
        self,
        nodes: Sequence[Node],
        temperatures: TemperatureSource,
        thresholds: Thresholds,
        owner: str,
        *,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes = list(nodes)
        self.temperatures = temperatures
        self.thresholds = thresholds
        self.owner = owner
        self.log = log or (lambda _message: None)
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.current_cap: str | None = None
        self.sets: list[tuple[str, str]] = []  # (node, cap) in the order they were set
        self.deferred_signals: list[int] = []
        self.closed = False

    # -- commands -------------------------------------------------------------------------

    def _tool(self, node: Node, *args: str) -> dict[str, Any]:
        argv = node.tool_argv(*args)
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise ClockError(f"{node.name}: cannot run {argv[0]}: {exc}") from None
        except subprocess.TimeoutExpired:
            raise ClockError(
                f"{node.name}: gx10-gpu-clock {' '.join(args[:2])} did not answer within "
                f"{COMMAND_TIMEOUT_S:g} s"
            ) from None
        if proc.returncode == EXIT_LOCKED:
            raise LockHeldError(f"{node.name}: {_tool_message(proc.stderr)}")
        if proc.returncode != 0:
            raise ClockError(
                f"{node.name}: gx10-gpu-clock {' '.join(args[:2])} failed (exit "
                f"{proc.returncode}): {_tool_message(proc.stderr) or proc.stdout.strip()}"
                + _hint(proc.returncode, proc.stderr)
            )
        try:
            data = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ClockError(
                f"{node.name}: gx10-gpu-clock {args[0]} printed no JSON: {proc.stdout[:200]!r}"
            ) from None
        return dict(data) if isinstance(data, dict) else {}

    # -- sessions -------------------------------------------------------------------------

    def open(self) -> None:
        """Open a session on every node (head first); refuse if any node's lock is held.

        On any failure the sessions already opened are closed (restoring nothing they did not
        change) before the error propagates."""
        try:
            for node in self.nodes:
                session = self._open(node)
                self.sessions[node.name] = session
                show = self._tool(node, "show")
                session.show = show
                session.policy = show.get("policy")
                self.log(
                    f"{node.name}: benchmark lock taken; cap found "
                    f"{_cap_text(session.original)}, policy {_cap_text(session.policy)}"
                )
        except BaseException:
            self.close()
            raise

    def _open(self, node: Node) -> Session:
        max_s = f"{self.thresholds.session_max_s:g}"
        argv = node.tool_argv("session", self.owner, "--max-seconds", max_s)
        try:
            proc = spawn_piped(argv)
        except OSError as exc:
            raise ClockError(f"{node.name}: cannot run {argv[0]}: {exc}") from None
        lines: queue.Queue[str | None] = queue.Queue()
        stderr_tail: list[str] = []

        def keep_err(line: str | None) -> None:
            if line:
                stderr_tail.append(line)
                del stderr_tail[:-20]

        threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True).start()
        err_pump = threading.Thread(target=_pump, args=(proc.stderr, keep_err), daemon=True)
        err_pump.start()
        try:
            first = lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            _end_session_process(proc)
            raise ClockError(
                f"{node.name}: gx10-gpu-clock session did not answer within {READY_TIMEOUT_S:g} s"
            ) from None
        except BaseException:  # interrupted while waiting: not ours to keep
            _end_session_process(proc)
            raise
        ready: dict[str, Any] = {}
        with contextlib.suppress(ValueError, TypeError):
            ready = dict(json.loads(first or ""))
        if not ready.get("ready"):
            _end_session_process(proc)
            err_pump.join(timeout=5)  # its last lines say why
            said = _tool_message("\n".join(stderr_tail)) or (first or "no output")
            if proc.returncode == EXIT_LOCKED:
                raise LockHeldError(
                    f"{node.name}: {said}; one runner at a time (a clock sweep under another "
                    "benchmark changes its figures)"
                )
            raise ClockError(
                f"{node.name}: gx10-gpu-clock session failed (exit {proc.returncode}): {said}"
                + _hint(proc.returncode, said)
            )
        return Session(node, proc, str(ready["token"]), ready.get("original"), lines, stderr_tail)

    def lost_session(self) -> str | None:
        """Why the sweep cannot go on because a session ended (a lost connection), or None."""
        for name, session in self.sessions.items():
            if not session.alive():
                return (
                    f"{name}: the node's clock session is gone ({session.why_ended()}); its lock "
                    "and cap are no longer held by this run"
                )
        return None

    # -- caps -----------------------------------------------------------------------------

    def set_cap(self, cap: str) -> None:
        """Set `cap` on every node (nothing when it is already the current cap)."""
        if cap == self.current_cap:
            return
        lost = self.lost_session()
        if lost:
            raise SweepAborted(lost)
        for name, session in self.sessions.items():
            try:
                self._tool(session.node, "set", cap, "--session", session.token)
            except Gx10Error as exc:
                raise SweepAborted(f"cannot set clock cap {cap}: {exc}") from exc
            self.sets.append((name, cap))
        self.current_cap = cap
        self.log(f"clock cap {_cap_text(cap)} set on {', '.join(self.sessions)}")

    # -- temperature ----------------------------------------------------------------------

    def _reading(self, name: str) -> tuple[float | None, str | None, bool]:
        """(temperature, why it is unknown, whether it has been unknown for stale_s)."""
        sample = self.temperatures.latest(name)
        if sample is None:
            return None, f"{name}: no temperature reading yet", False
        age = self.clock() - sample.mono
        if age > self.thresholds.stale_s:
            return None, f"{name}: no temperature reading for {age:.0f} s", True
        if sample.temperature_c is None:
            return None, f"{name}: temperature not reported ([N/A])", False
        return sample.temperature_c, None, False

    def hazard(self) -> str | None:
        """Why the sweep must stop now: a node above the abort limit, a lost session, or no
        temperature for stale_s (the limit cannot be watched); None when all is well."""
        lost = self.lost_session()
        if lost:
            return lost
        for node in self.nodes:
            temperature, unknown, stale = self._reading(node.name)
            if temperature is not None and temperature > self.thresholds.abort_c:
                return (
                    f"{node.name} at {temperature:g} C, above the abort limit "
                    f"{self.thresholds.abort_c:g} C"
                )
            if stale:
                return f"{unknown} (the abort limit cannot be watched)"
        return None

    def cool_down_steps(self) -> Iterator[float]:
        """Yields how long to sleep until every node is below the cool-down temperature.

        Raises SweepAborted above the abort limit, on a lost session, or at the timeout."""
        limits = self.thresholds
        started = self.clock()
        announced = False
        while True:
            lost = self.lost_session()
            if lost:
                raise SweepAborted(lost)
            waiting: list[str] = []
            for node in self.nodes:
                temperature, unknown, _stale = self._reading(node.name)
                if temperature is not None and temperature > limits.abort_c:
                    raise SweepAborted(
                        f"{node.name} at {temperature:g} C, above the abort limit "
                        f"{limits.abort_c:g} C"
                    )
                if unknown:
                    waiting.append(unknown)
                elif temperature is not None and temperature >= limits.cool_down_c:
                    waiting.append(f"{node.name} at {temperature:g} C")
            if not waiting:
                if announced:
                    self.log(f"cooled down below {limits.cool_down_c:g} C")
                return
            elapsed = self.clock() - started
            if elapsed >= limits.cool_down_timeout_s:
                raise SweepAborted(
                    f"cool-down: {'; '.join(waiting)} after {limits.cool_down_timeout_s:g} s "
                    f"(every node must be below {limits.cool_down_c:g} C before a case)"
                )
            if not announced:
                self.log(
                    f"cooling down: {'; '.join(waiting)} (waiting for every node below "
                    f"{limits.cool_down_c:g} C, up to {limits.cool_down_timeout_s:g} s)"
                )
                announced = True
            yield min(limits.poll_s, max(limits.cool_down_timeout_s - elapsed, 0.01))

    def cool_down(self, sleep: Callable[[float], None] = time.sleep) -> None:
        for pause in self.cool_down_steps():
            sleep(pause)

    # -- restore --------------------------------------------------------------------------

    def close(self) -> dict[str, dict[str, Any]]:
        """Restore every node's cap and end the sessions; returns what happened per node.

        Safe to call more than once and on any path; Ctrl-C and SIGTERM wait until it is done
        (they are kept in `deferred_signals`)."""
        report: dict[str, dict[str, Any]] = {}
        if self.closed:
            return report
        with signals_deferred() as received:
            report = self._restore_all()
        self.deferred_signals += received
        self.closed = True
        return report

    def _restore_all(self) -> dict[str, dict[str, Any]]:
        report: dict[str, dict[str, Any]] = {}
        for name, session in self.sessions.items():
            entry: dict[str, Any] = {
                "original": session.original,
                "policy": session.policy,
                "restore_to": session.restore_target,
            }
            report[name] = entry
            if session.restore_target is None:
                entry["set"] = "skipped: no original cap and no policy known"
            elif not session.alive():
                entry["set"] = f"skipped: {session.why_ended()}"
            else:
                try:
                    answer = self._tool(
                        session.node, "set", str(session.restore_target), "--session", session.token
                    )
                    entry["set"] = "ok"
                    entry["applied"] = answer.get("applied")
                except Gx10Error as exc:
                    entry["set"] = f"failed: {exc}"
        for session in self.sessions.values():
            with contextlib.suppress(OSError, ValueError):
                assert session.proc.stdin is not None
                session.proc.stdin.close()
        deadline = self.clock() + END_TIMEOUT_S
        for name, session in self.sessions.items():
            entry = report[name]
            while session.ended is None and not session.eof and self.clock() < deadline:
                session.read_line(timeout=max(deadline - self.clock(), 0.01))
            if session.proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    session.proc.wait(timeout=max(deadline - self.clock(), 0.1))
            if session.proc.poll() is None:
                # Ending the local end (ssh, docker exec, or the tool itself) closes the node's
                # stdin or signals the tool: either way the node restores by itself.
                _stop_process(session.proc)
                entry["warning"] = f"the session did not end within {END_TIMEOUT_S:g} s: stopped"
            entry["ended"] = session.ended
            entry["exit"] = session.proc.returncode
            if session.ended is None and "warning" not in entry:
                said = _tool_message("\n".join(session.stderr_tail))
                entry["warning"] = f"the session printed no 'ended' line: {said or 'no output'}"
            self.log(_describe_restore(name, entry))
        self.current_cap = None
        return report


def _end_session_process(proc: subprocess.Popen[str]) -> None:
    """Close a session's stdin (it restores and ends), then stop what did not end (bounded)."""
    with contextlib.suppress(OSError, ValueError):
        assert proc.stdin is not None
        proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    _stop_process(proc)


def _stop_process(proc: subprocess.Popen[str], timeout: float = 5.0) -> None:
    """Terminate, then kill, our own child `proc` (by its pid)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)


def _hint(code: int | None, said: str) -> str:
    lowered = said.lower()
    if "password is required" in lowered or "sudo:" in lowered:
        return (
            " (fix: passwordless sudo for the clock tool on that node, or connect as root; "
            "gx10 bench never prompts for a password)"
        )
    if code in (126, 127) or "not found" in lowered or "no such file" in lowered:
        return " (fix: install the tool with the gpu_clock role: gx10 run -i INV clock.yml)"
    return ""


def _cap_text(cap: Any) -> str:
    if cap is None:
        return "none recorded"
    return str(cap) if str(cap) == "unlocked" else f"{cap} MHz"


def _describe_restore(name: str, entry: dict[str, Any]) -> str:
    ended = entry.get("ended") or {}
    session = f"ended, node restored {ended.get('restored')}" if ended else "end not seen"
    text = (
        f"{name}: restore to {_cap_text(entry.get('restore_to'))}: set {entry.get('set')}; "
        f"session {session}"
    )
    if entry.get("warning"):
        text += f" ({entry['warning']})"
    return text
