#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.rail_ping: no-fragment full-frame pings over every rail (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rail_ping
short_description: Ping every peer over every rail with a full frame that must not be fragmented
description:
  - For each rail of this node and each of its peers, runs
    C(ping -M do -s <ping_payload> -c <count> -W <reply_timeout> -I <netdev> <peer address>).
    The payload is the plan's MTU - 28, so one echo request fills one frame exactly and a smaller
    MTU anywhere on the path fails instead of fragmenting.
  - With I(settle), unanswered pairs are tried again once a second until that many seconds have
    passed (links that networkd or NetworkManager configure asynchronously).
  - Never fails for an unanswered ping; it returns one result per pair and the caller judges them
    (the rail_network role's verify step, the fabric role's link checks).
  - Read-only; supports check mode.
options:
  rails:
    description: >-
      This node's rails as the cluster plan gives them (C(gx10_plan.hosts[host].rails)): C(name),
      C(netdev), C(address), C(peers) (host to address) and C(ping_payload).
    type: list
    elements: dict
    required: true
  peers:
    description: Ping only these peer hosts (default every peer of each rail).
    type: list
    elements: str
  count:
    description: Echo requests per attempt; every one must be answered.
    type: int
    default: 1
  reply_timeout:
    description: Seconds ping waits for each reply (C(-W)).
    type: int
    default: 2
  settle:
    description: Seconds to keep retrying unanswered pairs, once a second (0 judges the first try).
    type: int
    default: 0
  executable:
    description: The iputils ping to run.
    type: str
    default: ping
  host:
    description: This node's name in the C(unanswered) lines (the roles pass C(inventory_hostname)).
    type: str
    default: this node
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Ping every peer over every rail
  gx10.cluster.rail_ping:
    rails: "{{ gx10_plan.hosts[inventory_hostname].rails }}"
    settle: 30
  register: rail_ping
"""

RETURN = r"""
results:
  description: >-
    One per rail and peer, in plan order: C(rail), C(netdev), C(address), C(peer),
    C(peer_address), C(payload), C(ok), C(rc), C(attempts) and C(message) (what a failed ping
    said: its error, its last output line, or C(no answer)).
  returned: always
  type: list
  elements: dict
unanswered:
  description: One line per unanswered pair, naming the rail, both ends and what ping said.
  returned: always
  type: list
  elements: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.rail_ping import (
    RailPingError,
    ping_all,
    targets,
    unanswered,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rails": {"type": "list", "elements": "dict", "required": True},
            "peers": {"type": "list", "elements": "str"},
            "count": {"type": "int", "default": 1},
            "reply_timeout": {"type": "int", "default": 2},
            "settle": {"type": "int", "default": 0},
            "executable": {"type": "str", "default": "ping"},
            "host": {"type": "str", "default": "this node"},
        },
        supports_check_mode=True,
    )
    params = module.params
    for key in ("count", "reply_timeout"):
        if params[key] < 1:
            module.fail_json(msg=f"{key} must be at least 1, got {params[key]}")
    if params["settle"] < 0:
        module.fail_json(msg=f"settle must be 0 or more seconds, got {params['settle']}")
    try:
        found = targets(params["rails"], params["peers"])
    except RailPingError as exc:
        module.fail_json(msg=str(exc))
    executable = module.get_bin_path(params["executable"], required=True)

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, stdout, stderr = module.run_command(argv)
        return int(rc), str(stdout), str(stderr)

    results: list[dict[str, Any]] = ping_all(
        found,
        run,
        count=params["count"],
        reply_timeout=params["reply_timeout"],
        settle=params["settle"],
        executable=executable,
    )
    module.exit_json(
        changed=False,
        results=results,
        unanswered=unanswered(params["host"], results),
    )


if __name__ == "__main__":
    main()
