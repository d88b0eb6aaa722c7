"""Per-test times of a pytest run, one JSON per stage, for `make test`'s timing report.

Loaded with ``-p gx10._dev.pytest_timing``; it does nothing unless ``GX10_TEST_TIMING_DIR`` is
set. The run's stage (``--timing-stage``, else ``GX10_TEST_STAGE``, else ``pytest``) names the
file: ``<dir>/<stage>.json``, holding every test's nodeid, file, outcome and setup/call/teardown
seconds as pytest reports them (a fixture's setup counts to the test that first needed it), and
per file the tests' total time, the provision() runs by playbook and the pair restarts.

provision() runs are counted by wrapping it (`count_provisions`, installed by
tests/e2e/conftest.py); each run is kept in the running test's ``user_properties``, which
pytest-xdist sends to the controller with the test's reports. Only the controller writes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

DIR_ENV = "GX10_TEST_TIMING_DIR"
STAGE_ENV = "GX10_TEST_STAGE"
PROVISION_KEY = "gx10.provision"
HEAD = "gx10-a"
RANK_CONTAINER = "gx10-vllm"  # the serve role's name, supervised (systemd unit) or not
PROBE_TIMEOUT = 10.0

R = TypeVar("R")
Probe = Callable[[], str | None]

_current: pytest.Item | None = None  # the test running in this process, if any
_unattributed: list[dict[str, Any]] = []  # provision() runs outside any test


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timing-stage",
        default=None,
        help=f"name of this run in the timing report (default: ${STAGE_ENV}, else 'pytest')",
    )


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return
    stage = config.getoption("timing_stage") or os.environ.get(STAGE_ENV) or "pytest"
    # xdist workers record too (they run the tests) but only the controller, which gets every
    # worker's reports, writes the file.
    out = None if hasattr(config, "workerinput") else Path(directory) / f"{stage}.json"
    config.pluginmanager.register(Timing(stage, out), "gx10-test-timing")


def active(config: pytest.Config) -> bool:
    """Whether this run records: the plugin loaded and GX10_TEST_TIMING_DIR set. (Not whether
    pytest_configure registered the recorder: a conftest's pytest_configure may run first.)"""
    return bool(os.environ.get(DIR_ENV)) and config.pluginmanager.has_plugin(__name__)


class Timing:
    def __init__(self, stage: str, out: Path | None) -> None:
        self.stage = stage
        self.out = out
        self.started = time.time()
        self.tests: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        global _current  # noqa: PLW0603 - the provision() wrapper has no other way to the test
        _current = item
        try:
            return (yield)
        finally:
            _current = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        file = report.nodeid.partition("::")[0]
        test = self.tests.setdefault(
            report.nodeid, {"nodeid": report.nodeid, "file": file, "outcome": "passed"}
        )
        test[f"{report.when}_s"] = round(report.duration, 3)
        if report.when == "call":
            test["outcome"] = report.outcome
            if hasattr(report, "wasxfail"):
                test["outcome"] = "xfailed" if report.skipped else "xpassed"
        elif report.failed:
            test["outcome"] = "error"
        elif report.skipped:
            test["outcome"] = "skipped"
        # Each report carries the test's properties so far: the teardown's has every run.
        runs = [value for key, value in report.user_properties if key == PROVISION_KEY]
        if runs:
            test["provisions"] = runs

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        if self.out is None:
            return
        self.out.parent.mkdir(parents=True, exist_ok=True)
        document = summary(self.stage, self.tests.values(), _unattributed)
        document.update(exitstatus=int(exitstatus), seconds=round(time.time() - self.started, 3))
        self.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def summary(
    stage: str, tests: Iterable[dict[str, Any]], unattributed: Iterable[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The stage's JSON: its tests (with their total) and per file the sums the report shows."""
    rows = []
    files: dict[str, dict[str, Any]] = {}
    for test in tests:
        total = sum(test.get(f"{when}_s", 0.0) for when in ("setup", "call", "teardown"))
        rows.append({**test, "total_s": round(total, 3)})
        runs = test.get("provisions", [])
        one = files.setdefault(
            test["file"],
            {"tests": 0, "seconds": 0.0, "playbook_runs": Counter(), "pair_restarts": 0,
             "restarts_unknown": 0, "provision_seconds": 0.0},
        )  # fmt: skip
        one["tests"] += 1
        one["seconds"] = round(one["seconds"] + total, 3)
        one["playbook_runs"].update(run["playbook"] for run in runs)
        one["pair_restarts"] += sum(run["pair_restart"] is True for run in runs)
        one["restarts_unknown"] += sum(run["pair_restart"] is None for run in runs)
        one["provision_seconds"] = round(
            one["provision_seconds"] + sum(r["seconds"] for r in runs), 3
        )
    for one in files.values():
        one["playbook_runs"] = dict(sorted(one["playbook_runs"].items()))
    return {"stage": stage, "tests": rows, "files": files, "unattributed": list(unattributed)}


def record_provision(playbook: str, seconds: float, ok: bool, pair_restart: bool | None) -> None:
    """One provision() run, kept against the running test (or as unattributed)."""
    run = {
        "playbook": playbook,
        "seconds": round(seconds, 3),
        "ok": ok,
        "pair_restart": pair_restart,
    }
    if _current is None:
        _unattributed.append(run)
    else:
        _current.user_properties.append((PROVISION_KEY, run))


def restarted(before: str | None, after: str | None) -> bool | None:
    """A pair restart: a rank container after the run, not the one before (None: unknown)."""
    if before is None or after is None:
        return None
    return bool(after) and after != before


def parse_inspect(returncode: int, stdout: str, stderr: str) -> str | None:
    """`docker exec NODE docker inspect -f {{.Id}} C`: the id, "" for no such container, or None
    when the answer is something else (node down, daemon busy)."""
    out = stdout.strip()
    if returncode == 0 and re.fullmatch(r"[0-9a-f]{64}", out):
        return out
    if returncode != 0 and "No such object" in stderr:
        return ""
    return None


def head_rank_id(node: str = HEAD, container: str = RANK_CONTAINER) -> str | None:
    """The head's rank container id: one `docker exec`, bounded; never raises."""
    try:
        proc = subprocess.run(
            ["docker", "exec", node, "docker", "inspect", "-f", "{{.Id}}", container],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_inspect(proc.returncode, proc.stdout, proc.stderr)


def counting(
    provision: Callable[..., R],
    probe: Probe,
    record: Callable[[str, float, bool, bool | None], None] = record_provision,
) -> Callable[..., R]:
    """`provision`, recording each run: playbook, seconds (the run alone), ok, pair restart."""

    @functools.wraps(provision)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        playbook = args[1] if len(args) > 1 else kwargs.get("playbook", "site.yml")
        before = probe()
        started = time.monotonic()
        ok = False
        try:
            result = provision(*args, **kwargs)
            ok = bool(getattr(result, "ok", False))
            return result
        finally:
            seconds = time.monotonic() - started
            record(Path(str(playbook)).name, seconds, ok, restarted(before, probe()))

    return wrapper


def count_provisions(
    modules: Iterable[ModuleType], probe: Probe = head_rank_id
) -> Callable[[], None]:
    """Replace `provision` in each module that holds gx10's own with one counting wrapper (the
    modules that imported it by name keep their binding, so name them all); returns the undo."""
    from gx10.provision import provision  # noqa: PLC0415 - pytest loads this plugin first

    wrapped = counting(provision, probe)
    patched = [module for module in modules if getattr(module, "provision", None) is provision]
    for module in patched:
        module.provision = wrapped  # type: ignore[attr-defined]

    def undo() -> None:
        for module in patched:
            module.provision = provision  # type: ignore[attr-defined]

    return undo
