# SPDX-License-Identifier: Apache-2.0
"""The known-bad builds table: what is read of a node, when a fault counts, and the module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils import host_faults
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_module

BAD = "7.0.0-1019-nvidia"
MEMINFO_KHO = (
    "MemTotal:       125000000 kB\nCmaTotal:              0 kB\nCmaFree:          940604 kB\n"
)


def fake_host(
    root: Path,
    release: str = BAD,
    cmdline: str = "BOOT_IMAGE=/vmlinuz ro quiet splash",
    meminfo: str = MEMINFO_KHO,
    crash: str | None = "0",
) -> tuple[str, str]:
    proc, sys = root / "proc", root / "sys"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text(release + "\n")
    (proc / "cmdline").write_text(cmdline + "\n")
    (proc / "meminfo").write_text(meminfo)
    (sys / "kernel").mkdir(parents=True)
    if crash is not None:
        (sys / "kernel" / "kexec_crash_size").write_text(crash + "\n")
    return str(proc), str(sys)


def test_what_is_read_of_a_node(tmp_path: Path) -> None:
    assert host_faults.read_host(*fake_host(tmp_path)) == {
        "schema": 1,
        "release": BAD,
        "cmdline": ["BOOT_IMAGE=/vmlinuz", "ro", "quiet", "splash"],
        "cma_total_kb": 0,
        "cma_free_kb": 940604,
        "kexec_crash_size": 0,
    }


def test_what_cannot_be_read_is_none(tmp_path: Path) -> None:
    assert host_faults.read_host(str(tmp_path / "none"), str(tmp_path / "none")) == {
        "schema": 1,
        "release": None,
        "cmdline": None,
        "cma_total_kb": None,
        "cma_free_kb": None,
        "kexec_crash_size": None,
    }


def _host(**change: Any) -> dict[str, Any]:
    return {
        "release": BAD,
        "cmdline": ["ro", "quiet"],
        "cma_total_kb": 0,
        "cma_free_kb": 940604,
        "kexec_crash_size": 0,
        **change,
    }


def test_the_kho_build_without_kho_off_is_a_fault_with_its_evidence_fix_and_reports() -> None:
    (fault,) = host_faults.known_faults(_host())
    assert fault["id"] == "kho-cma-pinning"
    assert fault["evidence"] == (
        "kernel 7.0.0-1019-nvidia booted without kho=off; CmaFree 940604 kB > CmaTotal 0 kB in "
        "/proc/meminfo (the scratch area)"
    )
    assert "kho=off" in fault["fix"]
    assert "6.17.0-1032-nvidia" in fault["fix"]
    assert "ibv_reg_mr_iova2" in fault["summary"]
    assert "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259" in fault["sources"]


@pytest.mark.parametrize(
    "release", ["7.0.0-1019-nvidia", "7.0.0-31-generic", "7.0.0-1021-nvidia-64k"]
)
def test_every_reported_7_0_build_counts(release: str) -> None:
    assert [f["id"] for f in host_faults.known_faults(_host(release=release))] == [
        "kho-cma-pinning"
    ]


@pytest.mark.parametrize(
    "host",
    [
        _host(cmdline=["ro", "kho=off"]),  # the fix is applied
        _host(release="6.17.0-1032-nvidia"),  # the kernel the reports run cleanly
        _host(release="6.1.0-28-amd64"),  # the lab host's kind of kernel
        _host(release=None),  # not readable: nothing is claimed
    ],
)
def test_no_fault_where_the_build_or_the_argument_clears_it(host: dict[str, Any]) -> None:
    assert host_faults.known_faults(host) == []


def test_a_reserved_crash_kernel_is_named_since_the_fix_drops_it() -> None:
    (fault,) = host_faults.known_faults(_host(kexec_crash_size=536870912, cma_free_kb=0))
    assert fault["evidence"] == (
        "kernel 7.0.0-1019-nvidia booted without kho=off; a crash kernel is reserved "
        "(kexec_crash_size 536870912)"
    )


def test_an_accepted_fault_is_not_reported_and_unknown_ids_are_named() -> None:
    assert host_faults.known_faults(_host(), ignore=["kho-cma-pinning"]) == []
    assert host_faults.unknown_ids(["kho-cma-pinning", "kho"]) == ["kho"]


def _module(tmp_path: Path, **args: Any) -> dict[str, Any]:
    return run_module(tmp_path, "gx10.cluster.host_kernel_info", args)


def test_the_module_reports_the_fault_of_a_bad_build_and_accepts_an_ignored_one(
    tmp_path: Path,
) -> None:
    proc, sys_root = fake_host(tmp_path)
    got = _module(tmp_path, proc_root=proc, sys_root=sys_root)
    assert got["changed"] is False
    assert got["host"]["release"] == BAD
    assert [f["id"] for f in got["faults"]] == ["kho-cma-pinning"]
    got = _module(tmp_path, proc_root=proc, sys_root=sys_root, ignore=["kho-cma-pinning"])
    assert got["faults"] == []
    with pytest.raises(AssertionError, match="ignore: kho is no known fault"):
        _module(tmp_path, proc_root=proc, sys_root=sys_root, ignore=["kho"])
