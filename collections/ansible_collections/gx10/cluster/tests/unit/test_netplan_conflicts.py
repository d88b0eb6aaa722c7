# SPDX-License-Identifier: Apache-2.0
"""Unit tests for module_utils/netplan_conflicts.py and the netplan_conflicts module's scan."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.plugins.module_utils.netplan_conflicts import (
    Netdev,
    find_file_conflict,
    match_reason,
    parse_connection_details,
    parse_connection_list,
    profile_reason,
    split_terse,
    stale_reason,
    subnet_reason,
)
from ansible_collections.gx10.cluster.plugins.modules.netplan_conflicts import (
    read_netdev,
    scan_files,
)

RAIL0 = Netdev("enp1s0f0np0", "02:9a:00:00:0a:00", "mlx5_core")
RAIL1 = Netdev("enP2p1s0f0np0", "02:9a:00:00:0a:01", "mlx5_core")
RAILS = [RAIL0, RAIL1]
MGMT = Netdev("enP7s7", "4c:bb:47:00:00:01", "r8169")


def doc(text: str) -> Any:
    return yaml.safe_load(textwrap.dedent(text))


# NVIDIA's DGX Spark setup: both twins by name, link-local only.
CX7 = """
network:
  version: 2
  renderer: NetworkManager
  ethernets:
    enp1s0f0np0:
      link-local: [ipv4]
    enP2p1s0f0np0:
      link-local: [ipv4]
"""


def test_vendor_file_by_name_is_removed_whole() -> None:
    conflict = find_file_conflict("/etc/netplan/40-cx7.yaml", doc(CX7), RAILS, [MGMT])

    assert conflict is not None
    assert conflict.action == "remove"
    assert [(d.key, d.netdev) for d in conflict.definitions] == [
        ("enp1s0f0np0", "enp1s0f0np0"),
        ("enP2p1s0f0np0", "enP2p1s0f0np0"),
    ]
    result = conflict.as_dict()
    assert result["content"] is None
    assert result["summary"].startswith("remove /etc/netplan/40-cx7.yaml: ethernets.enp1s0f0np0")


def test_file_about_other_netdevs_is_no_conflict() -> None:
    mgmt_only = doc("""
        network:
          version: 2
          ethernets:
            enP7s7:
              dhcp4: true
        """)
    assert find_file_conflict("/etc/netplan/50-cloud-init.yaml", mgmt_only, RAILS, [MGMT]) is None


@pytest.mark.parametrize(
    "document",
    [None, "", "just text", {"network": None}, {"network": {"ethernets": None}}, [1, 2]],
)
def test_empty_or_odd_documents_are_no_conflict(document: Any) -> None:
    assert find_file_conflict("/x.yaml", document, RAILS) is None


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"macaddress": "02:9A:00:00:0A:00"}, "match macaddress '02:9A:00:00:0A:00'"),
        ({"name": "enp1s0f*"}, "match name 'enp1s0f*'"),
        ({"name": ["eth9", "enp1s0f0np0"]}, "match name ['eth9', 'enp1s0f0np0']"),
        ({"driver": "mlx5_*"}, "match driver 'mlx5_*'"),
        ({"driver": "mlx5_core", "name": "enp*"}, "match driver 'mlx5_core', name 'enp*'"),
        ({"macaddress": "02:9a:00:00:0b:00"}, None),  # the peer's MAC
        ({"driver": "mlx5_core", "name": "enP2*"}, None),  # every criterion must hold
        ({"name": "ENP1S0F0NP0"}, None),  # names are case sensitive
        ({"pci-path": "0000:01:00.0"}, None),  # a criterion we cannot judge: no claim
    ],
)
def test_match_rules(match: dict[str, Any], expected: str | None) -> None:
    assert match_reason("cx7", {"match": match}, RAIL0) == expected


def test_match_by_key_only_without_match() -> None:
    assert match_reason("enp1s0f0np0", {}, RAIL0) == "its id 'enp1s0f0np0' is the netdev name"
    assert match_reason("enp1s0f0np0", None, RAIL0) is not None
    # With a match the key is only an id: a key equal to the name means nothing then.
    assert match_reason("enp1s0f0np0", {"match": {"name": "eth*"}}, RAIL0) is None


def test_match_by_mac_or_driver_needs_what_sysfs_gave() -> None:
    bare = Netdev("enp1s0f0np0")
    assert match_reason("x", {"match": {"macaddress": "02:9a:00:00:0a:00"}}, bare) is None
    assert match_reason("x", {"match": {"driver": "*"}}, bare) is None


def test_shared_file_is_rewritten_without_the_rails_and_bonds_on_them() -> None:
    shared = doc("""
        network:
          version: 2
          renderer: networkd
          ethernets:
            enP7s7:
              dhcp4: true
            cx7a:
              match: {macaddress: "02:9a:00:00:0a:00"}
            enP2p1s0f0np0: {}
          bonds:
            bond0:
              interfaces: [cx7a, enP2p1s0f0np0]
              addresses: [10.0.0.1/24]
          vlans:
            bond0.7:
              id: 7
              link: bond0
            mgmt.9:
              id: 9
              link: enP7s7
        """)
    conflict = find_file_conflict("/etc/netplan/50-mixed.yaml", shared, RAILS, [MGMT])

    assert conflict is not None
    assert conflict.action == "rewrite"
    assert {(d.section, d.key) for d in conflict.definitions} == {
        ("ethernets", "cx7a"),
        ("ethernets", "enP2p1s0f0np0"),
        ("bonds", "bond0"),
        ("vlans", "bond0.7"),
    }
    content = conflict.as_dict()["content"]
    assert content.startswith("# Rewritten by gx10")
    assert yaml.safe_load(content) == {
        "network": {
            "version": 2,
            "renderer": "networkd",
            "ethernets": {"enP7s7": {"dhcp4": True}},
            "vlans": {"mgmt.9": {"id": 9, "link": "enP7s7"}},
        }
    }


def test_definition_that_also_matches_the_management_interface_is_blocked() -> None:
    greedy = doc("""
        network:
          version: 2
          ethernets:
            all-en:
              match: {name: "en*"}
              dhcp4: true
        """)
    conflict = find_file_conflict("/etc/netplan/01-all.yaml", greedy, RAILS, [MGMT])

    assert conflict is not None
    assert conflict.action == "blocked"
    assert [(d.key, d.netdev) for d in conflict.blocked] == [("all-en", "enP7s7")] * 2
    assert "leave alone" in conflict.summary


# --- after a hardware swap ----------------------------------------------------------------------

# The same rails after their NICs were replaced: new MACs (the lab's NIC generation 1).
SWAPPED = [Netdev(RAIL0.name, "02:9a:01:00:0a:00"), Netdev(RAIL1.name, "02:9a:01:00:0a:01")]

# A vendor-style file that pins each rail's name to the MAC of the NIC that was there before.
PINNED = f"""
network:
  version: 2
  ethernets:
    cx7p0:
      match: {{macaddress: "{RAIL0.mac}"}}
      set-name: enp1s0f0np0
      link-local: [ipv4]
    cx7p1:
      match:
        macaddress: "{RAIL1.mac}"
      set-name: enP2p1s0f0np0
      mtu: 9000
