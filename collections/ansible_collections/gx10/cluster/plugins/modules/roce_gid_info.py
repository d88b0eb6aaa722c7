#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.roce_gid_info: the NCCL GID index of a node's rails (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_gid_info
short_description: Resolve the RoCE v2 GID index of each rail from the node's own GID tables
description:
  - For each rail, finds its RDMA device (C(<sysfs_root>/class/net/<netdev>/device/infiniband/),
    or I(rdma_dev)) and reads the device's GID table
    (C(<sysfs_root>/class/infiniband/<dev>/ports/<port>/gids), C(gid_attrs/types),
    C(gid_attrs/ndevs)), then returns the index of the RoCE v2 entry whose GID is
    C(::ffff:<the rail's IPv4>), with the whole table for reports.
  - Indices move as addresses come and go, so two nodes can differ (3 on one, 5 on the other).
    Run it on every node and use each node's own result; never pin one literal for all nodes.
  - In C(pinned) mode the node's rails must agree, because one C(NCCL_IB_GID_INDEX) applies to
    every device in C(NCCL_IB_HCA); if they disagree the module fails with both tables and the fix.
    In C(auto) mode it only checks that every rail has its RoCE v2 IPv4 GID and returns
    C(gid_index=null) (leave C(NCCL_IB_GID_INDEX) unset).
  - Warns about 169.254 (IPv4 link-local) entries on a rail and, in C(auto) mode, about another
    RoCE v2 IPv4 entry in front of the rail's (NCCL's own choice takes the first one).
  - Read-only; supports check mode.
options:
  rails:
    description: The node's rails.
    type: list
    elements: dict
    required: true
    suboptions:
      netdev:
        description: The rail netdev, for example C(enp1s0f0np0).
        type: str
        required: true
      address:
        description: >-
          This node's IPv4 address on the rail, bare or with a prefix (C(192.168.100.10/24)).
        type: str
        required: true
      rdma_dev:
        description: The RDMA device, for example C(rocep1s0f0); found from sysfs when omitted.
        type: str
  mode:
    description: C(pinned) (one index per node, rails must agree) or C(auto) (NCCL chooses).
    type: str
    choices: [pinned, auto]
    default: pinned
  port:
    description: The RDMA port number.
    type: int
    default: 1
  sysfs_root:
    description: Where sysfs is mounted (tests and the lab's simulator point this at a fake tree).
    type: path
    default: /sys
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Resolve this node's GID index
  gx10.cluster.roce_gid_info:
    rails:
      - {netdev: enp1s0f0np0, address: 192.168.100.10}
      - {netdev: enP2p1s0f0np0, address: 192.168.101.10}
  register: gid
"""

RETURN = r"""
gid_index:
  description: The node's RoCE v2 GID index in C(pinned) mode; null in C(auto) mode.
  returned: success
  type: int
  sample: 3
mode:
  description: The mode used.
  returned: success
  type: str
rails:
  description: >-
    Per rail, C(netdev), C(rdma_dev), C(address), C(gid_index) and C(table) (the populated GID
    slots: C(index), C(gid), C(ipv4), C(type), C(ndev), C(link_local), C(ipv4_link_local)).
    Also returned on failure, as far as it was read.
  returned: always
  type: list
  elements: dict
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.roce_gid import (
    MODES,
    RoceGidError,
    resolve_node,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rails": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "netdev": {"type": "str", "required": True},
                    "address": {"type": "str", "required": True},
                    "rdma_dev": {"type": "str"},
                },
            },
            "mode": {"type": "str", "choices": list(MODES), "default": "pinned"},
            "port": {"type": "int", "default": 1},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result: dict[str, Any] = resolve_node(
            params["sysfs_root"], params["rails"], params["mode"], params["port"]
        )
    except RoceGidError as exc:
        module.fail_json(msg=str(exc), rails=exc.result.get("rails", []))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
