"""The lab's vLLM simulator: the `vllm serve` contract the launch stage and the bench rely on.

Everything runs on loopback: real processes (started as the lab image runs them: its `vllm` script,
the package importable as `vllm_sim`) on ephemeral ports, every wait bounded, every process killed
by its PID when the test ends. Pure pieces (NCCL env checks, tokenizer, tool-call extraction) are
tested in-process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from simulators import SIMULATORS

from gx10 import smoke
from gx10.lab.images import VLLM_ENTRY
from gx10.lab.simulators import vllm_sim as sim
from gx10.lab.simulators.vllm_sim.boot import Boot
from gx10.lab.simulators.vllm_sim.engine import EngineDeadError
from gx10.lab.simulators.vllm_sim.model import ModelInfo

ROOT = Path(__file__).resolve().parents[2]

API_KEY = "lab-secret"
SERVED = "ds4-flash"
MAX_MODEL_LEN = 4096
RAIL_IF = "enp1s0f0np0"
RAIL_IF2 = "enP2p1s0f0np0"
HCAS = "rocep1s0f0,roceP2p1s0f0"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


# --------------------------------------------------------------------------------------------
# Fixtures: a model directory, a simulated sysfs, and processes killed by PID
# --------------------------------------------------------------------------------------------


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def gid_text(ip: str | None) -> str:
    """A GID as sysfs prints it: eight groups of four hex digits."""
    if ip is None:
        return "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f"
    a, b, c, d = (int(part) for part in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def make_sysfs(
    root: Path,
    netdevs: tuple[str, ...] = ("lo", RAIL_IF, RAIL_IF2),
    hcas: Mapping[str, list[tuple[str | None, str]]] | None = None,
) -> Path:
    """class/net and class/infiniband as a GX10 shows them: per HCA, link-local v1/v2 then IPv4."""
    if hcas is None:
        hcas = {
            "rocep1s0f0": [
                (None, "IB/RoCE v1"),
                (None, "RoCE v2"),
                ("192.168.100.10", "IB/RoCE v1"),
                ("192.168.100.10", "RoCE v2"),
            ],
            "roceP2p1s0f0": [
                (None, "IB/RoCE v1"),
                (None, "RoCE v2"),
                ("192.168.101.10", "IB/RoCE v1"),
                ("192.168.101.10", "RoCE v2"),
            ],
        }
    for name in netdevs:
        (root / "class" / "net" / name).mkdir(parents=True, exist_ok=True)
    for dev, entries in hcas.items():
        port = root / "class" / "infiniband" / dev / "ports" / "1"
        (port / "gids").mkdir(parents=True, exist_ok=True)
        (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
        for index, (ip, kind) in enumerate(entries):
            (port / "gids" / str(index)).write_text(gid_text(ip) + "\n")
            (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
    return root


def make_model(root: Path, config: Mapping[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    default = {"architectures": ["DeepseekV4ForCausalLM"], "max_position_embeddings": 1048576}
    (root / "config.json").write_text(json.dumps(config or default))
    return root


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 10.0) -> int:
        return self.popen.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None


class Launcher:
    """Starts the simulator as `vllm serve ...`; kills what it started, by PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.sysfs = make_sysfs(workdir / "sys")
        self.model = make_model(workdir / "model")
        self.procs: list[Proc] = []
        self.master_port = 0

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("NCCL_", "GLOO_", "VLLM_", "GX10_SIM_"))
        }
        env.update(
            GX10_SIM_BOOT_SECONDS="0.2",
            GX10_SIM_TIME_SCALE="0",
            GX10_SIM_HEARTBEAT_SECONDS="0.2",
            GX10_SIM_RENDEZVOUS_TIMEOUT="15",
            GX10_SIM_SYSFS_ROOT=str(self.sysfs),
            # A GB10's memory, not this machine's (whose MemAvailable moves with other tests).
            GX10_SIM_MEM_TOTAL_GIB="121.6",
            VLLM_CACHE_ROOT=str(self.workdir / "vllm-cache"),
            NCCL_SOCKET_IFNAME=RAIL_IF,
            GLOO_SOCKET_IFNAME=RAIL_IF,
            NCCL_IB_HCA=HCAS,
            NCCL_IB_GID_INDEX="3",
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(SIMULATORS),  # vllm_sim: the image has it beside its `vllm` script
        )
        env.update(extra or {})
        return env

    def start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, str(VLLM_ENTRY), "serve", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(env),
                cwd=self.workdir,
            )
        proc = Proc(popen, log)
        self.procs.append(proc)
        return proc

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
        proc = self.start(f"run{len(self.procs)}", *args, env=env)
        return proc.wait(timeout=15), proc.output()

    def pair(
        self,
        *extra: str,
        head_env: Mapping[str, str] | None = None,
        worker_env: Mapping[str, str] | None = None,
    ) -> tuple[Proc, Proc, str]:
        """Worker first, then head (not waiting for the head's /health)."""
        master, port = free_port(), free_port()
        self.master_port = master
        common = [str(self.model), "-tp", "2", "--distributed-executor-backend", "mp"]
        common += ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(master)]
        worker = self.start(
            "worker", *common, "--node-rank", "1", "--headless", *extra, env=worker_env
        )
        wait_until(lambda: "headless multiproc executor" in worker.output(), 10, "the worker")
        head = self.start(
            "head", *common, "--host", "127.0.0.1", "--port", str(port), *extra, env=head_env
        )
        return head, worker, f"http://127.0.0.1:{port}"

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.popen.kill()  # SIGKILL to this PID only
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def http(
    method: str, url: str, body: Any = None, key: str | None = None, timeout: float = 10.0
) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    if key is not None:
        request.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def healthy(url: str) -> bool:
    try:
        return http("GET", f"{url}/health", timeout=1.0)[0] == 200
    except OSError:
        return False


