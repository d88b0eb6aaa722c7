"""gx10.provision against real ansible-playbook runs on localhost.

Each run costs about a second, so the runs are module-scoped fixtures shared by the assertions.
The project home they run in (the `home` fixture) comes from conftest.py and mini_project.py.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mini_project import SECRET

from gx10 import (
    FailedTask,
    HostStats,
    InventoryNotFoundError,
    PlaybookNotFoundError,
    ProjectNotFoundError,
    ProvisionResult,
    provision,
)
from gx10.errors import LimitError
from gx10.paths import ansible_cfg, project_home
from gx10.provision import resolve_inventory, task_message, with_controller


@dataclass(frozen=True)
class Run:
    result: ProvisionResult
    events: list[dict[str, Any]]
    marker: Path
    root: Path

    def host_results(self, task: str) -> list[dict[str, Any]]:
        """The `res` of every per-host result event of one task."""
        return [
            e["event_data"]["res"]
            for e in self.events
            if e["event"].startswith("runner_on_") and e["event_data"].get("task") == task
            if "res" in e["event_data"]
        ]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


def _run(home: Path, workdir: Path, name: str, **kwargs: Any) -> Run:
    events: list[dict[str, Any]] = []
    marker = workdir / f"{name}.marker"
    root = workdir / f"{name}-artifacts"
    result = provision(
        kwargs.pop("inventory", "inventories/local"),  # relative: resolved against the home
        kwargs.pop("playbook", "converge.yml"),
        extravars={"marker_path": str(marker)},
        on_event=events.append,
        artifact_dir=root,
        **kwargs,
    )
    return Run(result, events, marker, root)


@pytest.fixture(scope="module")
def converged(home: Path, workdir: Path) -> tuple[Run, object, object]:
    before = signal.getsignal(signal.SIGINT)
    run = _run(home, workdir, "converge")
    return run, before, signal.getsignal(signal.SIGINT)


@pytest.fixture(scope="module")
def checked(home: Path, workdir: Path) -> Run:
    return _run(home, workdir, "check", check=True, diff=True)


@pytest.fixture(scope="module")
def broken(home: Path, workdir: Path) -> Run:
    return _run(home, workdir, "broken", playbook="broken")


@pytest.fixture(scope="module")
def half_dead(home: Path, workdir: Path) -> Run:
    # No artifact_dir: the default is a fresh temp dir, pointed at workdir to keep /tmp clean.
    events: list[dict[str, Any]] = []
    marker = workdir / "mixed.marker"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(workdir))
        result = provision(
            home / "inventories" / "mixed.yml",
            home / "playbooks" / "converge.yml",
            extravars={"marker_path": str(marker)},
            on_event=events.append,
        )
    return Run(result, events, marker, result.artifact_dir.parent.parent)


# --- a successful run ------------------------------------------------------------------------


def test_successful_run_counts_one_change_and_one_ok(converged: tuple[Run, object, object]) -> None:
    run = converged[0]
    assert run.result.ok is True
    assert (run.result.status, run.result.rc) == ("successful", 0)
    assert dict(run.result.hosts) == {"localhost": HostStats(ok=2, changed=1)}
    assert run.result.changed_total == 1
    assert run.result.failed_hosts == ()
    assert run.result.failed_tasks == ()
    assert run.marker.read_text() == "hello\n"


def test_project_ansible_cfg_applies(converged: tuple[Run, object, object]) -> None:
    (res,) = converged[0].host_results("Report the run mode")
    assert res["msg"] == "check=False forks=7"


def test_on_event_sees_every_event_in_order(converged: tuple[Run, object, object]) -> None:
    names = [e["event"] for e in converged[0].events]
    assert names[0] == "playbook_on_start"
    assert names[-1] == "playbook_on_stats"
    assert names.count("playbook_on_task_start") == 2
    counters = [e["counter"] for e in converged[0].events]
    assert counters == sorted(counters)


def test_artifacts_land_under_the_given_root(converged: tuple[Run, object, object]) -> None:
    run = converged[0]
    assert run.result.artifact_dir.parent == run.root / "artifacts"
    assert (run.result.artifact_dir / "status").read_text() == "successful"
    assert list((run.result.artifact_dir / "job_events").glob("*.json"))


def test_no_env_files_or_environment_in_artifacts(converged: tuple[Run, object, object]) -> None:
    run = converged[0]
    assert not (run.root / "env").exists()
    files = [p for p in run.root.rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files)
    leaks = [p for p in files if SECRET in p.read_text(errors="replace")]
    assert leaks == []
    command = json.loads((run.result.artifact_dir / "command").read_text())
    assert set(command["env"]) <= {"ANSIBLE_CONFIG", "PATH"}


def test_signal_handlers_are_restored(converged: tuple[Run, object, object]) -> None:
    _, before, after = converged
    assert after is before


def test_result_is_frozen_and_json_serialisable(converged: tuple[Run, object, object]) -> None:
    result = converged[0].result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.ok = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.hosts["other"] = HostStats()  # type: ignore[index]
    assert json.loads(json.dumps(result.to_dict())) == {
        "ok": True,
        "status": "successful",
        "rc": 0,
        "changed_total": 1,
        "failed_hosts": [],
        "hosts": {
            "localhost": {
                "ok": 2,
                "changed": 1,
                "failed": 0,
                "unreachable": 0,
                "skipped": 0,
                "rescued": 0,
                "ignored": 0,
            }
        },
        "failed_tasks": [],
        "artifact_dir": str(result.artifact_dir),
    }


# --- check mode ------------------------------------------------------------------------------


def test_check_mode_reports_but_does_not_change(checked: Run) -> None:
    assert checked.result.ok is True
    assert dict(checked.result.hosts) == {"localhost": HostStats(ok=2, changed=1)}
    assert not checked.marker.exists()
    (res,) = checked.host_results("Report the run mode")
    assert res["msg"] == "check=True forks=7"


def test_diff_is_passed(checked: Run) -> None:
    (res,) = checked.host_results("Write the marker file")
    diffs = res["diff"] if isinstance(res["diff"], list) else [res["diff"]]
    assert any(d.get("after") == "hello\n" for d in diffs)


# --- a failing play --------------------------------------------------------------------------


def test_failed_play_is_a_result_not_an_exception(broken: Run) -> None:
    assert broken.result.ok is False
    assert broken.result.status == "failed"
    assert broken.result.rc != 0
    assert dict(broken.result.hosts) == {
        "localhost": HostStats(ok=2, failed=1, rescued=1, ignored=1)
    }
    assert broken.result.failed_hosts == ("localhost",)


def test_only_the_unrecovered_failure_is_reported(broken: Run) -> None:
    # The rescued and the ignored failure are not in the list; the real one carries stderr.
    assert broken.result.failed_tasks == (
        FailedTask(
            host="localhost",
            task="Run a failing command",
            message="non-zero return code: to-stderr",
            play="Break things",
        ),
    )


# --- an unreachable host ---------------------------------------------------------------------


def test_unreachable_host_fails_the_run(half_dead: Run) -> None:
    result = half_dead.result
    assert result.ok is False
    assert dict(result.hosts) == {
        "localhost": HostStats(ok=2, changed=1),
        "ghost": HostStats(unreachable=1),
    }
    assert result.failed_hosts == ("ghost",)
    (failure,) = result.failed_tasks
    assert (failure.host, failure.task, failure.play) == (
        "ghost",
        "Write the marker file",
        "Converge localhost",
    )
    assert "Failed to connect to the host via ssh" in failure.message
    assert half_dead.marker.read_text() == "hello\n"  # the reachable host still converged


def test_default_artifacts_go_to_a_fresh_temp_dir(half_dead: Run, workdir: Path) -> None:
    assert half_dead.root.parent == workdir
    assert half_dead.root.name.startswith("gx10-run-")
    assert not (half_dead.root / "env").exists()


# --- an on_event callback that raises ------------------------------------------------------


def test_on_event_errors_surface_after_the_run(home: Path, workdir: Path) -> None:
    marker = workdir / "raising.marker"

    def explode(event: dict[str, Any]) -> None:
        raise RuntimeError(f"renderer bug on {event['event']}")

    with pytest.raises(RuntimeError, match="renderer bug on playbook_on_start") as info:
        provision(
            "inventories/local",
            "converge",
            extravars={"marker_path": str(marker)},
            on_event=explode,
            artifact_dir=workdir / "raising-artifacts",
        )
    assert "status=successful, ok=True" in "".join(info.value.__notes__)
    assert marker.read_text() == "hello\n"  # the run itself went on


# --- setup errors: raised before anything runs ----------------------------------------------


def test_unknown_playbook_lists_the_available_ones(home: Path) -> None:
    with pytest.raises(PlaybookNotFoundError, match=r"'nope'.*broken\.yml, converge\.yml"):
        provision("inventories/local", "nope")


def test_missing_absolute_playbook(home: Path) -> None:
    with pytest.raises(PlaybookNotFoundError, match="does not exist"):
        provision("inventories/local", home / "playbooks" / "gone.yml")


def test_missing_inventory(home: Path) -> None:
    with pytest.raises(InventoryNotFoundError, match=r"'inventories/nope'.*inventories/local"):
        provision("inventories/nope", "converge")


def test_relative_inventory_prefers_the_cwd(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_inventory("inventories/local", home) == home / "inventories" / "local"
    (tmp_path / "inventories" / "local").mkdir(parents=True)
    assert resolve_inventory("inventories/local", home) == tmp_path / "inventories" / "local"


def test_project_home_must_hold_ansible_cfg_and_playbooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GX10_HOME", str(tmp_path))
    with pytest.raises(ProjectNotFoundError, match=r"missing ansible\.cfg"):
        provision("inventories/local")
    (tmp_path / "ansible.cfg").write_text("")
    with pytest.raises(ProjectNotFoundError, match="missing playbooks/"):
        project_home()
    (tmp_path / "playbooks").mkdir()
    assert project_home() == tmp_path.resolve()


def test_project_home_defaults_to_the_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GX10_HOME", raising=False)
    assert project_home() == Path(__file__).resolve().parents[2]


# --- failure messages ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        ({"msg": "boom"}, "boom"),
        (
            {"msg": "non-zero return code", "stderr": " oops \n", "stdout": "x"},
            "non-zero return code: oops",
        ),
        ({"stdout": "only stdout"}, "only stdout"),
        ({"msg": "MODULE FAILURE", "module_stderr": "Traceback"}, "MODULE FAILURE: Traceback"),
        (
            {
                "msg": "One or more items failed",
                "results": [{"msg": "fine"}, {"failed": True, "msg": "item two broke"}],
            },
            "One or more items failed: item two broke",
        ),
        ({}, "(no message)"),
    ],
)
def test_task_message(res: dict[str, Any], expected: str) -> None:
    assert task_message(res) == expected


def test_task_message_keeps_the_tail_of_long_output() -> None:
    message = task_message({"stderr": "x" * 1000 + "the actual error"})
    assert message.endswith("the actual error")
    assert len(message) == 501


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (None, None),
        ("", ""),
        ("all", "all"),
        ("gx10-a", "gx10-a,localhost"),
        ("gx10-a,gx10-b", "gx10-a,gx10-b,localhost"),
        ("gx10-a:localhost", "gx10-a:localhost"),
        ("localhost,gx10-b", "localhost,gx10-b"),
    ],
)
def test_a_node_limit_keeps_the_controller_plays(limit: str | None, expected: str | None) -> None:
    assert with_controller(limit) == expected


LAB4 = Path(__file__).resolve().parents[2] / "inventories" / "lab4"


@pytest.fixture(scope="module")
def ansible_env() -> dict[str, str]:
    return {"ANSIBLE_CONFIG": str(ansible_cfg(project_home()))}


@pytest.mark.parametrize(
    ("limit", "nodes"),
    [
        ("!gx10-b", ["gx10-a", "gx10-c", "gx10-d"]),
        ("workers:&gx10-c", ["gx10-c"]),
    ],
)
def test_an_exclusion_or_intersection_is_resolved_to_its_nodes_plus_the_controller(
    limit: str, nodes: list[str], ansible_env: dict[str, str]
) -> None:
    """Ansible applies `!` and `&` after the union, to localhost too: `!gx10-b,localhost` would
    select localhost alone. The limit is resolved to its nodes first (issue 29)."""
    assert with_controller(limit, LAB4, ansible_env) == ",".join([*nodes, "localhost"])


def test_a_limit_that_selects_no_node_is_refused_naming_it(ansible_env: dict[str, str]) -> None:
    with pytest.raises(LimitError, match=r"limit '!gx10-a,!gx10-b,!gx10-c,!gx10-d' selects no"):
        with_controller("!gx10-a,!gx10-b,!gx10-c,!gx10-d", LAB4, ansible_env)
