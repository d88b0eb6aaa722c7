"""End-to-end fixtures: the two-node lab, brought up once per session (test equipment)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from labtools import node_sh

from gx10 import lab


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab_up() -> lab.LabStatus:
    return lab.up(log=lambda line: print(f"lab: {line}"))


@pytest.fixture
def rail_down(lab_up: lab.LabStatus) -> Iterator[tuple[str, str]]:
    """Pull one rail's link down on gx10-b for the duration of a test, then restore it."""
    node, netdev = "gx10-b", "enP2p1s0f0np0"
    node_sh(node, f"ip link set {netdev} down")
    try:
        yield node, netdev
    finally:
        node_sh(node, f"ip link set {netdev} up")
