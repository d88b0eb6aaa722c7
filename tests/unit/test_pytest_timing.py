"""gx10._dev.pytest_timing: per-test times and provision() runs, written by the controller only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

import gx10
from gx10._dev import pytest_timing

REPO = Path(__file__).resolve().parents[2]
RANK_A, RANK_B = "a" * 64, "b" * 64


def _recorder() -> tuple[list[tuple[Any, ...]], Any]:
    runs: list[tuple[Any, ...]] = []
    return runs, lambda *run: runs.append(run)


class _Result:
    def __init__(self, ok: bool) -> None:
        self.ok = ok


def test_each_run_is_recorded_with_its_playbook_result_and_restart() -> None:
    runs, record = _recorder()
    ids = iter([RANK_A, RANK_A, RANK_A, RANK_B, None, RANK_B, RANK_B, ""])
    wrapped = pytest_timing.counting(
        lambda *a, **k: _Result(k.get("ok", True)), lambda: next(ids), record
    )

    wrapped("inv", "serve.yml")  # same container: no restart
    wrapped("inv", Path("playbooks/serve.yml"), ok=False)  # a new container: a restart
    wrapped("inv", playbook="stop.yml")  # docker did not answer before: unknown
    wrapped("inv")  # provision's default playbook; the pair stopped: no restart

    assert [(p, ok, restart) for p, _, ok, restart in runs] == [
        ("serve.yml", True, False),
        ("serve.yml", False, True),
        ("stop.yml", True, None),
        ("site.yml", True, False),
    ]
    assert all(seconds >= 0 for _, seconds, _, _ in runs)


def test_a_run_that_raises_is_recorded_as_not_ok_and_raises() -> None:
    runs, record = _recorder()

    def broken(*args: object, **kwargs: object) -> object:
        raise gx10.InventoryNotFoundError("no inventory")

    with pytest.raises(gx10.InventoryNotFoundError):
        pytest_timing.counting(broken, lambda: RANK_A, record)("inv", "site.yml")
    assert [(p, ok, restart) for p, _, ok, restart in runs] == [("site.yml", False, False)]


@pytest.mark.parametrize(
    ("returncode", "stdout", "stderr", "expected"),
    [
        (0, RANK_A + "\n", "", RANK_A),
        (1, "", "Error: No such object: gx10-vllm\n", ""),
        (1, "", "Error response from daemon: container gx10-a is not running\n", None),
        (0, "template: error\n", "", None),
    ],
)
def test_the_head_rank_id_is_known_absent_or_unknown(
    returncode: int, stdout: str, stderr: str, expected: str | None
) -> None:
    assert pytest_timing.parse_inspect(returncode, stdout, stderr) == expected


def test_a_docker_that_hangs_gives_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired("docker", pytest_timing.PROBE_TIMEOUT)

    monkeypatch.setattr(subprocess, "run", hang)
    assert pytest_timing.head_rank_id() is None


def test_count_provisions_replaces_gx10s_provision_where_bound_and_undoes_it() -> None:
    original = gx10.provision
    holder = types.ModuleType("holder")
    holder.provision = original  # type: ignore[attr-defined]
    other = types.ModuleType("other")
    other.provision = print  # type: ignore[attr-defined] # not gx10's: left alone
    undo = pytest_timing.count_provisions([holder, other], probe=lambda: None)
    try:
        assert holder.provision.__wrapped__ is original
        assert other.provision is print
        assert gx10.provision is original  # only the modules named
    finally:
        undo()
    assert holder.provision is original


def test_the_summary_sums_each_file() -> None:
    restart = {"playbook": "serve.yml", "seconds": 20.0, "ok": True, "pair_restart": True}
    unknown = {"playbook": "site.yml", "seconds": 60.0, "ok": True, "pair_restart": None}
    tests = [
        {"nodeid": "t/test_a.py::one", "file": "t/test_a.py", "outcome": "passed",
         "setup_s": 61.0, "call_s": 21.0, "teardown_s": 0.5, "provisions": [unknown, restart]},
        {"nodeid": "t/test_a.py::two", "file": "t/test_a.py", "outcome": "error", "setup_s": 1.0},
        {"nodeid": "t/test_b.py::one", "file": "t/test_b.py", "outcome": "passed", "call_s": 2.0,
         "provisions": [restart]},
    ]  # fmt: skip
    document = pytest_timing.summary("e2e", tests)
    assert [t["total_s"] for t in document["tests"]] == [82.5, 1.0, 2.0]
    assert document["files"]["t/test_a.py"] == {
        "tests": 2,
        "seconds": 83.5,
        "playbook_runs": {"serve.yml": 1, "site.yml": 1},
        "pair_restarts": 1,
        "restarts_unknown": 1,
        "provision_seconds": 80.0,
    }
    assert document["files"]["t/test_b.py"]["pair_restarts"] == 1


def test_a_worker_records_but_never_writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(pytest_timing.DIR_ENV, str(tmp_path))
    registered: list[object] = []
    worker = types.SimpleNamespace(
        workerinput={"workerid": "gw0"},
        getoption=lambda name: "unit",
        pluginmanager=types.SimpleNamespace(
            register=lambda plugin, name: registered.append(plugin)
        ),
    )
    pytest_timing.pytest_configure(worker)  # type: ignore[arg-type]
    (timing,) = registered
    assert isinstance(timing, pytest_timing.Timing)
    timing.pytest_sessionfinish(0)
    assert list(tmp_path.iterdir()) == []


def _run_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    """pytest in a subprocess on the files in tmp_path/run; the stage JSON it wrote."""
    out = tmp_path / "timing"
    monkeypatch.setenv(pytest_timing.DIR_ENV, str(out))
    monkeypatch.delenv(pytest_timing.STAGE_ENV, raising=False)
    # This checkout's gx10, whichever the venv installed.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "gx10._dev.pytest_timing", "--timing-stage", "demo", *args],
        cwd=tmp_path / "run", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the demo has a failure
    (written,) = out.iterdir()
    assert written.name == "demo.json"
    document: dict[str, Any] = json.loads(written.read_text())
    return document


def _write(root: Path, files: dict[str, str]) -> None:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))


def test_under_xdist_the_controller_writes_every_workers_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(
        tmp_path / "run",
        {
            "test_one.py": """
                import time
                import pytest
                from gx10._dev.pytest_timing import record_provision

                @pytest.fixture(scope="module")
                def slow():
                    time.sleep(0.3)
                    record_provision("site.yml", 0.3, True, True)
                    yield
                    record_provision("stop.yml", 0.1, True, False)

                def test_first(slow):
                    record_provision("serve.yml", 0.1, False, None)

                def test_second(slow):
                    assert False
            """,
            "test_two.py": """
                import pytest

                @pytest.fixture
                def broken():
                    raise RuntimeError("setup")

                def test_error(broken):
                    pass

                def test_skipped():
                    pytest.skip("no")
            """,
        },
    )
    document = _run_pytest(tmp_path, monkeypatch, "-n", "2", "--dist", "loadfile")
    tests = {t["nodeid"]: t for t in document["tests"]}
    assert {n: t["outcome"] for n, t in tests.items()} == {
        "test_one.py::test_first": "passed",
        "test_one.py::test_second": "failed",
        "test_two.py::test_error": "error",
        "test_two.py::test_skipped": "skipped",
    }
    first = tests["test_one.py::test_first"]
    assert first["setup_s"] >= 0.3  # the module fixture's setup counts to its first test
    assert [r["playbook"] for r in first["provisions"]] == ["site.yml", "serve.yml"]
    # The module fixture's teardown runs in the last test's teardown.
    assert [r["playbook"] for r in tests["test_one.py::test_second"]["provisions"]] == ["stop.yml"]
    assert document["files"]["test_one.py"]["playbook_runs"] == {
        "serve.yml": 1,
        "site.yml": 1,
        "stop.yml": 1,
    }
    assert document["files"]["test_one.py"]["pair_restarts"] == 1
    assert document["files"]["test_one.py"]["restarts_unknown"] == 1
    assert document["stage"] == "demo"
    assert document["exitstatus"] == 1


def test_a_conftest_counts_the_provision_a_test_module_imported_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As tests/e2e/conftest.py installs it: in its pytest_configure, which runs before the
    plugin's own, and before the test modules' `from gx10 import provision`."""
    _write(
        tmp_path / "run",
        {
            "conftest.py": """
                import sys
                import gx10
                from gx10 import provision
                from gx10._dev import pytest_timing

                def pytest_configure(config):
                    assert pytest_timing.active(config)
                    modules = (gx10, sys.modules["gx10.provision"], sys.modules[__name__])
                    config.add_cleanup(pytest_timing.count_provisions(modules, lambda: None))
            """,
            "test_it.py": """
                import pytest
                from gx10 import provision

                def test_a_run():
                    assert provision.__wrapped__
                    provision("/nonexistent/inventory", "serve.yml")
            """,
        },
    )
    document = _run_pytest(tmp_path, monkeypatch)
    (test,) = document["tests"]
    assert [(r["playbook"], r["ok"], r["pair_restart"]) for r in test["provisions"]] == [
        ("serve.yml", False, None)
    ]
