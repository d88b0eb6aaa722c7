# SPDX-License-Identifier: Apache-2.0
"""The no-fragment jumbo ping over every rail to every peer: one probe for every stage.

Pure Python (standard library only), shared by the ``gx10.cluster.rail_ping`` module (which runs
the pings on the node) and unit tested. The rail_network role's verify step and the fabric role's
link probes both use it, and the fabric judgments (``fabric_rules.link_checks``) read its results.

A *rail* is one entry of ``gx10_plan.hosts[host].rails``: ``{name, netdev, address, peers: {host:
address}, ping_payload}``. The payload is the plan's MTU - 28 (the IPv4 and ICMP headers), so one
echo request fills one frame exactly; with ``-M do`` a smaller MTU anywhere on the path fails
instead of fragmenting.

A *target* is one (rail, peer) pair; a *result* is a target with ``ok``, ``rc``, ``attempts`` and
``message`` (ping's own last words, or ``no answer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# What ping is asked: -M do (never fragment), -s payload, -c count, -W seconds per reply, -I netdev.
DEFAULT_COUNT = 1
DEFAULT_REPLY_TIMEOUT = 2

# (argv) -> (rc, stdout, stderr)
Runner = Callable[[list[str]], tuple[int, str, str]]


class RailPingError(ValueError):
    """A rail entry that does not say what to ping."""


def targets(
    rails: Sequence[Mapping[str, Any]], peers: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every (rail, peer) pair of this node, rails in plan order, peers in the rail's order.

    ``peers`` limits the pairs to those hosts (None: every peer of the rail). Raises
    RailPingError naming the rail and the key when an entry is incomplete.
    """
    found: list[dict[str, Any]] = []
    for position, rail in enumerate(rails):
        label = rail.get("name") or f"rails[{position}]"
        for key in ("netdev", "address", "peers", "ping_payload"):
            if rail.get(key) in (None, ""):
                raise RailPingError(f"{label}: {key} is missing (a rail of gx10_plan.hosts)")
        payload = rail["ping_payload"]
        if isinstance(payload, bool) or not str(payload).isdigit() or int(payload) < 1:
            raise RailPingError(f"{label}: ping_payload {payload!r} is not a positive byte count")
        if not isinstance(rail["peers"], Mapping):
            raise RailPingError(f"{label}: peers {rail['peers']!r} is not a mapping host: address")
        for peer, address in rail["peers"].items():
            if peers is not None and peer not in peers:
                continue
            found.append(
                {
                    "rail": str(label),
                    "netdev": str(rail["netdev"]),
                    "address": str(rail["address"]).split("/")[0],
                    "peer": str(peer),
                    "peer_address": str(address).split("/")[0],
                    "payload": int(payload),
                }
            )
    return found


def ping_argv(
    target: Mapping[str, Any],
    count: int = DEFAULT_COUNT,
    reply_timeout: int = DEFAULT_REPLY_TIMEOUT,
    executable: str = "ping",
) -> list[str]:
    """The iputils ping command line for one target."""
    return [
        executable,
        "-M",
        "do",
        "-s",
        str(target["payload"]),
        "-c",
        str(count),
        "-W",
        str(reply_timeout),
        "-I",
        target["netdev"],
        target["peer_address"],
    ]


def said(rc: int, stdout: str, stderr: str) -> str:
    """What ping said last: its error, else its last output line (the rtt summary when it was
    answered), else ``no answer`` for a failure."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return stderr.strip() or (lines[-1] if lines else "") or ("no answer" if rc else "")


def ping_all(
    found: Sequence[Mapping[str, Any]],
    run: Runner,
    *,
    count: int = DEFAULT_COUNT,
    reply_timeout: int = DEFAULT_REPLY_TIMEOUT,
    settle: float = 0.0,
    executable: str = "ping",
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> list[dict[str, Any]]:
    """Ping every target; retry the unanswered ones, once a second, until ``settle`` seconds.

    Links configured asynchronously (networkd, NetworkManager) may answer only after a moment, so
    a converge waits (bounded) while a read-only probe (settle 0) judges the first answer.
    """
    now = clock or time.monotonic
    pause = sleep or time.sleep
    deadline = now() + max(0.0, float(settle))
    results = [
        {**target, "ok": False, "rc": None, "attempts": 0, "message": ""} for target in found
    ]
    while True:
        for result in results:
            if result["ok"]:
                continue
            rc, stdout, stderr = run(ping_argv(result, count, reply_timeout, executable))
            result.update(rc=rc, ok=rc == 0, attempts=result["attempts"] + 1)
            result["message"] = said(rc, stdout, stderr)
        if all(result["ok"] for result in results) or now() >= deadline:
            return results
        pause(1.0)


def unanswered(host: str, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per unanswered target: which rail, from where to where, and what ping said."""
    return [
        f"{r['rail']} from {host} {r['netdev']} {r['address']} to {r['peer']} "
        f"{r['peer_address']}: {r['message'] or 'no answer'}"
        for r in results
        if not r["ok"]
    ]
