"""site.yml from bare nodes on the lab, two nodes against four: what a bigger cluster costs.

    .venv/bin/python bench/converge_nodes.py [--nodes 2 4] [--runs 1] --yes

For each node count N (issue 15, "N nodes through a switch": converge time for 4 nodes / for 2
nodes) and each run: `gx10 lab down`, `gx10 lab up --nodes N` (bare nodes, images cached), then
site.yml on N's lab inventory (`inventories/lab` for 2, `inventories/lab4` for 4) through
provision(), timed from the call to its return; then a second site.yml on the converged nodes
(the re-apply, which must change nothing). Prints one row per run, then each count's time against
the first count's. The lab is left at the last count's size; a plain `gx10 lab up` puts it back to
two nodes. Destructive for the lab (hence --yes); needs Docker and the lab images (`make lab`).

Exit 0 when every run converged and every re-apply changed nothing, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    """One bare converge and its re-apply on a lab of `nodes`."""

    nodes: int
    converge_s: float
    reapply_s: float
    changed: int
    changed_again: int
    ok: bool


def row(run: Run) -> str:
    return (
        f"{run.nodes:>5} {run.converge_s:>12.1f} {run.changed:>8} "
        f"{run.reapply_s:>12.1f} {run.changed_again:>14}  {'ok' if run.ok else 'FAILED'}"
    )


# inventories/lab4 runs supervised (its group_vars); the two-node lab is converged the same way,
# so the counts compare like for like.
LIKE_FOR_LIKE = {"vllm_supervisor_enabled": True}


def one_run(nodes: int) -> Run:
    from gx10 import lab, provision  # noqa: PLC0415 (after ANSIBLE_CONFIG is set in main)
    from gx10.lab.config import LAB_SIZES  # noqa: PLC0415 (idem)

    inventory = ROOT / LAB_SIZES[nodes]
    cfg = lab.LabConfig.sized(nodes)
    lab.down(log=lambda _line: None)
    lab.up(cfg, log=lambda _line: None)
    started = time.monotonic()
    first = provision(inventory, "site.yml", extravars=LIKE_FOR_LIKE)
    converge_s = time.monotonic() - started
    started = time.monotonic()
    again = provision(inventory, "site.yml", extravars=LIKE_FOR_LIKE)
    reapply_s = time.monotonic() - started
    for result in (first, again):
        for task in result.failed_tasks:
            print(f"  failed: {task.host} {task.task}: {task.message}", file=sys.stderr)
    return Run(
        nodes=nodes,
        converge_s=converge_s,
        reapply_s=reapply_s,
        changed=first.changed_total,
        changed_again=again.changed_total,
        ok=first.ok and again.ok and again.changed_total == 0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4], choices=[2, 4])
    parser.add_argument("--runs", type=int, default=1, help="bare converges per node count")
    parser.add_argument("--yes", action="store_true", help="take the lab down before each run")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("each run takes the lab down and brings it up bare: pass --yes")
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

    print(
        f"{'nodes':>5} {'converge s':>12} {'changed':>8} {'re-apply s':>12} {'changed again':>14}"
    )
    runs: list[Run] = []
    for nodes in args.nodes:
        for _ in range(args.runs):
            runs.append(one_run(nodes))
            print(row(runs[-1]), flush=True)
    medians = {n: statistics.median(r.converge_s for r in runs if r.nodes == n) for n in args.nodes}
    base = args.nodes[0]
    for nodes, median in medians.items():
        print(
            f"{nodes} nodes: converge from bare {median:.1f} s (median of {args.runs}) = "
            f"{median / medians[base]:.2f} x {base} nodes"
        )
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
