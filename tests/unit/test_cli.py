"""The gx10 command: real playbook runs for provision, a stand-in gx10.lab for lab.

The playbooks and inventories (the `home` fixture) come from conftest.py and mini_project.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Invocation, invoke

from gx10.cli import main
from gx10.lab import manager
from gx10.lab.errors import LabError
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


# --- lab -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeLabStatus:
    running: bool
    nodes: tuple[str, ...] = ("gx10-a", "gx10-b")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}

    def summary_lines(self) -> list[str]:
        return [f"lab: {'running' if self.running else 'stopped'}", *self.nodes]


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Stand in for gx10.lab (owned elsewhere and needs docker); records the calls."""
    module = types.ModuleType("gx10.lab")
    state = types.SimpleNamespace(running=False, calls=[])

    def up() -> FakeLabStatus:
        print("starting containers")  # the real up() logs progress with print
        state.calls.append("up")
        state.running = True
        return FakeLabStatus(running=True)

    def down() -> None:
        state.calls.append("down")
        state.running = False

    def status() -> FakeLabStatus:
        state.calls.append("status")
        return FakeLabStatus(running=state.running)

    module.up, module.down, module.status = up, down, status  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gx10.lab", module)
    return state


def test_lab_status_exit_code_follows_running(lab: types.SimpleNamespace) -> None:
    stopped = invoke(["lab", "status"])
    assert (stopped.code, stopped.stdout) == (3, "lab: stopped\ngx10-a\ngx10-b\n")
    lab.running = True
    assert invoke(["lab", "status"]).code == 0


def test_lab_up_json_keeps_logs_off_stdout(lab: types.SimpleNamespace) -> None:
    run = invoke(["lab", "up", "--json"])
    assert run.code == 0
    assert json.loads(run.stdout) == {"running": True, "nodes": ["gx10-a", "gx10-b"]}
    assert run.stderr == "starting containers\n"
    assert lab.calls == ["up"]


def test_lab_down(lab: types.SimpleNamespace) -> None:
    lab.running = True
    run = invoke(["lab", "down"])
    assert (run.code, run.stdout) == (0, "lab is down\n")
    assert lab.calls == ["down"]
    assert json.loads(invoke(["lab", "down", "--json"]).stdout) == {"ok": True}


def test_lab_swap_nics_and_replace_name_the_node(lab: types.SimpleNamespace) -> None:
    module = sys.modules["gx10.lab"]

    def swap_nics(node: str) -> FakeLabStatus:
        print(f"swapping the rail NICs of {node}")
        lab.calls.append(("swap_nics", node))
        return FakeLabStatus(running=True)

    def replace_node(node: str) -> FakeLabStatus:
        lab.calls.append(("replace_node", node))
        return FakeLabStatus(running=True)

    module.swap_nics, module.replace_node = swap_nics, replace_node  # type: ignore[attr-defined]
    swapped = invoke(["lab", "swap-nics", "gx10-b", "--json"])
    assert swapped.code == 0
    assert json.loads(swapped.stdout)["running"] is True
    assert swapped.stderr == "swapping the rail NICs of gx10-b\n"
    assert invoke(["lab", "replace", "gx10-a"]).code == 0
    assert lab.calls == [("swap_nics", "gx10-b"), ("replace_node", "gx10-a")]
    with pytest.raises(SystemExit) as info:  # NODE is required
        invoke(["lab", "replace"])
    assert info.value.code == 1


def test_lab_without_swap_support_exits_1(lab: types.SimpleNamespace) -> None:
    run = invoke(["lab", "swap-nics", "gx10-b"])
    assert run.code == 1
    assert run.stderr == "gx10: error: the lab is not available: gx10.lab has no swap_nics\n"


def test_lab_throttle_sets_and_clears_a_rate(lab: types.SimpleNamespace) -> None:
    module = sys.modules["gx10.lab"]

    def throttle(node: str, netdev: str, rate: str | None) -> str:
        print(f"throttling {node} {netdev}")
        lab.calls.append(("throttle", node, netdev, rate))
        return "qdisc tbf 8001: root rate 300Mbit" if rate else "qdisc noqueue 0: root"

    module.throttle = throttle  # type: ignore[attr-defined]
    run = invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0", "--rate", "300mbit"])
    assert run.code == 0
    assert run.stdout.endswith("gx10-b enP2p1s0f0np0: qdisc tbf 8001: root rate 300Mbit\n")
    cleared = invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0", "--clear", "--json"])
    assert json.loads(cleared.stdout) == {
        "node": "gx10-b",
        "netdev": "enP2p1s0f0np0",
        "rate": None,
        "qdisc": "qdisc noqueue 0: root",
    }
    assert cleared.stderr == "throttling gx10-b enP2p1s0f0np0\n"
    assert lab.calls == [
        ("throttle", "gx10-b", "enP2p1s0f0np0", "300mbit"),
        ("throttle", "gx10-b", "enP2p1s0f0np0", None),
    ]
    with pytest.raises(SystemExit) as info:  # --rate or --clear is required
        invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0"])
    assert info.value.code == 1


