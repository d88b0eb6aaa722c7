"""Live progress and recap rendering for the CLI.

`describe_event` is the logic (runner event -> `ProgressLine` or None) and has no rich in it;
`ProgressPrinter` and `recap_table` only turn those lines and a `ProvisionResult` into rich output.
`ByteProgress` and `print_verify_report` do the same for hashing and `gx10 model verify`,
`RunStatus` and `print_sync_report` for `gx10 model sync`, `print_battery` for
`gx10 smoke --battery`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from rich import box
from rich.console import Console
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.status import Status
from rich.table import Table
from rich.text import Text

from gx10.model.sync import SyncResult
from gx10.model.verify import VerifyReport
from gx10.provision import ProvisionResult, task_message

if TYPE_CHECKING:  # the battery imports openai: only `gx10 smoke` needs it at run time
    from gx10.battery import BatteryResult

LineKind = Literal["play", "task", "handler", "host", "output"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# runner event -> host status shown on the line
_HOST_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_retry": "retrying",
}

_STYLES = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold magenta",
    "skipped": "cyan",
    "ignored": "dim red",
    "retrying": "dim",
}


@dataclass(frozen=True, slots=True)
class ProgressLine:
    kind: LineKind
    text: str
    """Play or task name, the host for host lines, or a line of ansible output."""
    status: str | None = None
    """For host lines: ok, changed, failed, ignored, unreachable, skipped or retrying."""
    detail: str | None = None
    """Why a host failed, or the retry count."""


def describe_event(event: Mapping[str, Any]) -> ProgressLine | None:
    """What a human should see for one runner event, or None for events not worth a line."""
    name = event.get("event")
    data = event.get("event_data") or {}
    if name == "playbook_on_play_start":
        return ProgressLine("play", str(data.get("name") or data.get("play") or ""))
    if name == "playbook_on_task_start":
        return ProgressLine("task", str(data.get("task") or ""))
    if name == "playbook_on_handler_task_start":
        return ProgressLine("handler", str(data.get("task") or ""))
    if name == "playbook_on_no_hosts_matched":
        return ProgressLine("output", "no hosts matched")
    if name == "verbose":
        # Output outside task callbacks: errors before the first play, warnings, -v chatter.
        text = _ANSI.sub("", str(event.get("stdout") or "")).strip()
        return ProgressLine("output", text) if text else None
    status = _HOST_EVENTS.get(str(name))
    if status is None:
        return None
    res = data.get("res")
    res = res if isinstance(res, Mapping) else {}
    detail: str | None = None
    if status == "ok" and res.get("changed"):
        status = "changed"
    elif status == "failed":
        status = "ignored" if data.get("ignore_errors") else "failed"
        detail = task_message(res)
    elif status == "unreachable":
        detail = task_message(res)
    elif status == "retrying":
        detail = f"attempt {res.get('attempts', '?')} of {res.get('retries', '?')}"
    return ProgressLine("host", str(data.get("host") or ""), status, detail)


class ProgressPrinter:
    """An `on_event` callback that prints one line per play, task and host result."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def __call__(self, event: dict[str, Any]) -> None:
        line = describe_event(event)
        if line is not None:
            self._console.print(render_line(line), soft_wrap=True)


def render_line(line: ProgressLine) -> Text:
    if line.kind == "play":
        return Text.assemble("\n", ("PLAY ", "bold"), (line.text, "bold blue"))
    if line.kind in ("task", "handler"):
        return Text.assemble(("  " + line.kind.upper() + " ", "bold"), line.text)
    if line.kind == "output":
        return Text(line.text, style="dim")
    status = line.status or ""
    text = Text.assemble("    ", (f"{status:<12}", _STYLES.get(status, "")), line.text)
    if line.detail:
        text.append(f"  {line.detail}", style=_STYLES.get(status, ""))
    return text


