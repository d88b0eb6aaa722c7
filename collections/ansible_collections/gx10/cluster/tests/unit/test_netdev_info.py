# SPDX-License-Identifier: Apache-2.0
"""Unit tests for the netdev_info module: sysfs reading, addresses and expectations."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gx10.cluster.plugins.modules.netdev_info import (
    ip_addresses,
    mismatches,
    netdev_state,
)

IP_JSON = json.dumps(
    [
        {
            "ifindex": 5,
            "ifname": "enp1s0f0np0",
            "mtu": 9000,
            "addr_info": [
                {"family": "inet", "local": "192.168.100.10", "prefixlen": 24},
                {"family": "inet6", "local": "fe80::9a:ff:fe00:a00", "prefixlen": 64},
            ],
        },
        {"ifindex": 4, "ifname": "enP2p1s0f0np0", "mtu": 1500, "addr_info": []},
    ]
)


def fake_netdev(root: Path, name: str, **files: str) -> None:
    base = root / "class" / "net" / name
    base.mkdir(parents=True)
    for key, value in files.items():
        (base / key).write_text(value + "\n")


def test_netdev_state_from_sysfs(tmp_path: Path) -> None:
    fake_netdev(tmp_path, "enp1s0f0np0", carrier="1", mtu="9000", address="02:9a:00:00:0a:00")
    fake_netdev(tmp_path, "down0", operstate="down", mtu="1500")

    assert netdev_state(str(tmp_path), "enp1s0f0np0")["carrier"] is True
    assert netdev_state(str(tmp_path), "enp1s0f0np0")["mtu"] == 9000
    # carrier is unreadable while the link is administratively down: unknown, not False.
    assert netdev_state(str(tmp_path), "down0")["carrier"] is None
    assert netdev_state(str(tmp_path), "nope") == {"present": False}


def test_ip_addresses() -> None:
    assert ip_addresses(IP_JSON) == {
        "enp1s0f0np0": ["192.168.100.10/24", "fe80::9a:ff:fe00:a00/64"],
        "enP2p1s0f0np0": [],
    }
    assert ip_addresses("") == {}


def states() -> dict[str, dict[str, object]]:
    return {
        "enp1s0f0np0": {
            "present": True,
            "carrier": True,
            "mtu": 9000,
            "addresses": ["192.168.100.10/24", "fe80::9a:ff:fe00:a00/64"],
        },
        "enP2p1s0f0np0": {
            "present": True,
            "carrier": False,
            "mtu": 1500,
            "addresses": ["169.254.7.7/16"],
        },
        "gone0": {"present": False},
    }


def test_no_expectations_no_mismatches() -> None:
    assert mismatches({k: v for k, v in states().items() if v["present"]}) == []


def test_mismatches_name_netdev_value_and_expectation() -> None:
    found = mismatches(
        states(),
        mtu=9000,
        addresses={"enp1s0f0np0": "192.168.100.10/24", "enP2p1s0f0np0": ["192.168.101.10/24"]},
        carrier=True,
        no_link_local=True,
    )
    assert found == [
        "enp1s0f0np0: link-local address fe80::9a:ff:fe00:a00/64",
        "enP2p1s0f0np0: MTU 1500, expected 9000",
        "enP2p1s0f0np0: carrier False, expected True",
        "enP2p1s0f0np0: no address 192.168.101.10/24 (has 169.254.7.7/16)",
        "enP2p1s0f0np0: link-local address 169.254.7.7/16",
        "gone0: missing",
    ]


def test_prefix_matters() -> None:
    found = mismatches(
        {"enp1s0f0np0": states()["enp1s0f0np0"]}, addresses={"enp1s0f0np0": "192.168.100.10/16"}
    )
    assert found == [
        "enp1s0f0np0: no address 192.168.100.10/16 (has 192.168.100.10/24, fe80::9a:ff:fe00:a00/64)"
    ]
