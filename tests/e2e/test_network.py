"""The network stage on the lab: bad plans change nothing, unreachable peers are named, a node
replaced by a fresh machine converges on re-apply, the role's netplan file gives no link-local
address with either renderer (real `netplan generate` on a lab node), and verification names a
link-local address on a rail.

Bad plans run provision() against a temporary copy of inventories/lab with the bad value in
group_vars or host_vars. Each must fail naming the variable, the bad value and the fix, and leave
both nodes' network state and files exactly as they were.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import LAB_INVENTORY, ROOT, node_sh, rank_container

from gx10 import ProvisionResult, lab, provision

NODES = ("gx10-a", "gx10-b")
RAILS = {"rail0": ("enp1s0f0np0", "192.168.100"), "rail1": ("enP2p1s0f0np0", "192.168.101")}
HOST_NUMBER = {"gx10-a": 10, "gx10-b": 11}
DEFAULT_RAILS = [
    {"name": "rail0", "netdev": "enp1s0f0np0", "subnet": "192.168.100.0/24"},
    {"name": "rail1", "netdev": "enP2p1s0f0np0", "subnet": "192.168.101.0/24"},
]
SNAPSHOT = """
echo '# addr'; ip -j addr
echo '# link'; ip -j link
echo '# route'; ip -j route
echo '# files'
find /etc/netplan /run/systemd/network -type f -exec sha256sum {} + 2>/dev/null | sort
"""


def snapshot() -> dict[str, str]:
    """Both nodes' addresses, links, routes, and a hash of every netplan and networkd file."""
    return {node: node_sh(node, SNAPSHOT) for node in NODES}


def rails_with(index: int, **changes: Any) -> list[dict[str, Any]]:
    rails = [dict(rail) for rail in DEFAULT_RAILS]
    rails[index].update(changes)
    return rails


def bad_inventory(tmp_path: Path, group_vars: dict[str, Any], host_vars: dict[str, Any]) -> Path:
    """A copy of the lab inventory with extra group_vars/all.yml values and host_vars files."""
    inventory = tmp_path / "inventory"
    shutil.copytree(LAB_INVENTORY, inventory)
    all_yml = inventory / "group_vars" / "all.yml"
    values = yaml.safe_load(all_yml.read_text()) or {}
    all_yml.write_text(yaml.safe_dump({**values, **group_vars}))
    for host, variables in host_vars.items():
        (inventory / "host_vars").mkdir(exist_ok=True)
        (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(variables))
    return inventory


def all_messages(result: ProvisionResult) -> str:
    return "\n".join(f"{t.host}: {t.message}" for t in result.failed_tasks)


@pytest.fixture(scope="module")
def converged(serving_lab: ProvisionResult) -> ProvisionResult:
    """The session's shared converge."""
    return serving_lab


