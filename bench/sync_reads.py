"""Bytes each node reads back from its own disk during a sync, against the checkpoint size.

    .venv/bin/python bench/sync_reads.py [-i inventories/lab] [--goal 0.05] --yes

The target (issue 15, "each byte read once per node"): a fetched file is hashed as it is received
and never read again to verify it, so a node's disk reads during a sync from scratch are a small
fraction of the checkpoint (goal: under 0.05 x). This removes every node's copy of the checkpoint
(gx10_model_dir: destructive, hence --yes), runs `gx10 model sync -i INV --json`, and prints per
node the checkpoint size, the bytes it received, the bytes it read back from disk and their ratio,
twice:

* **ours**: `model_fetch`'s own counters (`bytes_read_back`: resumed `.partial` prefixes and the
  verify passes' reads), summed over the node's passes by `gx10 model sync`;
* **kernel**: measured without them. For the run, each node's `ansible_python_interpreter` is a
  wrapper (bench/sync_reads_io.py, copied to /var/tmp/gx10-bench/) that runs the real Python and
  logs the difference of its own /proc/self/io across each module run: Linux adds a reaped
  child's counters to its parent's, so that is the module process's `rchar` (every byte it
  read() from a file or pipe) and `read_bytes` (what the block layer read for it). The sync uses
  a copy of the inventory with host_vars naming the wrapper; the inventory itself is untouched.

Why rchar and not the block layer: `read_bytes`, a container's cgroup `io.stat` (v2) or
`blkio.throttle.io_service_bytes` (v1) count only reads the page cache did not absorb. A file
re-read right after it was written is in the page cache, so on the lab (a 55 MB checkpoint, a
host with GBs of RAM) they show about 0 whether or not a node re-reads what it fetched: they
cannot tell the two apart. rchar counts the reads themselves, cached or not, which is the
behaviour under test; on a GB10 (166.9 GB through 121 GB of memory) a re-read would also reach the
disk. Socket receives (the HTTP download) are not in rchar, so only file reads remain. A module
run also reads its own code (Python's startup, the AnsiballZ payload on stdin): that cost is
measured per node by running `model_fetch` in check mode on an empty directory with the same
file list (it reads nothing of a checkpoint), and subtracted once per `model_fetch` run. What
remains is file reads during the sync: checkpoint bytes, plus the verification cache file
(`.gx10-verify-cache.json`, rewritten once per installed file: a few hundred KB in all), which
ours does not count. A `dir` source's reads are file reads too: on the node that reads one (the
head) its bytes from the source are subtracted. Not measured: the head's peer server, which
reads each file once per worker it serves (serving, not verifying).

Exit 0 when every node is under the goal by both measures, 2 when not, 1 when the run failed.
Needs a converged network stage (the lab: `make lab`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gx10.bench.nodes import Node, load_cluster
from gx10.model import load_manifest

ROOT = Path(__file__).resolve().parents[1]
WRAPPER_SOURCE = Path(__file__).resolve().with_name("sync_reads_io.py")
REMOTE_DIR = "/var/tmp/gx10-bench"
WRAPPER = f"{REMOTE_DIR}/python3-io"
IO_LOG = f"{REMOTE_DIR}/io.jsonl"
BASELINE_DEST = f"{REMOTE_DIR}/empty-model-dir"
MODEL_FETCH = "ansible_collections.gx10.cluster.plugins.modules.model_fetch"
BASELINE_RUNS = 3
HOST_VARS_FILE = "zz-gx10-bench-io.yml"


@dataclass(frozen=True)
class Row:
    """One node's figures."""

    node: str
    checkpoint: int
    received: int
    hashed_receiving: int
    read_back: int
    """Ours: model_fetch's bytes_read_back over the node's passes."""
    runs: int
    """model_fetch runs on the node during the sync."""
    rchar: int
    """The kernel's file read() bytes of those runs, all together."""
    baseline: int
    """rchar of one model_fetch run that reads nothing of a checkpoint."""
    source_reads: int
    """File reads from a dir source (subtracted: they are the fetch, not a read-back)."""
    block_reads: int
    """The block layer's reads (read_bytes) of those runs: page cache misses only."""

    @property
    def measured(self) -> int:
        """The kernel's count of file bytes read back: rchar less the runs' own code and the
        source reads."""
        return self.rchar - self.runs * self.baseline - self.source_reads

    def ratio(self, value: int) -> float:
        return value / self.checkpoint if self.checkpoint else float("nan")


