"""Test equipment for the bench tests: a vLLM simulator pair on loopback (reusing
test_vllm_sim's Launcher), and simulated GB10 nodes for `gx10 bench -i`: the real node clock
tool (roles/gpu_clock/files/gx10-gpu-clock) over the lab's nvidia-smi simulator, each node with
its own state, reached through an `env` prefix as its command transport."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from test_vllm_sim import Launcher, healthy, wait_until

from gx10.bench.nodes import Node

SERVED = "ds4-flash"
MAX_MODEL_LEN = 20000
MAX_NUM_SEQS = 4
ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "roles" / "gpu_clock" / "files" / "gx10-gpu-clock"
SMI_SIM = ROOT / "python" / "gx10" / "lab" / "simulators" / "nvidia_smi.py"


@contextlib.contextmanager
def sim_pair(
    workdir: Path,
    time_scale: float,
    *extra: str,
    block_size: int = 16,
    states: tuple[Path, Path] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Head + worker with the reference perf model; yields the head's URL; kills both by PID.

    `states`: the nvidia-smi simulator state directories of the head's and the worker's node
    (where each writes its GPU load and reads its clock cap); default one shared directory.
    `env`: more environment for both (e.g. GX10_SIM_TOKENIZER)."""
    launcher = Launcher(workdir)
    head_state, worker_state = states or (workdir / "smi", workdir / "smi")
    env = {"GX10_SIM_TIME_SCALE": str(time_scale), **(env or {})}
    try:
        head, _worker, url = launcher.pair(
            "--served-model-name",
            SERVED,
            "--trust-remote-code",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--max-num-seqs",
            str(MAX_NUM_SEQS),
            "--block-size",
            str(block_size),
            *extra,
            head_env={**env, "GX10_SIM_STATE_DIR": str(head_state)},
            worker_env={**env, "GX10_SIM_STATE_DIR": str(worker_state)},
        )
        wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
        assert head.alive(), head.output()
        yield url
    finally:
        launcher.close()


def server_metric(url: str, name: str) -> float:
    """One counter or gauge of the simulator's /metrics, summed over its label sets."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + " ", name + "{"))
    )


def wait_idle(url: str, timeout: float = 60.0) -> None:
    """Until the server runs no request (bounded)."""
    deadline = time.monotonic() + timeout
    while server_metric(url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass
class SimNode:
    """A simulated node: its nvidia-smi state, its clock tool's config and run directory."""

    name: str
    root: Path

    @property
    def state(self) -> Path:
        return self.root / "smi"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def conf(self) -> Path:
        return self.root / "gpu-clock.conf"

    @property
    def smi(self) -> Path:
        return self.root / "nvidia-smi"

    @property
    def tool_wrapper(self) -> Path:
        return self.root / "gx10-gpu-clock"

    @property
    def env(self) -> dict[str, str]:
        return {
            "GX10_SIM_STATE_DIR": str(self.state),
            "GX10_SIM_EUID": "0",
            "GX10_SIM_SEED": self.name,
            "GX10_GPU_CLOCK_CONF": str(self.conf),
            "GX10_GPU_CLOCK_RUN_DIR": str(self.run_dir),
            "GX10_NVIDIA_SMI": str(self.smi),
        }

    def node(self, group: str = "workers", relay: Sequence[str] = ()) -> Node:
        """The node as gx10 bench sees it: an `env` prefix (after `relay`, a stand-in for ssh)."""
        prefix = (*relay, "env", *(f"{k}={v}" for k, v in self.env.items()))
        return Node(
            name=self.name,
            group=group,
            transport=prefix,
            tool=(sys.executable, str(TOOL)),
            nvidia_smi=str(self.smi),
        )

    def tool(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, str(TOOL), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def show(self) -> dict[str, object]:
        return dict(json.loads(self.tool("show").stdout))

    def lock(self) -> str | None:
        path = self.state / "locked_clocks"
        return path.read_text().strip() if path.exists() else None

    def set_ambient(self, offset_c: float) -> None:
        """The simulator's test knob: degrees added to its temperature model."""
        (self.state / "ambient_offset_c").write_text(f"{offset_c:g}\n")

    def wait_lock(self, expected: str | None, timeout: float = 20.0) -> str | None:
        deadline = time.monotonic() + timeout
        while self.lock() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.lock()

    def wait_no_session(self, timeout: float = 20.0) -> object:
        deadline = time.monotonic() + timeout
        session = self.show()["session"]
        while session is not None and time.monotonic() < deadline:
            time.sleep(0.1)
            session = self.show()["session"]
        return session


def sim_node(tmp: Path, name: str, *, policy: str = "2000", apply: bool = True) -> SimNode:
    """A node with the clock policy `policy` (applied first unless `apply` is False) and no
    thermal lag (thermal_tau_s 0: a temperature follows its inputs at once)."""
    node = SimNode(name, tmp / name)
    node.state.mkdir(parents=True)
    (node.state / "thermal_tau_s").write_text("0\n")
    node.conf.write_text(f"GX10_SM_CLOCK_MHZ={policy}\nGX10_SM_CLOCK_MIN_MHZ=208\n")
    node.smi.write_text(
        f'#!/bin/sh\nGX10_SIM_STATE_DIR="{node.state}" GX10_SIM_SEED="{name}" '
        f'exec "{sys.executable}" "{SMI_SIM}" "$@"\n'
    )
    node.smi.chmod(0o755)
    exports = " ".join(f'{k}="{v}"' for k, v in node.env.items())
    node.tool_wrapper.write_text(
        f'#!/bin/sh\nexport {exports}\nexec "{sys.executable}" "{TOOL}" "$@"\n'
    )
    node.tool_wrapper.chmod(0o755)
    if apply:
        node.tool("apply")
    return node


# A stand-in for `docker exec -i`: the command runs in its own session (as a process in a
# container is not in the controller's process group), its stdin fed from ours and closed at our
# EOF, its output drained even once ours is gone (so it never sees a broken pipe), and no signal
# is forwarded. Only the EOF on its stdin tells the command the controller is gone.
DOCKER_EXEC_LIKE = """
import shutil, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         start_new_session=True)
def feed():
    try:
        shutil.copyfileobj(sys.stdin.buffer, child.stdin, 1)
    except OSError:
        pass
    finally:
        child.stdin.close()
threading.Thread(target=feed, daemon=True).start()
out = sys.stdout.buffer
for line in child.stdout:
    try:
        out.write(line)
        out.flush()
    except OSError:
        pass
sys.exit(child.wait())
"""


def processes_mentioning(marker: str) -> list[int]:
    """PIDs whose environment or command line mentions `marker` (a test's own temp path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            if marker.encode() in blob:
                found.append(int(entry.name))
    return found
