"""site.yml on the lab through provision(): converges, runs clean in check mode, fails clearly.

The re-apply with changed=0 on a converged lab is test_network.py's hardware swap: its second
site.yml after the swap changes nothing and restarts nothing on either node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh, task_results

from gx10 import ProvisionResult, lab, provision


@pytest.fixture(scope="module")
def first_run(serving_lab: ProvisionResult) -> ProvisionResult:
    """The session's shared converge (conftest): this file runs with the read-only files and
    leaves the lab as it found it (each fault it injects is undone)."""
    return serving_lab


def test_site_converges_on_the_lab(first_run: ProvisionResult) -> None:
    assert first_run.ok, first_run.failed_tasks
    assert set(first_run.hosts) >= {"gx10-a", "gx10-b"}
    for host in ("gx10-a", "gx10-b"):
        assert first_run.hosts[host].failed == 0
        assert first_run.hosts[host].unreachable == 0
    # The last stage used the service through the official openai client: models, chat, stream
    # and a parsed tool call (smoke.yml alone runs the same checks).
    smoke = task_results(first_run, "Run the four smoke checks")
    assert smoke["localhost"]["rc"] == 0, smoke
    assert "model deepseek-v4-flash" in smoke["localhost"]["stdout"].splitlines()[-1]


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


def test_preflight_counts_the_compile_caches_on_the_checkpoints_disk(
    first_run: ProvisionResult,
) -> None:
    """The lab's caches and checkpoint share each node's filesystem: both needs add up."""
    result = provision(
        LAB_INVENTORY, "preflight.yml", extravars={"preflight_min_free_cache_gb": 10_000_000}
    )
    assert not result.ok
    failed = {t.host: t.message for t in result.failed_tasks}
    assert set(failed) == {"gx10-a", "gx10-b"}
    for host, message in failed.items():
        assert f"{host}: free disk at /srv/models/DeepSeek-V4-Flash-0731: found " in message
        assert (
            "expected at least 10000002 GB (preflight_min_free_disk_gb + "
            "preflight_min_free_cache_gb: the compile caches share the filesystem)"
        ) in message


FAKE_ROOT = "/run/gx10-test/kernel"


def _fake_kernel(node: str, release: str, cmdline: str, cma_free_kb: int) -> None:
    node_sh(
        node,
        f"set -e; rm -rf {FAKE_ROOT}; mkdir -p {FAKE_ROOT}/proc/sys/kernel {FAKE_ROOT}/sys/kernel;"
        f" echo {release} > {FAKE_ROOT}/proc/sys/kernel/osrelease;"
        f" echo '{cmdline}' > {FAKE_ROOT}/proc/cmdline;"
        f" printf 'MemTotal: 125000000 kB\\nCmaTotal: 0 kB\\nCmaFree: {cma_free_kb} kB\\n'"
        f" > {FAKE_ROOT}/proc/meminfo; echo 0 > {FAKE_ROOT}/sys/kernel/kexec_crash_size",
    )


@pytest.fixture
def kernel_trees(lab_up: lab.LabStatus) -> Iterator[None]:
    """gx10-a as on the kernel the reports run cleanly, gx10-b on 7.0 with KHO on, as a node
    shows itself in /proc and /sys (the preflight role reads them at preflight_proc_root)."""
    _fake_kernel("gx10-a", "6.17.0-1032-nvidia", "BOOT_IMAGE=/vmlinuz ro quiet", 0)
    _fake_kernel("gx10-b", "7.0.0-1019-nvidia", "BOOT_IMAGE=/vmlinuz ro quiet", 940604)
    yield
    for node in ("gx10-a", "gx10-b"):
        node_sh(node, f"rm -rf {FAKE_ROOT}")


def test_preflight_refuses_a_known_bad_kernel_build_with_the_fix(kernel_trees: None) -> None:
    roots = {
        "preflight_proc_root": f"{FAKE_ROOT}/proc",
        "preflight_sys_root": f"{FAKE_ROOT}/sys",
    }
    result = provision(LAB_INVENTORY, "preflight.yml", extravars=roots)
    assert not result.ok
    messages = {t.host: t.message for t in result.failed_tasks}
    assert set(messages) == {"gx10-b"}, messages
    message = messages["gx10-b"]
    assert "gx10-b: kernel build is not a known-bad one: found kho-cma-pinning: kernel " in message
    assert "7.0.0-1019-nvidia booted without kho=off; CmaFree 940604 kB > CmaTotal 0 kB" in message
    assert "update-grub" in message
    assert "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259" in message
    # An inventory that accepts the fault by its id passes (and is told the id is known).
    accepted = provision(
        LAB_INVENTORY,
        "preflight.yml",
        extravars={**roots, "preflight_known_faults_ignore": ["kho-cma-pinning"]},
    )
    assert accepted.ok, accepted.failed_tasks
