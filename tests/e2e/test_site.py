"""site.yml on the lab through provision(): converges, re-applies with changed=0, fails clearly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from labtools import LAB_INVENTORY

from gx10 import ProvisionResult, lab, provision


@pytest.fixture(scope="module")
def first_run(lab_up: lab.LabStatus) -> ProvisionResult:
    return provision(LAB_INVENTORY, "site.yml")


def test_site_converges_on_the_lab(first_run: ProvisionResult) -> None:
    assert first_run.ok, first_run.failed_tasks
    assert set(first_run.hosts) >= {"gx10-a", "gx10-b"}
    for host in ("gx10-a", "gx10-b"):
        assert first_run.hosts[host].failed == 0
        assert first_run.hosts[host].unreachable == 0


def test_second_run_changes_nothing(first_run: ProvisionResult) -> None:
    again = provision(LAB_INVENTORY, "site.yml")
    assert again.ok, again.failed_tasks
    assert again.changed_total == 0, {h: s.changed for h, s in again.hosts.items()}


def test_check_mode_runs_clean(first_run: ProvisionResult) -> None:
    result = provision(LAB_INVENTORY, "site.yml", check=True, diff=True)
    assert result.ok, result.failed_tasks
    assert result.changed_total == 0


def test_preflight_names_node_value_and_fix(first_run: ProvisionResult) -> None:
    result = provision(LAB_INVENTORY, "site.yml", extravars={"preflight_min_memory_mb": 10_000_000})
    assert not result.ok
    failed = {t.host: t for t in result.failed_tasks}
    assert set(failed) == {"gx10-a", "gx10-b"}
    for host, task in failed.items():
        assert f"{host}: memory: found " in task.message
        assert "expected at least 10000000 MB (preflight_min_memory_mb)" in task.message
        assert "Fix:" in task.message


def test_preflight_reports_a_rail_without_carrier(rail_down: tuple[str, str]) -> None:
    node, netdev = rail_down
    result = provision(LAB_INVENTORY, "site.yml")
    assert not result.ok
    messages = {t.host: t.message for t in result.failed_tasks}
    assert f"{node}: rail carrier: found no carrier on {netdev}" in messages[node], messages
    # A cable with one end down has no carrier at either end: the peer reports it too.
    assert f"gx10-a: rail carrier: found no carrier on {netdev}" in messages["gx10-a"], messages
    assert "enp1s0f0np0" not in messages[node]


def test_bad_inventory_stops_before_any_node_is_touched(
    first_run: ProvisionResult, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(LAB_INVENTORY, inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    # Two heads: gx10-b moves from workers to head.
    children = hosts["all"]["children"]["gx10"]["children"]
    children["head"]["hosts"]["gx10-b"] = None
    del children["workers"]
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))

    result = provision(inventory, "site.yml")
    assert not result.ok
    assert set(result.hosts) == {"localhost"}, "a node was contacted before validation passed"
    (task,) = result.failed_tasks
    assert "Inventory validation failed" in task.message
    assert "head" in task.message
    assert "gx10-b" in task.message