def recap_table(result: ProvisionResult) -> Table:
    table = Table(title="Recap", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("host", no_wrap=True)
    for column in ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored"):
        table.add_column(column, justify="right")
    for name, stats in sorted(result.hosts.items()):
        bad = stats.failed or stats.unreachable
        table.add_row(
            name,
            str(stats.ok),
            str(stats.changed),
            str(stats.failed),
            str(stats.unreachable),
            str(stats.skipped),
            str(stats.rescued),
            str(stats.ignored),
            style="red" if bad else None,
        )
    return table


def print_summary(console: Console, result: ProvisionResult) -> None:
    """Recap table, the failed tasks again (they scroll away), and a one-line verdict."""
    if result.hosts:
        console.print()
        console.print(recap_table(result))
    if result.failed_tasks:
        console.print(Text("Failed tasks:", style="bold red"))
        for task in result.failed_tasks:
            console.print(
                Text.assemble(
                    "  ", (task.host, "bold"), f"  {task.play} / {task.task}: ", task.message
                ),
                soft_wrap=True,
            )
    if result.ok:
        verdict = Text.assemble(
            ("OK", "bold green"),
            f": {len(result.hosts)} host(s), {result.changed_total} change(s)",
        )
    else:
        hosts = ", ".join(result.failed_hosts) or "no host recap"
        verdict = Text.assemble(
            ("FAILED", "bold red"),
            f" (status={result.status}, rc={result.rc}; {hosts})",
        )
    console.print(verdict)
    console.print(Text(f"artifacts: {result.artifact_dir}", style="dim"), soft_wrap=True)


# --- model hashing -----------------------------------------------------------------------------


def is_live(console: Console) -> bool:
    """Whether `console` writes to a terminal a live display can redraw.

    Needs a real tty as well as rich's own test: FORCE_COLOR (set in many CI setups for colour)
    makes rich treat a pipe as a terminal, and a redrawn bar in a log file is noise.
    """
    isatty = getattr(console.file, "isatty", None)
    try:
        return console.is_interactive and isatty is not None and bool(isatty())
    except ValueError:  # a closed file
        return False


class _Transient:
    """Starts and stops an optional rich live display (`_live`) as a context manager."""

    _live: Progress | Status | None = None

    def __enter__(self) -> Self:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()


class ByteProgress(_Transient):
    """A progress bar (bytes, rate, ETA) usable as a hashing `progress(done, total)` callback.

    Shown only on a terminal (`is_live`); elsewhere it prints nothing and the callback does
    nothing, so logs and captured output stay clean. Thread-safe: the hashing workers call it
    directly.
    """

    def __init__(self, console: Console, description: str) -> None:
        self._progress: Progress | None = None
        if not is_live(console):
            return
        self._progress = self._live = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self._task = self._progress.add_task(description, total=None)

    @property
    def live(self) -> bool:
        return self._progress is not None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)


class RunStatus(_Transient):
    """An `on_event` callback that shows the running play and task on one transient line.

    Shown only on a terminal (`is_live`); elsewhere it prints nothing. A byte bar is not possible
    here: a module reports once, when it is done, so the events carry no bytes while a node
    hashes or fetches.
    """

    def __init__(self, console: Console, title: str) -> None:
        self._title = title
        self._play = ""
        self._status = self._live = console.status(title) if is_live(console) else None

    def __call__(self, event: dict[str, Any]) -> None:
        if self._status is None:
            return
        line = describe_event(event)
        if line is None:
            return
        if line.kind == "play":
            self._play = line.text
        elif line.kind in ("task", "handler"):
            where = " / ".join(part for part in (self._play, line.text) if part)
            self._status.update(Text(f"{self._title}: {where}", style="dim"))


_VERIFY_STYLES = {
    "missing": "bold red",
    "size_mismatch": "bold red",
    "hash_mismatch": "bold red",
    "unreadable": "bold magenta",
    "extra": "yellow",
}


def print_verify_report(console: Console, report: VerifyReport) -> None:
    """Every failing file by name, the extra files, then a one-line verdict."""
    for result in (*report.failures, *report.extras):
        console.print(
            Text.assemble(
                "  ",
                (f"{result.status:<14}", _VERIFY_STYLES.get(result.status, "")),
                (result.path, "bold"),
                f"  {result.describe()}",
            ),
            soft_wrap=True,
        )
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    listed = len(report.results) - len(report.extras)
    sizes = (
        f"{report.total_bytes / 1e9:.2f} GB; {report.hashed_bytes / 1e9:.2f} GB hashed, "
        f"{report.cached_bytes / 1e9:.2f} GB from cache, {report.elapsed_s:.1f} s, "
        f"{report.jobs} jobs"
    )
    if report.ok:
        verdict = Text.assemble(("OK", "bold green"), f": {listed} files match ({sizes})")
    else:
        counts = report.counts()
        bad = ", ".join(
            f"{counts[s]} {s.replace('_', ' ')}"
            for s in ("missing", "size_mismatch", "hash_mismatch", "unreadable")
            if counts.get(s)
        )
        verdict = Text.assemble(
            ("FAILED", "bold red"), f": {len(report.failures)} of {listed} files ({bad}; {sizes})"
        )
    if report.extras:
        verdict.append(f"; {len(report.extras)} extra file(s) left in place", style="yellow")
    console.print(verdict, soft_wrap=True)


