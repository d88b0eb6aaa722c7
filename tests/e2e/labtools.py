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
