"""Run a playbook through ansible-runner and return a typed result.

Setup problems (no project home, unknown playbook or inventory, no ansible-playbook) raise a
`Gx10Error`. A playbook that runs and fails is not an exception: the result has `ok == False`,
per-host counts and the tasks that failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from uuid import uuid4

import ansible_runner
from ansible_runner.exceptions import ConfigurationError

from gx10.errors import (
    InventoryNotFoundError,
    LimitError,
    PlaybookNotFoundError,
    RunnerSetupError,
)
from gx10.paths import ansible_cfg, playbooks_dir, project_home

EventHandler = Callable[[dict[str, Any]], object]
"""Receives every ansible-runner event dict as it arrives; the return value is ignored."""

PathLike = str | os.PathLike[str]

_PLAYBOOK_SUFFIXES = (".yml", ".yaml")
# Long stderr (tracebacks, command output) ends with the useful part; keep the tail.
_MESSAGE_LIMIT = 500


@dataclass(frozen=True, slots=True)
class HostStats:
    """One host's line of the play recap."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True, slots=True)
class FailedTask:
    """A task that failed on a host (or could not reach it), and was neither ignored nor rescued."""

    host: str
    task: str
    message: str
    play: str


@dataclass(frozen=True, slots=True)
class ProvisionResult:
    ok: bool
    """True only if runner reports success, ansible-playbook exited 0 and no host failed."""
    status: str
    """ansible-runner status: successful, failed, timeout or canceled."""
    rc: int
    hosts: Mapping[str, HostStats]
    failed_tasks: tuple[FailedTask, ...]
    artifact_dir: Path
    """This run's ansible-runner artifacts (stdout, job_events/, command, status, rc)."""

    @property
    def changed_total(self) -> int:
        return sum(stats.changed for stats in self.hosts.values())

    @property
    def failed_hosts(self) -> tuple[str, ...]:
        """Hosts with a failed task or that were unreachable, sorted."""
        return tuple(sorted(name for name, s in self.hosts.items() if s.failed or s.unreachable))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "status": self.status,
            "rc": self.rc,
            "changed_total": self.changed_total,
            "failed_hosts": list(self.failed_hosts),
            "hosts": {name: asdict(stats) for name, stats in sorted(self.hosts.items())},
            "failed_tasks": [asdict(task) for task in self.failed_tasks],
            "artifact_dir": str(self.artifact_dir),
        }


def with_controller(
    limit: str | None,
    inventory: Path | None = None,
    envvars: Mapping[str, str] | None = None,
) -> str | None:
    """A node limit plus `localhost`, where the pipeline's controller-side plays run.

    Ansible applies a limit's exclusions (`!x`) and intersections (`&x`) after the union of its
    other patterns, to every host: `!gx10-b,localhost` selects localhost alone, and an
    intersection would drop localhost too. Such a limit is resolved against `inventory` to the
    nodes it selects (`limit_hosts`), and localhost is added to those; LimitError when it
    selects none.
    """
    if not limit or limit.strip() in ("all", "*"):
        return limit
    patterns = [p.strip() for p in limit.replace(":", ",").split(",") if p.strip()]
    if not any(p.startswith(("!", "&")) for p in patterns):
        return limit if "localhost" in patterns else f"{limit},localhost"
    if inventory is None:
        raise LimitError(f"limit {limit!r}: an exclusion or intersection needs the inventory")
    hosts = [h for h in limit_hosts(inventory, limit, envvars or {}) if h != "localhost"]
    if not hosts:
        raise LimitError(
            f"limit {limit!r} selects no node of inventory {inventory}: name at least one of "
            "its nodes (`ansible all -i INVENTORY --limit LIMIT --list-hosts` shows the selection)"
        )
    return ",".join([*hosts, "localhost"])