def rows(
    report: Mapping[str, Any],
    io_logs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    dir_source_node: str | None = None,
) -> list[Row]:
    """Per node: `gx10 model sync --json`'s totals beside the wrapper's log of the node."""
    out = []
    for name, node in report["nodes"].items():
        runs = [r for r in io_logs.get(name, ()) if r.get("module") == MODEL_FETCH]
        baseline = [int(r["rchar"]) for r in runs if r.get("dest") == BASELINE_DEST]
        synced = [r for r in runs if r.get("dest") != BASELINE_DEST]
        if not baseline:
            raise ValueError(f"{name}: no baseline run of model_fetch in the wrapper's log")
        out.append(
            Row(
                node=name,
                checkpoint=int(node["bytes_total"]),
                received=int(node["bytes_received"]),
                hashed_receiving=int(node["bytes_hashed_receiving"]),
                read_back=int(node["bytes_read_back"]),
                runs=len(synced),
                rchar=sum(int(r["rchar"]) for r in synced),
                baseline=int(statistics.median(baseline)),
                source_reads=int(node["bytes_fetched"]) if name == dir_source_node else 0,
                block_reads=sum(int(r.get("read_bytes", 0)) for r in synced),
            )
        )
    return out


def parse_log(text: str) -> list[dict[str, Any]]:
    """The wrapper's JSON lines (a line cut by a crash is skipped)."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def measuring_inventory(inventory: Path, into: Path, nodes: Sequence[str]) -> Path:
    """A copy of `inventory` (a directory, or a file with its directory) under `into`, in which
    every node's Python is the wrapper: host_vars, which win over the inventory's host, group and
    `all` variables. Returns the copy's path to pass as `-i`."""
    source_dir = inventory if inventory.is_dir() else inventory.parent
    copy = into / source_dir.name
    shutil.copytree(source_dir, copy, symlinks=True)
    host_vars = copy / "host_vars"
    host_vars.mkdir(exist_ok=True)
    for name in nodes:
        directory = host_vars / name
        if directory.is_dir():
            target, data = directory / HOST_VARS_FILE, {}
        else:
            found = [host_vars / f"{name}{ext}" for ext in ("", ".yml", ".yaml", ".json")]
            target = next((p for p in found if p.is_file()), host_vars / f"{name}.yml")
            try:
                data = yaml.safe_load(target.read_text()) if target.is_file() else {}
            except yaml.YAMLError as exc:  # a vaulted file, say
                raise SystemExit(
                    f"{target}: cannot add the interpreter to it ({exc}); give the node its "
                    "variables in a host_vars/NODE/ directory instead"
                ) from None
        data = dict(data or {})
        data["ansible_python_interpreter"] = WRAPPER
        target.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy if inventory.is_dir() else copy / inventory.name


def on_node(node: Node, script: str, *, stdin: str | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        node.argv(["sh", "-c", script], privileged=True),
        input=stdin, capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{node.name}: `{script}` failed ({done.returncode}): {done.stderr}")
    return done.stdout


def wrapper_for(python: str) -> str:
    """The wrapper's source, running `python` (the node's interpreter) and run by it."""
    source = WRAPPER_SOURCE.read_text()
    first, rest = source.split("\n", 1)
    assert first == "#!/usr/bin/python3", first
    default = '"/usr/bin/python3")'
    assert rest.count(default) == 1
    return f"#!{python}\n" + rest.replace(default, f"{json.dumps(python)})")


def install_wrapper(node: Node, python: str) -> None:
    """The wrapper, written as root (with become, modules run through it as root), and its log,
    which any user a module runs as can append to; both removed at the end."""
    on_node(
        node,
        f"mkdir -p -m 755 {REMOTE_DIR} && cat > {WRAPPER} && chmod 755 {WRAPPER} "
        f"&& : > {IO_LOG} && chmod 666 {IO_LOG} && rm -rf {BASELINE_DEST}",
        stdin=wrapper_for(python),
    )


def ansible(inventory: Path | str, pattern: str, *args: str) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), pattern, "-i", str(inventory), *args],
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"ansible {pattern} {args[:2]} failed:\n{done.stdout}{done.stderr}")


