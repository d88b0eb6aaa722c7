"""The pair supervisor agent (roles/vllm_supervisor/files/gx10-pair).

Loaded as a module for its pieces (the request guard, GID drift, the status report), and run as
two real agents on 127.0.0.1 for the pair's rules: fake ``systemctl``/``docker`` scripts keep each
node's rank state in files (and run the agent's own ``run-rank`` on start, against a fake sysfs),
a tiny HTTP server stands in for the head's vLLM, and GX10_PAIR_TIME_SCALE shortens every timing
(the config holds valid production-range values; the agent multiplies them by the scale).
"""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "roles" / "vllm_supervisor" / "files" / "gx10-pair"
MODULE_UTILS = ROOT / "collections" / "ansible_collections" / "gx10" / "cluster" / "plugins"
MODULE_UTILS = MODULE_UTILS / "module_utils"
SCALE = 0.05
TOKEN = "t" * 48
API_KEY = "test-key"
# Valid production values; times SCALE: heartbeat 0.1 s, peer timeout 2 s, worker ready 4 s,
# head ready 3 s, lone worker 1 s, probes every 0.5 s (0.25 s bound), backoff 0.1-0.2 s. The peer
# timeout and the worker's ready bound leave room for a machine whose two cores are busy with the
# rest of the suite (a missed heartbeat or a slow fake start would be a restart the test did not
# cause).
TIMINGS = {
    "heartbeat_interval": 2,
    "heartbeat_timeout": 40,
    "request_timeout": 10,
    "worker_ready_timeout": 80,
    "head_ready_timeout": 60,
    "lone_worker_timeout": 20,
    "probe_interval": 10,
    "probe_timeout": 5,
    "stall_threshold": 2,
    "backoff_initial": 2,
    "backoff_max": 4,
    "breaker_max_restarts": 3,
    "breaker_window": 600,
}
# A wait just past the worker's ready bound.
PAST_READY = TIMINGS["worker_ready_timeout"] * SCALE + 0.5
NODES = "abcdefgh"  # a is the head; b, c, ... its workers
DEV = {name: f"rocep1s0f{index}" for index, name in enumerate(NODES)}
NETDEV = {name: f"eth-{name}" for name in NODES}
RAIL_IP = {name: f"192.168.100.{10 + index}" for index, name in enumerate(NODES)}

FAKE_SYSTEMCTL = r"""#!/bin/bash
# fake-systemctl NODE_DIR EVENTS VERB [--quiet] UNIT: the rank's state is the file NODE_DIR/active
dir=$1 events=$2 verb=$3
node=$(basename "$dir")
case $verb in
  is-active) [ -e "$dir/active" ] ;;
  start)
    echo "$node start" >> "$events"
    # The real unit's ExecStart: resolve the GID, write gid.env, record it, exec the argv (true).
    "$FAKE_PYTHON" "$FAKE_AGENT" run-rank 2>> "$dir/run-rank.log" || exit 1
    [ -e "$dir/crash" ] && exit 0       # a rank that exits at once: never active
    touch "$dir/active"
    [ -e "$dir/ready-line" ] && cp "$dir/ready-line" "$dir/logs"
    exit 0 ;;
  stop)
    [ -e "$dir/active" ] && echo "$node stop" >> "$events"
    rm -f "$dir/active" "$dir/logs"
    exit 0 ;;
  *) exit 1 ;;
esac
"""
FAKE_DOCKER = """#!/bin/bash
# fake-docker NODE_DIR logs CONTAINER
cat "$1/logs" 2>/dev/null
exit 0
"""


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def load_agent() -> types.ModuleType:
    if str(MODULE_UTILS) not in sys.path:
        sys.path.insert(0, str(MODULE_UTILS))
    loader = SourceFileLoader("gx10_pair", str(AGENT))
    spec = spec_from_loader("gx10_pair", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


pair = load_agent()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_gid_table(root: Path, dev: str, netdev: str, ipv4: str, index: int | None) -> None:
    """A one-port table: link-local at 0/1, the rail's v1 at index-1 and its v2 at index (None:
    the rail has no IPv4 entries, as after it lost its address or carrier)."""
    base = root / "class" / "infiniband" / dev / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    mapped = ipaddress.IPv6Address(f"::ffff:{ipv4}").exploded
    slots = {0: ("fe80::1", "IB/RoCE v1"), 1: ("fe80::1", "RoCE v2")}
    if index is not None:
        slots[index - 1] = (mapped, "IB/RoCE v1")
        slots[index] = (mapped, "RoCE v2")
    for slot in range(8):
        gid, kind = slots.get(slot, ("::", ""))
        (base / "gids" / str(slot)).write_text(ipaddress.IPv6Address(gid).exploded + "\n")
        (base / "gid_attrs" / "types" / str(slot)).write_text(kind + "\n")
        (base / "gid_attrs" / "ndevs" / str(slot)).write_text((netdev if kind else "") + "\n")


class FakeVllm(http.server.ThreadingHTTPServer):
    """The head's API: healthy while the head's fake rank is active; a stall mode (no tokens)."""

    daemon_threads = True

    def __init__(self, head_dir: Path) -> None:
        self.head_dir = head_dir
        self.completions: list[dict[str, Any]] = []
        self.stall = False
        super().__init__(("127.0.0.1", 0), _VllmHandler)


class _VllmHandler(http.server.BaseHTTPRequestHandler):
    server: FakeVllm

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, code: int, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {API_KEY}"

    def do_GET(self) -> None:
        if not (self.server.head_dir / "active").exists():
            self._reply(503, {"error": "not up"})
        elif self.path == "/v1/models" and not self._authorized():
            self._reply(401, {"error": "key"})
        else:
            self._reply(200, {"ok": True})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        self.server.completions.append({"at": time.monotonic(), "request": request})
        if not self._authorized():
            self._reply(401, {"error": "key"})
        elif self.server.stall:
            self._reply(200, {"choices": [{"text": ""}], "usage": {"completion_tokens": 0}})
        else:
            self._reply(200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}})


