"""`gx10 status`: is the service whole? Per node the serving container, its rank and image, and
the head's health as the controller sees it.

Reuses the doctor's read-only evidence (playbooks/doctor.yml) so the nodes are asked once, the
same way. The head's `/health` is not enough on its own: a head whose worker died keeps
answering 200 until a request needs the collective, so every rank's container is checked too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from gx10.doctor.rules import Evidence


@dataclass(frozen=True, slots=True)
class NodeState:
    node: str
    role: str
    rank: int
    reachable: bool
    container: str  # running, exited, ..., or "missing"
    container_rank: int | None
    image: str | None


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