# Each case: group_vars, host_vars, whether validation (on the controller) catches it, and
# fragments the message must hold: the variable, the bad value, the fix. One plan the validate
# play refuses stays here as the proof of the wiring (nothing on the nodes changes); the others
# are unit tests now (tests/unit/test_validate_refusals.py, issue 24). The plans that only the
# nodes show to be bad stay here too.
BAD_PLANS: dict[str, tuple[dict[str, Any], dict[str, Any], bool, list[str]]] = {
    "two rails sharing a subnet": (
        {"gx10_rails": rails_with(1, subnet="192.168.100.0/24")},
        {},
        True,
        [
            "gx10_rails[1].subnet '192.168.100.0/24' (rail rail1) is the same subnet as "
            "gx10_rails[0].subnet '192.168.100.0/24'",
            "give each rail its own, non-overlapping subnet, e.g. 192.168.101.0/24 for rail1",
        ],
    ),
    "rail netdev missing on the nodes": (
        {"gx10_rails": rails_with(1, netdev="enP9p9s0f0np0")},
        {},
        False,
        [
            "rail netdevs present: found missing enP9p9s0f0np0",
            "correct the netdev names in gx10_rails",
        ],
    ),
    "rail on the management interface (default route)": (
        {"gx10_rails": rails_with(1, netdev="eth0")},
        {},
        False,
        [
            "management interface is not a rail: found eth0",
            "change gx10_rails",
        ],
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
def test_bad_plan_fails_clearly_and_changes_nothing(
    converged: ProvisionResult, tmp_path: Path, case: str
) -> None:
    group_vars, host_vars, at_validation, fragments = BAD_PLANS[case]
    inventory = bad_inventory(tmp_path, group_vars, host_vars)
    before = snapshot()

    result = provision(inventory, "site.yml")

    assert not result.ok, case
    messages = all_messages(result)
    for fragment in fragments:
        assert fragment in messages, f"{case}: {fragment!r} not in:\n{messages}"
    assert "Fix:" in messages or at_validation, messages
    if at_validation:
        # Stopped on the controller: no node was contacted at all.
        assert set(result.hosts) == {"localhost"}, result.hosts
        assert "Inventory validation failed" in messages
    else:
        assert all(result.hosts[node].changed == 0 for node in NODES), result.hosts
    assert snapshot() == before, f"{case}: the nodes' network changed"


def test_preflight_reports_a_rail_without_carrier(rail_down: tuple[str, str]) -> None:
    """(Here, not with the read-only files: a rail that goes down and up may move its GIDs.)"""
    node, netdev = rail_down
    result = provision(LAB_INVENTORY, "site.yml")
    assert not result.ok
    messages = {t.host: t.message for t in result.failed_tasks}
    assert f"{node}: rail carrier: found no carrier on {netdev}" in messages[node], messages
    # A cable with one end down has no carrier at either end: the peer reports it too.
    assert f"gx10-a: rail carrier: found no carrier on {netdev}" in messages["gx10-a"], messages
    assert "enp1s0f0np0" not in messages[node]


@pytest.fixture
def rail1_icmp_dropped(converged: ProvisionResult) -> Iterator[None]:
    """gx10-b drops every ICMP packet arriving on rail1, as a misconfigured firewall would."""
    rule = "INPUT -i enP2p1s0f0np0 -p icmp -j DROP"
    node_sh("gx10-b", f"iptables -I {rule}")
    try:
        yield
    finally:
        node_sh("gx10-b", f"iptables -D {rule}")


@pytest.mark.usefixtures("rail1_icmp_dropped")
def test_unreachable_peer_names_the_rail_and_both_ends() -> None:
    result = provision(LAB_INVENTORY, "site.yml", tags="network")

    assert not result.ok
    messages = {t.host: t.message for t in result.failed_tasks}
    assert "gx10-a" in messages, messages
    assert (
        "rail1 from gx10-a enP2p1s0f0np0 192.168.101.10 to gx10-b 192.168.101.11"
        in messages["gx10-a"]
    ), messages
    assert "Fix:" in messages["gx10-a"]
    # rail0 answers: only rail1 is named.
    assert "rail0 from" not in messages["gx10-a"], messages


def ping_across(rail: str) -> None:
    netdev, prefix = RAILS[rail]
    for node, peer in (NODES, NODES[::-1]):
        node_sh(node, f"ping -M do -s 8972 -c 1 -W 2 -I {netdev} {prefix}.{HOST_NUMBER[peer]}")


def container_id(node: str) -> str:
    proc = subprocess.run(
        ["docker", "inspect", "-f", "{{.Id}}", node], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def test_node_replaced_by_a_fresh_machine_converges_on_re_apply(
    converged: ProvisionResult,
) -> None:
    """The hardware swap of the brief: a fresh machine in gx10-b's place converges on the next
    site.yml, and the run after it changes nothing and restarts nothing on either node. That
    second run is also the suite's site.yml re-apply check on a converged lab (it was
    test_site.py's own re-apply, one site.yml run more, before issue 24)."""
    old_id = container_id("gx10-b")
    lab.replace_node("gx10-b", log=lambda line: print(f"lab: {line}"))
    assert container_id("gx10-b") != old_id
    # A fresh machine: nothing configured, the first NIC generation's MACs again.
    assert node_sh("gx10-b", "ls /etc/netplan").split() == []

    again = provision(LAB_INVENTORY, "site.yml")
    assert again.ok, again.failed_tasks
    ranks = {node: rank_container(node) for node in NODES}
    assert all(ranks.values()), ranks
    settled = provision(LAB_INVENTORY, "site.yml")
    assert settled.ok, settled.failed_tasks
    assert settled.changed_total == 0, {h: s.changed for h, s in settled.hosts.items()}
    assert {node: settled.hosts[node].changed for node in NODES} == dict.fromkeys(NODES, 0)
    assert {node: rank_container(node) for node in NODES} == ranks  # nothing restarted
    for rail in RAILS:
        ping_across(rail)
    links = json.loads(node_sh("gx10-b", "ip -j link show enp1s0f0np0"))
    assert links[0]["address"] == lab.LabConfig().mac("gx10-b", lab.LabConfig().rails[0])


# Renders the role's own template with the role's own variables (vars/main.yml, from the cluster
# plan the validate play computes) on each lab node, once per renderer, each into its own scratch
# root for `netplan generate`: one run for both renderers.
RENDER_PLAYBOOK = """
- name: Validate the inventory and compute the cluster plan
  ansible.builtin.import_playbook: {root}/playbooks/validate.yml

- name: Render the rails netplan file into a scratch root per renderer
  hosts: head:workers
  gather_facts: false
  vars_files:
    - {root}/roles/rail_network/vars/main.yml
  tasks:
    - name: Create the scratch netplan directories
      ansible.builtin.file:
        path: "{{{{ gx10_test_root }}}}-{{{{ item }}}}/etc/netplan"
        state: directory
        mode: "0700"
      loop: "{{{{ gx10_test_renderers }}}}"

    - name: Render the template
      ansible.builtin.template:
        src: {root}/roles/rail_network/templates/60-gx10-rails.yaml.j2
        dest: "{{{{ gx10_test_root }}}}-{{{{ item }}}}/etc/netplan/60-gx10-rails.yaml"
        mode: "0600"
      vars:
        rail_network_renderer: "{{{{ item }}}}"
      loop: "{{{{ gx10_test_renderers }}}}"
"""


def parse_ini(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for each line of a keyfile or systemd unit (keys may repeat)."""
    section, entries = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def values(entries: list[tuple[str, str, str]], section: str, key: str) -> list[str]:
    return [v for s, k, v in entries if s == section and k == key]


def generated(node: str, root: str, directory: str, suffix: str) -> dict[str, str]:
    """{file name: content} of what netplan wrote under root/directory."""
    names = node_sh(node, f"ls {root}/{directory} 2>/dev/null || true").split()
    return {
        name: node_sh(node, f"cat {root}/{directory}/{name}")
        for name in names
        if name.endswith(suffix)
    }


RENDERERS = ("NetworkManager", "networkd")
RENDER_ROOT = "/tmp/gx10-test-netplan"


@pytest.fixture(scope="module")
def renders(
    converged: ProvisionResult, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The role's rails file for each renderer, rendered into /tmp on both nodes: renderer ->
    its scratch root."""
    roots = {renderer: f"{RENDER_ROOT}-{renderer}" for renderer in RENDERERS}
    playbook = tmp_path_factory.mktemp("render") / "render.yml"
    playbook.write_text(RENDER_PLAYBOOK.format(root=ROOT))
    for node in NODES:
        node_sh(node, f"rm -rf {' '.join(roots.values())}")
    try:
        result = provision(
            LAB_INVENTORY,
            playbook,
            extravars={"gx10_test_renderers": list(RENDERERS), "gx10_test_root": RENDER_ROOT},
        )
        assert result.ok, result.failed_tasks
        yield roots
    finally:
        for node in NODES:
            node_sh(node, f"rm -rf {' '.join(roots.values())}", check=False)


def test_networkmanager_rails_get_ipv6_disabled_from_real_netplan(renders: dict[str, str]) -> None:
    root = renders["NetworkManager"]
    for node in NODES:
        node_sh(node, f"netplan generate --root-dir {root}")
        profiles = generated(node, root, "run/NetworkManager/system-connections", ".nmconnection")
        networkd = generated(node, root, "run/systemd/network", ".network")
        assert not networkd, (node, sorted(networkd))
        by_netdev = {}
        for name, text in profiles.items():
            entries = parse_ini(text)
            (netdev,) = values(entries, "connection", "interface-name")
            by_netdev[netdev] = entries
            assert values(entries, "connection", "type") == ["ethernet"], (node, name, text)
            # Not a bond member, and no bond profile.
            assert not values(entries, "connection", "master"), (node, name, text)
            assert not values(entries, "connection", "controller"), (node, name, text)
        assert sorted(by_netdev) == sorted(netdev for netdev, _ in RAILS.values()), (node, profiles)
        for _rail, (netdev, prefix) in RAILS.items():
            entries = by_netdev[netdev]
            # `method=ignore` (what netplan writes without the passthrough) leaves the kernel
            # adding an fe80:: address; `disabled` turns IPv6 off on the rail.
            assert values(entries, "ipv6", "method") == ["disabled"], (node, netdev, entries)
            assert values(entries, "ipv4", "method") == ["manual"], (node, netdev, entries)
            address = f"{prefix}.{HOST_NUMBER[node]}/24"
            assert values(entries, "ipv4", "address1") == [address], (node, netdev, entries)
            assert values(entries, "ethernet", "mtu") == ["9000"], (node, netdev, entries)


def test_networkd_rails_get_no_link_local_from_real_netplan(renders: dict[str, str]) -> None:
    root = renders["networkd"]
    for node in NODES:
        node_sh(node, f"netplan generate --root-dir {root}")
        profiles = generated(node, root, "run/NetworkManager/system-connections", ".nmconnection")
        networks = generated(node, root, "run/systemd/network", ".network")
        netdevs = generated(node, root, "run/systemd/network", ".netdev")
        assert not profiles, (node, sorted(profiles))
        assert not netdevs, (node, netdevs)  # no bond (or any other virtual device)
        by_netdev = {}
        for text in networks.values():
            entries = parse_ini(text)
            (netdev,) = values(entries, "Match", "Name")
            by_netdev[netdev] = entries
        assert sorted(by_netdev) == sorted(netdev for netdev, _ in RAILS.values()), (node, networks)
        for _rail, (netdev, prefix) in RAILS.items():
            entries = by_netdev[netdev]
            assert values(entries, "Network", "LinkLocalAddressing") == ["no"], (node, entries)
            assert values(entries, "Network", "IPv6AcceptRA") == ["no"], (node, entries)
            address = f"{prefix}.{HOST_NUMBER[node]}/24"
            assert values(entries, "Network", "Address") == [address], (node, entries)
            assert not values(entries, "Network", "Bond"), (node, entries)
            assert values(entries, "Link", "MTUBytes") == ["9000"], (node, entries)


LINK_LOCAL = "fe80::1234/64"


def test_verify_names_a_link_local_address_on_a_rail(converged: ProvisionResult) -> None:
    node, (netdev, _prefix) = "gx10-a", RAILS["rail0"]
    # A short settle: the wait gives up sooner, the verdict is the same.
    quick = {"rail_network_settle_timeout": 3}
    # IPv6 is off on the lab's rails (the container's default): turn it on for the address, as
    # another tool or profile would on a node, and put the setting back afterwards (which also
    # drops any address the kernel added meanwhile).
    sysctl = f"/proc/sys/net/ipv6/conf/{netdev}/disable_ipv6"
    disabled = node_sh(node, f"cat {sysctl}").strip()
    node_sh(node, f"echo 0 > {sysctl} && ip -6 addr add {LINK_LOCAL} dev {netdev}")
    try:
        result = provision(LAB_INVENTORY, "network.yml", extravars=quick)
        assert not result.ok
        messages = {t.host: t.message for t in result.failed_tasks}
        assert node in messages, messages
        message = messages[node]
        assert "no link-local address on a rail" in message, message
        assert f"rail0 {netdev} has {LINK_LOCAL}" in message, message
        assert "Fix:" in message, message
        assert "LinkLocalAddressing=no" in message, message
        assert "ip addr del <address> dev <netdev>" in message, message
        # Only that rail is named, and the address is not reported as a misconfiguration.
        assert "rail1" not in message, message
        assert "rails configured" not in message, message
    finally:
        node_sh(node, f"ip -6 addr del {LINK_LOCAL} dev {netdev}", check=False)
        node_sh(node, f"echo {disabled} > {sysctl}", check=False)
    again = provision(LAB_INVENTORY, "network.yml", extravars=quick)
    assert again.ok, again.failed_tasks
