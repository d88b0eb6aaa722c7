"""The lab runs the production shape (issue 26): inventories/lab's settings differ from
inventories/gx10's only where this file says why.

The settings compared are each inventory's group_vars (every file, in Ansible's order; both share
the roles' defaults, so what the group_vars leave unset is equal). Hosts' own variables
(addresses, API hosts) are the machines' and are not compared. A difference that is not declared
fails, naming the variable and both values; so does a declaration that no longer differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
UNSET = "<unset>"

# The machine the nodes are: memory, disk, CPU architecture, link speeds, the OS's renderer.
HARDWARE = {
    "gx10_supported_architectures": "the lab runs on the host's architecture (x86_64 CI)",
    "gx10_node_memory_gib": "a lab node is planned as the 24 GB lab machine, a GB10 as 121.6 GiB",
    "gx10_node_reserve_gib": "what the OS keeps beside vLLM on a 24 GB machine, not on a GB10",
    "preflight_min_memory_mb": "the lab machine's memory, not a GB10's",
    "preflight_min_free_disk_gb": "the lab's checkpoint is 55 MB, DeepSeek V4 Flash 166.9 GB",
    "preflight_min_free_cache_gb": "the simulator's compile caches are a few files",
    "gx10_model_margin_bytes": "the lab nodes share the host's disk",
    "rail_network_renderer": "lab nodes run systemd-networkd; DGX OS NetworkManager",
    "fabric_bandwidth_tool": "veth rails have no RDMA: iperf3 instead of ib_write_bw",
    "fabric_bandwidth": "veth bandwidth on two busy cores is too noisy to gate a converge on",
    "fabric_bandwidth_seconds": "a veth rail measures the same in one second",
    "fabric_min_link_speed_mbps": "veth reports 10000 Mb/s, a CX-7 rail 200000",
    "fabric_min_rail_gbps": "what a veth rail carries on this machine",
    "fabric_min_total_gbps": "what both veth rails carry on this machine",
    "fabric_degraded_band_gbps": "where a throttled veth rail lands (gx10 lab throttle)",
    "vllm_serve_gpus": "lab nodes have no GPU",
    "vllm_serve_devices": "lab nodes have no /dev/infiniband",
    "vllm_serve_memlock": "the sandbox's Docker cannot raise memlock above the host's limit",
    "vllm_serve_shm_size": "the lab node's shared memory, sized to the lab machine",
    "vllm_serve_kv_bytes_per_token": "the lab's synthetic checkpoint's KV cache",
    "vllm_serve_runtime_overhead_gib": "the simulator's runtime, not a large MoE model's",
}

# Test equipment: where the simulators stand in for hardware, and the lab's own services.
TEST_EQUIPMENT = {
    "gx10_model_source": "the lab's NAS stand-in serves the synthetic checkpoint",
    "vllm_image_repository": "the lab registry serves the simulator under the image's path",
    "nccl_env_sysfs_root": "the RDMA sysfs simulator's tree",
    "memory_guard_drop_caches_file": "the nodes share the host's kernel: drops go to a file",
    "vllm_serve_extra_env": "the simulators' knobs (sysfs root, boot seconds, node memory)",
    "vllm_serve_extra_volumes": "the simulators' state, mounted into the ranks",
}

# Timings for a pair that boots in seconds instead of minutes (the same code waits on both).
LAB_TIMINGS = {
    name: "the lab's pair boots in seconds"
    for name in (
        "vllm_serve_worker_timeout",
        "vllm_serve_head_timeout",
        "vllm_serve_progress_interval",
        "vllm_serve_wait_poll_interval",
        "vllm_supervisor_heartbeat_interval",
        "vllm_supervisor_heartbeat_timeout",
        "vllm_supervisor_request_timeout",
        "vllm_supervisor_lone_worker_timeout",
        "vllm_supervisor_worker_ready_timeout",
        "vllm_supervisor_head_ready_timeout",
        "vllm_supervisor_probe_interval",
        "vllm_supervisor_probe_timeout",
        "vllm_supervisor_stall_threshold",
        "vllm_supervisor_backoff_initial",
        "vllm_supervisor_backoff_max",
        "vllm_supervisor_breaker_max_restarts",
        "vllm_supervisor_breaker_window",
    )
}

# Not yet the production shape: issue 26 turns supervision on in the lab too (the end-to-end
# files then start from it instead of switching it on and back). The gateway, and its key from
# `gx10 keys init`'s file, are on in both.
NOT_YET = {
    "vllm_supervisor_enabled": "issue 26: the lab serves unsupervised; inventories/lab4 does not",
}

DECLARED = {**HARDWARE, **TEST_EQUIPMENT, **LAB_TIMINGS, **NOT_YET}


def settings(inventory: str) -> dict[str, Any]:
    """The inventory's group_vars, every file, later files over earlier ones (all, then groups
    in name order, as Ansible merges groups of the same depth)."""
    directory = ROOT / "inventories" / inventory / "group_vars"
    files = sorted(directory.glob("*.yml"), key=lambda path: (path.stem != "all", path.name))
    values: dict[str, Any] = {}
    for path in files:
        values.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return values


def test_the_lab_differs_from_real_nodes_only_where_it_says_why() -> None:
    real, lab = settings("gx10"), settings("lab")
    differing = {
        name: (real.get(name, UNSET), lab.get(name, UNSET))
        for name in sorted(real.keys() | lab.keys())
        if real.get(name, UNSET) != lab.get(name, UNSET)
    }
    undeclared = [
        f"{name}: inventories/gx10 {values[0]!r}, inventories/lab {values[1]!r}"
        for name, values in differing.items()
        if name not in DECLARED
    ]
    assert not undeclared, (
        "the lab differs from real nodes here without saying why (make it the same, or declare "
        "it in tests/unit/test_inventory_shape.py with the reason):\n" + "\n".join(undeclared)
    )
    stale = sorted(DECLARED.keys() - differing.keys())
    assert not stale, f"declared as differing, but the same in both inventories: {stale}"


def test_the_declared_differences_are_disjoint() -> None:
    groups = (HARDWARE, TEST_EQUIPMENT, LAB_TIMINGS, NOT_YET)
    assert sum(len(group) for group in groups) == len(DECLARED)