def limit_hosts(inventory: Path, limit: str, envvars: Mapping[str, str]) -> list[str]:
    """The inventory hosts `limit` selects, as ansible-playbook's --limit selects them (asked
    of `ansible --list-hosts` with the same configuration)."""
    env = {**os.environ, **envvars}
    beside = Path(sys.executable).parent / "ansible"  # as _ansible_on_path() prefers it
    ansible = str(beside) if beside.is_file() else shutil.which("ansible", path=env.get("PATH"))
    if ansible is None:
        raise RunnerSetupError("ansible not found on PATH; install ansible-core")
    done = subprocess.run(
        [ansible, "all", "-i", str(inventory), "--limit", limit, "--list-hosts"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        if "no hosts" in (done.stdout + done.stderr).lower():
            return []
        raise LimitError(f"limit {limit!r}: ansible could not read it: {done.stderr.strip()}")
    lines = done.stdout.splitlines()
    return [line.strip() for line in lines if line.startswith("    ") and line.strip()]


def provision(
    inventory: PathLike,
    playbook: PathLike = "site.yml",
    *,
    limit: str | None = None,
    tags: str | Sequence[str] | None = None,
    skip_tags: str | Sequence[str] | None = None,
    extravars: Mapping[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    on_event: EventHandler | None = None,
    verbosity: int = 0,
    artifact_dir: PathLike | None = None,
) -> ProvisionResult:
    """Run `playbook` against `inventory` with the project's ansible.cfg.

    `limit` selects nodes; the controller's own plays (validate, smoke) always run, so
    `localhost` is added to it.

    `artifact_dir` is the root that ansible-runner uses as its private data dir; each run writes
    `<root>/artifacts/<ident>/`. Without it a fresh temporary directory is used and kept, so the
    artifacts of a failed run can be read afterwards (`result.artifact_dir`).
    """
    home = project_home()
    playbook_path = resolve_playbook(playbook, home)
    inventory_path = resolve_inventory(inventory, home)
    envvars = {"ANSIBLE_CONFIG": str(ansible_cfg(home)), **_ansible_on_path()}
    private_dir = _private_data_dir(artifact_dir)

    cmdline = [flag for flag, wanted in (("--check", check), ("--diff", diff)) if wanted]
    collector = _EventCollector(on_event)
    try:
        with _keep_signal_handlers():
            runner = ansible_runner.run(
                private_data_dir=str(private_dir),
                project_dir=str(home),
                playbook=str(playbook_path),
                inventory=str(inventory_path),
                envvars=envvars,
                extravars=dict(extravars) if extravars else None,
                limit=with_controller(limit, inventory_path, envvars),
                tags=_join(tags),
                skip_tags=_join(skip_tags),
                verbosity=verbosity or None,
                cmdline=shlex.join(cmdline) if cmdline else None,
                ident=f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid4().hex[:8]}",
                event_handler=collector,
                # Without this, runner writes envvars/extravars/settings to <private_dir>/env/.
                suppress_env_files=True,
                quiet=True,
            )
    except (ConfigurationError, ValueError) as exc:
        raise RunnerSetupError(f"ansible-runner setup failed: {exc}") from exc

    run_artifacts = Path(runner.config.artifact_dir)
    _scrub_command_artifact(run_artifacts, envvars)
    result = collector.result(status=str(runner.status), rc=int(runner.rc), artifacts=run_artifacts)
    if collector.handler_error is not None:
        # The callback is ours to call but not ours to silence: re-raise once the run is over,
        # pointing at the result a caller would otherwise have lost.
        collector.handler_error.add_note(
            f"gx10: the playbook run finished (status={result.status}, ok={result.ok}); "
            f"artifacts in {result.artifact_dir}"
        )
        raise collector.handler_error
    return result


def resolve_playbook(playbook: PathLike, home: Path) -> Path:
    """Map "site", "site.yml" or an absolute path to an existing playbook file."""
    given = Path(playbook)
    if given.is_absolute():
        if given.is_file():
            return given
        raise PlaybookNotFoundError(f"playbook {given} does not exist")
    base = playbooks_dir(home)
    candidates = [base / given]
    if given.suffix not in _PLAYBOOK_SUFFIXES:
        candidates += [base / f"{given}{suffix}" for suffix in _PLAYBOOK_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    available = sorted(
        p.name for p in base.iterdir() if p.is_file() and p.suffix in _PLAYBOOK_SUFFIXES
    )
    raise PlaybookNotFoundError(
        f"unknown playbook {str(playbook)!r}; available in {base}: "
        f"{', '.join(available) if available else '(none)'}"
    )


def resolve_inventory(inventory: PathLike, home: Path) -> Path:
    """Resolve an inventory file or directory: as given (absolute or from cwd), then under home."""
    given = Path(inventory).expanduser()
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, home / given]
    candidates = list(dict.fromkeys(candidates))  # cwd may be the home
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    searched = " or ".join(str(c) for c in candidates)
    hint = ""
    inventories = home / "inventories"
    if inventories.is_dir():
        names = sorted(f"inventories/{p.name}" for p in inventories.iterdir())
        hint = f"; inventories in the project: {', '.join(names) if names else '(none)'}"
    raise InventoryNotFoundError(
        f"inventory {str(inventory)!r} not found (looked for {searched}){hint}"
    )


def task_message(res: Mapping[str, Any]) -> str:
    """A one-line-ish reason for a failed or unreachable task result.

    `msg` first; command-like results add their stderr (or stdout), because "non-zero return
    code" alone does not say what went wrong. Loops report their first failed item.
    """
    msg = str(res.get("msg") or "").strip()
    results = res.get("results")
    if isinstance(results, list):
        failed_items = [r for r in results if isinstance(r, Mapping) and r.get("failed")]
        if failed_items:
            item = task_message(failed_items[0])
            return f"{msg}: {item}" if msg else item
    output = ""
    for key in ("stderr", "module_stderr", "stdout", "module_stdout"):
        text = str(res.get(key) or "").strip()
        if text:
            output = _trim(text)
            break
    if msg and output:
        return f"{msg}: {output}"
    return msg or output or "(no message)"


class _EventCollector:
    """The ansible-runner event_handler: records failures and the recap, forwards to on_event."""

    def __init__(self, on_event: EventHandler | None) -> None:
        self._on_event = on_event
        self._failures: list[tuple[Literal["failed", "unreachable"], FailedTask]] = []
        self._stats: Mapping[str, Any] | None = None
        self.handler_error: Exception | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        name = event.get("event")
        data = event.get("event_data") or {}
        if name == "runner_on_failed" and not data.get("ignore_errors"):
            self._failures.append(("failed", _failed_task(data)))
        elif name == "runner_on_unreachable":
            self._failures.append(("unreachable", _failed_task(data)))
        elif name == "playbook_on_stats":
            self._stats = data
        if self._on_event is not None and self.handler_error is None:
            # An exception escaping here would unwind ansible-runner's read loop and orphan
            # ansible-playbook; keep the run going and re-raise afterwards.
            try:
                self._on_event(event)
            except Exception as exc:
                self.handler_error = exc
        return True  # keep the event in artifacts/<ident>/job_events/

    def result(self, *, status: str, rc: int, artifacts: Path) -> ProvisionResult:
        hosts = _host_stats(self._stats) if self._stats is not None else {}
        failed_tasks = self._unrecovered_failures(hosts if self._stats is not None else None)
        host_failed = any(s.failed or s.unreachable for s in hosts.values())
        return ProvisionResult(
            ok=status == "successful" and rc == 0 and not host_failed,
            status=status,
            rc=rc,
            hosts=MappingProxyType(hosts),
            failed_tasks=failed_tasks,
            artifact_dir=artifacts,
        )

    def _unrecovered_failures(
        self, hosts: Mapping[str, HostStats] | None
    ) -> tuple[FailedTask, ...]:
        """Drop failures that a block's `rescue` recovered.

        Events do not say whether a failure was rescued, but the recap does: a host's `failed`
        count is its unrescued failures, and a host stops at its first unrescued failure, so
        those are its last `failed` failure events. Same for `unreachable`.
        """
        if hosts is None:  # the run ended without a recap: report every failure seen
            return tuple(task for _, task in self._failures)
        by_host: dict[tuple[str, str], list[int]] = {}
        for index, (kind, task) in enumerate(self._failures):
            by_host.setdefault((task.host, kind), []).append(index)
        keep: set[int] = set()
        for (host, failure_kind), indexes in by_host.items():
            stats = hosts.get(host, HostStats())
            count = stats.failed if failure_kind == "failed" else stats.unreachable
            if count > 0:
                keep.update(indexes[-count:])
        return tuple(task for index, (_, task) in enumerate(self._failures) if index in keep)


def _failed_task(data: Mapping[str, Any]) -> FailedTask:
    res = data.get("res")
    return FailedTask(
        host=str(data.get("host", "")),
        task=str(data.get("task", "")),
        message=task_message(res if isinstance(res, Mapping) else {}),
        play=str(data.get("play", "")),
    )


# HostStats field -> key of ansible's playbook_on_stats event data.
_STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failed": "failures",
    "unreachable": "dark",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


def _host_stats(stats: Mapping[str, Any]) -> dict[str, HostStats]:
    per_key = {field: stats.get(key) or {} for field, key in _STATS_KEYS.items()}
    names = set(stats.get("processed") or {})
    for counts in per_key.values():
        names.update(counts)
    return {
        name: HostStats(**{field: int(counts.get(name, 0)) for field, counts in per_key.items()})
        for name in sorted(names)
    }


def _ansible_on_path() -> dict[str, str]:
    """Make runner use the ansible-playbook installed next to this interpreter.

    Runner spawns `ansible-playbook` from PATH; a venv's gx10 started without activating the
    venv would otherwise fail with rc 127 or pick up an unrelated ansible.
    """
    bindir = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (bindir / "ansible-playbook").is_file():
        if path.split(os.pathsep)[0] == str(bindir):
            return {}
        return {"PATH": os.pathsep.join(filter(None, (str(bindir), path)))}
    if shutil.which("ansible-playbook") is None:
        raise RunnerSetupError(
            f"ansible-playbook not found next to {sys.executable} or on PATH; "
            "install ansible-core in this environment"
        )
    return {}


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """Undo ansible-runner's SIGINT/SIGTERM handlers once the run is over.

    Runner installs handlers that only set a cancel flag for the run, and never restores the old
    ones; afterwards Ctrl-C in the calling process would be swallowed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed outside Python, cannot be restored
                signal.signal(sig, handler)


def _private_data_dir(artifact_dir: PathLike | None) -> Path:
    if artifact_dir is None:
        return Path(tempfile.mkdtemp(prefix="gx10-run-"))
    root = Path(artifact_dir).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise RunnerSetupError(f"cannot create artifact directory {root}: {exc}") from exc
    return root


def _scrub_command_artifact(run_artifacts: Path, envvars: Mapping[str, str]) -> None:
    """Drop the inherited environment from artifacts/<ident>/command.

    Runner records the full environment of ansible-playbook there, which includes whatever
    tokens the caller's shell exports; keep only the variables we set.
    """
    command_file = run_artifacts / "command"
    try:
        data = json.loads(command_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and "env" in data:
        data["env"] = dict(envvars)
        command_file.write_text(json.dumps(data), encoding="utf-8")


def _join(values: str | Sequence[str] | None) -> str | None:
    if values is None or isinstance(values, str):
        return values or None
    return ",".join(values) or None


def _trim(text: str) -> str:
    if len(text) <= _MESSAGE_LIMIT:
        return text
    return "…" + text[-_MESSAGE_LIMIT:]
