"""The model stage on the lab: faults on one node, resume, re-sync over the rail, bad input.

Every test starts from a converged model stage (both nodes verified) and leaves it converged.
Per-node figures come from the model_fetch results in the run's ansible-runner events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import (
    CHECKPOINT_DIGEST,
    LAB_INVENTORY,
    NODES,
    RANK_SEES_CHECKPOINT,
    node_sh,
    task_results,
)

from gx10 import ProvisionResult, lab, provision

MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"
MANIFEST_FILE = LAB_INVENTORY / "files" / "model-manifest.yml"
MANIFEST = yaml.safe_load(MANIFEST_FILE.read_text())
TOTAL = sum(f["size"] for f in MANIFEST["files"])
SHARD = "model-00007-of-00048.safetensors"
RAIL0 = "enp1s0f0np0"
SHARD_SHA256 = next(f["sha256"] for f in MANIFEST["files"] if f["path"] == SHARD)
SHARD_SIZE = next(f["size"] for f in MANIFEST["files"] if f["path"] == SHARD)
FETCH_TASK = "Fetch what is missing or bad, verified before it gets its name"
NEED_TASK = "Find what this worker lacks, and check its free disk"
SERVED_TASK = "Publish the bytes sent as model_sync_served"
HEAD = "gx10-a"


def _model(**extravars: object) -> ProvisionResult:
    return provision(LAB_INVENTORY, "site.yml", tags=["model"], extravars=extravars or None)


def _served(run: ProvisionResult) -> dict[str, dict[str, Any]]:
    """node -> its peer server's `model_sync_served` in this run (the task runs delegated to the
    node from a worker, so the fact names the node)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run.artifact_dir / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == SERVED_TASK:
            fact = data["res"]["ansible_facts"]["model_sync_served"]
            found[fact["node"]] = fact
    return found


def _inodes(node: str) -> dict[str, str]:
    out = node_sh(node, f"cd {MODEL_DIR} && find . -type f ! -name '.gx10*' -printf '%i %P\\n'")
    return {path: inode for inode, path in (line.split(" ", 1) for line in out.splitlines())}


def _sha256(node: str, path: str) -> str:
    return node_sh(node, f"sha256sum {MODEL_DIR}/{path}").split()[0]


@pytest.fixture(scope="module")
def synced(serving_lab: ProvisionResult) -> Iterator[ProvisionResult]:
    """The session's shared converge synced both copies (workers over rail 0). A test that
    removes a copy leaves the serving rank on the deleted directory (its bind mount keeps it):
    the file ends by restarting the pair then, as the serve stage does for a new copy."""
    yield serving_lab
    stale = [n for n in NODES if "no" in node_sh(n, RANK_SEES_CHECKPOINT, check=False).split()]
    if stale:
        again = provision(LAB_INVENTORY, "serve.yml")
        assert again.ok, again.failed_tasks


def _copies() -> dict[str, str]:
    """node -> a digest of its copy's files (names, bytes), not counting gx10's own records."""
    return {node: node_sh(node, CHECKPOINT_DIGEST, check=False) for node in NODES}


@pytest.fixture(autouse=True)
def converged_after(synced: ProvisionResult) -> Iterator[None]:
    """A test that leaves a copy changed (a removed, flipped or partial file) gets the model
    stage again; one whose own run repaired it costs a digest of each copy, not a stage."""
    before = _copies()
    yield
    if _copies() != before:
        again = _model()
        assert again.ok, again.failed_tasks
        assert _copies() == before


TRUNCATED = "model-00008-of-00048.safetensors"
PARTIAL = "model-00009-of-00048.safetensors"
SIZES = {f["path"]: f["size"] for f in MANIFEST["files"]}
DIGESTS = {f["path"]: f.get("sha256") for f in MANIFEST["files"]}


