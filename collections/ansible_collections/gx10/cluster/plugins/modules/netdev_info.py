#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.netdev_info: what sysfs says about a node's netdevs (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: netdev_info
short_description: Read link state, carrier, MTU, MAC, speed and PCIe link of netdevs from sysfs
description:
  - Reads C(<sysfs_root>/class/net/<netdev>/) for each netdev. Unlike the C(active) fact (which
    is true for any operstate but C(down), including C(lowerlayerdown)), C(carrier) is the
    kernel's own carrier flag, and is C(null) when the link is administratively down.
  - Also reads the negotiated PCIe link of the netdev's device (C(device/current_link_width) and
    C(device/current_link_speed)), C(null) where sysfs has none (veth, virtual functions).
  - With I(addresses) (or any I(expect_addresses) or I(expect_no_link_local)), also lists each
    netdev's IP addresses (C(ip -j addr show)), which sysfs does not hold.
  - With the C(expect_*) options, compares what it read with what is expected and returns one
    line per difference in C(mismatches) (it still never fails for a mismatch).
  - Read-only; supports check mode.
options:
  netdevs:
    description: The netdev names to report on.
    type: list
    elements: str
    required: true
  addresses:
    description: Also return the IPv4 and IPv6 addresses of each present netdev, as C(addr/prefix).
    type: bool
    default: false
  expect_mtu:
    description: The MTU every netdev should have.
    type: int
  expect_addresses:
    description: Per netdev, the address (C(addr/prefix)) or list of addresses it should have.
    type: dict
  expect_carrier:
    description: Whether every netdev should have carrier.
    type: bool
  expect_no_link_local:
    description: Report link-local addresses (C(169.254.0.0/16), C(fe80::/10)) on any netdev.
    type: bool
    default: false
  sysfs_root:
    description: Where sysfs is mounted (tests point this at a fake tree).
    type: path
    default: /sys
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Read the rails
  gx10.cluster.netdev_info:
    netdevs: [enp1s0f0np0, enP2p1s0f0np0]
  register: rails
"""

RETURN = r"""
netdevs:
  description: >-
    Per netdev, C(present), C(operstate), C(carrier), C(mtu), C(address) (the MAC),
    C(speed_mbps), C(pcie_width) (lanes, for example C(4)) and C(pcie_speed) (as the kernel
    prints it, for example C(32.0 GT/s PCIe)), and with I(addresses) C(addresses) (list of
    C(addr/prefix)).
  returned: always
  type: dict
missing:
  description: The netdevs that do not exist.
  returned: always
  type: list
  elements: str
without_carrier:
  description: The present netdevs whose carrier is not 1 (down, unplugged or admin down).
  returned: always
  type: list
  elements: str
mismatches:
  description: One line per difference from the C(expect_*) options (empty without them).
  returned: always
  type: list
  elements: str
"""

import ipaddress
import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        # carrier and speed raise EINVAL while the link is administratively down.
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def pcie_link(base: str) -> tuple[int | None, str | None]:
    """(width, speed) of the PCIe link of the netdev at ``base`` (its ``device`` function).

    None where sysfs has no such file (veth, virtual functions) or the value is unknown: the
    kernel prints a width of 0 and a speed of "Unknown" for a link it cannot read.
    """
    device = os.path.join(base, "device")
    width = _int(_read(os.path.join(device, "current_link_width")))
    speed = _read(os.path.join(device, "current_link_speed"))
    if speed is not None and (not speed or speed.lower().startswith("unknown")):
        speed = None
    return (width if width is not None and width > 0 else None), speed


def netdev_state(sysfs_root: str, netdev: str) -> dict[str, Any]:
    base = os.path.join(sysfs_root, "class", "net", netdev)
    if not os.path.isdir(base):
        return {"present": False}
    carrier = _read(os.path.join(base, "carrier"))
    speed = _int(_read(os.path.join(base, "speed")))
    pcie_width, pcie_speed = pcie_link(base)
    return {
        "present": True,
        "operstate": _read(os.path.join(base, "operstate")),
        "carrier": None if carrier is None else carrier == "1",
        "mtu": _int(_read(os.path.join(base, "mtu"))),
        "address": _read(os.path.join(base, "address")),
        # -1 (unknown) for links without a negotiated speed, e.g. veth or down links.
        "speed_mbps": speed if speed is not None and speed >= 0 else None,
        "pcie_width": pcie_width,
        "pcie_speed": pcie_speed,
    }


def ip_addresses(ip_json: str) -> dict[str, list[str]]:
    """``ip -j addr show`` output -> {netdev: ["addr/prefix", ...]}."""
    result: dict[str, list[str]] = {}
    for link in json.loads(ip_json or "[]"):
        result[link["ifname"]] = [
            f"{info['local']}/{info['prefixlen']}"
            for info in link.get("addr_info", [])
            if "local" in info and "prefixlen" in info
        ]
    return result


def _link_local(cidr: str) -> bool:
    try:
        return ipaddress.ip_interface(cidr).ip.is_link_local
    except ValueError:
        return False


def mismatches(
    states: dict[str, dict[str, Any]],
    mtu: int | None = None,
    addresses: dict[str, Any] | None = None,
    carrier: bool | None = None,
    no_link_local: bool = False,
) -> list[str]:
    """One line per way the netdevs differ from what is expected."""
    found: list[str] = []
    for dev, state in states.items():
        if not state["present"]:
            found.append(f"{dev}: missing")
            continue
        if mtu is not None and state["mtu"] != mtu:
            found.append(f"{dev}: MTU {state['mtu']}, expected {mtu}")
        if carrier is not None and state["carrier"] is not carrier:
            found.append(f"{dev}: carrier {state['carrier']}, expected {carrier}")
        live = state.get("addresses", [])
        wanted = (addresses or {}).get(dev, [])
        for cidr in [wanted] if isinstance(wanted, str) else wanted:
            if cidr not in live:
                found.append(f"{dev}: no address {cidr} (has {', '.join(live) or 'none'})")
        if no_link_local:
            found.extend(f"{dev}: link-local address {cidr}" for cidr in live if _link_local(cidr))
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "netdevs": {"type": "list", "elements": "str", "required": True},
            "addresses": {"type": "bool", "default": False},
            "expect_mtu": {"type": "int"},
            "expect_addresses": {"type": "dict"},
            "expect_carrier": {"type": "bool"},
            "expect_no_link_local": {"type": "bool", "default": False},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    states = {dev: netdev_state(root, dev) for dev in module.params["netdevs"]}
    params = module.params
    if params["addresses"] or params["expect_addresses"] or params["expect_no_link_local"]:
        ip = module.get_bin_path("ip", required=True)
        rc, out, err = module.run_command([ip, "-j", "addr", "show"])
        if rc != 0:
            module.fail_json(msg=f"`ip -j addr show` failed (rc {rc}): {err.strip()}")
        found = ip_addresses(out)
        for dev, state in states.items():
            if state["present"]:
                state["addresses"] = found.get(dev, [])
    module.exit_json(
        changed=False,
        netdevs=states,
        missing=[d for d, s in states.items() if not s["present"]],
        without_carrier=[d for d, s in states.items() if s["present"] and s["carrier"] is not True],
        mismatches=mismatches(
            states,
            params["expect_mtu"],
            params["expect_addresses"],
            params["expect_carrier"],
            params["expect_no_link_local"],
        ),
    )


if __name__ == "__main__":
    main()
