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
        "pcie_width": None,
        "pcie_speed": None,
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


def _pci_function(root: Path, netdev: str, address: str, width: str, speed: str) -> None:
    """A netdev whose `device` links to its PCI function, as on a real node."""
    function = root / "devices" / "pci0000:00" / address
    function.mkdir(parents=True)
    (function / "current_link_width").write_text(width + "\n")
    (function / "current_link_speed").write_text(speed + "\n")
    (function / "max_link_width").write_text("4\n")
    _netdev(root, netdev, operstate="up", carrier="1", mtu="9000")
    (root / "class" / "net" / netdev / "device").symlink_to(function)


def test_netdev_pcie_link_of_both_twins(tmp_path: Path) -> None:
    # GB10: each CX-7 twin is its own PCI function at Gen5 x4; early BIOS trains the second x2.
    _pci_function(tmp_path, "enp1s0f0np0", "0000:01:00.0", "4", "32.0 GT/s PCIe")
    _pci_function(tmp_path, "enP2p1s0f0np0", "0002:01:00.0", "2", "32.0 GT/s PCIe")
    first = netdev_info.netdev_state(str(tmp_path), "enp1s0f0np0")
    second = netdev_info.netdev_state(str(tmp_path), "enP2p1s0f0np0")
    assert (first["pcie_width"], first["pcie_speed"]) == (4, "32.0 GT/s PCIe")
    assert (second["pcie_width"], second["pcie_speed"]) == (2, "32.0 GT/s PCIe")


def test_netdev_pcie_link_unknown(tmp_path: Path) -> None:
    # A link the kernel cannot read prints width 0 and speed "Unknown"; older kernels print
    # the speed without the "PCIe" suffix.
    _pci_function(tmp_path, "enp1s0f0np0", "0000:01:00.0", "0", "Unknown")
    _pci_function(tmp_path, "enP2p1s0f0np0", "0002:01:00.0", "4", "16 GT/s")
    state = netdev_info.netdev_state(str(tmp_path), "enp1s0f0np0")
    assert (state["pcie_width"], state["pcie_speed"]) == (None, None)
    assert netdev_info.netdev_state(str(tmp_path), "enP2p1s0f0np0")["pcie_speed"] == "16 GT/s"


def test_netdev_without_pci_device(tmp_path: Path) -> None:
    # veth (the lab's rails) has no `device`; the RDMA simulator's `device` has no link files.
    _netdev(tmp_path, "enp1s0f0np0", operstate="up", carrier="1", mtu="9000")
    (tmp_path / "class" / "net" / "enp1s0f0np0" / "device" / "infiniband" / "rocep1s0f0").mkdir(
        parents=True
    )
    state = netdev_info.netdev_state(str(tmp_path), "enp1s0f0np0")
    assert (state["pcie_width"], state["pcie_speed"]) == (None, None)


def test_missing_netdev(tmp_path: Path) -> None:
    assert netdev_info.netdev_state(str(tmp_path), "enp9s0") == {"present": False}


def test_disk_space_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    target = tmp_path / "srv" / "models" / "ckpt"
    result = disk_space.space(str(target))
    assert result["probed"] == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert result["total_bytes"] == st.f_blocks * st.f_frsize
    assert 0 < result["free_bytes"] <= result["total_bytes"]
    # The filesystem's identity, so two paths on one filesystem are counted together.
    assert result["device"] == os.stat(tmp_path).st_dev
    assert disk_space.space("/proc/self")["device"] != result["device"]


@pytest.mark.parametrize("path", ["/", "/nonexistent/deeper/still"])
def test_nearest_existing_stops_at_root(path: str) -> None:
    assert disk_space.nearest_existing(path) == "/"
