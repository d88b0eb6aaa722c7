"""The lab's fault injectors (test equipment): reboot, power cut, stall, killed rank.

The lab's docker and ip calls all go through `gx10.lab._docker.run`; FakeLab stands in for it
with two nodes, their veth cables (a pair dies whole when either node's namespace goes) and a
serving container in each node's engine. The stall script runs here with sh against a temporary
file instead of in the serving container.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

from gx10.lab import LabConfig, manager
from gx10.lab.errors import LabError
from gx10.lab.simulators import vllm_sim

CFG = LabConfig()
A, B = CFG.nodes
RAILS = [rail.netdev for rail in CFG.rails]


@dataclass
class Serving:
    role: str
    state: str = "running"
    pid: int = 4242
    exit_code: int = 0
    restarts: int = 0
    restart_policy: str = "no"
    removed_on_exit: bool = False  # `docker run --rm`: gone as soon as it exits


@dataclass
class FakeLab:
    stall_file: Path
    graceful: bool = True  # does `systemctl reboot` bring the container down?
    cfg: LabConfig = CFG
    state: dict[str, str] = field(default_factory=dict)
    links: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    serving: dict[str, Serving | None] = field(
        default_factory=lambda: {A: Serving("head"), B: Serving("worker")}
    )
    calls: list[tuple[str, ...]] = field(default_factory=list)
    next_index: int = 100

    def __post_init__(self) -> None:
        self.state = {**dict.fromkeys(self.cfg.nodes, "running"), **self.state}

    def plug(self, node: str, netdev: str, mac: str, port: str) -> None:
        """A switch: the node's end and its port (not yet on a bridge) in the switch."""
        ia, ib = self.next_index, self.next_index + 1
        self.next_index += 2
        self.links.setdefault(node, {})[netdev] = {
            "ifname": netdev, "address": mac, "operstate": "UP", "ifindex": ia,
            "link_index": ib, "linkinfo": {"info_kind": "veth"},
            "peer": (self.cfg.switch_name, port),
        }  # fmt: skip
        self.links.setdefault(self.cfg.switch_name, {})[port] = {
            "ifname": port, "operstate": "UP", "ifindex": ib, "link_index": ia,
            "linkinfo": {"info_kind": "veth"}, "peer": (node, netdev),
        }  # fmt: skip

    def cable(self, netdev: str, macs: dict[str, str]) -> None:
        ia, ib = self.next_index, self.next_index + 1
        self.next_index += 2
        for node, index, peer in ((A, ia, ib), (B, ib, ia)):
            self.links.setdefault(node, {})[netdev] = {
                "ifname": netdev,
                "address": macs[node],
                "operstate": "UP",
                "ifindex": index,
                "link_index": peer,
                "linkinfo": {"info_kind": "veth"},
            }

    def power_off(self, node: str) -> None:
        self.state[node] = "exited"
        for netdev, end in list(self.links.get(node, {}).items()):
            self.drop(node, netdev, end)
        self.links[node] = {}

    def drop(self, node: str, name: str, end: dict[str, Any]) -> None:
        """A veth pair dies whole: its far end goes with it."""
        self.links.get(node, {}).pop(name, None)
        if "peer" in end:
            far_node, far_name = end["peer"]
            self.links.get(far_node, {}).pop(far_name, None)
        elif self.cfg.topology == "direct":
            for other in self.cfg.nodes:
                self.links.get(other, {}).pop(name, None)

    def run(
        self,
        args: Sequence[str],
        *,
        timeout: float = 120,
        input_bytes: bytes | None = None,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        args = list(args)
        self.calls.append(tuple(args))
        code, out = self.answer(args)
        if check and code != 0:
            raise LabError(f"`{' '.join(args)}` failed (exit {code})")
        return subprocess.CompletedProcess(args, code, out, "")

    def answer(self, args: list[str]) -> tuple[int, str]:
        match args:
            case ["ip", "link", "add", "name", netdev, "address", mac, "netns", pid, *rest] if (
                rest[-1] == f"pid-{self.cfg.switch_name}"
            ):
                assert rest[:4] == ["type", "veth", "peer", "name"]
                self.plug(pid.removeprefix("pid-"), netdev, mac, rest[4])
                return 0, ""
            case ["docker", "ps", "-a", "--format", "{{.Names}}", *filters]:
                assert filters[-1] == "label=gx10.lab.role=node", filters
                return 0, "\n".join(n for n in self.state if n in self.cfg.nodes)
            case ["ip", "link", "add", "name", netdev, "address", mac_a, "netns", pid_a, *rest]:
                assert rest[:4] == ["type", "veth", "peer", "name"]
                assert rest[4] == netdev
                mac_b, pid_b = rest[6], rest[8]
                assert (pid_a, pid_b) == ("pid-gx10-a", "pid-gx10-b")
                self.cable(netdev, {A: mac_a, B: mac_b})
                return 0, ""
            case ["docker", "inspect", "-f", "{{.State.Status}}", node]:
                return (0, self.state[node]) if node in self.state else (1, "")
            case ["docker", "inspect", "-f", "{{.State.Pid}}", node]:
                return 0, f"pid-{node}"
            case ["docker", "inspect", "-f", fmt, node] if "IPAddress" in fmt:
                return 0, self.cfg.mgmt_address(node)
            case ["docker", "kill", *nodes]:
                for node in nodes:
                    self.power_off(node)
                return 0, ""
            case ["docker", "start", node]:
                self.state[node] = "running"
                return 0, ""
            case ["docker", "exec", node, *command]:
                if self.state.get(node) != "running":
                    return 1, ""
                return self.node(node, command)
        raise AssertionError(f"unexpected command {args}")

    def node(self, node: str, command: list[str]) -> tuple[int, str]:
        serving = self.serving.get(node)
        match command:
            case ["ip", "link", "set", port, "mtu", mtu, "master", bridge, "up"]:
                assert node == self.cfg.switch_name
                self.links[node][port].update(master=bridge, mtu=int(mtu))
                return 0, ""
            case ["ip", "link", "add", bridge, "mtu", _, "type", "bridge", *_]:
                self.links.setdefault(node, {})[bridge] = {
                    "ifname": bridge,
                    "linkinfo": {"info_kind": "bridge"},
                    "operstate": "UP",
                }
                return 0, ""
            case ["systemctl", "reboot"]:
                if self.graceful:
                    self.power_off(node)
                return 0, ""
            case ["systemctl", "is-system-running"]:
                return 0, "running"
            case ["docker", "info", "--format", _]:
                return 0, "27.3.1"
            case ["ip", "-j", "-d", "link", "show"]:
                return 0, json.dumps(list(self.links.get(node, {}).values()))
            case ["ip", "link", "set", _, "up"]:
                return 0, ""
            case ["ip", "link", "del", netdev]:
                end = self.links.get(node, {}).get(netdev)
                if end is None:
                    return 1, ""
                self.drop(node, netdev, end)
                return 0, ""
            case ["docker", "inspect", "-f", _, manager.SERVE_CONTAINER]:
                if serving is None:
                    return 1, ""
                s = serving
                return 0, f"{s.state}|{s.role}|{s.pid}|{s.exit_code}|{s.restarts}"
            case ["docker", "exec", manager.SERVE_CONTAINER, "sh", "-c", script, name, path, how]:
                assert path == manager.STALL_FILE
                done = subprocess.run(
                    ["sh", "-c", script, name, str(self.stall_file), how],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                return done.returncode, done.stdout
            case ["sh", "-c", script] if "/proc/" in script:
                return 0, "/usr/bin/python3 /usr/local/bin/vllm serve /models/ds4 --headless "
            case ["kill", "-KILL", pid]:
                assert serving is not None
                assert str(serving.pid) == pid
                if serving.restart_policy == "on-failure":
                    serving.pid, serving.restarts = serving.pid + 1, serving.restarts + 1
                elif serving.removed_on_exit:
                    self.serving[node] = None
                else:
                    serving.state, serving.exit_code, serving.pid = "exited", 137, 0
                return 0, ""
        raise AssertionError(f"unexpected command in {node}: {command}")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeLab:
    lab = FakeLab(stall_file=tmp_path / "run" / "stall")
    for rail in CFG.rails:
        lab.cable(rail.netdev, {node: CFG.mac(node, rail) for node in CFG.nodes})
    monkeypatch.setattr(manager._docker, "run", lab.run)
    monkeypatch.setattr(manager.time, "sleep", lambda seconds: None)
    # The registry, the NAS stand-in and the Prometheus are other containers: running.
    lab.state.update(
        {CFG.registry_name: "running", CFG.nas_name: "running", CFG.prometheus_name: "running"}
    )
    return lab


def _macs(lab: FakeLab) -> dict[str, dict[str, str]]:
    return {n: {d: lab.links[n][d]["address"] for d in lab.links[n]} for n in CFG.nodes}


def test_reboot_is_graceful_and_recables_the_same_macs(fake: FakeLab) -> None:
    # gx10-b had its NICs swapped once: its MACs are generation 1, which a reboot keeps.
    fake.links[B][RAILS[1]]["address"] = CFG.mac(B, CFG.rails[1], 1)
    before = _macs(fake)
    logs: list[str] = []
    result = manager.reboot(B, log=logs.append)
    assert result.method == {B: "rebooted (systemctl reboot)"}
    assert result.systemd == {B: "running"}
    assert result.status.running
    assert _macs(fake) == before
    assert ("docker", "exec", B, "systemctl", "reboot") in fake.calls
    assert ("docker", "start", B) in fake.calls
    assert not any(call[:2] == ("docker", "kill") for call in fake.calls)
    assert not any(call[:2] == ("docker", "start") and call[2] == A for call in fake.calls)
    assert logs[0] == "rebooting gx10-b (systemctl reboot)"
    assert (
        result.summary_lines()[0] == "gx10-b: rebooted (systemctl reboot); back up, systemd running"
    )
    assert result.to_dict()["status"]["running"] is True


def test_a_reboot_that_does_not_stop_is_forced(fake: FakeLab) -> None:
    fake.graceful = False
    monotonic = iter(float(t) for t in range(0, 10_000, 5))
    manager_time = manager.time
    original = manager_time.monotonic
    try:
        manager_time.monotonic = lambda: next(monotonic)  # type: ignore[assignment]
        result = manager.reboot(A, stop_timeout=20, log=lambda line: None)
    finally:
        manager_time.monotonic = original  # type: ignore[assignment]
    assert result.method == {A: "forced (docker kill) after 20 s without a clean stop"}
    assert ("docker", "kill", A) in fake.calls
    assert result.status.running


def test_power_cut_kills_both_at_once_then_boots_and_recables(fake: FakeLab) -> None:
    before = _macs(fake)
    result = manager.power_cut(log=lambda line: None)
    assert result.nodes == (A, B)
    assert ("docker", "kill", A, B) in fake.calls  # one call: at once, no clean shutdown
    assert not any(call[-2:] == ("systemctl", "reboot") for call in fake.calls)
    assert result.method == {A: "power cut (docker kill)", B: "power cut (docker kill)"}
    assert result.status.running
    assert _macs(fake) == before


def test_power_cut_of_one_node(fake: FakeLab) -> None:
    result = manager.power_cut([B, B], log=lambda line: None)
    assert result.nodes == (B,)
    assert ("docker", "kill", B) in fake.calls
    assert result.status.running


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: manager.reboot("gx10-c"), "no lab node 'gx10-c'"),
        (lambda: manager.power_cut(["gx10-a", "gx10-c"]), "no lab node 'gx10-c'"),
        (lambda: manager.stall("gx10-c"), "no lab node 'gx10-c'"),
        (lambda: manager.kill_rank("gx10-c"), "no lab node 'gx10-c'"),
    ],
)
def test_unknown_nodes_are_refused_before_anything_changes(
    fake: FakeLab, call: Any, message: str
) -> None:
    with pytest.raises(LabError, match=message):
        call()
    assert not any(c[:2] in (("docker", "kill"), ("docker", "start")) for c in fake.calls)


