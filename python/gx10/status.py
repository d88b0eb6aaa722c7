"""`gx10 status`: is the service whole? Per node the serving container, its rank and image, the
pair supervisor's account (state, restarts, breaker, GID index per rail), and the head's health
as the controller sees it. With more than two nodes each node's peers are listed too (the head's
are every worker, a worker's is the head), with what its agent last heard of each; two nodes
show the table they always did.

Reuses the doctor's read-only evidence (playbooks/doctor.yml) so the nodes are asked once, the
same way. The head's `/health` is not enough on its own: a head whose worker died keeps
answering 200 until a request needs the collective, so every rank's container is checked too.
An open breaker is a problem even while nothing else is: the pair stays stopped until it is reset.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gx10.doctor.pair import PairReport
from gx10.doctor.rules import Evidence

NOT_SUPERVISED = "not supervised"  # no agent installed on the node
UNREADABLE = "unknown"  # an agent is installed, its status could not be read


@dataclass(frozen=True, slots=True)
class NodeState:
    node: str
    role: str
    rank: int
    reachable: bool
    container: str  # running, exited, ..., or "missing"
    container_rank: int | None
    image: str | None
    # The agent's state (serving, starting, restarting, waiting, tripped, stopped),
    # NOT_SUPERVISED or UNREADABLE; its whole report when it gave one.
    supervision_state: str = NOT_SUPERVISED
    supervision: PairReport | None = None
    # The nodes it works with, in rank order: the head's are every worker, a worker's the head.
    peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    nodes: tuple[NodeState, ...]
    endpoint: str | None
    head_health: int | None  # HTTP status of /health, None when it did not answer
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _health(endpoint: str, timeout: float) -> int | None:
    base = endpoint.removesuffix("/").removesuffix("/v1")
    try:
        return httpx.get(f"{base}/health", timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def judge(
    evidences: Sequence[Evidence], plan: dict[str, Any], *, timeout: float = 5.0
) -> ClusterStatus:
    by_node = {ev.node: ev for ev in evidences}
    nodes: list[NodeState] = []
    problems: list[str] = []
    entries = sorted(plan.get("nodes", []), key=lambda e: int(e["rank"]))
    head_name = next((str(e["name"]) for e in entries if int(e["rank"]) == 0), None)
    for entry in plan.get("nodes", []):
        name, role, rank = str(entry["name"]), str(entry["role"]), int(entry["rank"])
        ev = by_node.get(name)
        container = next(iter(ev.containers), None) if ev else None
        state = container.state if container else "missing"
        nodes.append(
            NodeState(
                node=name,
                role=role,
                rank=rank,
                reachable=bool(ev and ev.reachable),
                container=state,
                container_rank=container.rank if container else None,
                image=container.image if container else None,
                supervision_state=_supervision_state(ev),
                supervision=ev.pair if ev else None,
                peers=tuple(
                    str(e["name"])
                    for e in entries
                    if str(e["name"]) != name and (role == "head" or str(e["name"]) == head_name)
                ),
            )
        )
        if not ev or not ev.reachable:
            problems.append(
                f"{name}: not reachable ({'; '.join(ev.problems) if ev else 'no answer'})"
            )
        elif state != "running":
            problems.append(f"{name} (rank {rank}): serving container is {state}")
        elif container and container.rank != rank:
            problems.append(f"{name}: container runs rank {container.rank}, the plan says {rank}")
        if ev and ev.reachable and ev.supervisor_installed and ev.pair is None:
            why = "; ".join(p for p in ev.problems if p.startswith("pair supervisor")) or "?"
            problems.append(f"{name}: the pair supervisor's status could not be read ({why})")
    problems.extend(_breaker_problems(nodes))
    images = {n.image for n in nodes if n.image}
    if len(images) > 1:
        problems.append(
            "nodes run different images: " + ", ".join(f"{n.node} {n.image}" for n in nodes)
        )
    head = next(
        (by_node.get(str(e["name"])) for e in plan.get("nodes", []) if e["rank"] == 0), None
    )
    endpoint = head.endpoint if head else None
    health = _health(endpoint, timeout) if endpoint else None
    if health != 200:
        problems.append(
            f"head API {endpoint or '(unknown)'}: /health "
            + (f"answered {health}" if health is not None else "did not answer")
        )
    return ClusterStatus(tuple(nodes), endpoint, health, tuple(problems))


def _supervision_state(ev: Evidence | None) -> str:
    if ev is None or not ev.reachable:
        return UNREADABLE
    if ev.pair is not None:
        return ev.pair.state
    return UNREADABLE if ev.supervisor_installed else NOT_SUPERVISED


def _breaker_problems(nodes: Sequence[NodeState]) -> list[str]:
    """The head's breaker, from its own report, else from a worker's copy of it."""
    reports = [n.supervision for n in nodes if n.supervision is not None]
    head = next((r for r in reports if r.role == "head"), None)
    report = head or next((r for r in reports if r.breaker.state == "open"), None)
    if report is None or report.breaker.state != "open":
        return []
    node = report.node if report.role == "head" else f"{report.peer} (as {report.node} heard)"
    stopped = "the pair stays" if len(nodes) <= 2 else f"all {len(nodes)} ranks stay"
    return [
        f"{node}: the pair supervisor's breaker is open ({report.breaker.reason}): {stopped} "
        "stopped until it is reset (`gx10 doctor` names the fix)"
    ]


# --- rendering -------------------------------------------------------------------------------


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at is not None else "?"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def _gid_cell(report: PairReport) -> str:
    """``rail current (pinned p)`` per rail; a moved index is marked."""
    cells = []
    for g in report.gid:
        current = "none" if g.current is None else str(g.current)
        pinned = "-" if g.pinned is None else str(g.pinned)
        mark = " MOVED" if g.moved else ""
        cells.append(f"{g.netdev} {current} (pinned {pinned}){mark}")
    if report.gid_error:
        cells.append(f"resolver: {report.gid_error}")
    return escape("\n".join(cells)) or "-"


def _breaker_cell(report: PairReport) -> str:
    breaker = report.breaker
    if breaker.state == "open":
        return f"[red]OPEN[/red] since {_when(breaker.at)}: {escape(breaker.reason or '?')}"
    return breaker.state


def _peers_cell(node: NodeState) -> str:
    """Each peer, with its agent's state and how long ago this node's agent heard from it."""
    report = node.supervision
    heard = {p.name: p for p in report.peers} if report is not None else {}
    lines = []
    for name in node.peers:
        peer = heard.get(name)
        if report is None:
            lines.append(name)
        elif peer is None:
            lines.append(f"{name} not in this agent's peers")
        else:
            age = "" if peer.age is None else f" ({peer.age:g} s ago)"
            lines.append(f"{name} {peer.state or 'not heard yet'}{age}")
    return escape("\n".join(lines)) or "-"


def print_status(console: Console, state: ClusterStatus) -> None:
    """The ranks, then each node's supervision, the head's health, the problems, a verdict.

    With more than two nodes the supervision table has a peers column (every worker for the
    head, the head for a worker); two nodes keep the table without it."""
    ranks = Table(title="gx10 status", show_lines=False)
    for column in ("node", "rank", "role", "container", "image"):
        ranks.add_column(column, overflow="fold")
    for node in state.nodes:
        style = "green" if node.container == "running" else "red"
        ranks.add_row(
            node.node,
            str(node.rank),
            node.role,
            f"[{style}]{escape(node.container)}[/{style}]",
            escape(node.image or "-"),
        )
    console.print(ranks)
    show_peers = len(state.nodes) > 2
    supervision = Table(title="pair supervision", show_lines=True)
    for column in (
        "node",
        "state",
        *(("peers (state, last heard)",) if show_peers else ()),
        "generation",
        "restarts in window",
        "last restart",
        "breaker",
        "GID index (current, pinned at rank start)",
    ):
        supervision.add_column(column, overflow="fold")
    for node in state.nodes:
        report = node.supervision
        peers = (_peers_cell(node),) if show_peers else ()
        if report is None:
            supervision.add_row(
                node.node, escape(node.supervision_state), *peers, "-", "-", "-", "-", "-"
            )
            continue
        last = report.last_restart
        copied = " (head's)" if report.source == "head" else ""
        supervision.add_row(
            node.node,
            escape(report.state),
            *peers,
            _number(report.generation),
            _number(report.restarts_in_window) + copied,
            escape(f"{_when(last.at)} {last.reason}") if last else "-",
            _breaker_cell(report) + copied,
            _gid_cell(report),
        )
    console.print(supervision)
    console.print(
        f"endpoint {state.endpoint or '-'}  /health {state.head_health or 'no answer'}",
        highlight=False,
    )
    for problem in state.problems:
        console.print(f"problem: {problem}", highlight=False, markup=False)
    console.print("[green]OK: the service is whole[/green]" if state.ok else "[red]NOT OK[/red]")
