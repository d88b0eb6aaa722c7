# SPDX-License-Identifier: Apache-2.0
"""Bandwidth over node pairs: which pairs are measured, in which rounds, and their judgments.

Pure Python (standard library and fabric_rules only), no Ansible: the ``gx10.cluster`` filters
``fabric_pair_*`` (plugins/filter/fabric.py) expose these to the fabric role.

With two nodes (``gx10_topology: direct``) the schedule is one round of one pair, the head and
its worker, and the runs and checks are exactly the head -> worker ones of before. With N nodes
on a switch every unordered pair is measured: a round-robin schedule (the circle method) gives
N - 1 rounds of N / 2 disjoint pairs (N rounds with one node idle each when N is odd). The pairs
of a round share no node, so they run at the same time and the time is counted in rounds. A
budget cuts whole rounds from the end; it never cuts below the rounds that cover every node (one
round when N is even, two when it is odd), and says which pairs were skipped.

In a pair the node earlier in ``[head, *workers]`` is the client (as the head is today), the
other the server (``worker``, the key fabric_rules' measurements and checks use for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gx10.cluster.plugins.module_utils import fabric_rules
from ansible_collections.gx10.cluster.plugins.module_utils.fabric_rules import (
    DEGRADED_BAND_GBPS,
    MIN_TOTAL_GBPS,
    PER_RAIL_MIN_GBPS,
    Check,
    Rail,
)

# What one run costs beyond the measurement itself (start and wait for the servers, start and
# collect the clients, stop the servers): an estimate for the budget, from the lab's runs.
RUN_OVERHEAD_SECONDS = 5

Pair = list[str]


def round_robin(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every unordered pair of ``nodes`` once, in rounds of disjoint pairs (the circle method:
    the first node stays, the others rotate). Each pair is ordered as ``nodes`` is."""
    order = {node: index for index, node in enumerate(nodes)}
    ring: list[str | None] = list(nodes)
    if len(ring) % 2:
        ring.append(None)  # the idle slot: its partner sits this round out
    size = len(ring)
    rounds: list[list[Pair]] = []
    for _ in range(size - 1):
        pairs: list[Pair] = []
        for index in range(size // 2):
            one, other = ring[index], ring[size - 1 - index]
            if one is None or other is None:
                continue
            pairs.append(sorted([one, other], key=order.__getitem__))
        pairs.sort(key=lambda pair: (order[pair[0]], order[pair[1]]))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [pairs for pairs in rounds if pairs]


def covering_rounds(node_count: int) -> int:
    """The fewest rounds of the schedule that measure every node at least once."""
    if node_count < 2:
        return 0
    return 1 if node_count % 2 == 0 else 2


def pair_schedule(nodes: Sequence[str], max_rounds: int | None = None) -> dict[str, Any]:
    """The pairs to measure: ``{rounds, pairs, skipped, total_pairs, note}``.

    ``max_rounds`` None: every round. Otherwise whole rounds from the start up to it, but never
    fewer than cover every node (``note`` says so when the bound was raised for that)."""
    rounds = round_robin(nodes)
    keep = len(rounds)
    note = None
    if max_rounds is not None:
        floor = covering_rounds(len(nodes))
        keep = min(keep, max(int(max_rounds), floor))
        if int(max_rounds) < floor <= len(rounds):
            note = (
                f"the bound allows {int(max_rounds)} round(s); {floor} are measured so that every "
                "node is in at least one pair"
            )
    kept, cut = rounds[:keep], rounds[keep:]
    return {
        "rounds": kept,
        "pairs": [pair for pairs in kept for pair in pairs],
        "skipped": [pair for pairs in cut for pair in pairs],
        "total_pairs": sum(len(pairs) for pairs in rounds),
        "note": note,
    }


def runs_per_round(rail_count: int, tool: str, iperf3_reverse: bool) -> int:
    """Runs in one round: each rail alone, then all rails at once (with more than one rail);
    each also reversed with iperf3 and ``iperf3_reverse``."""
    directions = 2 if tool == "iperf3" and iperf3_reverse else 1
    return (int(rail_count) + (1 if rail_count > 1 else 0)) * directions


def rounds_within(
    budget_seconds: int, seconds: int, rail_count: int, tool: str, iperf3_reverse: bool
) -> int | None:
    """How many rounds fit in ``budget_seconds`` (None: no budget, for 0 or less)."""
    if int(budget_seconds) <= 0:
        return None
    per_round = runs_per_round(rail_count, tool, iperf3_reverse) * (
        int(seconds) + RUN_OVERHEAD_SECONDS
    )
    return int(budget_seconds) // per_round


# --- runs and measurements over pairs -------------------------------------------------------


def _rail_of(rails: Sequence[Rail], netdev: str) -> Rail:
    return next(rail for rail in rails if rail["netdev"] == netdev)


def pair_runs(
    rounds: Sequence[Sequence[Sequence[str]]],
    host_rails: Mapping[str, Sequence[Rail]],
    *,
    tool: str,
    iperf3_reverse: bool,
    port: int,
    gid: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The bandwidth runs of the schedule: per round each rail alone, then all rails at once,
    every pair of the round at the same time; with iperf3 (and ``iperf3_reverse``) each also
    server -> client. ``host_rails`` is each node's rails from the plan, ``gid`` each node's
    roce_gid_info rails. A pair's entry names its ``worker`` (the server) and its ``client``."""
    gid = gid or {}
    directions = [False, True] if tool == "iperf3" and iperf3_reverse else [False]
    runs: list[dict[str, Any]] = []
    for number, pairs in enumerate(rounds, start=1):
        ends = ", ".join(f"{client} <-> {server}" for client, server in pairs)
        per_rail: list[list[dict[str, Any]]] = []
        for index, rail in enumerate(host_rails[pairs[0][0]]):
            entries: list[dict[str, Any]] = []
            for client, server in pairs:
                mine = _rail_of(host_rails[client], rail["netdev"])
                theirs = _rail_of(host_rails[server], rail["netdev"])
                server_gid = fabric_rules._gid_of(gid.get(server, ()), rail["netdev"])
                client_gid = fabric_rules._gid_of(gid.get(client, ()), rail["netdev"])
                entries.append(
                    {
                        "rail": rail["name"],
                        "netdev": rail["netdev"],
                        "worker": server,
                        "server_ip": theirs["address"],
                        "client_ip": mine["address"],
                        "port": int(port) + index,
                        "server_rdma_dev": server_gid.get("rdma_dev"),
                        "server_gid_index": server_gid.get("gid_index"),
                        "client_rdma_dev": client_gid.get("rdma_dev"),
                        "client_gid_index": client_gid.get("gid_index"),
                        "client": client,
                    }
                )
            per_rail.append(entries)
        for entries in per_rail:
            for reverse in directions:
                runs.append(
                    {
                        "round": number,
                        "ends": ends,
                        "mode": "single",
                        "label": entries[0]["rail"],
                        "reverse": reverse,
                        "pairs": entries,
                    }
                )
        if len(per_rail) > 1:
            every = [entry for index in range(len(pairs)) for entry in _column(per_rail, index)]
            for reverse in directions:
                runs.append(
                    {
                        "round": number,
                        "ends": ends,
                        "mode": "both",
                        "label": "all rails at once",
                        "reverse": reverse,
                        "pairs": every,
                    }
                )
    return runs


def _column(per_rail: Sequence[Sequence[dict[str, Any]]], pair_index: int) -> list[dict[str, Any]]:
    """One pair's entries over every rail, in rail order."""
    return [entries[pair_index] for entries in per_rail]


def _key(entry: Mapping[str, Any], head: str) -> tuple[str, str, str]:
    return (str(entry.get("client", head)), str(entry["worker"]), str(entry["netdev"]))


def _of_run(measurement: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    if "worker" in run:  # a head -> worker run, as the runs were before the pairs
        return fabric_rules._of_run(measurement, run)
    keys = {_key(pair, "") for pair in run["pairs"]}
    return bool(
        measurement["mode"] == run["mode"]
        and measurement["reverse"] == run["reverse"]
        and _key(measurement, "") in keys
    )


def pair_run_measurements(
    run: Mapping[str, Any], done: Sequence[Mapping[str, Any]], parsed: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """fabric_rules.run_measurements over a run of several pairs: each measurement takes
    ``worker`` from its own pair and names its ``client`` (where the pair does: a head -> worker
    run, as the runs were before the pairs, gives fabric_rules' measurements)."""
    found: list[dict[str, Any]] = []
    for client, result in zip(done, parsed, strict=True):
        pair = fabric_rules.client_pair(client)
        its_run = {**run, "worker": pair["worker"]}
        (one,) = fabric_rules.run_measurements(its_run, [client], [result])
        found.append({**one, "client": pair["client"]} if "client" in pair else one)
    return found


def merge_pair_measurements(
    measurements: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    new: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The measurements with ``run``'s replaced by ``new``, earlier ones first."""
    kept = [dict(m) for m in measurements if not _of_run(m, run)]
    return kept + [dict(m) for m in new]


def pair_runs_without_result(
    runs: Sequence[Mapping[str, Any]], measurements: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The runs of which some client printed no result: repeated once."""
    again: list[dict[str, Any]] = []
    for run in runs:
        if any(_of_run(m, run) and not m["ok"] for m in measurements) and run not in again:
            again.append(dict(run))
    return again


def _of_pair(measurements: Sequence[Mapping[str, Any]], client: str, server: str) -> list[Any]:
    return [m for m in measurements if m.get("client") == client and m["worker"] == server]


def fold_pairs(
    measurements: Sequence[Mapping[str, Any]],
    head: str,
    pairs: Sequence[Sequence[str]],
    rails: Sequence[Rail],
) -> dict[str, dict[str, Any]]:
    """fabric_rules.fold_bandwidth of the head's pairs (``per_rail`` and ``total`` keyed by the
    worker, as gx10 doctor reads them), for the pairs measured with the head."""
    workers = [server for client, server in pairs if client == head]
    mine = [m for m in measurements if m.get("client") == head]
    return fabric_rules.fold_bandwidth(mine, workers, rails)


def pair_links(
    measurements: Sequence[Mapping[str, Any]],
    pairs: Sequence[Sequence[str]],
    host_rails: Mapping[str, Sequence[Rail]],
    *,
    min_rail_gbps: Any = PER_RAIL_MIN_GBPS,
) -> list[dict[str, Any]]:
    """Every measured link, one per pair and rail: ``{rail, netdev, node, peer, address, gbps,
    min_gbps, ok}`` (``address`` the peer's on that rail; ``gbps`` None: no result)."""
    links: list[dict[str, Any]] = []
    for client, server in pairs:
        folded = fabric_rules.fold_bandwidth(
            _of_pair(measurements, client, server), [server], host_rails[client]
        )
        figures = folded["per_rail"].get(server, {})
        for rail in host_rails[client]:
            gbps = figures.get(rail["netdev"])
            links.append(
                {
                    "rail": rail["name"],
                    "netdev": rail["netdev"],
                    "node": client,
                    "peer": server,
                    "address": _rail_of(host_rails[server], rail["netdev"])["address"],
                    "gbps": gbps,
                    "min_gbps": float(min_rail_gbps),
                    "ok": gbps is not None and float(gbps) >= float(min_rail_gbps),
                }
            )
    return links


def bad_links(links: Sequence[Mapping[str, Any]]) -> list[str]:
    """``<rail> <node> -> <peer> <address>: <measured> < <threshold>`` for every link below its
    threshold (``no result`` where the tool gave none)."""
    lines: list[str] = []
    for link in links:
        if link["ok"]:
            continue
        where = f"{link['rail']} {link['node']} -> {link['peer']} {link['address']}"
        measured = "no result" if link["gbps"] is None else f"{round(link['gbps'], 2)} Gb/s"
        lines.append(f"{where}: {measured} < {link['min_gbps']:g} Gb/s")
    return lines


def pair_bandwidth_checks(
    head: str,
    workers: Sequence[str],
    pairs: Sequence[Sequence[str]],
    host_rails: Mapping[str, Sequence[Rail]],
    measurements: Sequence[Mapping[str, Any]],
    *,
    tool: str,
    tool_rc: Mapping[str, Any],
    min_rail_gbps: Any = PER_RAIL_MIN_GBPS,
    min_total_gbps: Any = MIN_TOTAL_GBPS,
    degraded_band_gbps: Sequence[Any] = DEGRADED_BAND_GBPS,
) -> list[Check]:
    """fabric_rules.bandwidth_checks for every measured pair, the client's view of each: the
    tool on every node first, then per pair (the head's first) each rail and all rails at once.
    A pair's checks read ``<rail> <client> <netdev> <ip> <-> <server> <ip>: bandwidth
    (<tool>)``, which with the head as client is the text of the head -> worker checks."""
    checks = fabric_rules.bandwidth_checks(
        head,
        list(workers),
        [],
        [],
        tool=tool,
        tool_rc=tool_rc,
        min_rail_gbps=min_rail_gbps,
        min_total_gbps=min_total_gbps,
        degraded_band_gbps=degraded_band_gbps,
    )
    if checks:
        return checks
    # The head's pairs first, in the workers' order (as the head -> worker checks read), then
    # the others in the schedule's.
    ordered = sorted(
        (list(pair) for pair in pairs),
        key=lambda pair: (0, list(workers).index(pair[1])) if pair[0] == head else (1, 0),
    )
    for client, server in ordered:
        rails = [
            {**rail, "peers": {server: _rail_of(host_rails[server], rail["netdev"])["address"]}}
            for rail in host_rails[client]
        ]
        checks += fabric_rules.bandwidth_checks(
            client,
            [server],
            rails,
            _of_pair(measurements, client, server),
            tool=tool,
            tool_rc={client: 0, server: 0},  # every node's tool is checked above
            min_rail_gbps=min_rail_gbps,
            min_total_gbps=min_total_gbps,
            degraded_band_gbps=degraded_band_gbps,
        )
    return checks