SERVE_FLAGS = (
    "--trust-remote-code",
    "--revision",
    "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "--served-model-name",
    SERVED,
    "--kv-cache-dtype",
    "nvfp4_ds_mla",
    "--block-size",
    "256",
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--max-num-seqs",
    "12",
    "--max-num-batched-tokens",
    "8192",
    "--gpu-memory-utilization",
    "0.835",
    "--enable-prefix-caching",
    "--enable-chunked-prefill",
    "--async-scheduling",
    "--speculative-config",
    '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic"}',
    "--tokenizer-mode",
    "deepseek_v4",
    "--tool-call-parser",
    "deepseek_v4",
    "--enable-auto-tool-choice",
    "--reasoning-parser",
    "deepseek_v4",
    "--default-chat-template-kwargs",
    '{"thinking": false}',
    "--api-key",
    API_KEY,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head + worker pair with the reference serving flags; yields the head's URL."""
    launcher = Launcher(tmp_path_factory.mktemp("served"))
    try:
        head, _worker, url = launcher.pair(
            *SERVE_FLAGS, head_env={"VLLM_HOST_IP": "192.168.100.10"}
        )
        wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
        assert head.alive(), head.output()
        yield url
    finally:
        launcher.close()


@pytest.fixture
def client(served: str) -> OpenAI:
    return OpenAI(base_url=f"{served}/v1", api_key=API_KEY, max_retries=0, timeout=15.0)


# --------------------------------------------------------------------------------------------
# Command line and startup checks
# --------------------------------------------------------------------------------------------


def test_unknown_flag_is_rejected_like_vllm_argparse(lab: Launcher) -> None:
    code, out = lab.run(str(lab.model), "--foo", "1")
    assert code == 2
    assert "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..." in out
    assert "vllm: error: unrecognized arguments: --foo 1" in out


def test_bad_flag_values_are_argparse_errors(lab: Launcher) -> None:
    code, out = lab.run(str(lab.model), "--speculative-config", "{not json")
    assert code == 2
    assert "vllm serve: error: argument --speculative-config: Value {not json cannot be " in out
    code, out = lab.run(str(lab.model), "--kv-cache-dtype", "fp4")
    assert code == 2
    assert "argument --kv-cache-dtype: invalid choice: 'fp4'" in out


def test_underscore_flags_and_readable_lengths_are_accepted() -> None:
    args = sim.parse_args(["serve", "/m", "--max_model_len=1m", "--max-num-batched-tokens", "8K"])
    assert args.max_model_len == 1_000_000
    assert args.max_num_batched_tokens == 8192
    assert args.model == "/m"


def test_tp_size_must_match_nodes_times_gpus(lab: Launcher) -> None:
    code, out = lab.run(
        str(lab.model), "-tp", "4", "--nnodes", "2", "--distributed-executor-backend", "mp"
    )
    assert code == 1
    assert (
        "AssertionError: local_world_size (2) must be less than or equal to the number of "
        "visible devices (1)." in out
    )
    code, out = lab.run(str(lab.model), "-tp", "2")
    assert code == 1
    assert "World size (2) is larger than the number of available GPUs (1) in this node." in out
    code, out = lab.run(
        str(lab.model), "-tp", "1", "--nnodes", "2", "--node-rank", "1", "--headless"
    )
    assert code == 1
    assert "does not match nnodes (2) x GPUs per node (1)" in out


def test_model_directory_checks(lab: Launcher, tmp_path: Path) -> None:
    code, out = lab.run(str(tmp_path / "missing"))
    assert code == 1
    assert f"Invalid repository ID or local directory specified: '{tmp_path / 'missing'}'" in out
    assert "ensure the presence of a 'config.json'" in out
    remote = make_model(tmp_path / "remote", {"auto_map": {"AutoConfig": "x.Config"}})
    code, out = lab.run(str(remote))
    assert code == 1
    assert "set the option `trust_remote_code=True`" in out


def test_http_port_in_use_fails_at_start(lab: Launcher) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, out = lab.run(str(lab.model), "--host", "127.0.0.1", "--port", str(port))
    assert code == 1
    assert "OSError: [Errno 98] Address already in use" in out


def test_single_node_keeps_reasoning_inline_without_a_parser(lab: Launcher) -> None:
    port = free_port()
    head = lab.start("single", str(lab.model), "--host", "127.0.0.1", "--port", str(port))
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: healthy(url) or not head.alive(), 15, "the single-node server")
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=15.0)
    reply = client.chat.completions.create(
        model=str(lab.model),
        messages=[{"role": "user", "content": "Why?"}],
        max_tokens=4500,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    content = reply.choices[0].message.content or ""
    assert "</think>" in content
    assert "<think>" not in content  # the template opened it in the prompt
    assert getattr(reply.choices[0].message, "reasoning", None) is None
    stream = client.completions.create(
        model=str(lab.model), prompt="Once upon a time", max_tokens=8, stream=True
    )
    assert sum(1 for chunk in stream if chunk.choices and chunk.choices[0].text) >= 3


# --------------------------------------------------------------------------------------------
# Multi-node rendezvous and faults
# --------------------------------------------------------------------------------------------


def test_head_without_worker_times_out_naming_the_missing_rank(lab: Launcher) -> None:
    master = free_port()
    code, out = lab.run(
        str(lab.model),
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(master),
        "--port",
        str(free_port()),
        env={"GX10_SIM_RENDEZVOUS_TIMEOUT": "1"},
    )
    # The timeout's own message (GX10_SIM_RENDEZVOUS_TIMEOUT 1 s; the default is 600 s, which
    # run()'s 15 s bound on the process would not wait for).
    assert code == 1
    assert (
        "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. "
        "1/2 clients joined." in out
    )
    assert f"Missing node rank(s): 1 never connected to the master at 127.0.0.1:{master}" in out


def test_worker_without_head_times_out(lab: Launcher) -> None:
    master = free_port()
    code, out = lab.run(
        str(lab.model),
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--headless",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(master),
        env={"GX10_SIM_RENDEZVOUS_TIMEOUT": "1"},
    )
    assert code == 1
    assert "failed to connect to [127.0.0.1]" in out
    assert (
        "DistNetworkError: The client socket has timed out after 1000ms while trying to "
        f"connect to (127.0.0.1, {master})." in out
    )


def test_second_head_on_the_same_master_port_fails(lab: Launcher) -> None:
    _head, _worker, url = lab.pair()
    wait_until(lambda: healthy(url), 15, "the first head")
    port = str(lab.master_port)
    code, out = lab.run(
        str(lab.model),
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        port,
        "--port",
        str(free_port()),
    )
    assert code == 1
    assert "failed to listen on any local network address. port: " + port in out
    assert "EADDRINUSE" in out


def test_pair_rendezvous_then_health_and_models(lab: Launcher) -> None:
    head, worker, url = lab.pair("--served-model-name", "a", "b")
    wait_until(lambda: healthy(url) or not head.alive(), 15, "the head")
    assert head.alive(), head.output()
    status, body = http("GET", f"{url}/v1/models")
    assert status == 200
    models = json.loads(body)["data"]
    assert [m["id"] for m in models] == ["a", "b"]
    assert models[0]["max_model_len"] == 1048576
    assert models[0]["root"] == str(lab.model)
    out = head.output()
    assert "Starting vLLM API server 0 on http://127.0.0.1:" in out
    assert out.index("Starting vLLM API server") < out.index("Application startup complete.")
    assert "TP rank 1" in worker.output()
    head.popen.send_signal(signal.SIGTERM)
    assert head.wait() == 0
    assert "Application shutdown complete." in head.output()
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_health_is_not_served_before_boot_finishes(lab: Launcher) -> None:
    head, _worker, url = lab.pair(
        head_env={"GX10_SIM_BOOT_SECONDS": "1.5"}, worker_env={"GX10_SIM_BOOT_SECONDS": "1.5"}
    )
    wait_until(lambda: "Loading weights from" in head.output(), 10, "weight loading")
    assert not healthy(url)
    wait_until(lambda: healthy(url), 15, "the head after boot")


def _boot_then_stop(head: Proc, worker: Proc, url: str) -> None:
    """Wait until the head serves; then stop both."""
    wait_until(lambda: healthy(url) or not head.alive(), 30, "the head")
    assert head.alive(), head.output()
    for proc in (head, worker):
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait() == 0


def test_boot_phases_are_logged_in_order_and_the_compile_cache_makes_a_warm_boot(
    lab: Launcher,
) -> None:
    """A cold boot compiles and fills the rank's cache (and the JIT caches it is given); the next
    boot with the same cache directory loads the graphs, as vLLM's torch.compile cache does."""
    jit = lab.workdir / "triton"
    env = {"GX10_SIM_COMPILE_SECONDS": "2.0", "TRITON_CACHE_DIR": str(jit)}
    head, worker, url = lab.pair(head_env=env, worker_env=env)
    _boot_then_stop(head, worker, url)
    out = head.output()
    markers = [
        "Starting to load model",
        "Loading weights took",
        "Dynamo bytecode transform time",
        "Compiling a graph for compile range (1, 8192) takes",
        "torch.compile takes",
        "Capturing CUDA graphs",
        "Graph capturing finished in",
        "Starting vLLM API server 0",
    ]
    assert [out.index(m) for m in markers] == sorted(out.index(m) for m in markers), out
    assert "Compiling a graph for compile range" in worker.output()
    graphs = sorted(p.relative_to(lab.workdir) for p in lab.workdir.glob("vllm-cache/**/*.py"))
    assert [p.parts[-3] for p in graphs] == ["rank_0_0", "rank_1_0"]
    assert sorted(p.name.split("-")[2] for p in jit.iterdir()) == ["rank0", "rank1"]

    head, worker, url = lab.pair(head_env=env, worker_env=env)
    _boot_then_stop(head, worker, url)
    assert "Directly load the compiled graph(s) for compile range (1, 8192) from the cache" in (
        head.output()
    )
    assert "Compiling a graph" not in head.output()
    # How long each waits: test_a_warm_compile_waits_a_fraction_of_a_cold_one.


class RecordedWaits(threading.Event):
    """A boot's stop event that records every wait asked of it and returns at once (not set)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        return False


def test_a_warm_compile_waits_a_fraction_of_a_cold_one(tmp_path: Path) -> None:
    """The compile phase's waits, recorded instead of slept: a cold compile waits
    GX10_SIM_COMPILE_SECONDS and fills the rank's cache; the next one, with the same cache
    directory, loads the graphs in a twentieth of that."""
    env = sim.SimEnv.from_env(
        {"GX10_SIM_COMPILE_SECONDS": "2.0", "VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    )
    model = ModelInfo(str(tmp_path / "model"), "DeepseekV4ForCausalLM", 1048576, None)

    def compile_once() -> tuple[list[float | None], str]:
        stop, out = RecordedWaits(), io.StringIO()
        boot = Boot(
            env, stop, sim.Log(out=out), model, rank=0, world=2, max_len=MAX_MODEL_LEN,
            eager=False, memory=None,  # type: ignore[arg-type]  # compile() reads no memory plan
        )  # fmt: skip
        boot.compile()
        return stop.asked, out.getvalue()

    cold, cold_log = compile_once()
    assert cold == [2.0]
    assert "Compiling a graph for compile range (1, 8192)" in cold_log
    warm, warm_log = compile_once()
    assert warm == [0.1]  # a twentieth of the cold compile
    assert "Directly load the compiled graph(s) for compile range (1, 8192) from the cache" in (
        warm_log
    )


def test_the_phases_are_what_the_serve_stages_wait_reads(lab: Launcher) -> None:
    """The collection's boot_phases follows the simulator's log to the API phase."""
    from gx10._collection import load as module_utils  # noqa: PLC0415

    phases = module_utils("boot_phases")
    head, worker, url = lab.pair()
    _boot_then_stop(head, worker, url)
    seen = []
    lines = head.output().splitlines()
    for end in range(1, len(lines) + 1):
        phase, _ = phases.current_phase(lines[:end])
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
    assert seen == ["start", "weights", "compile", "graph_capture", "api"]
    lines = worker.output().splitlines()
    assert phases.current_phase(lines)[0] == "graph_capture"


def test_a_hung_phase_never_ends_and_never_serves(lab: Launcher) -> None:
    env = {"GX10_SIM_HANG_PHASE": "compile"}
    head, _worker, url = lab.pair(head_env=env)
    wait_until(lambda: "Dynamo bytecode transform time" in head.output(), 10, "the compile")
    time.sleep(1.0)
    assert head.alive()
    assert not healthy(url)
    assert "torch.compile takes" not in head.output()


def test_enforce_eager_skips_compile_and_capture(lab: Launcher) -> None:
    head, worker, url = lab.pair("--enforce-eager")
    _boot_then_stop(head, worker, url)
    assert "Dynamo bytecode" not in head.output()
    assert "Capturing CUDA graphs" not in head.output()
    assert "Skipping CUDA graph capture (enforce_eager)" in head.output()


def test_dead_head_leaves_the_worker_running_without_rejoining(lab: Launcher) -> None:
    head, worker, url = lab.pair()
    wait_until(lambda: healthy(url), 15, "the head")
    head.popen.kill()
    head.wait()
    wait_until(lambda: "recvValue failed" in worker.output(), 10, "the worker noticing")
    assert "Did the remote server shutdown or crash?" in worker.output()
    # A new head on the same master port is never joined: the old worker stays detached.
    code, out = lab.run(
        str(lab.model),
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(lab.master_port),
        "--port",
        str(free_port()),
        env={"GX10_SIM_RENDEZVOUS_TIMEOUT": "1"},
    )
    assert code == 1
    assert "1/2 clients joined" in out
    assert worker.alive()


def test_dead_worker_wedges_the_head_then_the_engine_dies(lab: Launcher) -> None:
    head, worker, url = lab.pair(head_env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1"})
    wait_until(lambda: healthy(url), 15, "the head")
    worker.popen.kill()
    worker.wait()
    time.sleep(0.5)
    assert healthy(url)  # as observed on real pairs: /health still says 200
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status, text = http("POST", f"{url}/v1/chat/completions", body)
    assert status == 500  # once the engine died (the wait itself: the test below)
    error = json.loads(text)["error"]
    assert error["type"] == "InternalServerError"
    assert "EngineCore encountered an issue" in error["message"]
    assert head.wait() == 1
    assert "RPC call to execute_model timed out." in head.output()


def test_a_step_without_its_peer_waits_for_the_execute_model_timeout() -> None:
    """In process: once the peer is lost, a step blocks on the collective until the timer of
    VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (set, not waited for, here) kills the engine."""
    out = io.StringIO()
    engine = sim.Engine(sim.SimEnv(execute_model_timeout=300.0), 4, 0, sim.Log(out=out))
    engine.peer_lost.set()  # the worker is gone
    failed: list[Exception] = []

    def step() -> None:
        try:
            engine.sleep(0.01)
        except EngineDeadError as error:
            failed.append(error)

    thread = threading.Thread(target=step, daemon=True)
    thread.start()
    wait_until(lambda: engine._stuck_timer is not None, 5, "the engine's stuck timer")
    timer = engine._stuck_timer
    assert timer is not None
    assert timer.interval == 300.0
    assert timer.function == engine.die
    timer.cancel()
    assert thread.is_alive()  # wedged: no error before the timer's end
    assert failed == []
    assert not engine.dead.is_set()
    timer.function()  # the timer's end
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(failed) == 1  # the step fails with the engine
    assert "RPC call to execute_model timed out." in out.getvalue()


def test_bad_gid_index_on_the_worker_fails_both_sides_like_nccl(lab: Launcher) -> None:
    head, worker, _url = lab.pair(worker_env={"NCCL_IB_GID_INDEX": "1"})
    assert worker.wait() == 1
    assert head.wait() == 1
    out = worker.output()
    assert "NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable" in out
    assert "RuntimeError: NCCL error: unhandled system error" in out
    assert "rocep1s0f0:1 NCCL_IB_GID_INDEX=1: GID index 1 is RoCE v2 fe80:" in out
    assert "remote process exited or there was a network error" in head.output()


# --------------------------------------------------------------------------------------------
# NCCL / Gloo environment against sysfs (in-process)
# --------------------------------------------------------------------------------------------


def comm_problem(sysfs: Path, **env: str) -> Any:
    base = {"GX10_SIM_SYSFS_ROOT": str(sysfs)}
    return sim.check_comm_env(sim.SimEnv.from_env({**base, **env}), True)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return make_sysfs(tmp_path / "sys")


def test_good_rail_environment_passes(sysfs: Path) -> None:
    good = {"NCCL_SOCKET_IFNAME": RAIL_IF, "GLOO_SOCKET_IFNAME": RAIL_IF, "NCCL_IB_HCA": HCAS}
    assert comm_problem(sysfs, **good, NCCL_IB_GID_INDEX="3") is None
    assert comm_problem(sysfs, **good) is None  # auto-selection finds the RoCE v2 IPv4 entry
    assert comm_problem(sysfs, NCCL_SOCKET_IFNAME="^lo,docker", NCCL_IB_HCA="=rocep1s0f0:1") is None


def test_missing_interfaces_fail_like_nccl_and_gloo(sysfs: Path) -> None:
    problem = comm_problem(sysfs, NCCL_SOCKET_IFNAME="enp9s0")
    assert problem.message.startswith("NCCL error: unhandled system error")
    assert "NCCL WARN Bootstrap : no socket interface found" in problem.lines[0]
    problem = comm_problem(sysfs, GLOO_SOCKET_IFNAME="enp9s0")
    assert problem.message.endswith("ifa != nullptr. Unable to find address for: enp9s0")


def test_absent_hca_fails(sysfs: Path) -> None:
    problem = comm_problem(sysfs, NCCL_IB_HCA="rocep1s0f0,mlx5_0")
    assert (
        "NCCL WARN NET/IB : No device found matching NCCL_IB_HCA entry 'mlx5_0'"
        in (problem.lines[0])
    )
    assert "unhandled system error" in problem.message


@pytest.mark.parametrize(
    ("index", "warning", "detail"),
    [
        ("2", "ibv_modify_qp failed", "GID index 2 is IB/RoCE v1 0000:0000:0000:0000:0000:ffff"),
        ("1", "ibv_modify_qp failed", "GID index 1 is RoCE v2 fe80:"),
        ("7", "ibv_query_gid failed", "GID index 7 does not exist"),
    ],
)
def test_pinned_gid_must_be_the_roce_v2_ipv4_entry(
    sysfs: Path, index: str, warning: str, detail: str
) -> None:
    problem = comm_problem(sysfs, NCCL_IB_HCA=HCAS, NCCL_IB_GID_INDEX=index)
    assert warning in problem.lines[0]
    assert detail in problem.lines[1]
    assert "the RoCE v2 IPv4 entry of this node is index 3" in problem.lines[1]


def test_one_index_for_rails_that_disagree_fails(tmp_path: Path) -> None:
    """Indices move: one twin with an extra address has its RoCE v2 IPv4 entry at 5."""
    root = make_sysfs(
        tmp_path / "sys",
        hcas={
            "rocep1s0f0": [
                (None, "IB/RoCE v1"),
                (None, "RoCE v2"),
                ("192.168.100.10", "IB/RoCE v1"),
                ("192.168.100.10", "RoCE v2"),
            ],
            "roceP2p1s0f0": [
                (None, "IB/RoCE v1"),
                (None, "RoCE v2"),
                ("169.254.3.4", "IB/RoCE v1"),
                ("169.254.3.4", "RoCE v2"),
                ("192.168.101.10", "IB/RoCE v1"),
                ("192.168.101.10", "RoCE v2"),
            ],
        },
    )
    problem = comm_problem(root, NCCL_IB_HCA=HCAS, NCCL_IB_GID_INDEX="3")
    assert "roceP2p1s0f0:1" in problem.lines[1]
    assert "index 5" in problem.lines[1]
    assert comm_problem(root, NCCL_IB_HCA="rocep1s0f0", NCCL_IB_GID_INDEX="3") is None


def test_own_address_is_preferred_when_a_device_has_several(tmp_path: Path) -> None:
    root = make_sysfs(
        tmp_path / "sys",
        hcas={"rocep1s0f0": [("10.0.0.5", "RoCE v2"), ("192.168.100.10", "RoCE v2")]},
    )
    env = {"NCCL_IB_HCA": "rocep1s0f0", "VLLM_HOST_IP": "192.168.100.10"}
    assert comm_problem(root, **env, NCCL_IB_GID_INDEX="1") is None
    assert comm_problem(root, **env, NCCL_IB_GID_INDEX="0") is not None


def test_no_ipv4_gid_fails_even_unpinned(tmp_path: Path) -> None:
    root = make_sysfs(
        tmp_path / "sys", hcas={"rocep1s0f0": [(None, "IB/RoCE v1"), (None, "RoCE v2")]}
    )
    problem = comm_problem(root, NCCL_IB_HCA="rocep1s0f0")
    assert "has no RoCE v2 GID for an IPv4 address" in problem.lines[0]
    assert comm_problem(root, NCCL_IB_HCA="rocep1s0f0", NCCL_IB_DISABLE="1") is None


# --------------------------------------------------------------------------------------------
# The OpenAI API, through the official client
# --------------------------------------------------------------------------------------------


def test_chat_completion_returns_text_and_usage(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "Say something."}], max_tokens=32
    )
    choice = reply.choices[0]
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert 0 < reply.usage.completion_tokens <= 32
    again = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "Say something."}], max_tokens=32
    )
    assert again.choices[0].message.content == choice.message.content  # deterministic


def test_max_tokens_is_honoured_exactly_with_ignore_eos(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Go on."}],
        max_tokens=300,
        extra_body={"ignore_eos": True},
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 300
    assert reply.choices[0].finish_reason == "length"


def test_streaming_sends_several_chunks_then_usage(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Tell me more."}],
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) >= 3
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] in ("stop", "length")
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 40 or finals[-1] == "stop"


def test_reasoning_field_when_thinking_is_on(client: OpenAI) -> None:
    """vLLM's `reasoning` (it replaced `reasoning_content`, removed in early 2026: PR 33402)."""
    reply = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Think first."}],
        max_tokens=20,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    message = reply.choices[0].message
    assert getattr(message, "reasoning", None)
    assert getattr(message, "reasoning_content", None) is None
    assert "<think>" not in (message.content or "")
    plain = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "Think first."}], max_tokens=20
    )
    assert getattr(plain.choices[0].message, "reasoning", None) is None