def test_a_flipped_byte_a_truncated_shard_and_a_partial_are_each_repaired_alone(
    synced: ProvisionResult,
) -> None:
    """Three faults on the worker, one model run: a flipped byte is found by its hash, a
    truncated shard by its size (a stat), and what a kill mid-file leaves (the shard gone, its
    first bytes in <shard>.partial) resumes with a range. Only those files are written (every
    other file keeps its inode), and the untouched head hashes nothing (its warm cache)."""
    before = _inodes("gx10-b")
    node_sh(
        "gx10-b",
        f"printf '\\377' | dd of={MODEL_DIR}/{SHARD} bs=1 seek=4096 conv=notrunc 2>/dev/null"
        f" && truncate -s 100000 {MODEL_DIR}/{TRUNCATED}"
        f" && cd {MODEL_DIR} && head -c 600000 {PARTIAL} > {PARTIAL}.partial && rm {PARTIAL}",
    )
    assert _sha256("gx10-b", SHARD) != SHARD_SHA256
    run = _model()
    assert run.ok, run.failed_tasks
    worker = task_results(run, FETCH_TASK)["gx10-b"]
    found = {f["path"]: f["status"] for f in worker["found"]}
    assert found == {SHARD: "hash_mismatch", TRUNCATED: "size_mismatch", PARTIAL: "missing"}
    assert sorted(worker["fetched"]) == sorted(found)
    # The flipped copy was read once to find it (its stamp changed: the worker's check-mode probe
    # read it and cached the wrong digest); the partial's prefix once to carry the hash on; the
    # truncated shard not at all. What came was hashed as it came, not read again.
    probe = task_results(run, NEED_TASK)["gx10-b"]
    assert probe["bytes_read_back"] + worker["bytes_read_back"] == SHARD_SIZE + 600000
    resumed = SIZES[PARTIAL] - 600000  # resumed, not restarted
    assert worker["bytes_from_source"] == SHARD_SIZE + SIZES[TRUNCATED] + resumed
    assert (
        worker["bytes_received"]
        == worker["bytes_hashed_receiving"]
        == (SHARD_SIZE + SIZES[TRUNCATED] + resumed)
    )
    head = task_results(run, FETCH_TASK)["gx10-a"]
    assert head["bytes_from_source"] == head["bytes_hashed"] == head["bytes_read_back"] == 0
    after = _inodes("gx10-b")
    assert all(after[path] != before.get(path) for path in found)
    assert {p: i for p, i in after.items() if p not in found} == {
        p: i for p, i in before.items() if p not in found
    }
    for path in found:
        assert _sha256("gx10-b", path) == DIGESTS[path], path
    assert node_sh("gx10-b", f"find {MODEL_DIR} -name '*.partial'") == ""


def _kill_the_writer_mid_file(node: str, at_least: int = 100_000) -> str:
    """On `node`, SIGKILL the process writing a .partial under MODEL_DIR once it holds
    `at_least` bytes. The writer is stopped (SIGSTOP) first and killed only if the descriptor
    still names that .partial: between the look and the kill it could otherwise finish the file
    and give it its name, leaving no .partial (seen once in a full run). Returns "pid path
    size"."""
    script = (
        "timeout 50 sh -c 'while :; do for pid in $(pidof python3); do "
        "for fd in /proc/$pid/fd/*; do t=$(readlink $fd 2>/dev/null) || continue; "
        f"case $t in {MODEL_DIR}/*.partial) [ $(stat -c %s $t) -ge {at_least} ] || continue; "
        'kill -STOP $pid; if [ "$(readlink $fd 2>/dev/null)" = "$t" ]; then '
        "kill -9 $pid; echo $pid $t $(stat -c %s $t); exit 0; fi; kill -CONT $pid;; esac; "
        "done; done; sleep 0.05; done'"
    )
    return node_sh(node, script).strip()


