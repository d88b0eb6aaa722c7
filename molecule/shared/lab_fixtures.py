"""Shared testinfra fixtures: the lab nodes as testinfra hosts, by inventory group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import testinfra

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = os.environ.get("GX10_INVENTORY", str(ROOT / "inventories" / "lab"))


def _hosts(group: str) -> list[testinfra.host.Host]:
    hosts = testinfra.get_hosts([group], connection="ansible", ansible_inventory=INVENTORY)
    # An empty group would make every loop below pass without checking anything.
    assert hosts, f"inventory {INVENTORY} has no hosts in group {group!r}"
    return list(hosts)


@pytest.fixture(scope="session")
def head() -> testinfra.host.Host:
    hosts = _hosts("head")
    assert len(hosts) == 1, f"expected exactly one head, got {len(hosts)}"
    return hosts[0]


@pytest.fixture(scope="session")
def workers() -> list[testinfra.host.Host]:
    return _hosts("workers")


@pytest.fixture(scope="session")
def nodes(
    head: testinfra.host.Host, workers: list[testinfra.host.Host]
) -> list[testinfra.host.Host]:
    return [head, *workers]