def test_tool_definition_yields_a_parsed_tool_call(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        max_tokens=200,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert calls[0].id.startswith("chatcmpl-tool-")


def test_streamed_tool_call_assembles(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Weather for Oslo please"}],
        tools=[WEATHER_TOOL],
        max_tokens=200,
        stream=True,
    )
    name, arguments, reason = "", "", None
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            name += call.function.name or "" if call.function else ""
            arguments += call.function.arguments or "" if call.function else ""
        reason = chunk.choices[0].finish_reason or reason
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "Oslo"}
    assert reason == "tool_calls"


def test_unrelated_question_with_tools_answers_in_text(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Write a haiku."}],
        tools=[WEATHER_TOOL],
        max_tokens=20,
    )
    assert not reply.choices[0].message.tool_calls
    assert reply.choices[0].message.content


def test_context_limits_use_vllm_wording(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=5000
        )
    assert (
        "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum "
        f"context length is {MAX_MODEL_LEN} tokens and your request has" in str(too_many.value)
    )
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "word " * 5000}], max_tokens=1
        )
    assert (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your "
        "request has" in str(too_long.value)
    )


def test_unknown_model_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert "The model `nope` does not exist." in str(missing.value)


def test_api_key_guards_v1_only(served: str) -> None:
    status, body = http("GET", f"{served}/v1/models")
    assert status == 401
    assert json.loads(body) == {"error": "Unauthorized"}
    assert http("GET", f"{served}/v1/models", key="wrong")[0] == 401
    assert http("GET", f"{served}/v1/models", key=API_KEY)[0] == 200
    assert http("GET", f"{served}/health")[0] == 200
    assert http("GET", f"{served}/metrics")[0] == 200
    bad = OpenAI(base_url=f"{served}/v1", api_key="wrong", max_retries=0, timeout=10.0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_tokenize_counts_match_usage(served: str, client: OpenAI) -> None:
    prompt = "The quick brown fox jumps over the lazy dog, twice: 1234567."
    status, body = http("POST", f"{served}/tokenize", {"prompt": prompt})
    assert status == 200
    tokens = json.loads(body)
    assert tokens["count"] == len(tokens["tokens"]) == len(sim.tokenize(prompt, True))
    assert tokens["max_model_len"] == MAX_MODEL_LEN
    completion = client.completions.create(model=SERVED, prompt=prompt, max_tokens=5)
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == tokens["count"]
    messages = [{"role": "user", "content": prompt}]
    _, chat_body = http("POST", f"{served}/tokenize", {"messages": messages})
    chat = client.chat.completions.create(model=SERVED, messages=messages, max_tokens=3)
    assert chat.usage is not None
    assert chat.usage.prompt_tokens == json.loads(chat_body)["count"]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


def test_metrics_counters_increase(served: str, client: OpenAI) -> None:
    names = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    )
    before_text = http("GET", f"{served}/metrics")[1]
    before = {name: metric(before_text, name) for name in names}
    assert metric(before_text, "vllm:num_requests_running") == 0
    reply = client.chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Count."}],
        max_tokens=50,
        extra_body={"ignore_eos": True},
    )
    assert reply.usage is not None
    after_text = http("GET", f"{served}/metrics")[1]
    after = {name: metric(after_text, name) for name in names}
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == (
        reply.usage.prompt_tokens
    )
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 50
    drafts = after[names[2]] - before[names[2]]
    accepted = after[names[3]] - before[names[3]]
    assert drafts > 0
    assert drafts % 5 == 0
    assert 0 < accepted <= drafts


