# SPDX-License-Identifier: Apache-2.0
"""The fabric role's bandwidth.yml over four nodes on a switch, through a real ansible-playbook.

Four inventory hosts on connection local, their rails on loopback addresses (127.0.1.x and
127.0.2.x), and a stand-in iperf3 (fixtures/fabric_pairs/iperf3) that listens, connects and
prints iperf3 -J, slow towards the server addresses a fault file names. This checks the
orchestration the unit tests cannot: every pair measured in its round, each server and client
run by its own node, the servers stopped, and the report naming the bad links.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_ansible_playbook

FAKE_BIN = Path(__file__).parent / "fixtures" / "fabric_pairs"
NODES = ("gx10-a", "gx10-b", "gx10-c", "gx10-d")
NETDEVS = ("lo-rail0", "lo-rail1")
# Away from the role's default and from another run of this test at the same time.
PORT = 20000 + os.getpid() % 20000


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def _plan() -> dict[str, Any]:
    def rails(node: str) -> list[dict[str, Any]]:
        return [
            {
                "name": f"rail{k}",
                "netdev": netdev,
                "address": f"127.0.{k + 1}.{10 + NODES.index(node)}",
                "cidr": f"127.0.{k + 1}.{10 + NODES.index(node)}/24",
                "peers": {
                    peer: f"127.0.{k + 1}.{10 + NODES.index(peer)}"
                    for peer in NODES
                    if peer != node
                },
                "rdma_dev": None,
                "ping_payload": 8972,
            }
            for k, netdev in enumerate(NETDEVS)
        ]

    return {
        "head": NODES[0],
        "workers": list(NODES[1:]),
        "topology": "switch",
        "mtu": 9000,
        "hosts": {node: {"rails": rails(node)} for node in NODES},
    }


def _servers_running() -> list[str]:
    """The stand-in's servers of this test still running (their command lines)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "--server" in argv and any(
            arg.isdigit() and int(arg) in (PORT, PORT + 1) for arg in argv
        ):
            found.append(" ".join(argv))
    return found


def test_every_pair_is_measured_and_the_slow_link_named(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.write_text("127.0.2.12\n")  # gx10-c's rail1 address: every link to it on rail1
    out = tmp_path / "out.json"
    inventory = {
        "all": {
            "hosts": {node: {} for node in NODES},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "gx10_plan": _plan(),
            },
        }
    }
    play = {
        "hosts": "all",
        "gather_facts": False,
        "environment": {
            "PATH": f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_IPERF3_SLOW": str(slow),
        },
        "vars": {
            "fabric_bandwidth_tool": "iperf3",
            "fabric_bandwidth_seconds": 1,
            # One direction: 9 runs (3 rounds x each rail and both), about a minute.
            "fabric_iperf3_reverse": False,
            "fabric_bandwidth_port": PORT,
            "fabric_min_rail_gbps": 2,
            "fabric_min_total_gbps": 3,
            "fabric_degraded_band_gbps": [0.1, 0.5],
        },
        "tasks": [
            {
                "name": "Measure",
                "ansible.builtin.include_role": {
                    "name": "fabric",
                    "tasks_from": "bandwidth.yml",
                    "public": True,
                },
            },
            {
                "name": "Keep what the head found",
                "ansible.builtin.copy": {
                    "content": (
                        "{{ {'schedule': __fabric_schedule, 'bandwidth': __fabric_bandwidth,"
                        " 'checks': __fabric_bandwidth_checks} | to_json }}"
                    ),
                    "dest": str(out),
                    "mode": "0644",
                },
                "when": "inventory_hostname == gx10_plan.head",
            },
        ],
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play]))
    # Each node's servers in a directory of its own (they share this machine's PID space).
    run_dir = f"__fabric_run_dir={tmp_path}/run-{{{{ inventory_hostname }}}}"
    result = run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", "-e", run_dir, timeout=600
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    found = json.loads(out.read_text())
    assert len(found["schedule"]["rounds"]) == 3
    assert found["schedule"]["skipped"] == []
    bandwidth = found["bandwidth"]
    assert len(bandwidth["links"]) == 12  # 6 pairs x 2 rails
    assert sorted(bandwidth["bad_links"]) == [
        "rail1 gx10-a -> gx10-c 127.0.2.12: 0.28 Gb/s < 2 Gb/s",
        "rail1 gx10-b -> gx10-c 127.0.2.12: 0.28 Gb/s < 2 Gb/s",
    ]
    assert bandwidth["per_rail"] == {
        "gx10-b": {NETDEVS[0]: 9.0, NETDEVS[1]: 9.0},
        "gx10-c": {NETDEVS[0]: 9.0, NETDEVS[1]: 0.28},
        "gx10-d": {NETDEVS[0]: 9.0, NETDEVS[1]: 9.0},
    }
    bad = [check["name"] for check in found["checks"] if not check["ok"]]
    assert bad == [
        "rail1 gx10-a lo-rail1 127.0.2.10 <-> gx10-c 127.0.2.12: bandwidth (iperf3)",
        "rail1 gx10-b lo-rail1 127.0.2.11 <-> gx10-c 127.0.2.12: bandwidth (iperf3)",
    ]
    # Every server was stopped: no PID file left behind, no server process left.
    assert not list(tmp_path.glob("run-*/*.pid"))
    assert not _servers_running(), _servers_running()
