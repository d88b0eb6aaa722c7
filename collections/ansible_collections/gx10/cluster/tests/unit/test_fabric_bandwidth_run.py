# SPDX-License-Identifier: Apache-2.0
"""gx10.cluster.fabric_bandwidth_run in process: one node's servers, clients and leftovers.

The stand-in iperf3 (fixtures/fabric_pairs/iperf3) on loopback: a server listens on its address
and serves one connection; a client connects and prints iperf3 -J. The whole role over four
nodes runs in test_fabric_pairs_playbook.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.modules import fabric_bandwidth_run as run_module

FAKE_BIN = Path(__file__).parent / "fixtures" / "fabric_pairs"
# Away from the role's default, from test_fabric_pairs_playbook.py's and from another run.
PORT = 40000 + os.getpid() % 20000


@pytest.fixture
def fake_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")


def _pair(k: int, port: int = PORT) -> dict[str, Any]:
    return {
        "rail": f"rail{k}",
        "netdev": f"lo-rail{k}",
        "worker": "b",
        "client": "a",
        "server_ip": f"127.0.{k + 1}.11",
        "client_ip": f"127.0.{k + 1}.10",
        "port": port + k,
    }


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not run_module._alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_servers_listen_then_clients_measure_all_at_once(fake_path: None, tmp_path: Path) -> None:
    pairs = [_pair(0), _pair(1)]
    served = run_module.serve("iperf3", 1, pairs, str(tmp_path), 10)
    assert [(s["port"], s["listening"]) for s in served["servers"]] == [
        (PORT, True),
        (PORT + 1, True),
    ]
    assert sorted(p.name for p in tmp_path.glob("*.pid")) == [
        f"server-{PORT}.pid",
        f"server-{PORT + 1}.pid",
    ]
    measured = run_module.measure("iperf3", 1, True, pairs, 30)
    clients = measured["clients"]
    assert [c["pair"] for c in clients] == pairs
    for client in clients:
        assert client["finished"] is True, client
        assert client["rc"] == 0, client
        report = json.loads(client["stdout"])
        assert report["start"]["test_start"]["reverse"] == 1
        assert report["end"]["sum_received"]["bits_per_second"] == 9.0e9
    # One-off servers end after their test; nothing is left to stop.
    assert all(_wait_gone(s["pid"]) for s in served["servers"])
    assert run_module.stop_all(str(tmp_path))["stopped"] == []
    assert not list(tmp_path.glob("*.pid"))


def test_a_server_whose_client_never_came_is_stopped(fake_path: None, tmp_path: Path) -> None:
    served = run_module.serve("iperf3", 1, [_pair(0)], str(tmp_path), 10)
    (server,) = served["servers"]
    assert server["listening"]
    assert run_module._alive(server["pid"])
    # The next run on the same port stops it first; then stop_all has nothing left.
    again = run_module.serve("iperf3", 1, [_pair(0)], str(tmp_path), 10)
    assert again["stopped"] == [server["pid"]]
    assert _wait_gone(server["pid"])
    (second,) = again["servers"]
    assert run_module.stop_all(str(tmp_path))["stopped"] == [second["pid"]]
    assert _wait_gone(second["pid"])
    assert not list(tmp_path.glob("*.pid"))


def test_a_pid_file_of_another_process_stops_nothing(tmp_path: Path) -> None:
    """A PID file outlives its server; by then the PID may be another process's."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"server-{PORT}.pid").write_text(f"{other.pid} 1\n")  # another start time
        assert run_module.stop_all(str(tmp_path))["stopped"] == []
        assert other.poll() is None
        assert not list(tmp_path.glob("*.pid"))
    finally:
        other.kill()
        other.wait()


def test_a_server_that_cannot_listen_is_reported_not_failed(
    fake_path: None, tmp_path: Path
) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface here: the bind fails and the server exits.
    pair = {**_pair(0), "server_ip": "192.0.2.1"}
    started = time.monotonic()
    served = run_module.serve("iperf3", 1, [pair], str(tmp_path), 10)
    assert time.monotonic() - started < 10  # the exit ends the wait, not the timeout
    (server,) = served["servers"]
    assert server["listening"] is False
    assert "Cannot assign requested address" in server["output"], server


def test_a_client_past_its_bound_is_killed_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = tmp_path / "bin" / "iperf3"
    slow.parent.mkdir()
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow.parent}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    (client,) = run_module.measure("iperf3", 1, False, [_pair(0)], 0)["clients"]
    assert time.monotonic() - started < 10
    assert client["finished"] is False
    assert client["msg"] == "timed out after 1 s"


def test_the_command_lines() -> None:
    server = {**_pair(0), "server_rdma_dev": "rocep1s0f0", "server_gid_index": 3}
    client = {**_pair(0), "client_rdma_dev": "rocep1s0f0", "client_gid_index": 3}
    assert run_module.server_argv("iperf3", 5, server) == [
        "iperf3", "--server", "--one-off", "--bind", "127.0.1.11", "--port", str(PORT),
        "--idle-timeout", "35",
    ]  # fmt: skip
    assert run_module.server_argv("ib_write_bw", 5, server) == [
        "timeout", "65", "ib_write_bw", "-d", "rocep1s0f0", "-i", "1", "-F", "--report_gbits",
        "-x", "3", "-D", "5", "-p", str(PORT),
    ]  # fmt: skip
    assert run_module.client_argv("iperf3", 5, True, client)[-2:] == ["--json", "--reverse"]
    assert run_module.client_argv("ib_write_bw", 5, True, client) == [
        "ib_write_bw", "-d", "rocep1s0f0", "-i", "1", "-F", "--report_gbits", "-x", "3",
        "-D", "5", "-p", str(PORT), "127.0.1.11",
    ]  # fmt: skip


def test_listening_reads_both_tables(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    # 127.0.1.11:PORT listening, 0.0.0.0:22 listening, an established socket, and on tcp6
    # ::ffff:10.0.0.5:8000 (IPv4-mapped) and [::]:9000 listening.
    ip4 = socket.inet_aton("127.0.1.11")
    local = f"{int.from_bytes(ip4, sys.byteorder):08X}:{PORT:04X}"
    mapped = socket.inet_pton(socket.AF_INET6, "::ffff:10.0.0.5")
    words = "".join(
        f"{int.from_bytes(mapped[i : i + 4], sys.byteorder):08X}" for i in range(0, 16, 4)
    )
    (tmp_path / "tcp").write_text(
        header
        + f"   0: {local} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        + "   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        + f"   2: {local} 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0\n"
    )
    (tmp_path / "tcp6").write_text(
        header
        + f"   0: {words}:1F40 {'0' * 32}:0000 0A 00000000:00000000 00:00000000 00000000  0\n"
        + f"   1: {'0' * 32}:2328 {'0' * 32}:0000 0A 00000000:00000000 00:00000000 00000000  0\n"
    )
    sockets = run_module.listening(str(tmp_path))
    assert sockets == {("127.0.1.11", PORT), ("0.0.0.0", 22), ("10.0.0.5", 8000), ("::", 9000)}
    assert run_module.listens({"server_ip": "127.0.1.11", "port": PORT}, sockets)
    assert run_module.listens({"server_ip": "10.9.9.9", "port": 22}, sockets)  # every address
    assert not run_module.listens({"server_ip": "127.0.1.12", "port": PORT}, sockets)
