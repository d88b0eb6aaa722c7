# SPDX-License-Identifier: Apache-2.0
"""The nccl_env role through real ansible-playbook, two nodes on localhost (connection local).

Each node has its own sysfs tree, built by the lab's RDMA sysfs simulator from a recorded
`ip -j addr show` (tests/fixtures/ip-addr), and its own env file under tmp_path. The sequence is
the house one: check mode, converge, converge again (changed=0), then a hardware swap that moves
one node's GID entries, which the next run must pick up.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from simulators import RECORDING, node_gid_tables

from gx10.lab.simulators.rdma_sysfs import sync

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
    two_node_inventory,
)

NODES = {"gx10-a": "10", "gx10-b": "11"}

pytestmark = [
    pytest.mark.heavy,  # long tests: make unit hands this file out first
    pytest.mark.skipif(
        not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
    ),
]

PLAYBOOK = f"""
- name: Validate the inventory and compute the cluster plan
  ansible.builtin.import_playbook: {ROOT}/playbooks/validate.yml

- name: Write the NCCL environment file on every node
  ansible.builtin.import_playbook: {ROOT}/playbooks/nccl.yml
"""


def setup(tmp_path: Path, **role_vars: Any) -> Path:
    hosts: dict[str, Any] = {}
    for host, octet in NODES.items():
        node_gid_tables(tmp_path / host / "sys", octet)
        hosts[host] = {
            "nccl_env_sysfs_root": str(tmp_path / host / "sys"),
            "nccl_env_file": str(tmp_path / host / "etc" / "gx10" / "nccl.env"),
        }
    inventory = two_node_inventory(hosts["gx10-a"], hosts["gx10-b"], role_vars)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    return tmp_path


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", *args, timeout=180
    )


def changed(output: str, host: str) -> int:
    match = re.search(rf"^{re.escape(host)}\s*:.*changed=(\d+)", output, re.MULTILINE)
    assert match, output
    return int(match.group(1))


def env_file(tmp_path: Path, host: str) -> dict[str, str]:
    lines = (tmp_path / host / "etc" / "gx10" / "nccl.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_check_converge_idempotent_and_follows_a_gid_shift(tmp_path: Path) -> None:
    setup(tmp_path)
    check = run(tmp_path, "--check", "--diff")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "+NCCL_IB_GID_INDEX=3" in check.stdout
    assert not (tmp_path / "gx10-a" / "etc" / "gx10" / "nccl.env").exists()

    first = run(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    head, worker = env_file(tmp_path, "gx10-a"), env_file(tmp_path, "gx10-b")
    assert head["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
    assert head["NCCL_IB_GID_INDEX"] == worker["NCCL_IB_GID_INDEX"] == "3"
    assert (head["VLLM_HOST_IP"], worker["VLLM_HOST_IP"]) == ("192.168.100.10", "192.168.100.11")
    mode = (tmp_path / "gx10-a" / "etc" / "gx10" / "nccl.env").stat().st_mode & 0o777
    assert mode == 0o640
    # verify.yml ran (a mismatch would have failed the run)
    assert "TASK [nccl_env : Judge the environment file]" in first.stdout

    second = run(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert changed(second.stdout, "gx10-a") == changed(second.stdout, "gx10-b") == 0

    # A swap that leaves stale slots in front: the worker's entries move to 5 (v1) and 6 (v2).
    node_gid_tables(tmp_path / "gx10-b" / "sys", NODES["gx10-b"], shift=5, reset=True)
    third = run(tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    assert changed(third.stdout, "gx10-a") == 0
    assert changed(third.stdout, "gx10-b") == 1
    assert env_file(tmp_path, "gx10-b")["NCCL_IB_GID_INDEX"] == "6"
    assert env_file(tmp_path, "gx10-a")["NCCL_IB_GID_INDEX"] == "3"


def test_auto_mode_extras_and_an_unlisted_override(tmp_path: Path) -> None:
    setup(tmp_path, nccl_env_mode="auto", nccl_env_extra={"NCCL_IB_TIMEOUT": 22})
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    env = env_file(tmp_path, "gx10-a")
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_TIMEOUT"] == "22"

    setup(tmp_path, nccl_env_extra={"NCCL_IB_GID_INDEX": 3})
    refused = run(tmp_path)
    assert refused.returncode == 2
    assert "extra key NCCL_IB_GID_INDEX would override" in refused.stdout + refused.stderr


def test_rails_that_disagree_fail_before_the_file_changes(tmp_path: Path) -> None:
    setup(tmp_path)
    assert run(tmp_path).returncode == 0
    before = (tmp_path / "gx10-a" / "etc" / "gx10" / "nccl.env").read_text()
    # Only rail0 of the head moves (a re-added address): its rails now disagree.
    sys_a = tmp_path / "gx10-a" / "sys"
    recorded = RECORDING.read_text(encoding="utf-8")
    sync(str(sys_a), recorded, {"enp1s0f0np0": "rocep1s0f0"}, shift=7, reset=True)
    result = run(tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "rails disagree on the RoCE v2 GID index" in output
    assert (tmp_path / "gx10-a" / "etc" / "gx10" / "nccl.env").read_text() == before
