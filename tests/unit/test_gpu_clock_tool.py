"""The gpu_clock role's node tool (roles/gpu_clock/files/gx10-gpu-clock) against the lab's
nvidia-smi simulator: policy, caps, the benchmark session's lock and its restore on every end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "roles" / "gpu_clock" / "files" / "gx10-gpu-clock"
SIM = ROOT / "python" / "gx10" / "lab" / "simulators" / "nvidia_smi.py"


@dataclass
class Node:
    env: dict[str, str]
    sim_state: Path
    conf: Path
    run_dir: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, str(TOOL), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def show(self) -> dict[str, object]:
        return dict(json.loads(self.run("show").stdout))

    def lock(self) -> str | None:
        path = self.sim_state / "locked_clocks"
        return path.read_text().strip() if path.exists() else None

    def session(self, owner: str = "bench", *extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(TOOL), "session", owner, *extra],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        proc.ready = json.loads(first)  # type: ignore[attr-defined]
        return proc


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SIM}" "$@"\n')
    smi.chmod(0o755)
    conf = tmp_path / "gpu-clock.conf"
    conf.write_text("GX10_SM_CLOCK_MHZ=2000\nGX10_SM_CLOCK_MIN_MHZ=208\n")
    env = {
        **os.environ,
        "GX10_NVIDIA_SMI": str(smi),
        "GX10_SIM_STATE_DIR": str(tmp_path / "sim"),
        "GX10_SIM_EUID": "0",
        "GX10_GPU_CLOCK_CONF": str(conf),
        "GX10_GPU_CLOCK_RUN_DIR": str(tmp_path / "run"),
    }
    return Node(env, tmp_path / "sim", conf, tmp_path / "run")


def end(proc: subprocess.Popen[str]) -> dict[str, object]:
    """Wait for a session to end (without closing its stdin) and return its last line."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.wait(timeout=30)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_show_on_a_fresh_node(node: Node) -> None:
    state = node.show()
    assert state["policy"] == 2000
    assert state["min_mhz"] == 208
    assert state["applied"] is None
    assert state["session"] is None
    clocks = state["clocks"]
    assert isinstance(clocks, dict)
    assert clocks["max_sm_clock_mhz"] == 3003


def test_apply_locks_the_range_and_records_it(node: Node) -> None:
    out = json.loads(node.run("apply").stdout)
    assert out["applied"] == 2000
    assert node.lock() == "208,2000"
    assert node.show()["applied"] == 2000


def test_unlocked_policy_resets(node: Node) -> None:
    node.run("apply")
    node.conf.write_text("GX10_SM_CLOCK_MHZ=unlocked\n")
    node.run("apply")
    assert node.lock() is None
    assert node.show()["applied"] == "unlocked"


def test_bad_config_names_the_key(node: Node) -> None:
    node.conf.write_text("GX10_SM_CLOCK_MHZ=fast\n")
    proc = node.run("apply", check=False)
    assert proc.returncode == 2
    assert "GX10_SM_CLOCK_MHZ" in proc.stderr
    assert "'fast'" in proc.stderr
    assert node.lock() is None


def test_refused_by_the_gpu_is_reported_and_not_recorded(node: Node) -> None:
    node.env["GX10_SIM_EUID"] = "1000"
    proc = node.run("apply", check=False)
    assert proc.returncode == 1
    assert "-lgc 208,2000 failed" in proc.stderr
    assert node.show()["applied"] is None


def test_session_restores_the_cap_it_found_when_stdin_closes(node: Node) -> None:
    node.run("apply")
    session = node.session("gx10 bench (test)")
    token = session.ready["token"]  # type: ignore[attr-defined]
    assert session.ready["original"] == 2000  # type: ignore[attr-defined]
    node.run("set", "2800", "--session", token)
    assert node.lock() == "208,2800"
    assert session.stdin is not None
    session.stdin.close()
    assert end(session) == {"ended": "stdin closed", "restored": 2000}
    assert node.lock() == "208,2000"
    assert node.show()["session"] is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_session_restores_on_a_signal(node: Node, sig: signal.Signals) -> None:
    node.run("apply")
    session = node.session()
    node.run("set", "unlocked", "--session", session.ready["token"])  # type: ignore[attr-defined]
    assert node.lock() is None
    session.send_signal(sig)
    assert end(session)["restored"] == 2000
    assert node.lock() == "208,2000"


def test_session_deadline_is_a_safety_net(node: Node) -> None:
    node.run("apply")
    session = node.session("stuck controller", "--max-seconds", "1")
    node.run("set", "2400", "--session", session.ready["token"])  # type: ignore[attr-defined]
    # Its stdin stays open: only the deadline ends it (end() fails after 30 s if it never does).
    result = end(session)
    assert result["ended"] == "--max-seconds 1 reached"
    assert node.lock() == "208,2000"


def test_a_killed_controller_closes_the_pipe(node: Node) -> None:
    """The controller's end of stdin dies with it: the session sees EOF and restores."""
    node.run("apply")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, {str(TOOL)!r}, 'session', 'doomed'], "
            "stdin=subprocess.PIPE, stdout=sys.stdout); time.sleep(60)",
        ],
        env=node.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    token = json.loads(holder.stdout.readline())["token"]
    node.run("set", "2600", "--session", token)
    holder.kill()
    holder.wait(timeout=10)
    deadline = time.monotonic() + 20
    while node.lock() != "208,2000" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node.lock() == "208,2000"
    while node.show()["session"] is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node.show()["session"] is None


def test_second_session_and_foreign_changes_are_refused(node: Node) -> None:
    node.run("apply")
    session = node.session("first runner")
    second = node.run("session", "second runner", check=False)
    assert second.returncode == 75
    assert "held by first runner (pid" in second.stderr
    foreign = node.run("set", "2400", check=False)
    assert foreign.returncode == 75
    apply = node.run("apply", check=False)
    assert apply.returncode == 75
    assert "a benchmark session holds this node's GPU clock: first runner" in apply.stderr
    shown = node.show()["session"]
    assert isinstance(shown, dict)
    assert shown["owner"] == "first runner"
    assert "token" not in shown
    assert node.lock() == "208,2000"
    assert session.stdin is not None
    session.stdin.close()
    end(session)
    node.run("apply")


def test_apply_waits_for_a_session_to_end(node: Node) -> None:
    node.run("apply")
    session = node.session()
    waiter = subprocess.Popen(
        [sys.executable, str(TOOL), "apply", "--wait", "20"],
        env=node.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert waiter.poll() is None
    assert session.stdin is not None
    session.stdin.close()
    end(session)
    assert waiter.wait(timeout=20) == 0


def test_session_without_a_recorded_cap_restores_the_policy(node: Node) -> None:
    session = node.session()
    assert session.ready["original"] is None  # type: ignore[attr-defined]
    node.run("set", "unlocked", "--session", session.ready["token"])  # type: ignore[attr-defined]
    assert session.stdin is not None
    session.stdin.close()
    assert end(session)["restored"] == 2000
    assert node.lock() == "208,2000"