def test_faults_need_the_lab_running(fake: FakeLab) -> None:
    fake.power_off(B)
    for call in (
        lambda: manager.reboot(A),
        manager.power_cut,
        lambda: manager.stall(B),
        lambda: manager.kill_rank(B),
    ):
        with pytest.raises(LabError, match="gx10-b is exited: run `gx10 lab up` first"):
            call()
    assert not any(c[:2] in (("docker", "kill"), ("docker", "start")) for c in fake.calls)


def test_stall_writes_and_clears_the_simulator_file(fake: FakeLab) -> None:
    assert manager.stall(A, log=lambda line: None) == {
        "node": A,
        "container": "gx10-vllm",
        "stalled": True,
        "file": manager.STALL_FILE,
    }
    assert fake.stall_file.exists()
    assert manager.stall(A, True, log=lambda line: None)["stalled"]  # again: still stalled
    assert manager.stall(A, False, log=lambda line: None)["stalled"] is False
    assert not fake.stall_file.exists()
    assert manager.stall(A, False, log=lambda line: None)["stalled"] is False  # already clear


def test_the_stall_file_is_the_one_the_simulator_reads() -> None:
    assert vllm_sim.DEFAULT_STALL_FILE == manager.STALL_FILE
    assert vllm_sim.SimEnv.from_env({}).stall_file == Path(manager.STALL_FILE)