def baseline(inventory: Path, files: list[dict[str, Any]]) -> None:
    """model_fetch in check mode on an empty directory, with the checkpoint's file list: the
    module's own reads (startup, payload), none of a checkpoint. Never contacts the source."""
    args = {
        "files": files,
        "dest": BASELINE_DEST,
        "source": {"type": "http", "base_url": "http://127.0.0.1:9/"},
    }
    for _ in range(BASELINE_RUNS):
        ansible(inventory, "head:workers", "-m", "gx10.cluster.model_fetch", "-a",
                json.dumps(args), "--check")  # fmt: skip


def print_rows(table: list[Row], goal: float) -> bool:
    header = (
        f"{'node':<10} {'checkpoint':>15} {'received':>15} {'read back':>12} {'ratio':>7}"
        f" | {'kernel: file reads':>18} {'ratio':>7} {'runs':>4} {'per-run code':>12}"
        f" {'block reads':>12}"
    )
    print(header)
    print("-" * len(header))
    met = True
    for row in table:
        ours, kernel = row.ratio(row.read_back), row.ratio(row.measured)
        met = met and ours < goal and kernel < goal
        print(
            f"{row.node:<10} {row.checkpoint:>15,} {row.received:>15,} {row.read_back:>12,}"
            f" {ours:>7.4f} | {row.measured:>18,} {kernel:>7.4f} {row.runs:>4}"
            f" {row.baseline:>12,} {row.block_reads:>12,}"
        )
        if row.hashed_receiving != row.received:
            print(f"  {row.node}: {row.received - row.hashed_receiving:,} bytes received unhashed")
        if row.source_reads:
            print(f"  {row.node}: {row.source_reads:,} bytes read from the dir source subtracted")
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "lab"))
    parser.add_argument("--goal", type=float, default=0.05, help="bytes read back / checkpoint")
    parser.add_argument("--keep", action="store_true", help=f"leave {REMOTE_DIR} on the nodes")
    parser.add_argument("--yes", action="store_true", help="remove every node's copy first")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("this removes every node's checkpoint copy first: pass --yes")

    extra = ("gx10_model_manifest", "gx10_model_source", "ansible_python_interpreter")
    cluster = load_cluster([args.inventory], need_api_key=False, extra=extra)
    settings = cluster.settings
    manifest = load_manifest(Path(str(settings["gx10_model_manifest"])))
    files = [f.to_dict() for f in manifest.files]
    source = settings.get("gx10_model_source") or {}
    dir_source_node = cluster.head.name if source.get("type") == "dir" else None
    python = str(settings.get("ansible_python_interpreter") or "")
    if not python.startswith("/"):  # unset, or auto discovery: the usual path
        python = "/usr/bin/python3"

    with tempfile.TemporaryDirectory(prefix="gx10-sync-reads-") as tmp:
        inventory = measuring_inventory(
            Path(args.inventory).resolve(), Path(tmp), [n.name for n in cluster.nodes]
        )
        for node in cluster.nodes:
            install_wrapper(node, python)
        try:
            ansible(args.inventory, "head:workers", "-m", "ansible.builtin.file",
                    "-a", "path={{ gx10_model_dir }} state=absent")  # fmt: skip
            baseline(inventory, files)
            started = time.monotonic()
            run = subprocess.run(
                [sys.executable, "-m", "gx10", "model", "sync", "-i", str(inventory), "--json"],
                capture_output=True, text=True, check=False, timeout=3600,
            )  # fmt: skip
            seconds = time.monotonic() - started
            if run.returncode != 0:
                print(f"the sync failed ({run.returncode}):\n{run.stdout}{run.stderr}",
                      file=sys.stderr)  # fmt: skip
                return 1
            logs = {n.name: parse_log(on_node(n, f"cat {IO_LOG}")) for n in cluster.nodes}
        finally:
            if not args.keep:
                for node in cluster.nodes:
                    on_node(node, f"rm -rf {REMOTE_DIR}")

    report = json.loads(run.stdout)
    table = rows(report, logs, dir_source_node=dir_source_node)
    print(f"inventory: {args.inventory}; a sync of every node's copy from scratch: {seconds:.1f} s")
    met = print_rows(table, args.goal)
    verdict = "met" if met else "NOT met"
    print(f"goal: bytes read back from disk / checkpoint < {args.goal} on every node ({verdict})")
    return 0 if met else 2


if __name__ == "__main__":
    sys.exit(main())