# --------------------------------------------------------------------------------------------
# Pure pieces
# --------------------------------------------------------------------------------------------


def test_tokenizer_is_deterministic_and_about_four_chars_per_token() -> None:
    text = "Serving DeepSeek on two GB10 nodes over a dual rail RoCE link. " * 20
    assert sim.tokenize(text) == sim.tokenize(text)
    ratio = len(text) / sim.count_tokens(text)
    assert 3.0 < ratio < 5.0
    assert sim.count_tokens(sim.BOS + "hi") == 2


def test_perf_model_is_pluggable() -> None:
    class Fast(sim.PerfModel):
        def ttft(self, prompt_tokens: int, concurrency: int) -> float:
            return 0.0

    sim.PERF_MODELS["fast"] = Fast
    try:
        engine = sim.Engine(sim.SimEnv(perf_model="fast"), 4, 0, sim.Log())
        assert isinstance(engine.perf, Fast)
    finally:
        del sim.PERF_MODELS["fast"]
    model = sim.PerfModel()
    assert model.decode_tps(256, 1) > model.decode_tps(256, 12) > 0
    assert model.ttft(65536, 1) > model.ttft(256, 1) > 0


def test_tool_arguments_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "count": {"type": "integer"},
            "mode": {"type": "string", "enum": ["append", "overwrite"]},
        },
        "required": ["path", "count", "mode"],
    }
    args = sim.tool_arguments(schema, "Overwrite fizzbuzz.py with 15 lines")
    assert args == {"path": "fizzbuzz.py", "count": 15, "mode": "overwrite"}


