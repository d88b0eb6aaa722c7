#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.netdev_info: what sysfs says about a node's netdevs (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: netdev_info
short_description: Read link state, carrier, MTU, MAC and speed of netdevs from sysfs
description:
  - Reads C(<sysfs_root>/class/net/<netdev>/) for each netdev. Unlike the C(active) fact (which
    is true for any operstate but C(down), including C(lowerlayerdown)), C(carrier) is the
    kernel's own carrier flag, and is C(null) when the link is administratively down.
  - Read-only; supports check mode.
options:
  netdevs:
    description: The netdev names to report on.
    type: list
    elements: str
    required: true
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
  description: Per netdev, C(present), C(operstate), C(carrier), C(mtu), C(address), C(speed_mbps).
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
"""

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


def netdev_state(sysfs_root: str, netdev: str) -> dict[str, Any]:
    base = os.path.join(sysfs_root, "class", "net", netdev)
    if not os.path.isdir(base):
        return {"present": False}
    carrier = _read(os.path.join(base, "carrier"))
    speed = _int(_read(os.path.join(base, "speed")))
    return {
        "present": True,
        "operstate": _read(os.path.join(base, "operstate")),
        "carrier": None if carrier is None else carrier == "1",
        "mtu": _int(_read(os.path.join(base, "mtu"))),
        "address": _read(os.path.join(base, "address")),
        # -1 (unknown) for links without a negotiated speed, e.g. veth or down links.
        "speed_mbps": speed if speed is not None and speed >= 0 else None,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "netdevs": {"type": "list", "elements": "str", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    states = {dev: netdev_state(root, dev) for dev in module.params["netdevs"]}
    module.exit_json(
        changed=False,
        netdevs=states,
        missing=[d for d, s in states.items() if not s["present"]],
        without_carrier=[d for d, s in states.items() if s["present"] and s["carrier"] is not True],
    )


if __name__ == "__main__":
    main()