"""


def test_definition_pinned_to_an_old_mac_by_set_name_is_removed() -> None:
    conflict = find_file_conflict("/etc/netplan/40-cx7.yaml", doc(PINNED), SWAPPED, [MGMT], SUBNETS)

    assert conflict is not None
    assert conflict.action == "remove"
    assert [(d.key, d.netdev, d.reason) for d in conflict.definitions] == [
        (
            "cx7p0",
            RAIL0.name,
            f"set-name 'enp1s0f0np0' with match macaddress '{RAIL0.mac}', not its current MAC "
            "02:9a:01:00:0a:00",
        ),
        (
            "cx7p1",
            RAIL1.name,
            f"set-name 'enP2p1s0f0np0' with match macaddress '{RAIL1.mac}', not its current MAC "
            "02:9a:01:00:0a:01",
        ),
    ]


def test_pinned_definition_before_the_swap_matches_by_mac() -> None:
    conflict = find_file_conflict("/etc/netplan/40-cx7.yaml", doc(PINNED), RAILS, [MGMT])

    assert conflict is not None
    assert [d.reason for d in conflict.definitions] == [
        f"match macaddress '{RAIL0.mac}'",
        f"match macaddress '{RAIL1.mac}'",
    ]


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ({"set-name": "enp1s0f0np0"}, "set-name 'enp1s0f0np0'"),
        (
            {"match": {"name": "enp1s0f0np0", "macaddress": RAIL0.mac}},
            f"match name 'enp1s0f0np0' with match macaddress '{RAIL0.mac}', not its current MAC "
            "02:9a:01:00:0a:00",
        ),
        (
            {"match": {"name": ["eth9", "enp1s0f0np0"], "driver": "ixgbe"}},
            "match name 'enp1s0f0np0'",
        ),
        # A glob is not a pin to this rail: it may be meant for other devices.
        ({"match": {"name": "enp1s0f*", "macaddress": RAIL0.mac}}, None),
        ({"match": {"macaddress": RAIL0.mac}, "set-name": "cx7p0"}, None),
        ({"set-name": "enP2p1s0f0np0"}, None),  # the other rail
        (None, None),
    ],
)
def test_stale_rules(definition: Any, expected: str | None) -> None:
    assert stale_reason("old", definition, SWAPPED[0]) == expected


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ({"addresses": ["10.0.0.2/8", "192.168.100.50/24"]}, "address 192.168.100.50/24 in rail"),
        ({"addresses": [{"192.168.101.7/24": {"label": "x"}}]}, "address 192.168.101.7/24 in rail"),
        ({"addresses": "192.168.101.7/24"}, "address 192.168.101.7/24 in rail"),
        ({"addresses": ["192.168.102.1/24", "fe80::1/64", "not-an-ip"]}, None),
        ({"dhcp4": True}, None),
        ("text", None),
    ],
)
def test_subnet_rules(definition: Any, expected: str | None) -> None:
    reason = subnet_reason(definition, SUBNETS)
    assert (reason if expected is None else (reason or "")[: len(expected)]) == expected


def test_definitions_with_rail_subnet_addresses_are_adopted_and_mgmt_is_blocked() -> None:
    mixed = doc("""
        network:
          version: 2
          ethernets:
            enP7s7:
              dhcp4: true
            NM-5c1e:
              match: {macaddress: "02:9a:00:00:0a:00"}
              addresses: ["192.168.100.10/24"]
          bonds:
            bond9:
              interfaces: [enP7s7]
              addresses: ["192.168.101.99/24"]
        """)
    conflict = find_file_conflict("/etc/netplan/90-NM-5c1e.yaml", mixed, SWAPPED, [MGMT], SUBNETS)

    assert conflict is not None
    assert conflict.action == "rewrite"
    assert [(d.section, d.key, d.netdev) for d in conflict.definitions] == [
        ("ethernets", "NM-5c1e", "NM-5c1e"),
        ("bonds", "bond9", "bond9"),
    ]
    assert yaml.safe_load(conflict.as_dict()["content"])["network"] == {
        "version": 2,
        "ethernets": {"enP7s7": {"dhcp4": True}},
    }
    # The management interface itself with a rail-subnet address: hands off, the run fails.
    greedy = doc("""
        network:
          ethernets:
            enP7s7:
              addresses: ["192.168.100.5/24"]
        """)
    blocked = find_file_conflict("/etc/netplan/50-mgmt.yaml", greedy, SWAPPED, [MGMT], SUBNETS)
    assert blocked is not None
    assert blocked.action == "blocked"
    # Without the subnets, as before: only netdev rules apply.
    assert find_file_conflict("/etc/netplan/50-mgmt.yaml", greedy, SWAPPED, [MGMT]) is None


def test_scan_reads_sysfs_and_skips_our_file(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    for dev in (RAIL0, RAIL1):
        base = sysfs / "class" / "net" / dev.name
        base.mkdir(parents=True)
        (base / "address").write_text(f"{dev.mac}\n")
    netplan = tmp_path / "netplan"
    netplan.mkdir()
    (netplan / "40-cx7.yaml").write_text(
        'network: {ethernets: {cx7: {match: {macaddress: "02:9a:00:00:0a:01"}}}}\n'
    )
    (netplan / "60-gx10-rails.yaml").write_text(
        "network: {ethernets: {enp1s0f0np0: {mtu: 9000}}}\n"
    )
    (netplan / "70-broken.yaml").write_text("network: [unclosed\n")
    (netplan / "README").write_text("not yaml, not *.yaml\n")

    netdevs = [read_netdev(str(sysfs), name) for name in (RAIL0.name, RAIL1.name)]
    assert netdevs[1] == Netdev(RAIL1.name, RAIL1.mac, None)
    files, unreadable = scan_files(str(netplan), [str(netplan / "60-gx10-rails.yaml")], netdevs, [])

    assert [(f["path"], f["action"]) for f in files] == [(str(netplan / "40-cx7.yaml"), "remove")]
    # A leftover with an address in a rail subnet is found once the subnets are given.
    (netplan / "45-old.yaml").write_text(
        'network: {ethernets: {gone: {match: {macaddress: "aa:bb:cc:00:00:01"}, '
        'addresses: ["192.168.100.10/24"]}}}\n'
    )
    files, _ = scan_files(str(netplan), [], netdevs, [], SUBNETS)
    assert [f["path"].rsplit("/", 1)[1] for f in files] == [
        "40-cx7.yaml",
        "45-old.yaml",
        "60-gx10-rails.yaml",
    ]
    assert files[0]["definitions"][0]["netdev"] == RAIL1.name
    assert [u["path"] for u in unreadable] == [str(netplan / "70-broken.yaml")]


# --- NetworkManager ------------------------------------------------------------------------------


def test_split_terse_undoes_escapes() -> None:
    assert split_terse(r"cx7 port\:0:0b1c-uuid:802-3-ethernet:/etc/x\\y") == [
        "cx7 port:0",
        "0b1c-uuid",
        "802-3-ethernet",
        r"/etc/x\y",
    ]


def test_parse_connection_list() -> None:
    text = (
        "Wired connection 1:1111:802-3-ethernet:"
        "/etc/NetworkManager/system-connections/w1.nmconnection\n"
        "netplan-enp1s0f0np0:2222:802-3-ethernet:"
        "/run/NetworkManager/system-connections/netplan-enp1s0f0np0.nmconnection\n"
        "lo:3333:loopback:\n"
        "\n"
    )
    assert parse_connection_list(text) == [
        {
            "name": "Wired connection 1",
            "uuid": "1111",
            "type": "802-3-ethernet",
            "filename": "/etc/NetworkManager/system-connections/w1.nmconnection",
        },
        {
            "name": "netplan-enp1s0f0np0",
            "uuid": "2222",
            "type": "802-3-ethernet",
            "filename": "/run/NetworkManager/system-connections/netplan-enp1s0f0np0.nmconnection",
        },
        {"name": "lo", "uuid": "3333", "type": "loopback", "filename": ""},
    ]


def test_parse_connection_details_escaped_and_plain() -> None:
    escaped = (
        "connection.interface-name:\n"
        "802-3-ethernet.mac-address:02\\:9A\\:00\\:00\\:0A\\:00\n"
        "ipv4.addresses:192.168.100.10/24, 10.0.0.2/8\n"
    )
    assert parse_connection_details(escaped) == {
        "connection.interface-name": "",
        "802-3-ethernet.mac-address": "02:9A:00:00:0A:00",
        "ipv4.addresses": "192.168.100.10/24, 10.0.0.2/8",
    }
    assert parse_connection_details("802-3-ethernet.mac-address:02:9A:00:00:0A:00\n") == {
        "802-3-ethernet.mac-address": "02:9A:00:00:0A:00"
    }


PROFILE = {"name": "cx7", "uuid": "1", "type": "802-3-ethernet", "filename": "/etc/nm/cx7"}
SUBNETS = ["192.168.100.0/24", "192.168.101.0/24"]


@pytest.mark.parametrize(
    ("profile", "details", "expected"),
    [
        # Pinned to the rail by name, with the MAC of a NIC that was swapped out.
        (
            PROFILE,
            {
                "connection.interface-name": "enp1s0f0np0",
                "802-3-ethernet.mac-address": "AA:BB:CC:00:00:01",
            },
            "interface-name enp1s0f0np0",
        ),
        (
            PROFILE,
            {"802-3-ethernet.mac-address": "02:9A:00:00:0A:01"},
            "mac-address 02:9a:00:00:0a:01",
        ),
        (
            PROFILE,
            {"ipv4.addresses": "10.1.1.1/8, 192.168.101.10/24"},
            "ipv4.addresses 192.168.101.10/24 (a rail subnet)",
        ),
        (PROFILE, {"connection.interface-name": "enP7s7", "ipv4.addresses": "10.0.0.2/8"}, None),
        # netplan's own profiles follow the netplan files; the file scan handles those.
        (
            {
                **PROFILE,
                "filename": "/run/NetworkManager/system-connections/netplan-cx7.nmconnection",
            },
            {"connection.interface-name": "enp1s0f0np0"},
            None,
        ),
        ({**PROFILE, "type": "wifi"}, {"connection.interface-name": "enp1s0f0np0"}, None),
    ],
)
def test_profile_reason(
    profile: dict[str, str], details: dict[str, str], expected: str | None
) -> None:
    assert profile_reason(profile, details, RAILS, SUBNETS) == expected


def test_profile_pinned_to_an_old_mac_is_caught_after_the_swap() -> None:
    """ "permanent MAC address doesn't match": rail name plus the MAC of the NIC that is gone."""
    pinned = {
        "connection.interface-name": "enp1s0f0np0",
        "802-3-ethernet.mac-address": RAIL0.mac.upper(),
        "ipv4.addresses": "",
    }
    assert profile_reason(PROFILE, pinned, SWAPPED, SUBNETS) == "interface-name enp1s0f0np0"
    by_address = {"802-3-ethernet.mac-address": RAIL1.mac, "ipv4.addresses": "192.168.101.10/24"}
    assert profile_reason(PROFILE, by_address, SWAPPED, SUBNETS) == (
        "ipv4.addresses 192.168.101.10/24 (a rail subnet)"
    )
    # Before the swap the MAC alone identifies the rail.
    mac_only = {"802-3-ethernet.mac-address": RAIL1.mac}
    assert profile_reason(PROFILE, mac_only, RAILS, SUBNETS) == f"mac-address {RAIL1.mac}"