def test_a_sync_really_killed_mid_file_resumes(synced: ProvisionResult) -> None:
    """The worker's rail is slowed so the copy takes seconds; its fetch is killed (SIGKILL, by
    the pid holding the .partial open) mid-file; the next run reads only what is missing."""
    node_sh("gx10-b", f"rm -rf {MODEL_DIR}")
    # The burst must exceed the rails' 9000-byte MTU, or tbf drops every jumbo frame.
    node_sh("gx10-a", f"tc qdisc add dev {RAIL0} root tbf rate 8mbit burst 64kb latency 400ms")
    # A process group of our own, so a hang can be ended by its id.
    run = subprocess.Popen(
        ["gx10", "provision", "-i", str(LAB_INVENTORY), "-t", "model"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _kill_the_writer_mid_file("gx10-b")
        killed_rc = run.wait(timeout=300)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(timeout=30)
        node_sh("gx10-a", f"tc qdisc del dev {RAIL0} root", check=False)
    assert killed_rc != 0
    # The one the writer held when it was stopped and killed.
    partials = node_sh("gx10-b", f"find {MODEL_DIR} -name '*.partial' -printf '%P %s\\n'").split()
    assert len(partials) == 2, partials  # one file, cut mid-way
    partial, kept = partials[0], int(partials[1])
    assert kept > 0
    sizes = {f["path"]: f["size"] for f in MANIFEST["files"]}
    present = node_sh(
        "gx10-b", f"cd {MODEL_DIR} && find . -type f ! -name '*.partial' -printf '%P %s\\n'"
    )
    installed = sum(
        int(size)
        for path, size in (line.split(" ") for line in present.splitlines())
        if sizes.get(path) == int(size)
    )
    assert 0 < installed + kept < TOTAL
    peer = node_sh("gx10-a", "systemctl is-active gx10-model-peer.service", check=False)
    assert peer.strip() in ("inactive", "unknown")  # stopped although the worker failed
    again = _model()
    assert again.ok, again.failed_tasks
    worker = task_results(again, FETCH_TASK)["gx10-b"]
    assert worker["bytes_from_source"] == TOTAL - installed - kept
    print(
        f"\nkilled mid-file: {partial} kept {kept} bytes, {installed} bytes "
        f"installed; the re-run read {worker['bytes_from_source']} of {TOTAL} bytes"
    )


def test_two_node_sync_reads_the_source_once(synced: ProvisionResult) -> None:
    for node in ("gx10-a", "gx10-b"):
        node_sh(node, f"rm -rf {MODEL_DIR}")
    run = _model()
    assert run.ok, run.failed_tasks
    fetch = task_results(run, FETCH_TASK)
    from_source = fetch["gx10-a"]["bytes_from_source"]
    print(
        f"\nbytes read from the source for two nodes: {from_source} = {from_source / TOTAL:.2f} x"
    )
    assert from_source == TOTAL
    assert fetch["gx10-b"]["bytes_from_source"] == TOTAL  # from the head, over the rail
    for node in ("gx10-a", "gx10-b"):  # each byte read once per node: received, never re-read
        assert fetch[node]["bytes_received"] == fetch[node]["bytes_hashed_receiving"] == TOTAL
        assert fetch[node]["bytes_read_back"] == 0


def test_disk_too_small_fails_before_any_byte_moves(synced: ProvisionResult) -> None:
    node_sh("gx10-b", f"rm {MODEL_DIR}/{SHARD}")
    run = _model(gx10_model_margin_bytes=1 << 60)
    assert not run.ok
    messages = {t.host: t.message for t in run.failed_tasks}
    assert "gx10-b" in messages, messages
    assert "not enough free disk" in messages["gx10-b"]
    assert "nothing was fetched" in messages["gx10-b"]
    assert node_sh("gx10-b", f"ls {MODEL_DIR}/{SHARD}* 2>/dev/null", check=False) == ""
    # The head had nothing to do and is untouched; no peer server was started.
    assert "gx10-a" not in messages


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gx10", "model", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_model_sync_cli_reports_per_node_and_refetches_one_file(synced: ProvisionResult) -> None:
    """`gx10 model sync -i INV --json`: a shard removed on the worker comes back from the head
    over the rail; the totals name each node."""
    node_sh("gx10-b", f"rm -f {MODEL_DIR}/{SHARD}")
    run = _cli("sync", "-i", str(LAB_INVENTORY), "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    text = json.dumps(report)
    assert "gx10-a" in text
    assert "gx10-b" in text
    assert _sha256("gx10-b", SHARD) == SHARD_SHA256


def test_model_verify_cli_names_the_bad_file(synced: ProvisionResult, tmp_path: Path) -> None:
    """`gx10 model verify` on a copy of a node's checkpoint: exit non-zero naming the flipped
    file."""
    copy = tmp_path / "copy"
    subprocess.run(["docker", "cp", f"gx10-a:{MODEL_DIR}", str(copy)], check=True, timeout=120)
    target = copy / SHARD
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    run = _cli("verify", "--manifest", str(MANIFEST_FILE), str(copy), "--json")
    assert run.returncode != 0
    assert SHARD in run.stdout


def test_a_directory_source_on_the_head(synced: ProvisionResult) -> None:
    """gx10_model_source {type: dir}: the head copies from a local (NAS-mounted) directory,
    verified; nothing else changes on the worker."""
    nas = "/srv/nas-copy"
    node_sh("gx10-a", f"rm -rf {nas} && cp -a {MODEL_DIR} {nas} && rm -rf {MODEL_DIR}")
    try:
        run = _model(gx10_model_source={"type": "dir", "path": nas})
        assert run.ok, run.failed_tasks
        fetch = task_results(run, FETCH_TASK)
        assert fetch["gx10-a"]["bytes_from_source"] == TOTAL
        assert fetch["gx10-a"]["files_fetched"] == len(MANIFEST["files"])
        assert _sha256("gx10-a", SHARD) == SHARD_SHA256
        missing = _model(gx10_model_source={"type": "dir", "path": "/srv/no-such-dir"})
        assert missing.ok  # nothing is missing on the head now: the source is not read
    finally:
        node_sh("gx10-a", f"rm -rf {nas}")


def test_the_workers_copy_down_the_chain_and_the_head_sends_the_checkpoint_once(
    synced: ProvisionResult,
) -> None:
    """A worker that lost its copy re-syncs from the head over the rail, the NAS not read again:
    head -> worker in rank order, each node sending the checkpoint once to the next (two nodes;
    test_switch checks four)."""
    # The inventory's workers (the synced run's fetch task skips those that lack nothing).
    workers = sorted(lab.LabConfig().nodes[1:])
    for node in workers:
        node_sh(node, f"rm -rf {MODEL_DIR}")
    run = _model()
    assert run.ok, run.failed_tasks
    served = _served(run)
    chain = [HEAD]
    while chain[-1] in served and len(chain) <= len(workers):
        chain.append(served[chain[-1]]["to"])
    assert sorted(chain[1:]) == workers, (chain, served)  # every worker once, the last serves none
    assert set(served) == set(chain[:-1])
    for node in chain[:-1]:
        assert served[node]["bytes_sent"] == TOTAL, (node, served[node])
    assert served[HEAD]["head"] is True
    fetch = task_results(run, FETCH_TASK)
    assert fetch[HEAD]["bytes_from_source"] == 0  # the head kept its copy: the source is not read
    for node in workers:
        assert fetch[node]["bytes_from_source"] == TOTAL
        assert fetch[node]["files_fetched"] == len(MANIFEST["files"])
        assert fetch[node]["bytes_received"] == fetch[node]["bytes_hashed_receiving"] == TOTAL
        assert fetch[node]["bytes_read_back"] == 0
    for node in chain[:-1]:
        peer = node_sh(node, "systemctl is-active gx10-model-peer.service", check=False)
        assert peer.strip() in ("inactive", "unknown")
    print(
        f"\nhead sent {served[HEAD]['bytes_sent']} bytes = "
        f"{served[HEAD]['bytes_sent'] / TOTAL:.2f} x checkpoint for {len(chain)} nodes"
    )
