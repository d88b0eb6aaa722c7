# SPDX-License-Identifier: Apache-2.0
"""netdev_info and disk_space over fake sysfs trees and real directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gx10.cluster.plugins.modules import disk_space, netdev_info


def _netdev(root: Path, name: str, **files: str) -> None:
    base = root / "class" / "net" / name
    base.mkdir(parents=True)
    for key, value in files.items():
        (base / key).write_text(value + "\n")


def test_netdev_up_with_carrier(tmp_path: Path) -> None:
    _netdev(
        tmp_path,
        "enp1s0f0np0",
        operstate="up",
        carrier="1",
        mtu="9000",
        address="02:9a:00:00:0a:00",
        speed="200000",
    )
    assert netdev_info.netdev_state(str(tmp_path), "enp1s0f0np0") == {
        "present": True,
        "operstate": "up",
        "carrier": True,
        "mtu": 9000,
        "address": "02:9a:00:00:0a:00",
        "speed_mbps": 200000,
    }


def test_netdev_without_carrier_and_unknown_speed(tmp_path: Path) -> None:
    # veth and unplugged links report speed -1; a peer that is down leaves carrier 0
    # while operstate reads lowerlayerdown (which the `active` fact counts as active).
    _netdev(tmp_path, "enP2p1s0f0np0", operstate="lowerlayerdown", carrier="0", speed="-1")
    state = netdev_info.netdev_state(str(tmp_path), "enP2p1s0f0np0")
    assert state["carrier"] is False
    assert state["speed_mbps"] is None


def test_netdev_admin_down_has_unknown_carrier(tmp_path: Path) -> None:
    # The kernel answers EINVAL for carrier while a link is administratively down; a fake
    # sysfs cannot raise that, so a directory named carrier stands in for the failing read.
    _netdev(tmp_path, "enp1s0f0np0", operstate="down", mtu="1500")
    (tmp_path / "class" / "net" / "enp1s0f0np0" / "carrier").mkdir()
    state = netdev_info.netdev_state(str(tmp_path), "enp1s0f0np0")
    assert state["carrier"] is None
    assert state["mtu"] == 1500


def test_missing_netdev(tmp_path: Path) -> None:
    assert netdev_info.netdev_state(str(tmp_path), "enp9s0") == {"present": False}


def test_disk_space_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    target = tmp_path / "srv" / "models" / "ckpt"
    result = disk_space.space(str(target))
    assert result["probed"] == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert result["total_bytes"] == st.f_blocks * st.f_frsize
    assert 0 < result["free_bytes"] <= result["total_bytes"]


@pytest.mark.parametrize("path", ["/", "/nonexistent/deeper/still"])
def test_nearest_existing_stops_at_root(path: str) -> None:
    assert disk_space.nearest_existing(path) == "/"