class Pair:
    """A group of agents (a: head; b, c, ...: workers; two by default) with their fake nodes, in
    ``tmp``. The configs are schema 2 (``peers``, as the role renders them); ``legacy`` writes a
    pair's schema 1 (one ``peer``) instead."""

    def __init__(
        self, tmp: Path, timings: dict[str, Any], workers: int = 1, legacy: bool = False
    ) -> None:
        self.tmp = tmp
        self.names = NODES[: workers + 1]
        self.workers = self.names[1:]
        self.legacy = legacy
        self.events = tmp / "events"
        self.events.touch()
        self.lib = tmp / "lib"
        self.lib.mkdir()
        shutil.copy(AGENT, self.lib / "gx10-pair")
        for name in ("pair_config.py", "roce_gid.py"):
            shutil.copy(MODULE_UTILS / name, self.lib / name)
        (tmp / "fake-systemctl").write_text(FAKE_SYSTEMCTL)
        (tmp / "fake-docker").write_text(FAKE_DOCKER)
        (tmp / "token").write_text(TOKEN)
        (tmp / "token").chmod(0o600)
        (tmp / "api_key").write_text(API_KEY)
        self.ports = {n: free_port() for n in self.names}
        self.dirs = {n: tmp / n for n in self.names}
        for name, path in self.dirs.items():
            path.mkdir()
            write_gid_table(path / "sys", DEV[name], NETDEV[name], RAIL_IP[name], 3)
        for name in self.workers:
            (self.dirs[name] / "ready-line").write_text("INFO (EngineCore) Worker ready\n")
        self.vllm = FakeVllm(self.dirs["a"])
        threading.Thread(target=self.vllm.serve_forever, daemon=True).start()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name in self.names:
            self.write_config(name, timings)

    def write_config(self, name: str, timings: dict[str, Any]) -> None:
        url = f"http://127.0.0.1:{self.vllm.server_address[1]}"
        head = name == "a"
        others = self.workers if head else "a"
        peers = [
            {"name": f"node-{o}", "address": "127.0.0.1", "port": self.ports[o]} for o in others
        ]
        if self.legacy:
            assert len(peers) == 1, "schema 1 has one peer"
            peering: dict[str, Any] = {
                "peer_name": peers[0]["name"],
                "peer_address": "127.0.0.1",
                "peer_port": peers[0]["port"],
            }
        else:
            peering = {"peers": peers}
        config = pair.pair_config.build_config(
            node=f"node-{name}",
            role="head" if head else "worker",
            listen_address="127.0.0.1",
            listen_port=self.ports[name],
            **peering,
            token_file=str(self.tmp / "token"),
            rank={
                "container": f"vllm-{name}",
                "health_urls": [f"{url}/health", f"{url}/v1/models"] if head else [],
                "model": "tiny" if head else None,
                "api_key_file": str(self.tmp / "api_key") if head else None,
            },
            gid=self.gid(name),
            bench_lock=str(self.dirs[name] / "bench.lock"),
            state_dir=str(self.dirs[name] / "state"),
            timings=timings,
        )
        assert pair.pair_config.validate_config(config) == []
        (self.dirs[name] / "pair.json").write_text(json.dumps(config))
        # The rank file the unit runs from (run-rank reads it alone): the same GID settings and
        # state directory; the "container" is `true`.
        rank = pair.pair_config.build_rank(
            node=f"node-{name}",
            role="head" if head else "worker",
            gid=self.gid(name),
            state_dir=str(self.dirs[name] / "state"),
            argv=["true"],
        )
        assert pair.pair_config.validate_rank(rank) == []
        (self.dirs[name] / "rank.json").write_text(json.dumps(rank))

    def gid(self, name: str) -> dict[str, Any]:
        return {
            "rails": [{"netdev": NETDEV[name], "address": RAIL_IP[name], "rdma_dev": DEV[name]}],
            "sysfs_root": str(self.dirs[name] / "sys"),
            "env_file": str(self.dirs[name] / "gid.env"),
            "default_index": 7,
        }

    def env(self, name: str) -> dict[str, str]:
        node = self.dirs[name]
        return {
            **os.environ,
            "GX10_PAIR_CONFIG": str(node / "pair.json"),
            "GX10_PAIR_RANK": str(node / "rank.json"),
            "GX10_PAIR_SYSTEMCTL": f"bash {self.tmp / 'fake-systemctl'} {node} {self.events}",
            "GX10_PAIR_DOCKER": f"bash {self.tmp / 'fake-docker'} {node}",
            "GX10_PAIR_TIME_SCALE": str(SCALE),
            "FAKE_PYTHON": sys.executable,
            "FAKE_AGENT": str(self.lib / "gx10-pair"),
        }

    def cli(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(self.lib / "gx10-pair"), *args],
            env=self.env(name),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def start(self, name: str) -> None:
        log = (self.dirs[name] / "agent.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, str(self.lib / "gx10-pair"), "serve"],
            env=self.env(name),
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 10
        while True:  # until the agent listens
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.ports[name])) == 0:
                    return
            if time.monotonic() > deadline or self.procs[name].poll() is not None:
                raise AssertionError(f"agent {name} did not listen:\n{self.log(name)}")
            time.sleep(0.02)

    def terminate(self, name: str, sig: int = signal.SIGTERM) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        return proc.wait(timeout=15)

    def close(self) -> None:
        for name in list(self.procs):
            self.terminate(name, signal.SIGKILL)
        self.vllm.shutdown()
        self.vllm.server_close()

    def status(self, name: str) -> dict[str, Any]:
        done = self.cli(name, "status", "--json")
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def event_list(self) -> list[str]:
        return [line for line in self.events.read_text().splitlines() if line]

    def active(self, name: str) -> bool:
        return (self.dirs[name] / "active").exists()

    def log(self, name: str) -> str:
        path = self.dirs[name] / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(
            f"timed out waiting for {what}\nevents: {self.event_list()}\n"
            + "\n".join(f"{n} log:\n{self.log(n)[-3000:]}" for n in self.names)
        )

    def saved(self, name: str) -> dict[str, Any]:
        """The agent's own status file (cheap to poll; `status` runs the CLI)."""
        data = pair.read_json(str(self.dirs[name] / "state" / "status.json"), {})
        return data if isinstance(data, dict) else {}

    def state(self, name: str) -> str:
        return str(self.saved(name).get("state"))

    def generation(self) -> int:
        return int(self.saved("a").get("generation") or 0)

    def restarts(self) -> int:
        return len(pair.StateDir(str(self.dirs["a"] / "state")).restarts())

    def serving(self) -> bool:
        return all(self.state(name) == "serving" for name in self.names)

    def up(self, timeout: float = 15.0) -> None:
        for name in self.workers:
            self.start(name)
        self.start("a")
        self.wait("the pair serving", self.serving, timeout)


