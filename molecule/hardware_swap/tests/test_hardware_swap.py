"""After gx10-b's rail NICs were swapped and the network re-applied: converged, nothing stale.

The MACs gx10-b had before the swap are read from what the side effect recorded (and, as a
cross-check, every earlier NIC generation of the node is recomputed from the lab's MAC scheme).
Expected addresses are written out: the lab inventory uses the default plan.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gx10.lab.config import LabConfig, mac_generation

MTU = 9000
RAILS = {"rail0": ("enp1s0f0np0", "192.168.100"), "rail1": ("enP2p1s0f0np0", "192.168.101")}
HOST_NUMBER = {"gx10-a": 10, "gx10-b": 11}
SWAPPED = "gx10-b"
PLANTED = "40-cx7-pinned.yaml"
BACKUP_DIR = "/var/backups/gx10/netplan"
# Where netplan's input lives, and where it renders networkd units (and udev .link files).
CONFIG_DIRS = ("/etc/netplan", "/run/systemd/network")


def name(node) -> str:
    return node.backend.get_hostname()


def address(node_name: str, rail: str) -> str:
    return f"{RAILS[rail][1]}.{HOST_NUMBER[node_name]}"


def rail_macs(node) -> list[str]:
    return [
        node.file(f"/sys/class/net/{netdev}/address").content_string.strip().lower()
        for netdev, _ in RAILS.values()
    ]


@pytest.fixture(scope="module")
def old_macs(nodes) -> set[str]:
    swapped = next(node for node in nodes if name(node) == SWAPPED)
    cfg = LabConfig()
    now = {mac_generation(mac) for mac in rail_macs(swapped)}
    assert len(now) == 1, f"{SWAPPED}'s rails are of different NIC generations: {now}"
    assert now != {0}, f"{SWAPPED} was not swapped: {rail_macs(swapped)}"
    earlier = {
        cfg.mac(SWAPPED, rail, generation) for rail in cfg.rails for generation in range(max(now))
    }
    recorded: set[str] = set()
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if ephemeral:
        record = Path(ephemeral) / "old-macs.json"
        recorded = {mac.lower() for mac in json.loads(record.read_text())[SWAPPED]}
        assert recorded <= earlier, (recorded, earlier)
    return earlier | recorded


def test_swapped_node_has_new_macs_and_the_peer_kept_its_own(nodes, old_macs) -> None:
    cfg = LabConfig()
    for node in nodes:
        macs = rail_macs(node)
        if name(node) == SWAPPED:
            assert old_macs.isdisjoint(macs), macs
        else:
            assert macs == [cfg.mac(name(node), rail) for rail in cfg.rails]


@pytest.mark.parametrize("rail", sorted(RAILS))
def test_rails_addressed_and_pinging_across(nodes, rail) -> None:
    netdev = RAILS[rail][0]
    for node in nodes:
        (link,) = json.loads(node.check_output(f"ip -j addr show dev {netdev}"))
        assert link["mtu"] == MTU, (name(node), netdev, link["mtu"])
        inet = [(a["local"], a["prefixlen"]) for a in link["addr_info"] if a["family"] == "inet"]
        assert inet == [(address(name(node), rail), 24)], (name(node), netdev, link["addr_info"])
        peer = next(address(n, rail) for n in HOST_NUMBER if n != name(node))
        ping = node.run(f"ping -M do -s {MTU - 28} -c 1 -W 2 -I {netdev} {peer}")
        assert ping.rc == 0, (name(node), netdev, peer, ping.stdout, ping.stderr)


def test_nothing_refers_to_the_old_macs(nodes, old_macs) -> None:
    for node in nodes:
        for directory in CONFIG_DIRS:
            pattern = "|".join(sorted(old_macs))
            found = node.run(f"grep -rliE '{pattern}' {directory}")
            assert found.rc == 1, (name(node), directory, found.stdout, found.stderr)


def test_stale_file_adopted_with_a_backup(nodes) -> None:
    for node in nodes:
        assert not node.file(f"/etc/netplan/{PLANTED}").exists, name(node)
        backups = node.check_output(f"ls {BACKUP_DIR}").split()
        assert any(entry.startswith(f"{PLANTED}.") for entry in backups), (name(node), backups)
        netplan = node.check_output("ls /etc/netplan").split()
        assert netplan == ["60-gx10-rails.yaml"], (name(node), netplan)
        generate = node.run("netplan generate")
        assert generate.rc == 0, (name(node), generate.stderr)
