"""What the head sends when the workers sync, against the checkpoint size (the sync chain).

    .venv/bin/python bench/sync_chain.py -i inventories/lab [--goal 1.05] [--from-scratch] --yes

The target (issue 15, "N nodes through a switch"): the model stage copies the checkpoint down a
chain over rail 0 (head -> worker 1 -> worker 2 -> ..., each worker fetching from the node before
it, all at once), so the head sends it about once whatever the node count; a star (every worker
fetching from the head) would make it N-1 times. This removes every worker's copy of the checkpoint
(gx10_model_dir: destructive, hence --yes; --from-scratch removes the head's too, which then reads
the source again), runs `gx10 model sync -i INV --json`, and prints per node what its peer server
sent (the server's own count of the body bytes it answered with) and the ratio to the checkpoint,
then the head's ratio against the goal and against what a star would send.

Exit 0 when the head sent under goal x the checkpoint, 2 when not, 1 when the run failed.
Needs a converged network stage (the lab: `make lab`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Link:
    """One node's peer server in the chain."""

    node: str
    head: bool
    to: str
    bytes_sent: int
    checkpoint: int

    @property
    def ratio(self) -> float:
        return self.bytes_sent / self.checkpoint if self.checkpoint else float("nan")


def links(report: Mapping[str, Any]) -> list[Link]:
    """`gx10 model sync --json`'s `sent`, head first, then by name."""
    out = [
        Link(
            node=name,
            head=bool(item.get("head")),
            to=str(item.get("to") or ""),
            bytes_sent=int(item.get("bytes_sent") or 0),
            checkpoint=int(item.get("bytes_total") or 0),
        )
        for name, item in (report.get("sent") or {}).items()
    ]
    return sorted(out, key=lambda link: (not link.head, link.node))


def fetched_by_workers(report: Mapping[str, Any], head: str) -> int:
    """Bytes the workers fetched in the run (from the node before each in the chain)."""
    return sum(
        int(node.get("bytes_fetched") or 0)
        for name, node in (report.get("nodes") or {}).items()
        if name != head
    )


def print_links(table: list[Link], nodes: int, goal: float) -> bool:
    """The rows, then the head's verdict; True when the head sent under the goal."""
    header = f"{'node':<12} {'sent to':<12} {'bytes sent':>16} {'x checkpoint':>13}"
    print(header)
    print("-" * len(header))
    for link in table:
        name = f"{link.node} (head)" if link.head else link.node
        print(f"{name:<12} {link.to:<12} {link.bytes_sent:>16,} {link.ratio:>13.3f}")
    head = next((link for link in table if link.head), None)
    if head is None:
        print("the head's peer server did not run (no worker lacked a file?)")
        return False
    star = max(nodes - 1, 1)
    met = head.ratio < goal
    print(
        f"head sent {head.bytes_sent:,} bytes = {head.ratio:.3f} x checkpoint for {nodes} nodes "
        f"(a star would send {star} x); goal < {goal} ({'met' if met else 'NOT met'})"
    )
    return met


def ansible(inventory: str, pattern: str, *args: str) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), pattern, "-i", inventory, *args],
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"ansible {pattern} {args[:2]} failed:\n{done.stdout}{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "lab"))
    parser.add_argument("--goal", type=float, default=1.05, help="head bytes sent / checkpoint")
    parser.add_argument(
        "--from-scratch", action="store_true", help="remove the head's copy too (reads the source)"
    )
    parser.add_argument("--yes", action="store_true", help="remove the workers' copies first")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("this removes every worker's checkpoint copy first: pass --yes")

    pattern = "head:workers" if args.from_scratch else "workers"
    ansible(args.inventory, pattern, "-m", "ansible.builtin.file",
            "-a", "path={{ gx10_model_dir }} state=absent")  # fmt: skip
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "gx10", "model", "sync", "-i", args.inventory, "--json"],
        capture_output=True, text=True, check=False, timeout=6 * 3600,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if run.returncode != 0:
        print(f"the sync failed ({run.returncode}):\n{run.stdout}{run.stderr}", file=sys.stderr)
        return 1
    report = json.loads(run.stdout)
    nodes = len(report.get("nodes") or {})
    table = links(report)
    head = next((link.node for link in table if link.head), "")
    print(
        f"inventory: {args.inventory}; {nodes} nodes, the workers' copies synced in "
        f"{seconds:.1f} s ({fetched_by_workers(report, head):,} bytes fetched by the workers)"
    )
    return 0 if print_links(table, nodes, args.goal) else 2


if __name__ == "__main__":
    sys.exit(main())
