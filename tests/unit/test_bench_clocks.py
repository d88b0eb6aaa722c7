"""gx10.bench.clocks and `gx10 bench -i`: the clock sweep's safety, for real.

Two simulated nodes run the real node tool (roles/gpu_clock/files/gx10-gpu-clock) over the lab's
nvidia-smi simulator, each with its own state, reached through an `env` prefix (bench_helpers).
Covered: caps set once each and restored; a second runner refused, naming the holder; cool-down
and the abort limit (the simulator's ambient_offset_c, and an injected temperature source); a
lost connection; an exception, SIGTERM and SIGKILL of the controller mid-sweep; the CLI with an
inventory end to end. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_helpers import (
    SERVED,
    TOOL,
    SimNode,
    processes_mentioning,
    server_metric,
    sim_node,
    sim_pair,
    wait_idle,
)
from rich.console import Console

from gx10.bench.client import Endpoint
from gx10.bench.clocks import (
    ClockController,
    LockHeldError,
    SweepAborted,
    Terminated,
    Thresholds,
    signals_deferred,
    terminate_as_exception,
)
from gx10.bench.matrix import build_config
from gx10.bench.nodes import Cluster, Node
from gx10.bench.report import TITLES, build_report
from gx10.bench.results import RunOutcome
from gx10.bench.runner import run_bench
from gx10.bench.telemetry import Sample, TelemetryHub

ROOT = Path(__file__).resolve().parents[2]
SCALE = 0.2  # the vLLM simulator at 5x real time
LONG = 16384  # max_tokens of a case that would run about a minute (MAX_MODEL_LEN 20,000)
GENERATED = "vllm:generation_tokens_total"
SECRET = "sk-gx10-test-0ff1ce"  # the inventory's API key: sent, never shown or written
INTERVAL_MS = 200


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def temperature(hub: TelemetryHub, name: str) -> float | None:
    latest = hub.latest(name)
    return latest.temperature_c if latest is not None else None


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SimNode, SimNode]:
    """node-a has its policy applied (original 2000); node-b has nothing recorded yet (its
    restore falls back to the policy)."""
    return sim_node(tmp_path, "node-a"), sim_node(tmp_path, "node-b", apply=False)


@pytest.fixture
def hub(pair: tuple[SimNode, SimNode]) -> Iterator[TelemetryHub]:
    a, b = pair
    telemetry = TelemetryHub([a.node("head"), b.node()], interval_ms=INTERVAL_MS)
    telemetry.start()
    assert telemetry.wait_for(0.0, 15) == []
    yield telemetry
    telemetry.stop()


def controller(
    pair: tuple[SimNode, SimNode], temps: Any, owner: str = "test runner", **limits: Any
) -> ClockController:
    a, b = pair
    thresholds = Thresholds(**{"poll_s": 0.1, **limits})
    return ClockController([a.node("head"), b.node()], temps, thresholds, owner)


# --------------------------------------------------------------------------------------------
# The controller against the tool
# --------------------------------------------------------------------------------------------


def test_a_sweep_sets_each_cap_once_and_restores(
    pair: tuple[SimNode, SimNode], hub: TelemetryHub
) -> None:
    a, b = pair
    clocks = controller(pair, hub)
    clocks.open()
    try:
        assert a.show()["session"] == {
            "owner": "test runner",
            "pid": clocks.sessions["node-a"].proc.pid,
            "started": pytest.approx(time.time(), abs=30),
            "original": 2000,
        }
        assert (clocks.sessions["node-a"].original, clocks.sessions["node-b"].original) == (
            2000,
            None,
        )
        clocks.set_cap("2400")
        assert (a.lock(), b.lock()) == ("208,2400", "208,2400")
        clocks.set_cap("2400")  # the same cap: nothing sent
        clocks.set_cap("unlocked")
        assert (a.lock(), b.lock()) == (None, None)
        clocks.cool_down()
        assert clocks.hazard() is None
        # Nobody else can change the clock meanwhile.
        foreign = a.tool("set", "2000", check=False)
        assert foreign.returncode == 75
    finally:
        report = clocks.close()
    assert clocks.sets == [
        ("node-a", "2400"),
        ("node-b", "2400"),
        ("node-a", "unlocked"),
        ("node-b", "unlocked"),
    ]
    assert (a.lock(), b.lock()) == ("208,2000", "208,2000")
    assert report["node-a"]["restore_to"] == 2000
    assert report["node-a"]["set"] == "ok"
    assert report["node-a"]["applied"] == 2000  # the node's answer to the explicit restore
    assert report["node-b"]["restore_to"] == 2000  # no original: the policy
    assert report["node-b"]["ended"] == {"ended": "stdin closed", "restored": 2000}
    assert a.show()["session"] is None
    assert b.show()["session"] is None
    assert clocks.close() == {}  # once only


def test_a_second_runner_is_refused_naming_the_holder(
    pair: tuple[SimNode, SimNode], hub: TelemetryHub
) -> None:
    a, b = pair
    holder = subprocess.Popen(
        [sys.executable, str(TOOL), "session", "gx10 bench alice@ctl /data/run1"],
        env={**os.environ, **b.env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert json.loads(holder.stdout.readline())["ready"]
        clocks = controller(pair, hub, owner="gx10 bench bob@ctl /data/run2")
        with pytest.raises(LockHeldError) as error:
            clocks.open()
        message = str(error.value)
        assert message.startswith("node-b: this node's benchmark lock is held by ")
        assert f"gx10 bench alice@ctl /data/run1 (pid {holder.pid}, since" in message
        # node-a's session (opened first) was closed again: its lock is free, its cap as it was.
        assert a.wait_no_session() is None
        assert a.lock() == "208,2000"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=20)
    # The holder is gone: the next run goes ahead.
    clocks = controller(pair, hub)
    clocks.open()
    clocks.close()


def test_cool_down_waits_until_every_node_is_below_the_limit(
    pair: tuple[SimNode, SimNode], hub: TelemetryHub
) -> None:
    _a, b = pair
    b.set_ambient(30)  # idle at 76 C
    assert wait_for(lambda: temperature(hub, "node-b") == 76)
    clocks = controller(pair, hub, cool_down_timeout_s=30)
    messages: list[str] = []
    clocks.log = messages.append
    cooling = threading.Event()

    def cool() -> None:
        cooling.set()  # first: set before any reading can show the cooler node
        b.set_ambient(0)

    threading.Timer(1.5, cool).start()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    clocks.cool_down(sleep=sleep)
    assert cooling.is_set()  # it returned only once the node was cooled
    assert sleeps
    assert set(sleeps) == {0.1}  # polled at poll_s, never a longer nap
    assert messages[0].startswith("cooling down: node-b at 76 C (waiting for every node below 70")
    assert messages[-1] == "cooled down below 70 C"


def test_cool_down_is_bounded_and_the_abort_limit_is_immediate(
    pair: tuple[SimNode, SimNode], hub: TelemetryHub
) -> None:
    a, _b = pair
    a.set_ambient(30)
    assert wait_for(lambda: temperature(hub, "node-a") == 76)
    clocks = controller(pair, hub, cool_down_timeout_s=1.0)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    with pytest.raises(SweepAborted) as error:
        clocks.cool_down(sleep=sleep)
    assert str(error.value) == (
        "cool-down: node-a at 76 C after 1 s (every node must be below 70 C before a case)"
    )
    assert sleeps
    assert all(0 < pause <= 0.1 for pause in sleeps)  # polls: the timeout ends the wait
    a.set_ambient(40)  # 86 C idle: above the abort limit
    assert wait_for(lambda: temperature(hub, "node-a") == 86)
    clocks = controller(pair, hub, cool_down_timeout_s=60)
    sleeps.clear()
    with pytest.raises(SweepAborted, match=r"^node-a at 86 C, above the abort limit 84 C$"):
        clocks.cool_down(sleep=sleep)
    assert sleeps == []  # immediate: not one poll of the cool-down
    assert clocks.hazard() == "node-a at 86 C, above the abort limit 84 C"


@dataclass
class FakeTemps:
    """An injected temperature source and clock: readings scripted per node."""

    readings: dict[str, float | None]
    now: float = 1000.0
    read_at: float = 1000.0

    def latest(self, name: str) -> Sample | None:
        if name not in self.readings:
            return None
        return Sample(name, self.read_at, 0.0, "t", 2000, 30, self.readings[name], 90)

    def clock(self) -> float:
        return self.now


def fake_controller(temps: FakeTemps, **limits: Any) -> ClockController:
    thresholds = Thresholds(**{"poll_s": 1.0, **limits})
    nodes = [Node("a", "head"), Node("b", "workers")]
    return ClockController(nodes, temps, thresholds, "fake", clock=temps.clock)


def test_cool_down_logic_with_injected_readings() -> None:
    temps = FakeTemps({"a": 72.0, "b": 60.0})
    clocks = fake_controller(temps, cool_down_timeout_s=10)
    steps = clocks.cool_down_steps()
    assert next(steps) == 1.0  # a is at 72: wait
    temps.now = temps.read_at = 1001
    temps.readings["a"] = 70.0  # "below 70" means below: still waiting
    assert next(steps) == 1.0
    temps.now = temps.read_at = 1002
    temps.readings["a"] = 69.0
    with pytest.raises(StopIteration):
        next(steps)
    # A temperature the GPU does not report ([N/A]) is waited for, then times out.
    temps.readings["b"] = None
    steps = clocks.cool_down_steps()
    assert next(steps) == 1.0
    temps.now += 11
    with pytest.raises(SweepAborted, match=r"b: temperature not reported \(\[N/A\]\) after 10 s"):
        next(steps)
    # A reading older than stale_s is no reading; during a case that stops the sweep.
    temps.readings = {"a": 50.0, "b": 50.0}
    temps.now = temps.read_at + 16
    assert clocks.hazard() == (
        "a: no temperature reading for 16 s (the abort limit cannot be watched)"
    )
    temps.read_at = temps.now
    assert clocks.hazard() is None
    temps.readings["b"] = 84.0  # at the limit is not above it
    assert clocks.hazard() is None
    temps.readings["b"] = 84.5
    assert clocks.hazard() == "b at 84.5 C, above the abort limit 84 C"


def test_a_lost_connection_ends_the_sweep_and_the_node_restores_itself(
    pair: tuple[SimNode, SimNode], hub: TelemetryHub, tmp_path: Path
) -> None:
    """node-b is reached through a relay (an ssh stand-in): killing the relay closes the node's
    end of the pipe, as a dropped connection does."""
    a, b = pair
    relay = tmp_path / "relay.py"
    relay.write_text(
        textwrap.dedent(
            """
            import shutil, subprocess, sys, threading
            child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE)
            def pump():
                try:
                    shutil.copyfileobj(sys.stdin.buffer, child.stdin, 1)
                finally:
                    child.stdin.close()
            threading.Thread(target=pump, daemon=True).start()
            sys.exit(child.wait())
            """
        )
    )
    nodes = [a.node("head"), b.node(relay=(sys.executable, "-u", str(relay)))]
    clocks = ClockController(nodes, hub, Thresholds(poll_s=0.1), "test runner")
    clocks.open()
    try:
        clocks.set_cap("2600")
        assert b.lock() == "208,2600"
        clocks.sessions["node-b"].proc.kill()  # the relay: our own child, by its PID
        clocks.sessions["node-b"].proc.wait(timeout=10)
        assert b.wait_lock("208,2000") == "208,2000"  # restored by the node itself (policy)
        assert b.wait_no_session() is None
        hazard = clocks.hazard()
        assert hazard is not None
        assert hazard.startswith("node-b: the node's clock session is gone")
        with pytest.raises(SweepAborted, match="node-b: the node's clock session is gone"):
            clocks.set_cap("2000")
        assert a.lock() == "208,2600"
    finally:
        report = clocks.close()
    assert a.lock() == "208,2000"
    assert report["node-a"]["set"] == "ok"
    # The relay passed the node's own last word through: it restored the cap by itself.
    assert report["node-b"]["set"] == "skipped: it ended (stdin closed) and restored 2000"


CONTROLLER_SCRIPT = """
import json, sys, time
from pathlib import Path
from gx10.bench.clocks import ClockController, Thresholds, terminate_as_exception
from gx10.bench.nodes import Node
from gx10.bench.telemetry import TelemetryHub

