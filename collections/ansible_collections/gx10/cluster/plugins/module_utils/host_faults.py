# SPDX-License-Identifier: Apache-2.0
"""Known-bad host builds: a table of kernel builds with field-reported faults, and the judge.

Pure Python (standard library only), shared by the ``gx10.cluster.host_kernel_info`` module (the
preflight stage refuses a node that matches, with the fix) and ``gx10 doctor`` (which names it),
and unit tested.

What is read of a node (``read_host``): the kernel release (``<proc>/sys/kernel/osrelease``, what
``uname -r`` prints), the kernel command line (``<proc>/cmdline``), ``CmaTotal`` and ``CmaFree``
from ``<proc>/meminfo`` and ``<sys>/kernel/kexec_crash_size``. Every entry of ``KNOWN_FAULTS``
says which builds it concerns, which evidence shows the fault is live on this boot, what takes it
away (a kernel argument, another kernel), and the reports it follows (repository and issue).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = 1


@dataclass(frozen=True)
class KnownFault:
    """One known-bad build: which kernels, when the fault is live, and the way out."""

    id: str
    summary: str
    # Kernel releases (uname -r) the reports name, as regular expressions (full match).
    releases: tuple[str, ...]
    # A kernel argument that takes the fault away on these builds (checked on the cmdline).
    cleared_by_argument: str
    fix: str
    sources: tuple[str, ...]

    def concerns(self, release: str) -> bool:
        return any(re.fullmatch(pattern, release) for pattern in self.releases)


KNOWN_FAULTS: tuple[KnownFault, ...] = (
    KnownFault(
        id="kho-cma-pinning",
        summary=(
            "Linux 7.0 with Kexec HandOver on by default (CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y) "
            "gives about 9 GiB of scratch memory back as CMA pageblocks; long-term pinning of "
            "GPU memory for RDMA then fails, so NCCL over RoCE dies at init with `Call to "
            "ibv_reg_mr_iova2 failed with error Cannot allocate memory` and the engine never "
            "binds, with nothing in dmesg"
        ),
        releases=(r"7\.0\.0-[0-9]+-nvidia(-64k)?", r"7\.0\.0-[0-9]+-generic(-64k)?"),
        cleared_by_argument="kho=off",
        fix=(
            "add kho=off to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run `update-grub` "
            "and reboot (safe when /sys/kernel/kexec_crash_size is 0: no crash kernel is "
            "reserved); or boot the 6.17 kernel the reports run cleanly (6.17.0-1032-nvidia); "
            "afterwards CmaFree in /proc/meminfo reads 0"
        ),
        sources=(
            "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259",
            "MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks#14",
            "NVIDIA/NV-Kernels#591",
            "eugr/spark-vllm-docker#392",
        ),
    ),
)

_MEMINFO = re.compile(r"^(CmaTotal|CmaFree):\s+([0-9]+)\s*kB\s*$", re.MULTILINE)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_host(proc_root: str = "/proc", sys_root: str = "/sys") -> dict[str, Any]:
    """What this node's kernel says of itself; a value it could not read is None."""
    release = _read(os.path.join(proc_root, "sys", "kernel", "osrelease"))
    cmdline = _read(os.path.join(proc_root, "cmdline"))
    meminfo = _read(os.path.join(proc_root, "meminfo")) or ""
    cma = {key: int(value) for key, value in _MEMINFO.findall(meminfo)}
    crash = _read(os.path.join(sys_root, "kernel", "kexec_crash_size"))
    return {
        "schema": SCHEMA,
        "release": release.strip() if release is not None else None,
        "cmdline": cmdline.replace("\0", " ").split() if cmdline is not None else None,
        "cma_total_kb": cma.get("CmaTotal"),
        "cma_free_kb": cma.get("CmaFree"),
        "kexec_crash_size": int(crash) if crash and crash.strip().isdigit() else None,
    }


def _kho_live(host: Mapping[str, Any]) -> str:
    """The tell of donated KHO scratch (CmaFree above CmaTotal), described, or ''."""
    total, free = host.get("cma_total_kb"), host.get("cma_free_kb")
    if isinstance(total, int) and isinstance(free, int) and free > total:
        return f"; CmaFree {free} kB > CmaTotal {total} kB in /proc/meminfo (the scratch area)"
    return ""


def known_faults(
    host: Mapping[str, Any],
    ignore: Sequence[str] = (),
    table: Sequence[KnownFault] = KNOWN_FAULTS,
) -> list[dict[str, Any]]:
    """The table's faults that this node shows: id, summary, evidence, fix and sources.

    A fault counts when the node runs a build it names and the kernel argument that clears it is
    not on the command line. ``ignore`` lists fault ids the inventory has accepted.
    """
    release = str(host.get("release") or "")
    cmdline = [str(token) for token in host.get("cmdline") or []]
    found: list[dict[str, Any]] = []
    for fault in table:
        if fault.id in ignore or not fault.concerns(release):
            continue
        if fault.cleared_by_argument in cmdline:
            continue
        evidence = f"kernel {release} booted without {fault.cleared_by_argument}"
        if fault.id == "kho-cma-pinning":
            evidence += _kho_live(host)
            crash = host.get("kexec_crash_size")
            if isinstance(crash, int) and crash > 0:
                evidence += f"; a crash kernel is reserved (kexec_crash_size {crash})"
        found.append(
            {
                "id": fault.id,
                "summary": fault.summary,
                "evidence": evidence,
                "fix": fault.fix,
                "sources": list(fault.sources),
            }
        )
    return found


def unknown_ids(ignore: Sequence[str], table: Sequence[KnownFault] = KNOWN_FAULTS) -> list[str]:
    """The ids in ``ignore`` that name no fault of the table (a typo would ignore nothing)."""
    known = {fault.id for fault in table}
    return [name for name in ignore if name not in known]
