#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.fabric_bandwidth_run: one node's part of a bandwidth run, in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_bandwidth_run
short_description: One node's servers or clients of a fabric bandwidth run, all at once
description:
  - The fabric role's bandwidth runs (roles/fabric/tasks/measure.yml) with one module execution
    per node and step, every node at the same time, instead of a delegated loop from the head per
    server and client (each item a module run, one node after another).
  - C(state=serving) first stops a server this module left on one of I(servers)' ports (a run's
    server that outlived its test), then starts each of I(servers) detached from the module (a
    new session; its output in I(run_dir)), and waits until each listens on its port, its process
    ends, or I(listen_timeout) passes. It never fails for a server that does not listen; that
    server's client then finds nothing, and its measurement says so.
  - C(state=measured) runs every one of I(clients) at the same time and waits for them, each
    bounded by I(seconds) + I(client_margin) (then killed, and reported as not finished).
  - C(state=stopped) stops every server this module started under I(run_dir) that still runs
    (SIGTERM, then SIGKILL after 5 s) and removes their PID files.
  - iperf3 serves one test (C(--one-off)) and gives up when idle (C(--idle-timeout)
    I(seconds) + 30); ib_write_bw serves one test under C(timeout) I(seconds) + 60. Either way a
    server ends by itself; C(state=stopped) (or the next run's C(state=serving)) ends one that did
    not.
  - Nothing on the node changes but the run's own temporary processes and files under
    I(run_dir), so the module runs in check mode as out of it.
options:
  state:
    description: This node's step of the run.
    type: str
    choices: [serving, measured, stopped]
    required: true
  tool:
    description: The bandwidth tool.
    type: str
    choices: [ib_write_bw, iperf3]
    default: ib_write_bw
  seconds:
    description: Seconds each client measures (C(iperf3 --time), C(ib_write_bw -D)).
    type: int
    default: 5
  reverse:
    description: iperf3 only, the clients measure server -> client (C(--reverse)).
    type: bool
    default: false
  servers:
    description:
      - C(state=serving), the servers this node runs, each a pair entry of C(fabric_pair_runs)
        (C(server_ip), C(port); with ib_write_bw C(server_rdma_dev) and C(server_gid_index)).
    type: list
    elements: dict
    default: []
  clients:
    description:
      - C(state=measured), the clients this node runs, each a pair entry of C(fabric_pair_runs)
        (C(server_ip), C(client_ip), C(port); with ib_write_bw C(client_rdma_dev) and
        C(client_gid_index)).
    type: list
    elements: dict
    default: []
  run_dir:
    description: Where the servers' PID files and output go (created, mode 0700).
    type: path
    default: /run/gx10-fabric
  listen_timeout:
    description: Seconds C(state=serving) waits for every server to listen.
    type: int
    default: 20
  client_margin:
    description: Seconds a client may take beyond I(seconds) (connection, the tool's own start).
    type: int
    default: 60
attributes:
  check_mode:
    description: Runs as out of check mode (a measurement changes nothing on the node).
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Start this node's servers of the run
  gx10.cluster.fabric_bandwidth_run:
    state: serving
    tool: iperf3
    seconds: 5
    servers: "{{ __fabric_run.pairs | selectattr('worker', 'eq', inventory_hostname) }}"

- name: Run this node's clients of the run, all at once
  gx10.cluster.fabric_bandwidth_run:
    state: measured
    tool: iperf3
    seconds: 5
    clients: "{{ __fabric_run.pairs | selectattr('client', 'eq', inventory_hostname) }}"
  register: __fabric_node_run
"""

RETURN = r"""
servers:
  description: >-
    C(state=serving): each server's C(port), C(pid), whether it C(listening), and when it is not,
    the end of its output (C(output)).
  returned: always
  type: list
  elements: dict
clients:
  description: >-
    C(state=measured): each client's C(pair) (its entry of I(clients)), whether it C(finished)
    within its bound, C(rc), C(stdout), C(stderr), and C(msg) when it did not finish.
  returned: always
  type: list
  elements: dict
stopped:
  description: C(state=stopped) (and C(state=serving)'s leftovers), the PIDs stopped.
  returned: always
  type: list
  elements: int
"""

import contextlib
import ipaddress
import os
import signal
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.module_utils.basic import AnsibleModule

POLL_SECONDS = 0.05
TERM_GRACE_SECONDS = 5.0
OUTPUT_TAIL_CHARS = 2000
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def server_argv(tool: str, seconds: int, server: Mapping[str, Any]) -> list[str]:
    """The server's command line: one test, bounded."""
    if tool == "iperf3":
        return [
            "iperf3", "--server", "--one-off", "--bind", str(server["server_ip"]),
            "--port", str(server["port"]), "--idle-timeout", str(seconds + 30),
        ]  # fmt: skip
    return [
        "timeout", str(seconds + 60), "ib_write_bw", "-d", str(server["server_rdma_dev"]),
        "-i", "1", "-F", "--report_gbits", "-x", str(server["server_gid_index"]),
        "-D", str(seconds), "-p", str(server["port"]),
    ]  # fmt: skip


def client_argv(tool: str, seconds: int, reverse: bool, client: Mapping[str, Any]) -> list[str]:
    """The client's command line (iperf3's JSON report; ib_write_bw's table in Gb/s)."""
    if tool == "iperf3":
        return [
            "iperf3", "--client", str(client["server_ip"]), "--bind", str(client["client_ip"]),
            "--port", str(client["port"]), "--time", str(seconds), "--json",
        ] + (["--reverse"] if reverse else [])  # fmt: skip
    return [
        "ib_write_bw", "-d", str(client["client_rdma_dev"]), "-i", "1", "-F", "--report_gbits",
        "-x", str(client["client_gid_index"]), "-D", str(seconds), "-p", str(client["port"]),
        str(client["server_ip"]),
    ]  # fmt: skip


def _address(hexed: str) -> str:
    """/proc/net/tcp{,6}'s local address (32-bit words in host order) as text; an IPv4-mapped
    IPv6 address as its IPv4 address."""
    words = [int(hexed[i : i + 8], 16) for i in range(0, len(hexed), 8)]
    packed = b"".join(struct.pack("=I", word) for word in words)
    if len(packed) == 4:
        return str(ipaddress.IPv4Address(packed))
    address = ipaddress.IPv6Address(packed)
    return str(address.ipv4_mapped or address)


def listening(proc_net: str = "/proc/net") -> set[tuple[str, int]]:
    """(address, port) of every TCP socket listening in this network namespace."""
    found: set[tuple[str, int]] = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc_net, name), encoding="ascii") as table:
                lines = table.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN:
                address, port = fields[1].rsplit(":", 1)
                found.add((_address(address), int(port, 16)))
    return found


def listens(server: Mapping[str, Any], sockets: set[tuple[str, int]]) -> bool:
    """Something listens on the server's port, on its address or on every address."""
    port = int(server["port"])
    return any(
        (address, port) in sockets for address in (str(server["server_ip"]), "0.0.0.0", "::")
    )


def _pidfile(run_dir: str, port: object) -> str:
    return os.path.join(run_dir, f"server-{port}.pid")


def _logfile(run_dir: str, port: object) -> str:
    return os.path.join(run_dir, f"server-{port}.log")


def _start_time(pid: int) -> str:
    """The process's start time (/proc/PID/stat field 22): with the PID, who it is (a PID file
    outlives its process, and the PID may be another's by then)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    """The process runs (a zombie of ours is reaped and counts as ended)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: the server of an earlier module run
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as output:
            return output.read()[-OUTPUT_TAIL_CHARS:]
    except OSError:
        return ""


def stop_pidfile(path: str) -> int | None:
    """Stop the server a PID file names, if it still runs (its session: `timeout` and the tool);
    the file is removed. Returns the PID stopped."""
    try:
        with open(path, encoding="ascii") as pidfile:
            pid_text, started = pidfile.read().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        pid, started = 0, ""
    stopped = None
    if pid > 0 and _alive(pid) and _start_time(pid) == started:
        for sig, grace in ((signal.SIGTERM, TERM_GRACE_SECONDS), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(pid, sig)  # its own session and group (start_new_session)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            if not _alive(pid):
                break
        stopped = pid
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return stopped


def serve(
    tool: str, seconds: int, servers: Sequence[Mapping[str, Any]], run_dir: str, listen_timeout: int
) -> dict[str, Any]:
    """Start the servers (leftovers on their ports stopped first); wait until each listens."""
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    stopped = [
        pid
        for server in servers
        if (pid := stop_pidfile(_pidfile(run_dir, server["port"]))) is not None
    ]
    started: list[tuple[Mapping[str, Any], subprocess.Popen[bytes]]] = []
    for server in servers:
        with open(_logfile(run_dir, server["port"]), "wb") as log:
            proc = subprocess.Popen(
                server_argv(tool, seconds, server),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                cwd="/",
            )
        with open(_pidfile(run_dir, server["port"]), "w", encoding="ascii") as pidfile:
            pidfile.write(f"{proc.pid} {_start_time(proc.pid)}\n")
        started.append((server, proc))
    deadline = time.monotonic() + listen_timeout
    while time.monotonic() < deadline:
        sockets = listening()
        if all(listens(server, sockets) or proc.poll() is not None for server, proc in started):
            break
        time.sleep(POLL_SECONDS)
    sockets = listening()
    report = []
    for server, proc in started:
        port = int(server["port"])
        entry: dict[str, Any] = {
            "port": port,
            "pid": proc.pid,
            "listening": listens(server, sockets),
        }
        if not entry["listening"]:
            entry["output"] = _tail(_logfile(run_dir, port))
        report.append(entry)
    return {"servers": report, "clients": [], "stopped": stopped}


def measure(
    tool: str,
    seconds: int,
    reverse: bool,
    clients: Sequence[Mapping[str, Any]],
    client_margin: int,
) -> dict[str, Any]:
    """Run every client at once, each bounded; their outputs as the role parses them."""
    running = [
        (
            client,
            subprocess.Popen(
                client_argv(tool, seconds, reverse, client),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for client in clients
    ]
    deadline = time.monotonic() + seconds + client_margin
    results = []
    for client, proc in running:
        entry: dict[str, Any] = {"pair": dict(client), "finished": True}
        try:
            stdout, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            entry["finished"] = False
            entry["msg"] = f"timed out after {seconds + client_margin} s"
        entry.update(rc=proc.returncode, stdout=stdout, stderr=stderr)
        results.append(entry)
    return {"servers": [], "clients": results, "stopped": []}


def stop_all(run_dir: str) -> dict[str, Any]:
    """Stop every server left under run_dir."""
    stopped = []
    try:
        names = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        names = []
    for name in names:
        if name.startswith("server-") and name.endswith(".pid"):
            pid = stop_pidfile(os.path.join(run_dir, name))
            if pid is not None:
                stopped.append(pid)
    return {"servers": [], "clients": [], "stopped": stopped}


def run(params: Mapping[str, Any]) -> dict[str, Any]:
    tool, seconds = params["tool"], int(params["seconds"])
    if params["state"] == "serving":
        result = serve(
            tool, seconds, params["servers"], params["run_dir"], params["listen_timeout"]
        )
    elif params["state"] == "measured":
        result = measure(
            tool, seconds, params["reverse"], params["clients"], params["client_margin"]
        )
    else:
        result = stop_all(params["run_dir"])
    return {"changed": False, **result}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {
                "type": "str",
                "choices": ["serving", "measured", "stopped"],
                "required": True,
            },
            "tool": {"type": "str", "choices": ["ib_write_bw", "iperf3"], "default": "ib_write_bw"},
            "seconds": {"type": "int", "default": 5},
            "reverse": {"type": "bool", "default": False},
            "servers": {"type": "list", "elements": "dict", "default": []},
            "clients": {"type": "list", "elements": "dict", "default": []},
            "run_dir": {"type": "path", "default": "/run/gx10-fabric"},
            "listen_timeout": {"type": "int", "default": 20},
            "client_margin": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    if module.params["seconds"] < 1:
        module.fail_json(msg=f"seconds must be 1 or more, got {module.params['seconds']}")
    try:
        module.exit_json(**run(module.params))
    except OSError as exc:
        module.fail_json(msg=f"{module.params['state']}: {exc}")


if __name__ == "__main__":
    main()