def test_lab_module_without_the_api_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gx10.lab", types.ModuleType("gx10.lab"))
    run = invoke(["lab", "status"])
    assert run.code == 1
    assert run.stderr == "gx10: error: the lab is not available: gx10.lab has no up, down, status\n"


def test_lab_heat_sets_and_clears_the_gpu_offset(lab: types.SimpleNamespace) -> None:
    module = sys.modules["gx10.lab"]

    def heat(node: str, offset_c: float | None, tau_s: float | None = None) -> dict[str, Any]:
        print(f"heating {node}")
        lab.calls.append(("heat", node, offset_c, tau_s))
        return {"ambient_offset_c": offset_c, "thermal_tau_s": tau_s}

    module.heat = heat  # type: ignore[attr-defined]
    run = invoke(["lab", "heat", "gx10-b", "--offset", "25"])
    assert run.code == 0
    assert run.stdout == (
        "heating gx10-b\ngx10-b: GPU ambient offset +25 C, thermal time constant 30 s (default)\n"
    )
    run = invoke(["lab", "heat", "gx10-a", "--offset=-5.5", "--tau", "0"])
    assert run.stdout.endswith("gx10-a: GPU ambient offset -5.5 C, thermal time constant 0 s\n")
    cleared = invoke(["lab", "heat", "gx10-b", "--clear", "--json"])
    assert json.loads(cleared.stdout) == {
        "node": "gx10-b",
        "ambient_offset_c": None,
        "thermal_tau_s": None,
    }
    assert cleared.stderr == "heating gx10-b\n"
    assert lab.calls == [
        ("heat", "gx10-b", 25.0, None),
        ("heat", "gx10-a", -5.5, 0.0),
        ("heat", "gx10-b", None, None),
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["gx10-b"],  # --offset or --clear is required
        ["gx10-b", "--offset", "25", "--clear"],
        ["gx10-b", "--offset", "hot"],
        ["gx10-b", "--offset", "nan"],
        ["gx10-b", "--offset", "150"],
        ["gx10-b", "--offset", "20", "--tau", "-1"],
        ["gx10-b", "--clear", "--tau", "inf"],
        ["--offset", "20"],  # NODE is required
    ],
)
def test_lab_heat_refuses_bad_arguments(lab: types.SimpleNamespace, args: list[str]) -> None:
    module = sys.modules["gx10.lab"]
    module.heat = lambda *a: lab.calls.append(a)  # type: ignore[attr-defined]
    with pytest.raises(SystemExit) as info:
        invoke(["lab", "heat", *args])
    assert info.value.code == 1
    assert lab.calls == []


def test_lab_heat_writes_the_simulator_state_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gx10.lab.heat's script, run here with sh instead of in a node with docker exec."""
    state_dir = tmp_path / "nvidia-smi"
    commands: list[tuple[str, ...]] = []

    def node_exec(node: str, *args: str, timeout: float = 60, check: bool = True) -> str:
        commands.append((node, *args))
        assert args[:2] == ("sh", "-c")
        assert args[4] == manager.NVIDIA_SMI_STATE_DIR
        local = [*args[:4], str(state_dir), *args[5:]]
        done = subprocess.run(local, capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.strip()

    monkeypatch.setattr(manager, "_state", lambda name: "running")
    monkeypatch.setattr(manager._docker, "node_exec", node_exec)
    logs: list[str] = []
    assert manager.heat("gx10-b", 25.0, 10.0, log=logs.append) == {
        "ambient_offset_c": 25.0,
        "thermal_tau_s": 10.0,
    }
    assert (state_dir / "ambient_offset_c").read_text() == "25.0\n"
    assert (state_dir / "thermal_tau_s").read_text() == "10.0\n"
    assert manager.heat("gx10-b", -3.0, log=logs.append) == {
        "ambient_offset_c": -3.0,
        "thermal_tau_s": None,  # no --tau: back to the default
    }
    assert not (state_dir / "thermal_tau_s").exists()
    assert manager.heat("gx10-b", None, log=logs.append) == {
        "ambient_offset_c": None,
        "thermal_tau_s": None,
    }
    assert sorted(p.name for p in state_dir.iterdir()) == []
    assert [c[0] for c in commands] == ["gx10-b"] * 3
    assert logs[0] == "heating gx10-b's GPU by +25 C (time constant 10 s)"
    assert logs[-1] == "clearing the GPU heat on gx10-b"
    with pytest.raises(LabError, match="no lab node 'gx10-c'"):
        manager.heat("gx10-c", 5.0)
    with pytest.raises(LabError, match="outside"):
        manager.heat("gx10-a", float("nan"))
    monkeypatch.setattr(manager, "_state", lambda name: "exited")
    with pytest.raises(LabError, match="run `gx10 lab up` first"):
        manager.heat("gx10-a", 5.0)
    assert len(commands) == 3