def test_stall_refuses_a_worker_and_a_missing_or_stopped_container(fake: FakeLab) -> None:
    with pytest.raises(LabError, match=r"is the worker rank; .* stall the head's node"):
        manager.stall(B)
    fake.serving[A] = None
    with pytest.raises(LabError, match="no serving container gx10-vllm on gx10-a: start the"):
        manager.stall(A)
    fake.serving[A] = Serving("head", state="exited")
    with pytest.raises(LabError, match="gx10-vllm on gx10-a is exited, not running"):
        manager.stall(A)
    assert not fake.stall_file.exists()


def test_kill_rank_kills_the_main_process_by_pid_and_names_it(fake: FakeLab) -> None:
    logs: list[str] = []
    result = manager.kill_rank(B, log=logs.append)
    assert result == {
        "node": B,
        "container": "gx10-vllm",
        "role": "worker",
        "pid": 4242,
        "command": "/usr/bin/python3 /usr/local/bin/vllm serve /models/ds4 --headless",
        "signal": "SIGKILL",
        "state": "exited",
        "exit_code": 137,
        "restarts": 0,
    }
    assert ("docker", "exec", B, "kill", "-KILL", "4242") in fake.calls
    assert not any(c[:3] == ("docker", "exec", B) and "stop" in c for c in fake.calls)
    assert "pid 4242" in logs[0]


