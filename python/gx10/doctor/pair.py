"""The pair supervisor's own account of a node, as `gx10-pair status --json` prints it.

The agent (roles/vllm_supervisor/files/gx10-pair) keeps its records on the node: its state, the
generation of the pair's current start, the restarts in the breaker's window, the breaker, and per
rail the RoCE v2 GID index pinned at this rank's start next to the one the node's sysfs holds now.
`playbooks/doctor.yml` runs its status command read-only where the agent is installed;
`parse_pair_report` turns that output into a `PairReport`, which `gx10 doctor` judges
(GID_MOVED, SUPERVISION_TRIPPED) and `gx10 status` shows. Pure: no Ansible, no I/O.

A worker's agent does not keep the breaker: it reports the head's restarts and breaker as the
head last told it (``source: head``), so the head's report is the one to believe when there is
one.

The head's agent supervises every worker, so its peers are the workers (in rank order) and each
worker's peer is the head: ``peers`` lists them all with what the agent last heard of each. An
agent from before N nodes gave only ``peer``; it reads as a one-peer list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The agent's states (gx10-pair STATES); "stopped" is an agent that is not running, so its node
# is not supervised right now (stop.yml, or an unsupervised serve after a supervised one).
AGENT_STATES = ("starting", "serving", "restarting", "tripped", "stopped", "waiting")
BreakerState = Literal["closed", "open", "unknown"]


class PairReportError(ValueError):
    """The status output is not the agent's report."""


@dataclass(frozen=True, slots=True)
class PairGid:
    """One rail: the index its rank was started with (None: no start recorded) and the index of
    the rail's RoCE v2 GID in the node's table now (None: the resolver found none)."""

    netdev: str
    pinned: int | None
    current: int | None

    @property
    def moved(self) -> bool:
        return self.pinned is not None and self.current != self.pinned


@dataclass(frozen=True, slots=True)
class PairRestart:
    at: float | None  # seconds since the epoch
    reason: str


@dataclass(frozen=True, slots=True)
class PairBreaker:
    state: BreakerState  # unknown: a worker that has not heard from its head
    reason: str | None  # why it tripped: the count, the window, the last restart's reason
    at: float | None


@dataclass(frozen=True, slots=True)
class PairPeer:
    """One of the agent's peers as it last heard of it."""

    name: str
    state: str | None  # the peer agent's state in its last heartbeat; None: not heard yet
    age: float | None  # seconds since that heartbeat


@dataclass(frozen=True, slots=True)
class PairReport:
    node: str
    role: str  # head or worker
    state: str  # one of AGENT_STATES
    generation: int | None
    rank_active: bool | None  # None when the agent is not running
    restarts_in_window: int | None
    last_restart: PairRestart | None
    breaker: PairBreaker
    gid: tuple[PairGid, ...]
    gid_error: str | None  # why the agent's resolver could not read a rail now
    source: str  # "local" (the head's own records) or "head" (a worker's copy of them)
    # A worker's head; the head's stalest worker (every one is in peers).
    peer: str | None
    peer_age: float | None  # seconds since the peer's last heartbeat
    agent: str | None = None  # the agent's path on the node, for the commands a fix names
    peers: tuple[PairPeer, ...] = ()  # every peer, in rank order

    @property
    def supervising(self) -> bool:
        """The agent runs, so it owns the node's rank (and started it, with its pinned index)."""
        return self.state != "stopped"

    @property
    def moved(self) -> tuple[PairGid, ...]:
        return tuple(rail for rail in self.gid if rail.moved)


def parse_pair_report(output: object, agent: str | None = None) -> PairReport:
    """`gx10-pair status --json` (the text, or the object Ansible made of it) as a `PairReport`.

    Raises PairReportError when it is not an object with the agent's node, role and state.
    """
    if isinstance(output, str):
        try:
            loaded: object = json.loads(output)
        except ValueError as exc:
            raise PairReportError(f"not JSON ({exc}): {output[:200]!r}") from None
    else:
        loaded = output
    if not isinstance(loaded, Mapping):
        raise PairReportError(f"not a JSON object: {str(loaded)[:200]!r}")
    node, role, state = loaded.get("node"), loaded.get("role"), loaded.get("state")
    if not isinstance(node, str) or role not in ("head", "worker") or state not in AGENT_STATES:
        raise PairReportError(
            f"no node, role and state of the agent's (node {node!r}, role {role!r}, "
            f"state {state!r}): the agent and this gx10 are from different versions"
        )
    peer = loaded.get("peer")
    peer = peer if isinstance(peer, Mapping) else {}
    rank_active = loaded.get("rank_active")
    return PairReport(
        node=node,
        role=str(role),
        state=str(state),
        generation=_int(loaded.get("generation")),
        rank_active=rank_active if isinstance(rank_active, bool) else None,
        restarts_in_window=_int(loaded.get("restarts_in_window")),
        last_restart=_restart(loaded.get("last_restart")),
        breaker=_breaker(loaded.get("breaker")),
        gid=tuple(_gid(rail) for rail in _list(loaded.get("gid")) if isinstance(rail, Mapping)),
        gid_error=_text(loaded.get("gid_error")),
        source=_text(loaded.get("source")) or ("local" if role == "head" else "head"),
        peer=_text(peer.get("name")),
        peer_age=_float(peer.get("age")),
        agent=agent,
        peers=_peers(loaded.get("peers"), peer),
    )


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def _peers(value: object, peer: Mapping[str, Any]) -> tuple[PairPeer, ...]:
    """``peers`` (schema 2 agents), else the one ``peer`` of an agent from before them."""
    listed = [p for p in _list(value) if isinstance(p, Mapping) and _text(p.get("name"))]
    if not listed and _text(peer.get("name")):
        listed = [peer]
    return tuple(
        PairPeer(str(p["name"]), _text(p.get("state")), _float(p.get("age"))) for p in listed
    )


def _gid(rail: Mapping[str, Any]) -> PairGid:
    return PairGid(str(rail.get("netdev")), _int(rail.get("pinned")), _int(rail.get("current")))


def _restart(value: object) -> PairRestart | None:
    if not isinstance(value, Mapping):
        return None
    return PairRestart(_float(value.get("at")), str(value.get("reason") or "?"))


def _breaker(value: object) -> PairBreaker:
    breaker = value if isinstance(value, Mapping) else {}
    tripped = breaker.get("tripped")
    state: BreakerState = "open" if tripped is True else "closed" if tripped is False else "unknown"
    return PairBreaker(state, _text(breaker.get("reason")), _float(breaker.get("at")))