spec = json.loads(sys.argv[1])
nodes = [Node(**{**n, "transport": tuple(n["transport"]), "tool": tuple(n["tool"])}) for n in spec]
hub = TelemetryHub(nodes, interval_ms=200)
hub.start()
clocks = ClockController(nodes, hub, Thresholds(), "doomed controller")
with terminate_as_exception():
    try:
        clocks.open()
        clocks.set_cap("2400")
        print("READY", flush=True)
        for _ in range(600):
            time.sleep(0.1)
    finally:
        report = clocks.close()
        hub.stop()
        print(json.dumps(report), flush=True)
"""


def _spawn_controller(pair: tuple[SimNode, SimNode]) -> subprocess.Popen[str]:
    a, b = pair
    spec = [
        {
            "name": n.name,
            "group": n.group,
            "transport": list(n.transport),
            "tool": list(n.tool),
            "nvidia_smi": n.nvidia_smi,
        }
        for n in (a.node("head"), b.node())
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER_SCRIPT, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
    assert (a.lock(), b.lock()) == ("208,2400", "208,2400")
    return proc


def test_sigterm_to_a_controller_restores_and_releases(pair: tuple[SimNode, SimNode]) -> None:
    a, b = pair
    proc = _spawn_controller(pair)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1  # Terminated propagated after the finally block
    assert "Terminated: SIGTERM received" in err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["node-a"]["set"] == "ok"
    assert report["node-b"]["set"] == "ok"
    assert (a.lock(), b.lock()) == ("208,2000", "208,2000")
    assert a.show()["session"] is None
    assert b.show()["session"] is None


def test_sigkill_of_the_controller_leaves_the_nodes_to_restore_themselves(
    pair: tuple[SimNode, SimNode], tmp_path: Path
) -> None:
    a, b = pair
    proc = _spawn_controller(pair)
    proc.kill()  # SIGKILL: no finally, no handler; only the closed pipes remain
    proc.wait(timeout=10)
    assert a.wait_lock("208,2000") == "208,2000"
    assert b.wait_lock("208,2000") == "208,2000"
    assert a.wait_no_session() is None
    assert b.wait_no_session() is None
    # The telemetry queries ended with their stdin too: nothing of the run is left running.
    assert wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 15), processes_mentioning(
        str(tmp_path)
    )


def test_signal_handlers_for_the_run_and_the_restore() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with terminate_as_exception():
        with pytest.raises(Terminated, match="SIGTERM received"):
            signal.raise_signal(signal.SIGTERM)
        # While the caps are restored, Ctrl-C and SIGTERM wait.
        with signals_deferred() as received:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
        assert received == [signal.SIGINT, signal.SIGTERM]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# --------------------------------------------------------------------------------------------
# The runner with nodes: a vLLM simulator pair whose nodes are the simulated ones
# --------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """The simulator pair and its two nodes, shared by the runner tests (reset for each)."""

    url: str
    root: Path
    a: SimNode
    b: SimNode

    def reset(self) -> None:
        for node in (self.a, self.b):
            shutil.rmtree(node.root)
        self.a = sim_node(self.root, "node-a")
        self.b = sim_node(self.root, "node-b", apply=False)

    def cluster(self) -> Cluster:
        return Cluster(
            sources=("(test)",),
            nodes=(self.a.node("head"), self.b.node()),
            endpoint=self.url,
            model=SERVED,
        )


@pytest.fixture(scope="module")
def cell_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cell]:
    root = tmp_path_factory.mktemp("cell")
    a, b = sim_node(root, "node-a"), sim_node(root, "node-b", apply=False)
    with sim_pair(tmp_path_factory.mktemp("sim"), SCALE, states=(a.state, b.state)) as url:
        yield Cell(url, root, a, b)


@pytest.fixture
def cell(cell_base: Cell) -> Cell:
    cell_base.reset()
    return cell_base


def run(
    cell: Cell,
    out: Path,
    lock: Path,
    transport: httpx.AsyncBaseTransport | None = None,
    **flags: Any,
) -> RunOutcome:
    config = build_config(
        None,
        {
            "max_tokens": 16,
            "request_timeout_s": 60.0,
            "telemetry_interval_ms": INTERVAL_MS,
            "prompt_lengths": "256",
            **flags,
        },
    )
    return run_bench(
        config,
        Endpoint.parse(cell.url, "", SERVED),
        out,
        lock_path=lock,
        console=quiet(),
        command=["gx10", "bench", "(test)"],
        cluster=cell.cluster(),
        transport=transport,
        owner="gx10 bench (test)",
    )


def test_a_run_with_nodes_sweeps_records_and_restores(cell: Cell, tmp_path: Path) -> None:
    out, lock = tmp_path / "out", tmp_path / "lock"
    # 256 tokens: about a second of load per case (the simulator runs 5x real time).
    outcome = run(
        cell,
        out,
        lock,
        clock_caps="2400,2000,unlocked",
        concurrency="1,2",
        max_tokens=256,
        ignore_eos=True,
    )
    assert outcome.failed == []
    assert outcome.aborted is None
    # Grouped by cap, in the order given: each cap set once.
    assert [c["id"] for c in outcome.cases] == [
        "p256-c1-2400", "p256-c2-2400", "p256-c1-2000", "p256-c2-2000",
        "p256-c1-unlocked", "p256-c2-unlocked",
    ]  # fmt: skip
    document = json.loads((out / "results.json").read_text())
    clock = document["commands"][-1]["clock"]
    assert clock["caps_set"] == ["2400", "2000", "unlocked"]
    assert clock["sessions"] == {
        "node-a": {"original": 2000, "policy": 2000},
        "node-b": {"original": None, "policy": 2000},
    }
    assert {n: r["set"] for n, r in clock["restore"].items()} == {"node-a": "ok", "node-b": "ok"}
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")
    assert cell.a.show()["session"] is None
    assert [n["name"] for n in document["nodes"]] == ["node-a", "node-b"]
    assert document["safety"]["abort_c"] == 84.0
    for case in outcome.cases:
        telemetry = case["telemetry"]
        assert set(telemetry["nodes"]) == {"node-a", "node-b"}
        assert all(n["samples"] >= 1 for n in telemetry["nodes"].values())
        assert telemetry["power_w_total"] > 25  # two loaded nodes (idle is about 7 W each)
        if case["clock_cap"] != "unlocked":
            assert telemetry["sm_clock_mhz_mean"] <= int(case["clock_cap"])
        assert telemetry["tps_per_w"] == pytest.approx(
            case["aggregate_tps"] / telemetry["power_w_total"]
        )
        assert case["ended_wall"] > case["started_wall"]
    # What the sweep is for: a lower cap draws less power and gives more tokens per joule.
    single = {c["clock_cap"]: c["telemetry"] for c in outcome.cases if c["concurrency"] == 1}
    watts = [single[cap]["power_w_total"] for cap in ("2000", "2400", "unlocked")]
    assert watts == sorted(watts)
    assert single["2000"]["tps_per_w"] > single["unlocked"]["tps_per_w"]
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert {"tps_per_w", "node-a.power_w.mean", "node-b.temperature_c.max"} <= set(header)
    timeline = (out / "telemetry.csv").read_text().splitlines()
    assert timeline[0].startswith("node,wall,node_time,sm_clock_mhz")
    assert len(timeline) > 10
    html = build_report(out).read_text()
    assert html.count("<svg aria-label=") == 5
    assert f"aria-label='{TITLES['clock']}'" in html
    assert f"aria-label='{TITLES['thermal']}'" in html
    summary = (out / "summary.md").read_text()
    assert "Clock sweep at 256 prompt tokens, 1 stream(s)" in summary
    assert "| 2000 MHz |" in summary
    assert "| unlocked |" in summary
    assert "clock caps after the last run: node-a -> 2000 (set ok; restored 2000)" in summary
    # Resume: the finished cases are kept, the sessions opened again for the new one.
    again = run(
        cell,
        out,
        lock,
        clock_caps="2400,2000,unlocked,2200",
        concurrency="1,2",
        max_tokens=256,
        ignore_eos=True,
    )
    assert (again.ran, again.skipped) == (2, 6)
    document = json.loads((out / "results.json").read_text())
    assert document["commands"][-1]["clock"]["caps_set"] == ["2200"]
    assert cell.a.lock() == "208,2000"


class SlowTokenize(httpx.AsyncBaseTransport):
    """Forwards to the server; holds every /tokenize call (a slow padding search) for `delay` s."""

    def __init__(self, delay: float) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.delay = delay
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            self.calls += 1
            await asyncio.sleep(self.delay)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_telemetry_covers_the_requests_not_the_prompt_preparation(
    cell: Cell, tmp_path: Path
) -> None:
    """Padding a prompt can take seconds of /tokenize calls on a loaded controller, with the GPUs
    idle: a case's power figures must come from the stretch its requests ran (about a second of
    load here), or the idle readings before it pull the mean down towards 7 W."""
    slow = SlowTokenize(2.0)
    outcome = run(
        cell,
        tmp_path / "out",
        tmp_path / "lock",
        transport=slow,
        clock_caps="unlocked",
        concurrency="1",
        max_tokens=256,
        ignore_eos=True,
    )
    assert outcome.failed == []
    (case,) = outcome.cases
    assert case["tokenize_calls"] >= 2, case["tokenize_calls"]  # >= 4 s of idle preparation
    for name, node in case["telemetry"]["nodes"].items():
        # Loaded at the saturated clock, 24-29 W measured here (an edge reading may still be
        # idle); with the preparation in the window, 8 W: the idle draw is about 7 W.
        assert node["power_w"]["mean"] > 15, (name, node)


class Fault(httpx.AsyncBaseTransport):
    """Forwards to the server; calls `action` at the `at`-th chat completion request."""

    def __init__(self, at: int, action: Callable[[], None]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.chats = 0
        self.at = at
        self.action = action

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            self.chats += 1
            if self.chats == self.at:
                self.action()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_an_exception_mid_sweep_restores(cell: Cell, tmp_path: Path) -> None:
    def explode() -> None:
        raise RuntimeError("injected controller bug")

    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected controller bug"):
        run(cell, out, tmp_path / "lock", Fault(2, explode), clock_caps="2400,2600")
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")
    assert cell.a.show()["session"] is None
    assert cell.b.show()["session"] is None
    document = json.loads((out / "results.json").read_text())
    assert document["cases"]["p256-c1-2400"]["status"] == "ok"
    restore = document["commands"][-1]["clock"]["restore"]
    assert restore["node-a"]["set"] == "ok"
    assert restore["node-b"]["ended"]["restored"] == 2000


def test_above_the_abort_limit_the_rest_is_skipped(cell: Cell, tmp_path: Path) -> None:
    cell.b.set_ambient(40)  # 86 C idle
    outcome = run(cell, tmp_path / "out", tmp_path / "lock", clock_caps="2400,unlocked")
    assert outcome.aborted == "node-b at 86 C, above the abort limit 84 C"
    assert [c["status"] for c in outcome.cases] == ["skipped", "skipped"]
    assert all(c["skip_reason"] == outcome.aborted for c in outcome.cases)
    assert outcome.cases[0]["request_results"] == []  # nothing was sent
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")
    summary = build_report(tmp_path / "out").with_name("summary.md").read_text()
    assert "2 case(s) skipped (clock sweep aborted): node-b at 86 C" in summary


def test_crossing_the_abort_limit_during_a_case_stops_it(cell: Cell, tmp_path: Path) -> None:
    """The first case heats node-b past 84 C while it runs: it is cut short, the rest skipped."""
    wait_idle(cell.url)
    generated = server_metric(cell.url, GENERATED)
    outcome = run(
        cell,
        tmp_path / "out",
        tmp_path / "lock",
        Fault(1, lambda: cell.b.set_ambient(40)),
        clock_caps="2000,unlocked",
        max_tokens=LONG,
        ignore_eos=True,
    )
    first, second = outcome.cases
    assert first["status"] == "skipped"
    assert outcome.aborted is not None
    assert outcome.aborted.startswith("during p256-c1-2000: node-b at ")
    assert "above the abort limit 84 C" in outcome.aborted
    assert first["skip_reason"] == second["skip_reason"] == outcome.aborted
    # 16,384 tokens take over 300 simulated seconds (a minute here): the case was stopped well
    # before, as the server's own count of the tokens it generated shows (load-proof, unlike a
    # wall-clock bound).
    wait_idle(cell.url)
    assert server_metric(cell.url, GENERATED) - generated < LONG / 4
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")


def test_two_runs_at_once_on_the_same_nodes(cell: Cell, tmp_path: Path) -> None:
    """Two controllers (separate controller locks) and the same nodes: the second is refused
    by the node locks, naming the first."""
    holder = subprocess.Popen(
        [sys.executable, str(TOOL), "session", "gx10 bench carol@other-host /runs/x"],
        env={**os.environ, **cell.a.env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert json.loads(holder.stdout.readline())["ready"]
        with pytest.raises(LockHeldError, match=r"node-a: .*held by gx10 bench carol@other-host"):
            run(cell, tmp_path / "out", tmp_path / "lock", clock_caps="2400")
        assert not (tmp_path / "out" / "results.json").exists()
        assert cell.b.show()["session"] is None
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=20)


# --------------------------------------------------------------------------------------------
# The CLI with an inventory
# --------------------------------------------------------------------------------------------


def write_inventory(cell: Cell, path: Path) -> Path:
    port = cell.url.rsplit(":", 1)[1]

    def host(node: SimNode) -> dict[str, Any]:
        return {
            "ansible_connection": "local",
            "gpu_clock_tool": str(node.tool_wrapper),
            "gx10_nvidia_smi": str(node.smi),
        }

    inventory = {
        "all": {
            "children": {
                "head": {"hosts": {"node-a": {**host(cell.a), "gx10_api_host": "127.0.0.1"}}},
                "workers": {"hosts": {"node-b": host(cell.b)}},
            },
            "vars": {
                "gx10_serve_port": int(port),
                "vllm_serve_served_model_name": SERVED,
                "vllm_serve_api_key": SECRET,
            },
        }
    }
    path.write_text(json.dumps(inventory))  # JSON is YAML
    return path


def _interruptible() -> None:
    """In the child, before exec: SIGINT at its default, as at a terminal. A suite started in the
    background or under GNU time inherits SIGINT ignored, and a Python started so never raises
    KeyboardInterrupt: the tests that interrupt the bench would wait out their bounds."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(cell: Cell, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    inventory = write_inventory(cell, tmp_path / "hosts.yml")
    env = {**os.environ, "GX10_BENCH_LOCK": str(tmp_path / "bench.lock")}
    return subprocess.Popen(
        [sys.executable, "-m", "gx10", "bench", "-i", str(inventory), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=_interruptible,  # noqa: PLW1509 (a signal reset only: no lock, no allocation)
    )


def test_cli_with_an_inventory(cell: Cell, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_file = tmp_path / "run.yml"
    run_file.write_text("telemetry_interval_ms: 200\nmax_tokens: 16\n")
    proc = cli(
        cell, tmp_path, "--out", str(out), "--run", str(run_file), "--json",
        "--prompt-lengths", "256", "--clock-caps", "2000,unlocked", "--cool-down-c", "75",
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert result["cases"] == 2
    assert result["aborted"] is None
    assert result["restore"]["node-a"]["set"] == "ok"
    assert "cluster: node-a (local), node-b (local); endpoint http://127.0.0.1:" in stderr
    document = json.loads((out / "results.json").read_text())
    assert document["safety"]["cool_down_c"] == 75.0
    assert document["inventory"] == [str(tmp_path / "hosts.yml")]
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")
    written = [p.read_text() for p in out.iterdir() if p.is_file()]
    assert len(written) >= 6  # results.json/.csv, requests.csv, telemetry.csv, report, summary
    assert all(SECRET not in text for text in [stdout, stderr, *written])


def test_cli_killed_mid_sweep_restores_and_releases(cell: Cell, tmp_path: Path) -> None:
    out = tmp_path / "out"
    wait_idle(cell.url)
    proc = cli(
        cell, tmp_path, "--out", str(out), "--prompt-lengths", "256", "--max-tokens", str(LONG),
        "--ignore-eos", "--clock-caps", "2400,2600",
    )  # fmt: skip
    try:
        assert cell.a.wait_lock("208,2400", 120) == "208,2400", proc.stderr
        assert cell.b.wait_lock("208,2400", 120) == "208,2400"
        # Into the case: the server runs its request (a case of about a minute, so the signal
        # comes mid-case however slow this machine is).
        deadline = time.monotonic() + 120
        while not server_metric(cell.url, "vllm:num_requests_running"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the case did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 143, stderr
    assert "terminated (SIGTERM)" in stderr
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")
    assert cell.a.show()["session"] is None
    assert cell.b.show()["session"] is None
    document = json.loads((out / "results.json").read_text())
    restore = document["commands"][-1]["clock"]["restore"]
    assert restore["node-a"]["set"] == "ok"
    assert restore["node-b"]["set"] == "ok"
    # The controller lock is free too: the run resumes.
    again = cli(
        cell,
        tmp_path,
        "--out",
        str(out),
        "--prompt-lengths",
        "256",
        "--max-tokens",
        str(LONG),
        "--ignore-eos",
        "--clock-caps",
        "2400,2600",
        "--json",
    )
    try:
        assert cell.a.wait_lock("208,2400", 120) == "208,2400"
    finally:
        again.send_signal(signal.SIGINT)
        _stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 130, stderr
    assert (cell.a.lock(), cell.b.lock()) == ("208,2000", "208,2000")


def test_cli_refuses_caps_without_an_inventory(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gx10", "bench", "--endpoint", "http://127.0.0.1:9",
         "--out", str(tmp_path / "o"), "--clock-caps", "2000"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "clock caps ['2000'] need an inventory (gx10 bench -i INV)" in proc.stderr