def sync_table(result: SyncResult) -> Table:
    """Per node: verified or not, files, what was fetched, what was read back from its own disk
    to hash, and what the cache vouched for."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("node", no_wrap=True)
    table.add_column("verified")
    table.add_column("files", justify="right")
    table.add_column("fetched", justify="right")
    table.add_column("read back", justify="right")
    table.add_column("cache hits", justify="right")
    table.add_column("seconds", justify="right")
    for node in result.nodes:
        table.add_row(
            node.node,
            "yes" if node.verified else "NO",
            str(node.files),
            f"{node.files_fetched} ({decimal(node.bytes_fetched)})",
            decimal(node.bytes_read_back),
            decimal(node.bytes_cached),
            f"{node.seconds:.1f}",
            style=None if node.verified else "red",
        )
    return table


def print_sync_report(console: Console, result: SyncResult) -> None:
    """The per-node table, then every unverified node with its reason and files, then a verdict."""
    if result.nodes:
        console.print(sync_table(result))
    if any(n.files_fetched for n in result.nodes):
        console.print(
            Text(
                "  (a fetched file is hashed as it is received, never read back; 'read back' is "
                "what a node read from its own disk to hash: copies already in place, resumed "
                ".partial files)",
                style="dim",
            ),
            soft_wrap=True,
        )
    for node in result.unverified:
        console.print(Text.assemble(("  " + node.node, "bold"), f": {node.reason}"), soft_wrap=True)
        for problem in node.problems:
            console.print(
                Text.assemble(
                    "    ",
                    (f"{problem.status:<14}", _VERIFY_STYLES.get(problem.status, "")),
                    (problem.path, "bold"),
                    f"  {problem.message}",
                ),
                soft_wrap=True,
            )
    for node in result.nodes:
        if node.extras:
            console.print(
                Text(
                    f"  {node.node}: {len(node.extras)} extra file(s) left in place: "
                    + ", ".join(node.extras[:5])
                    + (" ..." if len(node.extras) > 5 else ""),
                    style="yellow",
                ),
                soft_wrap=True,
            )
    for served in result.served:
        console.print(
            Text(
                f"  {served.node}{' (head)' if served.head else ''} sent {served.bytes_sent} bytes "
                f"({decimal(served.bytes_sent)}) to {served.to or 'its successor'} = "
                f"{served.ratio:.2f} x the checkpoint",
                style="dim",
            ),
            soft_wrap=True,
        )
    head = result.head_served
    if head is not None:
        console.print(
            f"head sent {head.bytes_sent} bytes = {head.ratio:.2f} x checkpoint "
            f"(the chain: each node sends the checkpoint at most once, to the next)",
            soft_wrap=True,
        )
    fetched = sum(n.bytes_fetched for n in result.nodes)
    read_back = sum(n.bytes_read_back for n in result.nodes)
    if result.ok:
        size = max(n.bytes_total for n in result.nodes)
        verdict = Text.assemble(
            ("OK", "bold green"),
            f": {len(result.nodes)} node(s) verified ({decimal(size)} each); "
            f"{decimal(fetched)} fetched, {decimal(read_back)} read back to hash",
        )
    else:
        run = f"status={result.run.status}, rc={result.run.rc}"
        if result.unverified:
            what = "not verified: " + ", ".join(n.node for n in result.unverified)
        else:
            what = "no node ran the model stage" if not result.nodes else "the playbook failed"
            for task in result.run.failed_tasks:  # no node line explains these
                console.print(
                    Text.assemble("  ", (task.host, "bold"), f"  {task.task}: ", task.message),
                    soft_wrap=True,
                )
        verdict = Text.assemble(("FAILED", "bold red"), f": {what} ({run})")
    console.print(verdict, soft_wrap=True)
    console.print(Text(f"artifacts: {result.run.artifact_dir}", style="dim"), soft_wrap=True)


# --- the tool-call battery ---------------------------------------------------------------------


def battery_table(result: BatteryResult) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("case", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("detail")
    for case in result.cases:
        table.add_row(
            case.name,
            "pass" if case.ok else "FAIL",
            f"{case.seconds:.2f}",
            case.detail,
            style=None if case.ok else "red",
        )
    return table


def print_battery(console: Console, result: BatteryResult) -> None:
    """The per-case table, each failed case's response (trimmed), then a verdict."""
    console.print(battery_table(result))
    for case in result.cases:
        if not case.ok and case.response:
            console.print(Text(f"{case.name}: the response that failed", style="bold red"))
            console.print(Text(case.response), soft_wrap=True)
    where = f"{result.base_url} model {result.model}"
    if result.ok:
        verdict = Text.assemble(("OK", "bold green"), f": {len(result.cases)} case(s), {where}")
    else:
        failed = ", ".join(result.failed)
        verdict = Text.assemble(
            ("FAILED", "bold red"),
            f": {failed} ({len(result.failed)} of {len(result.cases)}), {where}",
        )
    console.print(verdict, soft_wrap=True)