# --------------------------------------------------------------------------------------------
# The product's smoke test (gx10.smoke) against the simulator
# --------------------------------------------------------------------------------------------


def test_smoke_test_passes_against_a_served_pair(served: str) -> None:
    result = smoke.run(f"{served}/v1", SERVED, api_key=API_KEY, timeout=15.0)
    assert [c.name for c in result.checks] == ["models", "chat", "stream", "tool call"]
    assert result.ok, result.checks
    assert result.checks[3].detail == "write_file(content, path)"


def test_smoke_test_names_a_model_the_server_does_not_serve(served: str) -> None:
    result = smoke.run(f"{served}/v1", "not-served", api_key=API_KEY, timeout=15.0)
    assert not result.ok
    (check,) = result.checks
    assert "'not-served' is not served" in check.detail


# --------------------------------------------------------------------------------------------
# GPU load for the nvidia-smi simulator
# --------------------------------------------------------------------------------------------


def read_load(state_dir: Path) -> float | None:
    try:
        return float((state_dir / "load").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def test_engine_load_follows_the_running_sequences() -> None:
    assert sim.engine_load(0, 12) == 0.0
    assert sim.engine_load(1, 12) == 0.725
    assert sim.engine_load(6, 12) == 0.85
    assert sim.engine_load(12, 12) == 1.0
    assert sim.engine_load(30, 12) == 1.0
    loads: list[float] = []
    engine = sim.Engine(sim.SimEnv(), 4, 0, sim.Log())
    engine.load_listener = loads.append
    for _ in range(2):
        engine.admit()
    for _ in range(2):
        engine.release()
    assert loads == [0.775, 0.85, 0.775, 0.0]


def test_gpu_load_is_written_on_change_and_rate_limited(tmp_path: Path) -> None:
    """The interval on a fake clock: what is set within it waits for the clock to pass it, and
    only the latest of those is written."""
    now = [100.0]
    looked: list[float] = []  # the writer's readings of the clock

    def clock() -> float:
        looked.append(now[0])
        return now[0]

    sent: list[tuple[float, float]] = []
    out = io.StringIO()
    load = sim.GpuLoad(
        tmp_path,
        sim.Log(out=out),
        min_interval=0.3,
        sinks=[lambda x: sent.append((x, now[0]))],
        clock=clock,
    )
    try:
        load.set(0.7)
        wait_until(lambda: read_load(tmp_path) == 0.7, 5, "the first load")
        for value in (0.8, 0.9, 1.0):  # within one interval: only the latest is written
            load.set(value)
        now[0] = 100.29
        wait_until(lambda: 100.29 in looked, 5, "the writer reading the clock at 100.29")
        assert sent == [(0.7, 100.0)]  # 0.29 s after the last write: held
        now[0] = 100.3
        wait_until(lambda: read_load(tmp_path) == 1.0, 5, "the latest load")
        assert sent == [(0.7, 100.0), (1.0, 100.3)]
        now[0] = 101.0
        load.set(1.0)  # unchanged: nothing to write
        time.sleep(0.2)
        assert sent == [(0.7, 100.0), (1.0, 100.3)]
        assert (tmp_path / "load").read_text(encoding="utf-8") == "1.000\n"
    finally:
        load.close()
    assert read_load(tmp_path) == 0.0  # shutdown: the GPU idles
    assert sent[-1][0] == 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load"]  # no temporary file left
    assert out.getvalue() == ""
    load.set(0.9)  # closed: ignored
    time.sleep(0.1)
    assert read_load(tmp_path) == 0.0


def test_gpu_load_without_a_state_dir_logs_once_and_carries_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    sent: list[float] = []
    out = io.StringIO()
    load = sim.GpuLoad(blocker / "smi", sim.Log(out=out), min_interval=0.0, sinks=[sent.append])
    for value in (0.7, 0.8, 0.9):
        load.set(value)
        wait_until(lambda v=value: sent[-1:] == [v], 5, f"load {value}")
    load.close()
    assert sent == [0.7, 0.8, 0.9, 0.0]  # the workers still hear it
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "WARNING" in lines[0]
    assert f"cannot write the GPU load to {blocker / 'smi' / 'load'}" in lines[0]
    never = sim.GpuLoad(tmp_path / "unused", sim.Log(out=out))
    never.close()  # never published: nothing written on close
    assert not (tmp_path / "unused").exists()


def test_the_pair_drives_both_nodes_gpu_load(lab: Launcher) -> None:
    head_dir, worker_dir = lab.workdir / "smi-a", lab.workdir / "smi-b"
    head_dir.mkdir()
    worker_dir.mkdir()
    (head_dir / "load").write_text("1.0\n")  # left by an engine that was killed
    slow = {"GX10_SIM_TIME_SCALE": "0.05"}
    head, worker, url = lab.pair(
        "--max-num-seqs",
        "4",
        head_env={**slow, "GX10_SIM_STATE_DIR": str(head_dir)},
        worker_env={**slow, "GX10_SIM_STATE_DIR": str(worker_dir)},
    )
    wait_until(lambda: healthy(url) or not head.alive(), 15, "the head")
    assert head.alive(), head.output()
    wait_until(lambda: read_load(head_dir) == 0.0, 5, "the head's idle load")
    wait_until(lambda: read_load(worker_dir) == 0.0, 5, "the worker's idle load")
    seen: dict[str, set[float]] = {"head": set(), "worker": set()}
    body = {
        "messages": [{"role": "user", "content": "Go on."}],
        "max_tokens": 600,
        "ignore_eos": True,
    }
    result: list[int] = []
    request = threading.Thread(
        target=lambda: result.append(http("POST", f"{url}/v1/chat/completions", body)[0])
    )
    request.start()
    while request.is_alive():
        for name, path in (("head", head_dir), ("worker", worker_dir)):
            value = read_load(path)
            if value is not None:
                seen[name].add(value)
        time.sleep(0.02)
    request.join()
    assert result == [200]
    assert 0.775 in seen["head"], seen  # one of four sequences running
    assert 0.775 in seen["worker"], seen  # tensor parallel: the worker's GPU works too
    wait_until(lambda: read_load(head_dir) == 0.0, 5, "the head back to idle")
    wait_until(lambda: read_load(worker_dir) == 0.0, 5, "the worker back to idle")
    head.popen.send_signal(signal.SIGTERM)
    assert head.wait() == 0
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "cannot write the GPU load" not in head.output() + worker.output()


def test_shutdown_leaves_both_gpus_idle(lab: Launcher) -> None:
    head_dir, worker_dir = lab.workdir / "smi-a", lab.workdir / "smi-b"
    head_dir.mkdir()
    worker_dir.mkdir()
    slow = {"GX10_SIM_TIME_SCALE": "1"}
    head, worker, url = lab.pair(
        head_env={**slow, "GX10_SIM_STATE_DIR": str(head_dir)},
        worker_env={**slow, "GX10_SIM_STATE_DIR": str(worker_dir)},
    )
    wait_until(lambda: healthy(url) or not head.alive(), 15, "the head")
    body = {"messages": [{"role": "user", "content": "Go on."}], "max_tokens": 2000}

    def cut_short() -> None:
        with contextlib.suppress(OSError):  # the server goes away mid-request
            http("POST", f"{url}/v1/chat/completions", body, timeout=30)

    request = threading.Thread(target=cut_short, daemon=True)
    request.start()
    busy = (head_dir, worker_dir)
    wait_until(lambda: all((read_load(d) or 0) >= 0.7 for d in busy), 10, "both GPUs busy")
    head.popen.send_signal(signal.SIGTERM)  # mid-request
    head.wait()
    assert read_load(head_dir) == 0.0
    wait_until(lambda: read_load(worker_dir) == 0.0, 5, "the worker told to idle")
    (worker_dir / "load").write_text("0.5\n")
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert read_load(worker_dir) == 0.0
