"""The gx10 command: real playbook runs for provision, a stand-in gx10.lab for lab.

The playbooks and inventories (the `home` fixture) come from conftest.py and mini_project.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Invocation, invoke

from gx10.cli import main
from gx10.progress import ProgressLine, describe_event


@pytest.fixture(scope="module")
def converge_json(home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Invocation, Path]:
    work = tmp_path_factory.mktemp("work")
    marker = work / "marker"
    varsfile = work / "vars.yml"
    varsfile.write_text(f"marker_path: {marker}\nmarker_content: from-file\n")
    run = invoke(
        [
            "provision",
            "-i",
            "inventories/local",
            "-p",
            "converge",
            "--json",
            "--limit",
            "localhost",
            "--skip-tags",
            "report",
            "-e",
            "marker_content=from-command-line",
            "-e",
            f"@{varsfile}",  # later -e wins
        ]
    )
    return run, marker


@pytest.fixture(scope="module")
def broken_text(home: Path) -> Invocation:
    return invoke(["provision", "-i", "inventories/local", "-p", "broken.yml"])


# --- provision -------------------------------------------------------------------------------


def test_json_output_is_the_result(converge_json: tuple[Invocation, Path]) -> None:
    run, marker = converge_json
    assert run.code == 0
    document = json.loads(run.stdout)  # stdout holds nothing but the document
    assert document["ok"] is True
    assert document["changed_total"] == 1
    # --skip-tags reached ansible: only the copy task ran, so ok is 1, not 2.
    assert document["hosts"] == {
        "localhost": {
            "ok": 1,
            "changed": 1,
            "failed": 0,
            "unreachable": 0,
            "skipped": 0,
            "rescued": 0,
            "ignored": 0,
        }
    }
    assert document["failed_tasks"] == []
    assert Path(document["artifact_dir"], "status").read_text() == "successful"
    assert marker.read_text() == "from-file\n"


def test_json_mode_sends_progress_to_stderr(converge_json: tuple[Invocation, Path]) -> None:
    stderr = converge_json[0].stderr
    assert "PLAY Converge localhost" in stderr
    assert "TASK Write the marker file" in stderr
    assert "changed     localhost" in stderr
    assert "Report the run mode" not in stderr
    assert "Recap" in stderr


def test_failed_play_exits_2_with_recap(broken_text: Invocation) -> None:
    assert broken_text.code == 2
    assert broken_text.stderr == ""
    out = broken_text.stdout
    assert "TASK Run a failing command" in out
    assert "failed      localhost  non-zero return code: to-stderr" in out
    assert "Break things / Run a failing command: non-zero return code: to-stderr" in out
    assert "FAILED (status=failed" in out
    recap = next(line for line in out.splitlines() if line.strip().startswith("localhost "))
    # ok, changed, failed, unreachable, skipped, rescued, ignored
    assert recap.split() == ["localhost", "2", "0", "1", "0", "0", "1", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "nope"], "gx10: error: unknown playbook 'nope'; available in "),
        (["-i", "inventories/missing"], "gx10: error: inventory 'inventories/missing' not found"),
    ],
)
def test_setup_errors_exit_1(home: Path, argv: list[str], message: str) -> None:
    base = ["provision", "-i", "inventories/local", "-p", "converge"]
    run = invoke(base + argv)
    assert run.code == 1
    assert run.stdout == ""
    assert run.stderr.startswith(message)


def test_project_not_found_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GX10_HOME", str(tmp_path))
    run = invoke(["provision", "-i", "x"])
    assert run.code == 1
    assert "is not a gx10 project home: missing ansible.cfg" in run.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("novalue", "expected KEY=VALUE or @FILE, got 'novalue'"),
        ("@/nonexistent/vars.yml", "cannot read /nonexistent/vars.yml"),
    ],
)
def test_bad_extra_vars_are_usage_errors(
    extra: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["provision", "-i", "x", "-e", extra])
    assert info.value.code == 1
    assert message in capsys.readouterr().err


def test_extra_vars_file_must_be_a_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = tmp_path / "list.yml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(SystemExit):
        main(["provision", "-i", "x", "-e", f"@{listing}"])
    assert "must hold a mapping of variables" in capsys.readouterr().err


def test_missing_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 1
    assert "usage: gx10" in capsys.readouterr().err


# --- progress lines --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (
            {"event": "playbook_on_play_start", "event_data": {"name": "Deploy"}},
            ProgressLine("play", "Deploy"),
        ),
        (
            {"event": "runner_on_ok", "event_data": {"host": "a", "res": {"changed": True}}},
            ProgressLine("host", "a", "changed"),
        ),
        (
            {"event": "runner_on_ok", "event_data": {"host": "a", "res": {"changed": False}}},
            ProgressLine("host", "a", "ok"),
        ),
        (
            {
                "event": "runner_on_failed",
                "event_data": {"host": "b", "ignore_errors": True, "res": {"msg": "meh"}},
            },
            ProgressLine("host", "b", "ignored", "meh"),
        ),
        (
            {
                "event": "runner_retry",
                "event_data": {"host": "c", "res": {"attempts": 2, "retries": 5}},
            },
            ProgressLine("host", "c", "retrying", "attempt 2 of 5"),
        ),
        (
            {"event": "verbose", "stdout": "\x1b[0;31m[ERROR]: bad playbook\x1b[0m"},
            ProgressLine("output", "[ERROR]: bad playbook"),
        ),
        ({"event": "verbose", "stdout": "\x1b[0;31m\x1b[0m"}, None),
        ({"event": "runner_on_start", "event_data": {"host": "a"}}, None),
    ],
)
def test_describe_event(event: dict[str, Any], line: ProgressLine | None) -> None:
    assert describe_event(event) == line
