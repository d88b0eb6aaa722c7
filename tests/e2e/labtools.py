"""Helpers for the end-to-end tests: run commands in lab nodes."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB_INVENTORY = ROOT / "inventories" / "lab"


def node_sh(node: str, script: str, *, check: bool = True) -> str:
    """Run a shell snippet inside a lab node and return its stdout."""
    proc = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{node}: `{script}` failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def rank_container(node: str, container: str = "gx10-vllm") -> dict[str, str]:
    """The rank container's id and start time in a node ({} when none runs)."""
    out = node_sh(
        node,
        f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' {container} 2>/dev/null",
        check=False,
    ).split()
    return {"id": out[0], "started": out[1]} if len(out) == 2 else {}