def test_kill_rank_reports_a_restart_by_docker_policy(fake: FakeLab) -> None:
    fake.serving[A] = Serving("head", restart_policy="on-failure")
    result = manager.kill_rank(A, log=lambda line: None)
    assert (result["state"], result["restarts"], result["pid"]) == ("running", 1, 4242)


def test_kill_rank_of_a_container_removed_on_exit(fake: FakeLab) -> None:
    """A supervised rank runs `docker run --rm`: once killed it is gone, which is the crash."""
    fake.serving[B] = Serving("worker", removed_on_exit=True)
    result = manager.kill_rank(B, log=lambda line: None)
    assert (result["state"], result["pid"], result["role"]) == ("removed", 4242, "worker")
    assert result["exit_code"] is None


def test_kill_rank_without_a_running_rank(fake: FakeLab) -> None:
    fake.serving[B] = None
    with pytest.raises(LabError, match="no serving container gx10-vllm on gx10-b"):
        manager.kill_rank(B)
    fake.serving[B] = Serving("worker", state="exited", pid=0)
    with pytest.raises(LabError, match="is exited, not running"):
        manager.kill_rank(B)
    assert not any("kill" in c for c in fake.calls)


# ----------------------------------------------------------------------------------------------
# The commands: `gx10 lab reboot|power-cut|stall|kill-rank`
# ----------------------------------------------------------------------------------------------


