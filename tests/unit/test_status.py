"""gx10 status: whole only when every rank runs the same image and the head answers /health."""

from __future__ import annotations

from typing import Any

import pytest

from gx10 import status
from gx10.doctor.rules import ContainerEvidence, Evidence

PLAN: dict[str, Any] = {
    "nodes": [
        {"name": "gx10-a", "rank": 0, "role": "head"},
        {"name": "gx10-b", "rank": 1, "role": "worker"},
    ]
}
IMAGE = "gx10-registry:5000/anemll/dspark-vllm-gx10@sha256:" + "0" * 64


def _node(name: str, rank: int, state: str = "running", image: str = IMAGE) -> Evidence:
    container = ContainerEvidence("gx10-vllm", rank, state, True, True, image=image)
    return Evidence(
        node=name,
        containers=(container,),
        endpoint=f"http://{name}:8000/v1" if rank == 0 else None,
    )


@pytest.fixture
def health(monkeypatch: pytest.MonkeyPatch) -> dict[str, int | None]:
    answers: dict[str, int | None] = {"http://gx10-a:8000/v1": 200}
    monkeypatch.setattr(status, "_health", lambda endpoint, timeout: answers.get(endpoint))
    return answers


def test_whole_service(health: dict[str, int | None]) -> None:
    result = status.judge([_node("gx10-a", 0), _node("gx10-b", 1)], PLAN)
    assert result.ok, result.problems
    assert result.head_health == 200
    assert [(n.node, n.container, n.container_rank) for n in result.nodes] == [
        ("gx10-a", "running", 0),
        ("gx10-b", "running", 1),
    ]


def test_a_dead_worker_is_not_whole_even_with_a_healthy_head(
    health: dict[str, int | None],
) -> None:
    result = status.judge([_node("gx10-a", 0), _node("gx10-b", 1, state="exited")], PLAN)
    assert not result.ok
    assert result.problems == ("gx10-b (rank 1): serving container is exited",)


def test_head_not_answering(health: dict[str, int | None]) -> None:
    health["http://gx10-a:8000/v1"] = None
    result = status.judge([_node("gx10-a", 0), _node("gx10-b", 1)], PLAN)
    assert result.problems == ("head API http://gx10-a:8000/v1: /health did not answer",)


def test_different_images_and_a_missing_container(health: dict[str, int | None]) -> None:
    other = IMAGE[:-1] + "1"
    worker = Evidence(node="gx10-b", containers=())
    result = status.judge([_node("gx10-a", 0, image=other), worker], PLAN)
    assert "gx10-b (rank 1): serving container is missing" in result.problems
    result = status.judge([_node("gx10-a", 0), _node("gx10-b", 1, image=other)], PLAN)
    assert any(p.startswith("nodes run different images") for p in result.problems)
