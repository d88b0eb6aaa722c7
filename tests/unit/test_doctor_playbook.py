"""playbooks/doctor.yml through ansible-runner (gx10.doctor.collect), two nodes on localhost.

Each node has its own sysfs tree: the GID tables from the lab's RDMA sysfs simulator (fed a
recorded `ip -j addr show`), plus the rail netdevs' mtu/carrier and the PCIe link files of their
functions. nvidia-smi is the lab's simulator, holding a 2000 MHz clock lock under load. There is no
serving container (the name is one nobody uses). The head has the pair supervisor's agent
installed (its real files, a config and the GID index its last rank start pinned; the agent is not
running), the worker has none. The evidence must come back parsed for both nodes, and an
unreachable worker must not hide the head.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from simulators import node_gid_tables, simulator_path

from gx10._collection import load as module_utils
from gx10.doctor import diagnose
from gx10.doctor import rules as r
from gx10.doctor.collect import collect

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared two-node localhost inventory

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    two_node_inventory,
)

NVIDIA_SMI = simulator_path("nvidia_smi")
AGENT = ROOT / "roles" / "vllm_supervisor" / "files" / "gx10-pair"
MODULE_UTILS = ROOT / "collections" / "ansible_collections" / "gx10" / "cluster" / "plugins"
MODULE_UTILS = MODULE_UTILS / "module_utils"
NODES = {"gx10-a": "10", "gx10-b": "11"}
RAIL0, RAIL1 = "enp1s0f0np0", "enP2p1s0f0np0"
# The worker's second twin trained at x2 (the early-BIOS fault).
PCIE = {
    ("gx10-a", RAIL0): "4",
    ("gx10-a", RAIL1): "4",
    ("gx10-b", RAIL0): "4",
    ("gx10-b", RAIL1): "2",
}

pytestmark = [
    pytest.mark.heavy,  # long tests: make unit hands this file out first
    pytest.mark.skipif(
        not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
    ),
]


def node_sysfs(root: Path, node: str) -> None:
    node_gid_tables(root, NODES[node], reset=True)
    for netdev in (RAIL0, RAIL1):
        base = root / "class" / "net" / netdev
        for name, value in (("operstate", "up"), ("carrier", "1"), ("mtu", "9000")):
            (base / name).write_text(f"{value}\n")
        (base / "device" / "current_link_width").write_text(f"{PCIE[node, netdev]}\n")
        (base / "device" / "current_link_speed").write_text("32.0 GT/s PCIe\n")


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The inventory's directory; nvidia-smi (simulated) on PATH, clock locked at 2400 MHz (the
    policy is the default 2000 MHz: a cap left behind)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvidia-smi"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {NVIDIA_SMI} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / "gpu"
    state.mkdir()
    (state / "load").write_text("1.0\n")
    (state / "locked_clocks").write_text("2400,2400\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("GX10_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("GX10_HOME", str(ROOT))
    monkeypatch.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "ansible-tmp"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return tmp_path


def install_agent(home: Path, sysfs: Path) -> dict[str, str]:
    """The head's agent as the vllm_supervisor role installs it, its config, and the record of a
    rank start (`run-rank`, whose rank is `true`); the inventory variables that point there."""
    lib = home / "pair-lib"
    lib.mkdir()
    shutil.copy(AGENT, lib / "gx10-pair")
    for name in ("pair_config.py", "roce_gid.py"):
        shutil.copy(MODULE_UTILS / name, lib / name)
    pair_config = module_utils("pair_config")
    gid = {
        "rails": [
            {"netdev": RAIL0, "address": "192.168.100.10"},
            {"netdev": RAIL1, "address": "192.168.101.10"},
        ],
        "sysfs_root": str(sysfs),
        "env_file": str(home / "gid.env"),
    }
    config = pair_config.build_config(
        node="gx10-a",
        role="head",
        listen_address="127.0.0.1",
        peer_name="gx10-b",
        peer_address="127.0.0.1",
        token_file=str(home / "pair.token"),
        rank={
            "container": "gx10-vllm",
            "health_urls": ["http://127.0.0.1:9/health"],
            "model": "tiny",
        },
        gid=gid,
        state_dir=str(home / "pair-state"),
    )
    assert pair_config.validate_config(config) == []
    (home / "pair.json").write_text(json.dumps(config))
    rank = pair_config.build_rank(
        node="gx10-a", role="head", gid=gid, state_dir=str(home / "pair-state"), argv=["true"]
    )
    (home / "rank.json").write_text(json.dumps(rank))
    env = {**os.environ, "GX10_PAIR_CONFIG": str(home / "pair.json")}
    env["GX10_PAIR_RANK"] = str(home / "rank.json")
    subprocess.run(
        [sys.executable, str(lib / "gx10-pair"), "run-rank"], env=env, check=True, timeout=30
    )
    return {
        "vllm_supervisor_lib_dir": str(lib),
        "vllm_supervisor_config_path": str(home / "pair.json"),
        "vllm_supervisor_python": sys.executable,
    }


def inventory(tmp_path: Path, **worker: Any) -> str:
    hosts: dict[str, Any] = {}
    for node in NODES:
        sysfs = tmp_path / node / "sys"
        node_sysfs(sysfs, node)
        hosts[node] = {
            "doctor_sysfs_root": str(sysfs),
            "nccl_env_sysfs_root": str(sysfs),
            "nccl_env_file": str(tmp_path / node / "nccl.env"),
        }
    hosts["gx10-a"].update(install_agent(tmp_path / "gx10-a", tmp_path / "gx10-a" / "sys"))
    hosts["gx10-b"]["vllm_supervisor_lib_dir"] = str(tmp_path / "gx10-b" / "no-agent-here")
    hosts["gx10-b"].update(worker)
    (tmp_path / "gx10-a" / "nccl.env").write_text(
        "# Managed by Ansible\nNCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0\nNCCL_IB_GID_INDEX=3\n"
    )
    document = two_node_inventory(
        hosts["gx10-a"],
        hosts["gx10-b"],
        {"vllm_serve_container_name": "gx10-doctor-test-no-such-container"},
    )
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return str(path)


def test_evidence_of_both_nodes(lab: Path) -> None:
    evidences, plan, result = collect(inventory(lab))
    assert result.ok, result.to_dict()
    assert plan["head"] == "gx10-a"
    assert [ev.node for ev in evidences] == ["gx10-a", "gx10-b"]
    head, worker = evidences
    for ev in evidences:
        assert ev.reachable
        assert ev.gid_mode == "pinned"
        assert {rail.netdev: rail.mtu for rail in ev.rails} == {RAIL0: 9000, RAIL1: 9000}
        assert all(rail.carrier for rail in ev.rails)
        assert {rail.rdma_dev for rail in ev.rails} == {"rocep1s0f0", "roceP2p1s0f0"}
        for table in ev.gid_tables.values():
            assert [e["index"] for e in table] == [0, 1, 2, 3]
        assert ev.sm_clock_cap_mhz is not None
        assert abs(ev.sm_clock_cap_mhz - 2400) <= 13  # read off the loaded GPU, quantized
        assert ev.sm_clock_policy_mhz == 2000
        assert not ev.sm_clock_cap_recorded
        # The serve stage's draft: the serving profile's, resolved by the validate stage
        # (gx10_plan.serving.speculative_config; the inventory sets none).
        assert ev.speculative == {
            "method": "dspark",
            "num_speculative_tokens": 5,
            "draft_sample_method": "probabilistic",
        }
        # No such container here; where docker does not answer, that is named instead.
        assert [(c.name, c.state) for c in ev.containers] == [
            ("gx10-doctor-test-no-such-container", "missing")
        ] or any("not inspected" in p for p in ev.problems)
    assert head.env == {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"}
    assert worker.env is None
    assert any(p.startswith("no NCCL env file") for p in worker.problems)
    assert [(rail.netdev, rail.pcie_width) for rail in worker.rails] == [(RAIL0, 4), (RAIL1, 2)]
    # The head's agent answered its status (installed, not running: the node is not supervised
    # now); the worker has no agent, which is no problem.
    assert head.supervisor_installed
    assert head.pair is not None
    assert (head.pair.node, head.pair.role, head.pair.state) == ("gx10-a", "head", "stopped")
    assert [(g.netdev, g.pinned, g.current) for g in head.pair.gid] == [
        (RAIL0, 3, 3),
        (RAIL1, 3, 3),
    ]
    assert head.pair.agent == str(lab / "gx10-a" / "pair-lib" / "gx10-pair")
    assert not head.supervised
    assert not any(p.startswith("pair supervisor") for p in head.problems)
    assert (worker.supervisor_installed, worker.pair) == (False, None)

    found = {(f.code, f.node) for f in diagnose(evidences, plan)}
    assert (r.PCIE_WIDTH_LOW, "gx10-b") in found
    assert (r.CLOCK_CAP_LEFT, "gx10-a") in found
    assert (r.EVIDENCE_INCOMPLETE, "gx10-b") in found
    assert not any(code.startswith("GID_") for code, _node in found)


def test_unreachable_worker_does_not_hide_the_head(lab: Path) -> None:
    evidences, plan, _run = collect(
        inventory(
            lab,
            ansible_connection="ssh",
            ansible_host="127.0.0.1",
            ansible_port=1,
            ansible_ssh_common_args="-o ConnectTimeout=3 -o StrictHostKeyChecking=no",
        )
    )
    head, worker = evidences
    assert head.reachable
    assert len(head.rails) == 2
    assert not worker.reachable
    assert worker.problems
    found = {(f.code, f.node) for f in diagnose(evidences, plan)}
    assert (r.NODE_UNREACHABLE, "gx10-b") in found


def test_the_inventorys_pcie_width_threshold_is_the_fabric_roles(lab: Path) -> None:
    """fabric_min_pcie_width judges doctor's PCIe links as it does the fabric role's (the doctor
    used a fixed x4 before)."""
    evidences, plan, result = collect(inventory(lab, fabric_min_pcie_width=2))
    assert result.ok, result.to_dict()
    found = {(f.code, f.node) for f in diagnose(evidences, plan)}
    assert (r.PCIE_WIDTH_LOW, "gx10-b") not in found
    assert [ev.pcie_min_width for ev in evidences] == [4, 2]