def test_lab_reboot_and_power_cut_commands(fake: FakeLab) -> None:
    run = invoke(["lab", "reboot", B, "--json"])
    assert run.code == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["method"] == {B: "rebooted (systemctl reboot)"}
    assert data["systemd"] == {B: "running"}
    assert data["status"]["running"] is True
    assert "rebooting gx10-b" in run.stderr  # progress off stdout with --json
    run = invoke(["lab", "power-cut"])
    assert run.code == 0, run.stderr
    assert "gx10-a: power cut (docker kill); back up, systemd running" in run.stdout
    run = invoke(["lab", "power-cut", B, "--json"])
    assert json.loads(run.stdout)["nodes"] == [B]


def test_lab_stall_and_kill_rank_commands(fake: FakeLab) -> None:
    run = invoke(["lab", "stall", A])
    assert (run.code, run.stdout.splitlines()[-1]) == (
        0,
        "gx10-a gx10-vllm: stalled (HTTP up, no tokens)",
    )
    run = invoke(["lab", "stall", A, "--clear", "--json"])
    assert json.loads(run.stdout)["stalled"] is False
    run = invoke(["lab", "kill-rank", B])
    assert run.code == 0
    assert run.stdout.splitlines()[-1] == (
        "gx10-b gx10-vllm: killed pid 4242 (/usr/bin/python3 /usr/local/bin/vllm serve "
        "/models/ds4 --headless, worker rank) with SIGKILL; container exited, exit code 137"
    )


def test_lab_fault_commands_report_errors(fake: FakeLab) -> None:
    run = invoke(["lab", "reboot", "gx10-c"])
    assert run.code == 1
    assert "no lab node 'gx10-c'" in run.stderr
    fake.serving[A] = None
    run = invoke(["lab", "stall", A, "--json"])
    assert run.code == 1
    assert "no serving container gx10-vllm on gx10-a" in run.stderr
    for args in (["reboot"], ["stall"], ["kill-rank"], ["reboot", A, "--stop-timeout", "0"]):
        with pytest.raises(SystemExit) as info:
            invoke(["lab", *args])
        assert info.value.code == 1


# --------------------------------------------------------------------------------------------
# Four nodes on a switch (`gx10 lab up --nodes 4`): one bridge per rail, a port per node and rail
# --------------------------------------------------------------------------------------------

CFG4 = LabConfig.sized(4)


@pytest.fixture
def switched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeLab:
    """Four running nodes and a running switch with its bridges; no node plugged in yet."""
    lab = FakeLab(stall_file=tmp_path / "stall", cfg=CFG4)
    lab.state.update({CFG4.switch_name: "running"})
    for rail in CFG4.rails:
        lab.node(CFG4.switch_name, ["ip", "link", "add", CFG4.bridge(rail), "mtu", "9216",
                                    "type", "bridge"])  # fmt: skip
    monkeypatch.setattr(manager._docker, "run", lab.run)
    monkeypatch.setattr(manager.time, "sleep", lambda seconds: None)
    lab.state.update(
        {CFG4.registry_name: "running", CFG4.nas_name: "running", CFG4.prometheus_name: "running"}
    )
    return lab


def _ports(lab: FakeLab) -> dict[str, tuple[str | None, str]]:
    """Switch port -> (its bridge, the MAC of the node end it leads to)."""
    ports = lab.links.get(CFG4.switch_name, {})
    return {
        name: (port.get("master"), lab.links[port["peer"][0]][port["peer"][1]]["address"])
        for name, port in ports.items()
        if "peer" in port
    }


