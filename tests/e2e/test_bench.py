"""`gx10 bench -i` on the lab: a clock sweep with telemetry, and its safety on every exit path.

The nodes run the gpu_clock role's tool and the nvidia-smi simulator's clock/power/thermal model;
the vLLM simulator drives the simulated GPUs' load. Each test ends with both nodes back at the
policy's 2000 MHz cap and no benchmark session holding a node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from labtools import LAB_INVENTORY, auth, node_sh

from gx10 import ProvisionResult, lab

NODES = ("gx10-a", "gx10-b")
QUICK = ["--prompt-lengths", "256", "--max-tokens", "32", "--cool-down-timeout", "120"]
# Cases of about 3 s of load (160 tokens at about 55 tok/s): two or more 1 Hz telemetry readings
# fall inside each case's requests, whose stretch the case's power figures cover.
LOADED = [
    "--prompt-lengths",
    "256",
    "--max-tokens",
    "160",
    "--ignore-eos",
    "--cool-down-timeout",
    "120",
]
# One case of about a minute (4,000 tokens at about 55 tok/s): a run still going when tested.
LONG = ["--prompt-lengths", "256", "--max-tokens", "4000", "--concurrency", "1", "--ignore-eos"]


def show(node: str) -> dict[str, Any]:
    return dict(json.loads(node_sh(node, "gx10-gpu-clock show")))


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.5)


def policy_restored() -> bool:
    states = [show(node) for node in NODES]
    return all(s["applied"] == 2000 and s["session"] is None for s in states)


def bench(
    out: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gx10", "bench", "-i", str(LAB_INVENTORY), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def start_bench(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gx10", "bench", "-i", str(LAB_INVENTORY), "--out", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def sessions_held() -> bool:
    return all(show(node)["session"] is not None for node in NODES)


@pytest.fixture(scope="module")
def served(serving_lab: ProvisionResult) -> None:
    assert policy_restored()


@pytest.fixture
def cool(served: None) -> Iterator[None]:
    """Each test starts and ends with normal temperatures and the policy's cap."""
    yield
    for node in NODES:
        lab.heat(node, None)
    wait_for(policy_restored, 60, "both nodes back at the 2000 MHz policy, no session")


def test_clock_sweep_with_telemetry_restores_the_policy(cool: None, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    run = bench(out, *LOADED, "--concurrency", "1,2", "--clock-caps", "2400,unlocked")
    assert run.returncode == 0, run.stderr
    results = json.loads((out / "results.json").read_text())
    cases = list(results["cases"].values())
    assert len(cases) == 4
    assert {str(c["clock_cap"]) for c in cases} == {"2400", "unlocked"}
    for case in cases:
        assert case["status"] == "ok"
        telemetry = case["telemetry"]
        assert set(telemetry["nodes"]) == set(NODES)
        for node in NODES:
            # Loaded GPUs: above the simulator's 7.2 W idle, at (or near) the case's cap.
            assert telemetry["nodes"][node]["power_w"]["mean"] > 8.0
        assert telemetry["tps_per_w"] > 0
        clock = telemetry["sm_clock_mhz_mean"]
        assert clock <= 2400 if case["clock_cap"] == "2400" else clock > 2400
    assert (out / "report.html").stat().st_size > 10_000
    assert policy_restored()
    # Exact prompts with the lab simulator's real BPE tokenizer (issue 16): every request at its
    # target length as the server counted it, none failed, the server's counter judged the cache.
    for case in cases:
        assert case["requests_failed"] == 0
        assert [r["prompt_tokens"] for r in case["request_results"]] == [256] * case["concurrency"]
        assert case["cache_hit_source"] == "server"
    text = "The morning was cold and the kettle took a long time to boil."
    body = {"model": results["model"], "prompt": text, "return_token_strs": True}
    pieces = httpx.post(
        f"{results['endpoint']}/tokenize", json=body, headers=auth(), timeout=30
    ).json()
    # The regex tokenizer never makes a piece of more than 4 letters; the trained BPE does.
    assert any(len(p.strip()) > 4 for p in pieces["token_strs"]), pieces


def test_a_second_run_is_refused_naming_the_holder(cool: None, tmp_path: Path) -> None:
    """On the same controller the controller's lock refuses it; from another controller (its
    own lock file) each node's lock does, naming the first run."""
    first_out = tmp_path / "first"
    first = start_bench(first_out, *LONG, "--clock-caps", "2400")
    try:
        wait_for(sessions_held, 60, "the first run holds both nodes")
        same = bench(tmp_path / "same", *QUICK, "--concurrency", "1", "--clock-caps", "2400")
        assert same.returncode == 1
        assert str(first_out) in same.stderr
        other = bench(
            tmp_path / "other",
            *QUICK,
            "--concurrency",
            "1",
            "--clock-caps",
            "2400",
            env={**os.environ, "GX10_BENCH_LOCK": str(tmp_path / "other-controller.lock")},
        )
        assert other.returncode == 1
        assert "benchmark lock is held by gx10 bench" in other.stderr
        assert str(first_out) in other.stderr
    finally:
        # The controller alone (not its process group): its own handler must restore the caps.
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode in (143, -signal.SIGTERM)
    assert first.stderr is not None
    assert "restore to 2000 MHz: set ok" in first.stderr.read() + (first.stdout.read() or "")
    wait_for(policy_restored, 30, "SIGTERM restores the caps and releases the locks")


def test_a_killed_controller_is_cleaned_up_by_the_nodes(cool: None, tmp_path: Path) -> None:
    """SIGKILL: no handler runs on the controller; each node's session sees its pipe close and
    restores the cap it found, by itself."""
    run = start_bench(tmp_path / "killed", *LONG, "--clock-caps", "2800")
    wait_for(sessions_held, 60, "the run holds both nodes")
    wait_for(lambda: all(show(n)["applied"] == 2800 for n in NODES), 60, "the 2800 MHz point")
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    wait_for(policy_restored, 30, "the nodes restore 2000 MHz and release their locks")


def test_a_hot_node_aborts_the_rest_of_the_sweep(cool: None, tmp_path: Path) -> None:
    lab.heat("gx10-b", 40.0, tau_s=1.0)
    out = tmp_path / "hot"
    run = bench(out, *QUICK, "--concurrency", "1", "--clock-caps", "2000,unlocked")
    assert run.returncode != 0
    assert "gx10-b" in run.stdout + run.stderr
    results = json.loads((out / "results.json").read_text())
    statuses = [c.get("status") for c in results["cases"].values()]
    assert statuses, results
    assert "ok" not in statuses, statuses
    assert policy_restored()
