"""Bytes read from the checkpoint source for a whole-cluster sync, against the checkpoint size.

    .venv/bin/python bench/source_reads.py [-i inventories/lab] [--yes]

The target (issue 5): a two-node sync reads the source once, 1.0 x the checkpoint; the workers
copy the head's verified files over the first rail. This removes every node's copy of the
checkpoint (gx10_model_dir: destructive, hence --yes), runs the model stage with
`gx10 model sync -i INV --json`, and prints, per node, the bytes it fetched and from where, then
the ratio of bytes read from the source to the manifest's total. Needs a converged network stage
(the lab: `make lab`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gx10.bench.nodes import load_cluster

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "lab"))
    parser.add_argument("--yes", action="store_true", help="remove every node's copy first")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("this removes every node's checkpoint copy first: pass --yes")

    removed = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"), "head:workers", "-i", args.inventory,
            "-m", "ansible.builtin.file", "-a", "path={{ gx10_model_dir }} state=absent",
        ],
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )  # fmt: skip
    if removed.returncode != 0:
        print(f"removing the copies failed:\n{removed.stdout}{removed.stderr}", file=sys.stderr)
        return 1

    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "gx10", "model", "sync", "-i", args.inventory, "--json"],
        capture_output=True, text=True, check=False, timeout=3600,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if run.returncode != 0:
        print(f"the sync failed ({run.returncode}):\n{run.stdout}{run.stderr}", file=sys.stderr)
        return 1
    report = json.loads(run.stdout)
    nodes = report["nodes"]
    head = load_cluster([args.inventory], need_api_key=False).head.name
    manifest_total = max(n["bytes_total"] for n in nodes.values())

    print(f"inventory: {args.inventory}; sync of every node's copy from scratch: {seconds:.1f} s")
    print(f"{'node':<10} {'fetched bytes':>15}  from")
    for name, node in nodes.items():
        origin = "the source" if name == head else f"{head} over the first rail"
        print(f"{name:<10} {node['bytes_fetched']:>15,}  {origin}")
    from_source = nodes[head]["bytes_fetched"]
    ratio = from_source / manifest_total if manifest_total else float("nan")
    print(f"checkpoint (manifest total): {manifest_total:,} bytes")
    verdict = "met" if abs(ratio - 1.0) < 1e-9 else "NOT met"
    print(f"bytes read from the source: {from_source:,} = {ratio:.2f} x the checkpoint ({verdict})")
    return 0 if verdict == "met" else 2


if __name__ == "__main__":
    sys.exit(main())