def test_the_four_node_lab_is_named_and_shaped() -> None:
    assert CFG4.nodes == ("gx10-a", "gx10-b", "gx10-c", "gx10-d")
    assert (CFG4.topology, CFG4.metrics_inventory) == ("switch", "inventories/lab4")
    assert [CFG4.mgmt_address(n) for n in CFG4.nodes][-1] == "172.31.240.13"
    assert CFG4.port("gx10-c", CFG4.rails[1]) == "gx10-c-r1"
    assert len(CFG4.port("gx10-d", CFG4.rails[1])) <= 15  # IFNAMSIZ - 1
    with pytest.raises(ValueError, match="2 or 4 nodes"):
        LabConfig.sized(3)
    with pytest.raises(ValueError, match="direct cables join two nodes"):
        LabConfig(nodes=CFG4.nodes)
    with pytest.raises(ValueError, match="'ring' is not one of direct, switch"):
        LabConfig(topology="ring")


def test_every_node_is_plugged_into_each_rails_bridge(switched: FakeLab) -> None:
    logs: list[str] = []
    manager.ensure_rails(CFG4, logs.append)
    ports = _ports(switched)
    assert ports == {
        CFG4.port(node, rail): (CFG4.bridge(rail), CFG4.mac(node, rail))
        for node in CFG4.nodes
        for rail in CFG4.rails
    }
    assert logs[0] == (
        "plugging gx10-a enp1s0f0np0 02:9a:00:00:0a:00 into gx10-switch rail0 (gx10-a-r0)"
    )
    status = manager.status(CFG4)
    assert status.running, status.problems
    assert {r.peer_node for n in status.nodes for r in n.rails} == {
        "gx10-switch rail0",
        "gx10-switch rail1",
    }
    # Plugged: a second pass changes nothing.
    calls = len(switched.calls)
    manager.ensure_rails(CFG4, logs.append)
    assert not any(c[:3] == ("ip", "link", "add") for c in switched.calls[calls:])


def test_the_lab_is_as_big_as_its_node_containers(switched: FakeLab) -> None:
    assert manager.current() == CFG4
    for node in ("gx10-c", "gx10-d"):
        del switched.state[node]
    assert manager.current() == CFG


def test_a_rebooted_node_is_plugged_back_alone_with_its_macs(switched: FakeLab) -> None:
    manager.ensure_rails(CFG4, lambda line: None)
    before = _ports(switched)
    result = manager.reboot("gx10-c", CFG4, log=lambda line: None)
    assert result.status.running, result.status.problems
    assert _ports(switched) == before
    replugged = [c for c in switched.calls if c[:3] == ("ip", "link", "add")][len(before) :]
    assert [c[4] for c in replugged] == ["enp1s0f0np0", "enP2p1s0f0np0"]
    assert {c[8] for c in replugged} == {"pid-gx10-c"}


def test_a_switch_port_missing_is_a_problem_named_by_node_and_rail(switched: FakeLab) -> None:
    manager.ensure_rails(CFG4, lambda line: None)
    switched.node(CFG4.switch_name, ["ip", "link", "del", "gx10-d-r1"])
    assert manager.status(CFG4).problems == (
        "rail enP2p1s0f0np0: gx10-d is not plugged into gx10-switch rail1",
    )


def test_swapping_a_nodes_nics_on_a_switch_changes_its_macs_only(switched: FakeLab) -> None:
    manager.ensure_rails(CFG4, lambda line: None)
    before = _ports(switched)
    manager.swap_nics("gx10-b", CFG4, log=lambda line: None)
    after = _ports(switched)
    changed = {port for port in after if after[port] != before[port]}
    assert changed == {"gx10-b-r0", "gx10-b-r1"}
    assert after["gx10-b-r1"] == ("rail1", CFG4.mac("gx10-b", CFG4.rails[1], 1))