@pytest.fixture
def make_pair(tmp_path: Path) -> Iterator[Callable[..., Pair]]:
    made: list[Pair] = []

    def make(workers: int = 1, legacy: bool = False, **overrides: Any) -> Pair:
        built = Pair(tmp_path / f"pair{len(made)}", {**TIMINGS, **overrides}, workers, legacy)
        made.append(built)
        return built

    for index in range(3):
        (tmp_path / f"pair{index}").mkdir()
    yield make
    for built in made:
        built.close()


def after(events: list[str], marker: int) -> list[str]:
    return events[marker:]


# --------------------------------------------------------------------------------------------
# Pieces, in process
# --------------------------------------------------------------------------------------------


def _headers(token: bytes, op: str, body: bytes, stamp: float, nonce: str) -> dict[str, str]:
    text = f"{stamp:.3f}"
    return {
        "X-Gx10-Timestamp": text,
        "X-Gx10-Nonce": nonce,
        "X-Gx10-Signature": pair.signature(token, op, text, nonce, body),
    }


def test_guard_accepts_a_signed_request_once_and_refuses_the_rest() -> None:
    token = TOKEN.encode()
    guard = pair.Guard(token)
    body = b'{"generation": 1}'
    now = 1_000_000.0
    good = _headers(token, "start", body, now, "a" * 32)
    assert guard.check("start", good, body, now=now + 1) is None
    assert guard.check("start", good, body, now=now + 2) == "replayed nonce"
    other = _headers(token, "start", body, now, "b" * 32)
    assert guard.check("stop", other, body, now=now) == "bad signature"  # op is signed
    assert guard.check("start", other, body + b" ", now=now) == "bad signature"  # body is signed
    wrong = _headers(b"x" * 48, "start", body, now, "c" * 32)
    assert guard.check("start", wrong, body, now=now) == "bad signature"
    stale = _headers(token, "start", body, now - 61, "d" * 32)
    assert "outside the 60s window" in str(guard.check("start", stale, body, now=now))
    fresh = _headers(token, "start", body, now - 59, "e" * 32)
    assert guard.check("start", fresh, body, now=now) is None
    assert guard.check("start", {**good, "X-Gx10-Nonce": "zz"}, body, now=now) == "no valid nonce"


def test_gid_drift_names_the_rail_and_both_indices() -> None:
    pinned = {"rails": {"eth0": 3, "eth1": 3}}
    assert pair.gid_drift(pinned, {"eth0": 3, "eth1": 3}) is None
    assert pair.gid_drift(pinned, {"eth0": 3, "eth1": 4}) == "gid-changed:eth1 3->4"
    assert pair.gid_drift(pinned, {"eth0": None, "eth1": 3}) == "gid-changed:eth0 3->None"
    assert pair.gid_drift(None, {"eth0": 9}) is None


def test_time_scale_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GX10_PAIR_TIME_SCALE", "0.5")
    assert pair.time_scale() == 0.5
    for bad in ("0", "2", "fast"):
        monkeypatch.setenv("GX10_PAIR_TIME_SCALE", bad)
        with pytest.raises(SystemExit, match="GX10_PAIR_TIME_SCALE"):
            pair.time_scale()


def test_state_files_are_written_atomically(tmp_path: Path) -> None:
    state = pair.StateDir(str(tmp_path / "state"))
    state.set_restarts([{"at": 1.0, "reason": "x"}])
    state.set_breaker({"tripped": True, "reason": "r", "at": 2.0})
    assert state.restarts() == [{"at": 1.0, "reason": "x"}]
    assert state.breaker() == {"tripped": True, "reason": "r", "at": 2.0}
    assert sorted(os.listdir(tmp_path / "state")) == ["breaker.json", "restarts.json"]


# --------------------------------------------------------------------------------------------
# Two agents
# --------------------------------------------------------------------------------------------


