"""End-to-end fixtures: the two-node lab, brought up once per session (test equipment).

The files that only use the lab serving as site.yml leaves it, and leave it so (each restores
what it changed), share one converge (`serving_lab`) and run first, in this order; every other
file converges for itself. Each converge of the lab is a minute, so this is where the suite's
time goes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LAB_INVENTORY, node_sh

import gx10
from gx10 import ProvisionResult, lab, provision
from gx10._dev import pytest_timing

SHARED_CONVERGE = (
    "test_site.py",
    "test_clients.py",
    "test_metrics.py",
    "test_gateway.py",
    "test_doctor.py",
    "test_bench.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """With `make test`'s timing report on, count each provision() run per test: its playbook,
    time, and whether the pair restarted. Here, before the test modules import provision by name;
    this module's own name for it is replaced too."""
    if pytest_timing.active(config):
        modules = (gx10, sys.modules["gx10.provision"], sys.modules[__name__])
        config.add_cleanup(pytest_timing.count_provisions(modules))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.lab)

    def group(item: pytest.Item) -> int:
        name = Path(str(item.fspath)).name
        return SHARED_CONVERGE.index(name) if name in SHARED_CONVERGE else len(SHARED_CONVERGE)

    items.sort(key=group)  # stable: each file's tests keep their order


@pytest.fixture(scope="session")
def lab_up() -> lab.LabStatus:
    return lab.up(log=lambda line: print(f"lab: {line}"))


@pytest.fixture(scope="session")
def serving_lab(lab_up: lab.LabStatus) -> ProvisionResult:
    """site.yml converged on the lab once, for the SHARED_CONVERGE files."""
    result = provision(LAB_INVENTORY, "site.yml")
    assert result.ok, result.failed_tasks
    return result


@pytest.fixture
def rail_down(lab_up: lab.LabStatus) -> Iterator[tuple[str, str]]:
    """Pull one rail's link down on gx10-b for the duration of a test, then restore it."""
    node, netdev = "gx10-b", "enP2p1s0f0np0"
    node_sh(node, f"ip link set {netdev} down")
    try:
        yield node, netdev
    finally:
        node_sh(node, f"ip link set {netdev} up")
