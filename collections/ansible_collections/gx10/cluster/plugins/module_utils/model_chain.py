# SPDX-License-Identifier: Apache-2.0
"""The model sync chain: head, worker 1, worker 2, ... in rank order, each node fetching the
checkpoint from the one before it over the first rail.

A star (every worker fetching from the head) makes the head send the checkpoint N-1 times; in a
chain each node sends it at most once, to its successor, and the files flow down the chain
pipelined (a node serves a file as soon as it verified it). Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class ChainError(ValueError):
    """The plan does not describe a chain (no nodes, a duplicate, a node without a rail-0
    address)."""


def chain_order(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The node names by rank (the head is rank 0)."""
    names = [str(n["name"]) for n in sorted(nodes, key=lambda n: int(n["rank"]))]
    if not names:
        raise ChainError("the plan lists no nodes")
    if len(set(names)) != len(names):
        raise ChainError(f"a node is listed twice in the plan: {names}")
    return names


def chain_links(
    nodes: Sequence[Mapping[str, Any]], addresses: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Per node: `upstream` (the node it fetches from, None for the head), `upstream_address`
    (that node's rail-0 address), `downstream` (the node it serves, None for the last),
    `downstream_address`, and `position` (0 for the head)."""
    order = chain_order(nodes)
    missing = [name for name in order if not addresses.get(name)]
    if missing:
        raise ChainError(f"no rail-0 address in the plan for {', '.join(missing)}")
    links: dict[str, dict[str, Any]] = {}
    for position, name in enumerate(order):
        upstream = order[position - 1] if position else None
        downstream = order[position + 1] if position + 1 < len(order) else None
        links[name] = {
            "position": position,
            "upstream": upstream,
            "upstream_address": addresses[upstream] if upstream else None,
            "downstream": downstream,
            "downstream_address": addresses[downstream] if downstream else None,
        }
    return links


def plan_links(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """chain_links of a cluster plan (gx10_plan): its nodes, and rail 0's addresses."""
    rails = plan.get("rails") or []
    if not rails:
        raise ChainError("the plan has no rails: the chain runs over rail 0")
    return chain_links(plan.get("nodes") or [], rails[0].get("addresses") or {})