def test_ordered_start_worker_first_then_head_and_status(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    events = p.event_list()
    assert events.index("b start") < events.index("a start")
    assert events.count("a start") == 1
    head = p.status("a")
    assert head["state"] == "serving"
    assert head["generation"] == 1
    assert head["restarts_in_window"] == 0
    assert head["breaker"] == {"tripped": False, "reason": None, "at": None}
    assert head["gid"] == [{"netdev": "eth-a", "pinned": 3, "current": 3}]
    assert head["peer"]["name"] == "node-b"
    assert isinstance(head["peer"]["age"], float)  # its value: the in-process status test
    assert head["peer"]["age"] >= 0
    worker = p.status("b")
    assert worker["state"] == "serving"
    assert worker["gid"] == [{"netdev": "eth-b", "pinned": 3, "current": 3}]
    assert worker["source"] == "head"
    assert (p.dirs["b"] / "gid.env").read_text() == "NCCL_IB_GID_INDEX=3\n"
    text = p.cli("a", "status").stdout
    assert "node-a (head): serving, generation 1" in text
    assert "gid eth-a: pinned 3, current 3" in text


def test_head_never_starts_while_the_worker_is_not_ready(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    (p.dirs["b"] / "ready-line").unlink()  # the worker's log never shows it joined
    p.start("b")
    p.start("a")
    p.wait("a failed start", lambda: p.restarts() >= 1, timeout=10)
    events = p.event_list()
    assert "a start" not in events
    assert "b start" in events
    reason = p.status("a")["last_restart"]["reason"]
    assert reason.startswith("worker-not-ready:"), reason


def test_an_absent_worker_agent_is_waited_for_not_counted(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.start("a")
    time.sleep(PAST_READY)  # past worker_ready_timeout (4 s scaled): still no failed start
    assert p.state("a") == "waiting"
    assert p.restarts() == 0
    assert p.event_list() == []
    p.start("b")
    p.wait("the pair serving", p.serving)
    assert p.restarts() == 0
    assert p.event_list() == ["b start", "a start"]


def test_rails_without_their_gid_are_waited_for_not_counted(
    make_pair: Callable[..., Pair],
) -> None:
    """The worker's rail has no RoCE v2 GID (its node is booting, a cable is out): the head
    waits, uncounted and past every start deadline, then starts the pair once the GID is back."""
    p = make_pair()
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], None)
    p.start("b")
    p.start("a")
    _waits_for_the_workers_rail_then_starts(p)
    assert "every rail has its RoCE v2 GID again" in p.log("a")


def _waits_for_the_workers_rail_then_starts(p: Pair) -> None:
    """The head waits for node-b's rail, uncounted and past every start deadline, and starts
    the pair, worker first, once the rail has its GID again."""
    p.wait("the head waiting for the rail", lambda: "RoCE v2 GID on node-b:eth-b" in p.log("a"))
    time.sleep(PAST_READY)  # past worker_ready_timeout (4 s scaled): still no start, no failure
    assert p.state("a") == "waiting"
    assert p.restarts() == 0
    assert p.event_list() == []
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], 3)
    p.wait("the pair serving", p.serving)
    assert p.restarts() == 0
    assert p.event_list() == ["b start", "a start"]


def test_a_worker_back_from_a_reboot_without_its_rails_is_waited_for_not_started(
    make_pair: Callable[..., Pair],
) -> None:
    """The head starts while its worker's node is down; the worker's agent comes back before
    its rails have a RoCE v2 GID (seen on the lab's real engine: the rank then failed at once,
    'netdev ... does not exist', and the reboot cost a counted restart). The head waits for the
    agent, then for its rails, uncounted, and starts the pair once both hold."""
    p = make_pair()
    p.start("a")
    p.wait("the head waiting for the worker's agent", lambda: p.state("a") == "waiting")
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], None)
    p.start("b")
    _waits_for_the_workers_rail_then_starts(p)


