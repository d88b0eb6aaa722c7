"""End-to-end fixtures: one lab for the whole run, one converge for every two-node file.

The lab comes up once (the role pipeline of `make test` leaves it converged; `lab_up` only
inspects it then). `serving_lab` runs site.yml once; every two-node file (SHARED_CONVERGE) starts
from the lab serving as that run left it and must leave it so: `lab_as_it_was` snapshots each
node before the file and fails the file's last test, naming each difference, if the lab is not
the same after it. Then the four-node file reshapes the lab (nothing two-node runs after it) and
test_lab.py, last, takes the lab down and brings a fresh one up: the lab's own life cycle is what
it tests. A converge of the lab is a minute or more on two cores: fixtures here, not in files
(tests/unit/test_e2e_structure.py holds the line).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import LAB_INVENTORY, lab_state, node_sh, state_diff

import gx10
from gx10 import ProvisionResult, lab, provision
from gx10._dev import pytest_timing

# Read-only files first, then those that inject faults and restore; supervision last (its
# restore takes the agents away again).
SHARED_CONVERGE = (
    "test_site.py",
    "test_clients.py",
    "test_metrics.py",
    "test_gateway.py",
    "test_doctor.py",
    "test_bench.py",
    "test_fabric.py",
    "test_gid_drift.py",
    "test_model.py",
    "test_serve.py",
    "test_lab_faults.py",
    "test_network.py",
    "test_supervise.py",
)
# After them, in this order: the real engine (its own converge of the same two nodes, opt-in:
# `make e2e-engine`), the four-node reshape, then the lab's own down and up.
LAST = ("test_engine.py", "test_switch.py", "test_lab.py")
ORDER = SHARED_CONVERGE + LAST


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
        # A file not placed yet runs with the shared files' restores checked, before the reshape.
        return ORDER.index(name) if name in ORDER else len(SHARED_CONVERGE) - 1

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


def _lab_up(cfg: lab.LabConfig, what: str) -> lab.LabStatus:
    started = time.monotonic()
    status = lab.up(cfg, log=lambda line: print(f"lab: {line}"))
    print(f"lab up {what}: {time.monotonic() - started:.1f} s")
    return status


def _converge(inventory: str, what: str) -> ProvisionResult:
    started = time.monotonic()
    result = provision(LAB_INVENTORY.parent / inventory, "site.yml")
    print(f"site.yml {what}: {time.monotonic() - started:.1f} s")
    return result


@pytest.fixture(scope="session")
def four_node_lab() -> lab.LabStatus:
    """The lab reshaped to four nodes on the switch stand-in (test_switch.py). Not put back:
    only test_lab.py runs after it, and it brings a fresh two-node lab up itself."""
    return _lab_up(lab.LabConfig.sized(4), "--nodes 4")


@pytest.fixture(scope="session")
def four_node_converge(four_node_lab: lab.LabStatus) -> ProvisionResult:
    """site.yml on the four nodes (inventories/lab4), once."""
    return _converge("lab4", "on four nodes")


@pytest.fixture(scope="session")
def engine_lab() -> lab.LabStatus:
    """The two-node lab serving vLLM itself (`gx10 lab up --engine vllm-cpu`, test_engine.py):
    the same nodes, the engine image published, its tiny model on the NAS. Not put back: the
    four-node reshape and test_lab.py's fresh lab come after it."""
    return _lab_up(lab.LabConfig.sized(2, "vllm-cpu"), "--engine vllm-cpu")


@pytest.fixture(scope="session")
def engine_converge(engine_lab: lab.LabStatus) -> ProvisionResult:
    """site.yml on inventories/lab-vllm, once."""
    return _converge("lab-vllm", "with the real engine")


@pytest.fixture(scope="module", autouse=True)
def lab_as_it_was(request: pytest.FixtureRequest) -> Iterator[None]:
    """A two-node file leaves the lab as the shared converge left it (fails naming what differs)."""
    if Path(str(request.path)).name in LAST:
        yield
        return
    request.getfixturevalue("serving_lab")
    before = lab_state()
    yield
    changed = state_diff(before, lab_state())
    if changed:
        pytest.fail(
            f"{Path(str(request.path)).name} left the lab changed (restore what the file "
            "changes):\n" + "\n".join(changed),
            pytrace=False,
        )


@pytest.fixture
def rail_down(lab_up: lab.LabStatus) -> Iterator[tuple[str, str]]:
    """Pull one rail's link down on gx10-b for the duration of a test, then restore it."""
    node, netdev = "gx10-b", "enP2p1s0f0np0"
    node_sh(node, f"ip link set {netdev} down")
    try:
        yield node, netdev
    finally:
        node_sh(node, f"ip link set {netdev} up")
