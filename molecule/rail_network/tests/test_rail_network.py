"""The rails after converge, as the nodes show them, and traffic across each rail.

Expected values are written out here (the lab inventory uses the default plan: rail0
enp1s0f0np0 192.168.100.0/24, rail1 enP2p1s0f0np0 192.168.101.0/24, head .10, worker .11) rather
than recomputed with the code under test.
"""

from __future__ import annotations

import json
import time

import pytest

MTU = 9000
RAILS = {"rail0": ("enp1s0f0np0", "192.168.100"), "rail1": ("enP2p1s0f0np0", "192.168.101")}
HOST_NUMBER = {"gx10-a": 10, "gx10-b": 11}
NETPLAN_FILE = "/etc/netplan/60-gx10-rails.yaml"
BACKUP_DIR = "/var/backups/gx10/netplan"


def name(node) -> str:
    return node.backend.get_hostname()


def address(node, rail: str) -> str:
    return f"{RAILS[rail][1]}.{HOST_NUMBER[name(node)]}"


def peer_of(node, nodes):
    others = [other for other in nodes if name(other) != name(node)]
    assert len(others) == 1, [name(n) for n in nodes]
    return others[0]


def ip_json(node, *args: str):
    return json.loads(node.check_output("ip -j " + " ".join(args)))


@pytest.mark.parametrize("rail", sorted(RAILS))
def test_rail_address_prefix_and_mtu(nodes, rail):
    netdev = RAILS[rail][0]
    for node in nodes:
        (link,) = ip_json(node, "addr", "show", "dev", netdev)
        assert link["mtu"] == MTU, (name(node), netdev, link["mtu"])
        inet = [(a["local"], a["prefixlen"]) for a in link["addr_info"] if a["family"] == "inet"]
        # Exactly the plan's address: the vendor's 169.254 address is gone, nothing else crept in.
        assert inet == [(address(node, rail), 24)], (name(node), netdev, link["addr_info"])
        link_local = [a for a in link["addr_info"] if a["local"].startswith(("169.254.", "fe80"))]
        assert not link_local, (name(node), netdev, link_local)


def test_no_bond_devices_and_rails_unenslaved(nodes):
    for node in nodes:
        # `ip -j link show type bond` prints one empty object per non-matching link: filter here.
        links = ip_json(node, "-d", "link", "show")
        kinds = {link["ifname"]: link.get("linkinfo", {}).get("info_kind") for link in links}
        assert "bond" not in kinds.values(), (name(node), kinds)
        assert kinds[RAILS["rail0"][0]] == "veth", kinds  # the probe does see link kinds
        for link in links:
            if link["ifname"] in {netdev for netdev, _ in RAILS.values()}:
                assert "master" not in link, (name(node), link["ifname"], link.get("master"))


def test_netplan_file_private_and_valid(nodes):
    for node in nodes:
        netplan_file = node.file(NETPLAN_FILE)
        assert netplan_file.is_file, name(node)
        assert netplan_file.mode == 0o600, (name(node), oct(netplan_file.mode))
        assert netplan_file.user == "root"
        generate = node.run("netplan generate")
        assert generate.rc == 0, (name(node), generate.stderr)
        # Nothing in it refers to a MAC: a NIC swap needs no edit.
        assert "macaddress" not in netplan_file.content_string


def test_vendor_file_adopted_with_backup(nodes):
    for node in nodes:
        assert not node.file("/etc/netplan/40-cx7.yaml").exists, name(node)
        backups = node.check_output(f"ls {BACKUP_DIR}").split()
        assert any(entry.startswith("40-cx7.yaml.") for entry in backups), (name(node), backups)


@pytest.mark.parametrize("rail", sorted(RAILS))
def test_jumbo_ping_without_fragmentation(nodes, rail):
    netdev = RAILS[rail][0]
    for node in nodes:
        peer = address(peer_of(node, nodes), rail)
        ping = node.run(f"ping -M do -s {MTU - 28} -c 1 -W 2 -I {netdev} {peer}")
        assert ping.rc == 0, (name(node), netdev, peer, ping.stdout, ping.stderr)
        # One byte more than the MTU must be refused, not fragmented: -M do is really in force.
        too_big = node.run(f"ping -M do -s {MTU - 27} -c 1 -W 2 -I {netdev} {peer}")
        assert too_big.rc != 0, (name(node), netdev, peer)


@pytest.mark.parametrize("rail", sorted(RAILS))
def test_route_to_peer_leaves_through_the_rail(nodes, rail):
    netdev = RAILS[rail][0]
    for node in nodes:
        peer = address(peer_of(node, nodes), rail)
        (route,) = ip_json(node, "route", "get", peer)
        assert route["dev"] == netdev, (name(node), peer, route)
        assert route["prefsrc"] == address(node, rail), (name(node), peer, route)


@pytest.mark.parametrize("rail", sorted(RAILS))
def test_iperf3_across_the_rail(head, workers, rail):
    port = 5301 + sorted(RAILS).index(rail)
    server, client = head, workers[0]
    server_ip, client_ip = address(server, rail), address(client, rail)
    pidfile = f"/tmp/gx10-iperf3-{rail}.pid"
    # One-shot daemon bound to the rail address: it serves one test and exits.
    server.check_output(f"iperf3 -s -1 -D -B {server_ip} -p {port} -I {pidfile}")
    try:
        result = None
        for _ in range(5):  # the daemon may need a moment before it listens
            result = client.run(
                f"timeout 20 iperf3 -c {server_ip} -B {client_ip} -p {port} -t 1 -J"
            )
            if result.rc == 0:
                break
            time.sleep(0.5)
        assert result is not None
        assert result.rc == 0, (rail, result.stdout, result.stderr)
        report = json.loads(result.stdout)
        assert report["start"]["connected"][0]["local_host"] == client_ip
        assert report["end"]["sum_received"]["bytes"] > 0, report["end"]
    finally:
        server.run(f"test -f {pidfile} && kill $(cat {pidfile}) 2>/dev/null; rm -f {pidfile}")