def test_a_dead_worker_rank_restarts_both_worker_first(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    marker = len(p.event_list())
    (p.dirs["b"] / "active").unlink()  # the worker's rank process dies
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    events = after(p.event_list(), marker)
    assert events[:3] == ["a stop", "b start", "a start"], events
    head = p.status("a")
    assert head["last_restart"]["reason"] == "worker-rank-inactive"
    assert head["restarts_in_window"] == 1


def test_a_dead_head_rank_restarts_both_worker_first(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    marker = len(p.event_list())
    (p.dirs["a"] / "active").unlink()
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    events = after(p.event_list(), marker)
    assert events[:3] == ["b stop", "b start", "a start"], events
    assert p.status("a")["last_restart"]["reason"] == "head-rank-inactive"


def test_a_worker_without_head_heartbeats_stops_its_rank(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    p.terminate("a", signal.SIGKILL)  # the head node is gone: no more heartbeats
    # When (heartbeat_timeout after the last heartbeat, not before): the in-process test below.
    p.wait("the worker's rank stopped", lambda: not p.active("b"), timeout=10)
    p.wait("the worker waiting", lambda: p.state("b") == "waiting")
    assert "lone worker: no heartbeat from the head" in p.log("b")


def test_a_worker_whose_head_never_starts_stops_after_the_bound(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    p.start("b")
    token = TOKEN.encode()
    port = p.ports["b"]
    # The test plays a head whose agent answers but whose rank never starts.
    pair.call("127.0.0.1", port, token, "start", {"generation": 5}, timeout=2.0)
    stop_beats = threading.Event()

    def beats() -> None:
        while not stop_beats.is_set():
            info = {"generation": 5, "rank_active": False, "state": "starting", "role": "head"}
            with contextlib.suppress(pair.PeerError):
                pair.call("127.0.0.1", port, token, "heartbeat", info, timeout=2.0)
            stop_beats.wait(0.1)

    thread = threading.Thread(target=beats, daemon=True)
    thread.start()
    try:
        p.wait("the worker's rank ready", lambda: "rank ready" in p.log("b"))
        # When (lone_worker_timeout after it was ready, not before): the in-process test below.
        p.wait("the worker's rank stopped", lambda: not p.active("b"), timeout=10)
    finally:
        stop_beats.set()
        thread.join(timeout=5)
    assert "the head's rank did not run within 20s" in p.log("b")
    assert p.event_list() == ["b start", "b stop"]


class FakeTime:
    """The agent module's `time` for an agent in process: clocks that move when the test says."""

    def __init__(self) -> None:
        self.now = 5000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """The agent module's clock, moved by the test."""
    fake = FakeTime()
    monkeypatch.setattr(pair, "time", fake)
    return fake


class RankStub:
    """A worker agent in process, on the module's `time`: its rank unit, docker log and peer
    calls stubbed (what systemctl was asked is in `units`); production timings (scale 1)."""

    def __init__(self, p: Pair, name: str = "b") -> None:
        self.agent = pair.Agent(json.loads((p.dirs[name] / "pair.json").read_text()), 1.0)
        self.units: list[str] = []
        self.running = False
        self.agent.is_active = lambda: self.running
        self.agent.unit = self.unit
        self.agent.worker_ready_in_log = lambda: True
        self.agent.send = lambda name, op, payload: {}
        self.w: dict[str, Any] = {"started": 0.0, "ready_at": 0.0, "head_at": 0.0, "asked": False}

    def unit(self, verb: str, why: str) -> bool:
        self.units.append(verb)
        self.running = verb == "start"
        return True

    def order(self, generation: int) -> None:
        self.agent.worker_order(("start", generation, ""), self.w)

    def beat(self, **info: Any) -> None:
        """A heartbeat from the head, now."""
        self.agent.note_peer(self.agent.names[0], {"role": "head", **info})

    def tick(self) -> None:
        self.agent.worker_tick(self.w)


def test_a_lone_worker_stops_its_rank_at_heartbeat_timeout_not_before(
    make_pair: Callable[..., Pair], clock: FakeTime, capfd: pytest.CaptureFixture[str]
) -> None:
    worker = RankStub(make_pair())
    worker.order(1)
    worker.beat(generation=1, rank_active=True, state="serving")
    worker.tick()
    assert (worker.agent.state, worker.units) == ("serving", ["start"])
    clock.now += TIMINGS["heartbeat_timeout"]  # no heartbeat for that long: at the bound
    worker.tick()
    assert (worker.agent.state, worker.units) == ("serving", ["start"])
    clock.now += 0.5
    worker.tick()
    assert (worker.agent.state, worker.units) == ("waiting", ["start", "stop"])
    gap = TIMINGS["heartbeat_timeout"] + 0.5
    assert f"lone worker: no heartbeat from the head for {gap}s" in capfd.readouterr().err


def test_a_worker_whose_head_rank_never_runs_stops_at_lone_worker_timeout_not_before(
    make_pair: Callable[..., Pair], clock: FakeTime, capfd: pytest.CaptureFixture[str]
) -> None:
    worker = RankStub(make_pair())
    worker.order(5)
    head = {"generation": 5, "rank_active": False, "state": "starting"}
    worker.beat(**head)
    worker.tick()  # ready now
    assert worker.agent.ready
    for _ in range(TIMINGS["lone_worker_timeout"]):  # 20 s of heartbeats, the head's rank down
        clock.now += 1
        worker.beat(**head)
        worker.tick()
    assert (worker.agent.state, worker.units) == ("starting", ["start"])
    clock.now += 0.5
    worker.beat(**head)
    worker.tick()
    assert (worker.agent.state, worker.units) == ("waiting", ["start", "stop"])
    assert "the head's rank did not run within 20s" in capfd.readouterr().err


def test_status_gives_each_peers_age_since_its_last_heartbeat(
    make_pair: Callable[..., Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTime()
    monkeypatch.setattr(pair, "time", clock)
    monkeypatch.setattr(pair, "agent_alive", lambda pid: pid == os.getpid())
    p = make_pair(workers=2)
    config = json.loads((p.dirs["a"] / "pair.json").read_text())
    head = pair.Agent(config, 1.0)
    head.note_peer("node-b", {"state": "serving"})
    clock.now += 1.5
    head.note_peer("node-c", {"state": "serving"})
    head.write_status()  # as the agent does every tick
    clock.now += 2.0
    report = pair.status_report(config)
    assert [(peer["name"], peer["age"]) for peer in report["peers"]] == [
        ("node-b", 3.5),
        ("node-c", 2.0),
    ]
    assert report["peer"]["name"] == "node-b"  # the stalest
    assert report["peer"]["age"] == 3.5


def test_a_head_that_did_not_run_hears_its_workers_before_judging_them(
    make_pair: Callable[..., Pair], clock: FakeTime, capfd: pytest.CaptureFixture[str]
) -> None:
    """The head's own stall (suspended, starved of CPU) is not its worker's loss: the first
    check after a gap over heartbeat_timeout waits a heartbeat interval for the worker to be
    heard (its beats queued, unread, meanwhile), once in a row; a worker still silent after that
    is lost."""
    head = pair.Agent(json.loads((make_pair().dirs["a"] / "pair.json").read_text()), 1.0)
    head.rank_active, head.current_gids = True, {}  # its rank runs; nothing pinned, no drift
    head.refresh = lambda: None
    probe: dict[str, float] = {"next": clock.now + 10_000, "stalls": 0, "checked": clock.now}
    serving = {"generation": head.generation, "rank_active": True, "state": "serving"}
    head.note_peer("node-b", serving)
    beat, stall = TIMINGS["heartbeat_interval"], TIMINGS["heartbeat_timeout"] + 5
    clock.now += beat
    assert head.serving_check(probe) is None  # a normal tick
    clock.now += stall  # the head itself did not run
    assert head.serving_check(probe) is None
    assert f"this agent did not run for {stall:.1f}s" in capfd.readouterr().err
    head.note_peer("node-b", serving)  # the queued beat, read
    clock.now += beat
    assert head.serving_check(probe) is None  # heard: nothing to restart
    clock.now += stall  # stalled again, and the worker silent
    assert head.serving_check(probe) is None  # the grace again: the last check was on time
    clock.now += beat
    lost = "worker-lost:no heartbeat from node-b for {}s"
    assert head.serving_check(probe) == lost.format(beat + stall + beat)
    clock.now += stall  # a stall right after a check that judged
    probe["graced"] = 1  # ... and one graced just before it: never two in a row
    assert head.serving_check(probe) == lost.format(beat + stall + beat + stall)


def test_requests_with_a_bad_mac_a_stale_timestamp_or_a_replayed_nonce_are_refused(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    p.start("b")
    url = f"http://127.0.0.1:{p.ports['b']}/v1/start"
    body = b'{"generation": 1}'
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(headers: dict[str, str]) -> int:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        deadline = time.monotonic() + 10
        while True:
            try:
                with opener.open(request, timeout=5) as response:
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    now = time.time()
    assert post(_headers(b"w" * 48, "start", body, now, "1" * 32)) == 401
    assert post(_headers(TOKEN.encode(), "start", body, now - 600, "2" * 32)) == 401
    good = _headers(TOKEN.encode(), "heartbeat", body, now, "3" * 32)
    url = url.replace("/start", "/heartbeat")
    assert post(good) == 200
    assert post(good) == 401  # the same nonce again
    big = b"{" + b" " * (64 * 1024) + b"}"
    request = urllib.request.Request(url, data=big, headers=good, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(request, timeout=5)
    assert caught.value.code == 413  # refused before any MAC is computed
    unknown = urllib.request.Request(url.replace("/heartbeat", "/exec"), data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(unknown, timeout=5)
    assert caught.value.code == 404
    time.sleep(0.5)
    assert "b start" not in p.event_list()
    log = p.log("b")
    assert "bad signature" in log
    assert "outside the 60s window" in log
    assert "replayed nonce" in log


def test_a_gid_change_restarts_the_pair_with_the_reason(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], 5)
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    assert p.status("a")["last_restart"]["reason"] == "gid-changed:eth-b 3->5"
    assert p.status("b")["gid"] == [{"netdev": "eth-b", "pinned": 5, "current": 5}]
    assert (p.dirs["b"] / "gid.env").read_text() == "NCCL_IB_GID_INDEX=5\n"
    write_gid_table(p.dirs["a"] / "sys", DEV["a"], NETDEV["a"], RAIL_IP["a"], 5)
    p.wait("the second restart", lambda: p.generation() == 3 and p.serving())
    assert p.status("a")["last_restart"]["reason"] == "gid-changed:eth-a 3->5"


def test_stalls_restart_after_the_threshold_but_never_probe_under_the_bench_lock(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    p.up()
    p.wait("a first probe", lambda: len(p.vllm.completions) >= 1)
    assert p.vllm.completions[0]["request"] == {"model": "tiny", "prompt": "ping", "max_tokens": 1}
    lock_fd = os.open(p.dirs["a"] / "bench.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # a benchmark session runs
        # The head probes in its loop: once it has skipped one, none is in flight.
        skipped = "stall probe skipped: a benchmark holds the node lock"
        p.wait("a probe skipped", lambda: skipped in p.log("a"))
        held = len(p.vllm.completions)
        p.vllm.stall = True
        time.sleep(1.6)  # three probe intervals
        assert len(p.vllm.completions) == held
        assert p.status("a")["generation"] == 1
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)
    released = len(p.vllm.completions)
    p.wait("a stall restart", lambda: p.generation() == 2, timeout=10)
    assert len(p.vllm.completions) - released == 2  # stall_threshold probes, then the restart
    reason = p.status("a")["last_restart"]["reason"]
    assert reason == "stall:no token (HTTP up, empty completion)", reason
    assert "stall 1/2" in p.log("a")
    p.vllm.stall = False
    p.wait("the pair serving again", p.serving)


def test_the_breaker_trips_after_k_restarts_and_stays_tripped_until_reset(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair(breaker_max_restarts=2)
    (p.dirs["a"] / "crash").touch()  # a config that cannot boot: the head rank exits at once
    p.start("b")
    p.start("a")
    p.wait("the breaker tripped", lambda: p.state("a") == "tripped")
    assert p.event_list().count("a start") == 3  # the first start and K=2 restarts
    head = p.status("a")
    assert head["breaker"]["tripped"] is True
    assert "3 restarts within 600s (limit 2)" in head["breaker"]["reason"]
    assert "head-rank-inactive" in head["breaker"]["reason"]
    p.wait("the worker stopped", lambda: not p.active("b") and p.state("b") == "waiting")
    assert p.status("b")["breaker"]["tripped"] is True  # as the head reports it

    assert p.terminate("a") == 0  # the agent restarts (a reboot): the breaker holds
    p.start("a")
    p.wait("tripped after the restart", lambda: p.state("a") == "tripped")
    starts = p.event_list().count("a start") + p.event_list().count("b start")
    time.sleep(0.5)
    assert p.event_list().count("a start") + p.event_list().count("b start") == starts
    assert p.status("a")["state"] == "tripped"

    (p.dirs["a"] / "crash").unlink()
    done = p.cli("a", "reset")
    assert done.returncode == 0, done.stderr
    p.wait("serving after the reset", p.serving)
    head = p.status("a")
    assert head["breaker"]["tripped"] is False
    assert head["restarts_in_window"] == 0


def test_sigterm_stops_supervision_and_leaves_the_rank(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    assert p.terminate("a") == 0
    assert p.active("a")  # systemd stops the rank, not the agent
    assert p.status("a")["state"] == "stopped"
    assert "SIGTERM: supervision stops" in p.log("a")


def test_a_restarted_head_agent_adopts_the_serving_pair(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    p.up()
    marker = len(p.event_list())
    assert p.terminate("a") == 0
    p.start("a")
    p.wait("adopted", lambda: "adopted the serving pair" in p.log("a"))
    p.wait("serving", p.serving)
    assert after(p.event_list(), marker) == []
    assert p.status("a")["generation"] == 1


# --------------------------------------------------------------------------------------------
# CLI pieces
# --------------------------------------------------------------------------------------------


def test_check_config_names_the_bad_key(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    assert p.cli("a", "check-config").returncode == 0
    config = json.loads((p.dirs["a"] / "pair.json").read_text())
    config["timings"]["probe_timeout"] = 30
    (p.dirs["a"] / "pair.json").write_text(json.dumps(config))
    done = p.cli("a", "check-config")
    assert done.returncode == 2
    assert "vllm_supervisor_probe_timeout is 30" in done.stderr


def test_run_rank_falls_back_to_the_provision_time_index(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    shutil.rmtree(p.dirs["a"] / "sys")  # the resolver cannot say
    done = p.cli("a", "run-rank")
    assert done.returncode == 0, done.stderr
    assert (p.dirs["a"] / "gid.env").read_text() == "NCCL_IB_GID_INDEX=7\n"
    pinned = json.loads((p.dirs["a"] / "state" / "pinned.json").read_text())
    assert pinned["source"] == "default"
    assert pinned["gid_index"] == 7
    assert "using the provision-time GID index 7" in done.stderr
    rank = p.dirs["a"] / "rank.json"
    spec = json.loads(rank.read_text())
    rank.write_text(json.dumps({**spec, "argv": []}))
    refused = p.cli("a", "run-rank")
    assert refused.returncode == 2
    assert "argv is []: it must be a non-empty list of non-empty strings" in refused.stderr
    # A rank file from before the one launch path (schema 1, the argv alone) is re-rendered.
    rank.write_text(json.dumps({"schema": 1, "argv": ["true"]}))
    old = p.cli("a", "run-rank")
    assert old.returncode == 2
    assert "render the file again with the serve stage" in old.stderr


def test_run_rank_needs_no_agent_config(make_pair: Callable[..., Pair]) -> None:
    """Unsupervised, the node has the rank file and no pair.json: the rank unit still starts,
    with the GID index resolved now (the one launch path)."""
    p = make_pair()
    (p.dirs["b"] / "pair.json").unlink()
    done = p.cli("b", "run-rank")
    assert done.returncode == 0, done.stderr
    assert (p.dirs["b"] / "gid.env").read_text() == "NCCL_IB_GID_INDEX=3\n"
    pinned = json.loads((p.dirs["b"] / "state" / "pinned.json").read_text())
    assert (pinned["source"], pinned["gid_index"]) == ("resolved", 3)
    assert "gx10-pair[worker]: GID pinned for this run: 3 (resolved)" in done.stderr


# --------------------------------------------------------------------------------------------
# The memory guard's kills (roles/memory_guard: earlyoom's hook writes memory-event.json)
# --------------------------------------------------------------------------------------------


def memory_event(state_dir: Path, *, name: str = "vllm", mib: int = 2929, age: float = 0.0) -> None:
    """What gx10-memory-guard's notify writes into the pair's state directory after a kill."""
    state_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "schema": 1,
        "kind": "kill",
        "at": time.time() - age,
        "victim": {"pid": 4242, "name": name, "uid": 0},
        "memory": {"mem_available_mib": mib, "mem_total_mib": 121626},
    }
    (state_dir / "memory-event.json").write_text(json.dumps(record))


def test_memory_reason_names_the_victim_and_memory_and_survives_odd_names() -> None:
    event = {"kind": "kill", "at": 1.0, "victim": {"name": "vllm"}, "memory": {}}
    assert pair.memory_reason(event) == "memory-guard:vllm MemAvailable ? MiB"
    event["memory"] = {"mem_available_mib": 812}
    assert pair.memory_reason(event) == "memory-guard:vllm MemAvailable 812 MiB"
    event["victim"] = {"name": "evil name\nx"}
    assert pair.memory_reason(event) == "memory-guard:evil?name?x MemAvailable 812 MiB"


def test_a_worker_rank_killed_by_the_memory_guard_restarts_with_its_reason(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    p.up()
    marker = len(p.event_list())
    memory_event(p.dirs["b"] / "state", mib=2929)  # earlyoom killed the worker's vllm ...
    (p.dirs["b"] / "active").unlink()  # ... and its rank unit went inactive
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    events = after(p.event_list(), marker)
    assert events[:3] == ["a stop", "b start", "a start"], events
    head = p.status("a")
    assert head["last_restart"]["reason"] == "memory-guard:vllm MemAvailable 2929 MiB"
    assert "the memory guard killed a process on this node" in p.log("b")
    # Taken once: the record is kept as the handled one, and a later crash is a plain one.
    assert not (p.dirs["b"] / "state" / "memory-event.json").exists()
    assert p.status("b")["memory_event"] == {
        "at": pytest.approx(time.time(), abs=30),
        "reason": "memory-guard:vllm MemAvailable 2929 MiB",
        "taken": True,
    }
    (p.dirs["b"] / "active").unlink()
    p.wait("the second restart", lambda: p.generation() == 3 and p.serving())
    assert p.status("a")["last_restart"]["reason"] == "worker-rank-inactive"


def test_a_head_rank_killed_by_the_memory_guard_restarts_with_its_reason(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    p.up()
    memory_event(p.dirs["a"] / "state", name="VLLM::EngineCor", mib=1500)
    (p.dirs["a"] / "active").unlink()
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    reason = p.status("a")["last_restart"]["reason"]
    assert reason == "memory-guard:VLLM::EngineCor MemAvailable 1500 MiB"


def test_an_old_memory_guard_kill_explains_nothing(make_pair: Callable[..., Pair]) -> None:
    """A kill older than the window (120 s, scaled to 6 s here) is another story."""
    p = make_pair()
    p.up()
    memory_event(p.dirs["b"] / "state", age=60.0)
    (p.dirs["b"] / "active").unlink()
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    assert p.status("a")["last_restart"]["reason"] == "worker-rank-inactive"
    assert (p.dirs["b"] / "state" / "memory-event.json").exists()  # not taken


# --------------------------------------------------------------------------------------------
# A group of four: the head and three workers (issue 15)
# --------------------------------------------------------------------------------------------


# Four agents and their ranks start on a busy test machine: the workers get 10 s (scaled) to
# show their ready line, not 2 s, and a peer is lost after 3 s without a heartbeat, not 1 s;
# the waits for the group are 45 s.
FOUR = {"worker_ready_timeout": 200, "heartbeat_timeout": 60}
FOUR_WAIT = 45.0


def _started_before_head(events: list[str], workers: str) -> None:
    """Every worker started (once) before the head did; the head started once, last."""
    assert events.count("a start") == 1, events
    head = events.index("a start")
    for name in workers:
        assert events.count(f"{name} start") == 1, events
        assert events.index(f"{name} start") < head, events


def test_a_group_of_four_starts_every_worker_before_the_head(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair(workers=3, **FOUR)
    p.up(FOUR_WAIT)
    _started_before_head(p.event_list(), "bcd")
    p.wait(
        "the head's status showing its workers serving",
        lambda: [w.get("state") for w in p.saved("a").get("peers", [])] == ["serving"] * 3,
        FOUR_WAIT,
    )
    head = p.status("a")
    assert head["state"] == "serving"
    assert head["generation"] == 1
    assert head["restarts_in_window"] == 0
    assert [peer["name"] for peer in head["peers"]] == ["node-b", "node-c", "node-d"]
    assert all(isinstance(peer["age"], float) for peer in head["peers"]), head["peers"]
    assert all(peer["age"] >= 0 for peer in head["peers"]), head["peers"]
    for name in "bcd":
        worker = p.status(name)
        assert worker["state"] == "serving"
        assert worker["peer"]["name"] == "node-a"
        assert worker["source"] == "head"
        assert (p.dirs[name] / "gid.env").read_text() == "NCCL_IB_GID_INDEX=3\n"
    assert "peers node-b, node-c, node-d" in p.cli("a", "check-config").stdout


def test_a_dead_rank_on_worker_three_restarts_all_four_workers_first(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair(workers=3, **FOUR)
    p.up(FOUR_WAIT)
    marker, generation, restarts = len(p.event_list()), p.generation(), p.restarts()
    (p.dirs["d"] / "active").unlink()  # worker 3's rank process dies
    p.wait(
        "the group serving again",
        lambda: p.generation() > generation and p.serving(),
        FOUR_WAIT,
    )
    events = after(p.event_list(), marker)
    # The head's rank stops first, then the workers still running; d's had already exited.
    assert events[0] == "a stop", events
    stops = [e for e in events if e.endswith(" stop")]
    assert sorted(stops) == ["a stop", "b stop", "c stop"], events
    assert max(events.index(e) for e in stops) < min(
        i for i, e in enumerate(events) if e.endswith(" start")
    ), events
    _started_before_head(events, "bcd")
    head = p.status("a")
    assert head["last_restart"]["reason"] == "worker-rank-inactive"
    assert head["last_restart"]["node"] == "node-d"
    assert head["restarts_in_window"] == restarts + 1
    assert all(p.active(name) for name in "abcd")


def test_a_group_of_four_waits_for_every_worker_agent_uncounted(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair(workers=3, heartbeat_timeout=FOUR["heartbeat_timeout"])
    for name in "bc":
        p.start(name)
    p.start("a")
    p.wait("the head waiting for node-d", lambda: "worker node-d's agent to report" in p.log("a"))
    time.sleep(PAST_READY)  # past worker_ready_timeout: no failed start, no rank at all
    assert p.state("a") == "waiting"
    assert p.restarts() == 0
    assert p.event_list() == []  # no worker starts while another's agent is absent
    p.start("d")
    p.wait("the group serving", p.serving, FOUR_WAIT)
    assert p.restarts() == 0
    _started_before_head(p.event_list(), "bcd")


def test_a_pair_with_a_schema_1_config_still_serves(make_pair: Callable[..., Pair]) -> None:
    """A config written before issue 15 (one ``peer``) is read as a group of two."""
    p = make_pair(legacy=True)
    assert json.loads((p.dirs["a"] / "pair.json").read_text())["schema"] == 1
    p.up()
    assert p.event_list() == ["b start", "a start"]
    assert p.status("a")["peer"]["name"] == "node-b"


def test_a_ready_worker_holds_its_rank_while_another_is_still_joining(
    make_pair: Callable[..., Pair],
) -> None:
    """Worker d shows its ready line well after lone_worker_timeout (1 s scaled): b and c,
    ready long before, keep their ranks while the head waits for d, and the first generation
    serves."""
    p = make_pair(workers=3, **FOUR)
    (p.dirs["d"] / "ready-line").unlink()
    for name in "bcd":
        p.start(name)
    p.start("a")
    p.wait("b and c ready", lambda: all("rank ready" in p.log(n) for n in "bc"))
    time.sleep(2.0)  # twice lone_worker_timeout
    assert p.active("b")
    assert p.active("c")
    assert not p.active("a")
    (p.dirs["d"] / "logs").write_text("INFO (EngineCore) Worker ready\n")
    p.wait("the group serving", p.serving, FOUR_WAIT)
    assert p.generation() == 1
    assert p.restarts() == 0
    _started_before_head(p.event_list(), "bcd")
    assert "lone worker" not in p.log("b") + p.log("c")
