"""bench/sync_reads.py without a lab: its interpreter wrapper, its inventory copy, its arithmetic.

The wrapper runs here as it runs on a node (the real Python on the same stdin), with this
machine's kernel doing the counting.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


sync_reads = load_bench("sync_reads")
io_wrapper = load_bench("sync_reads_io")

# What an AnsiballZ payload holds, as far as the wrapper reads it: the module's name and its
# arguments; and then it runs (here: reads a file, prints, exits 3).
PAYLOAD = """
import sys
_ = dict(
    module_fqn='ansible_collections.gx10.cluster.plugins.modules.model_fetch',
    params='{{"ANSIBLE_MODULE_ARGS": {{"dest": "/srv/models/x", "source": null, '
    '"_ansible_check_mode": false}}}}',
)
with open({path!r}, "rb") as handle:
    while handle.read(65536):
        pass
print("module output")
sys.exit(3)
"""


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux I/O accounting")
def test_the_wrapper_logs_the_modules_file_reads_and_changes_nothing_it_sees(
    tmp_path: Path,
) -> None:
    data = tmp_path / "shard"
    data.write_bytes(os.urandom(3_000_000))
    log = tmp_path / "io.jsonl"
    env = {**os.environ, "GX10_BENCH_PYTHON": sys.executable, "GX10_BENCH_IO_LOG": str(log)}
    run = subprocess.run(
        [sys.executable, str(BENCH / "sync_reads_io.py")],
        input=PAYLOAD.format(path=str(data)).encode(),
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert run.returncode == 3  # the module's own exit status
    assert run.stdout == b"module output\n"  # and its own output, nothing added
    (record,) = sync_reads.parse_log(log.read_text())
    assert record["module"] == sync_reads.MODEL_FETCH
    assert record["dest"] == "/srv/models/x"
    assert record["check_mode"] is False
    assert record["verify_only"] is True
    assert record["rc"] == 3
    # The child's reads, counted by the kernel and handed to the wrapper when it reaped it:
    # the file, plus Python's own startup (a few MB at most).
    assert 3_000_000 <= record["rchar"] < 3_000_000 + 20_000_000
    assert "read_bytes" in record


def test_a_non_pipelined_module_file_is_read_for_its_name(tmp_path: Path) -> None:
    module = tmp_path / "AnsiballZ_model_fetch.py"
    module.write_text(PAYLOAD.format(path=str(module)))
    log = tmp_path / "io.jsonl"
    env = {**os.environ, "GX10_BENCH_PYTHON": sys.executable, "GX10_BENCH_IO_LOG": str(log)}
    run = subprocess.run(
        [sys.executable, str(BENCH / "sync_reads_io.py"), str(module)],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert run.returncode == 3
    if Path("/proc/self/io").exists():
        (record,) = sync_reads.parse_log(log.read_text())
        assert record["module"] == sync_reads.MODEL_FETCH


def test_the_installed_wrapper_runs_the_nodes_python() -> None:
    source = sync_reads.wrapper_for("/opt/python3.12/bin/python3")
    assert source.startswith("#!/opt/python3.12/bin/python3\n")
    assert 'os.environ.get("GX10_BENCH_PYTHON", "/opt/python3.12/bin/python3")' in source
    compile(source, "python3-io", "exec")


def _inventory(root: Path) -> Path:
    inventory = root / "lab"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "files").mkdir()
    (inventory / "files" / "model-manifest.yml").write_text("kept: true\n")
    hosts = {
        "all": {
            "children": {
                "gx10": {
                    "children": {
                        "head": {"hosts": {"gx10-a": {"ansible_python_interpreter": "/x"}}},
                        "workers": {"hosts": {"gx10-b": None, "gx10-c": None}},
                    }
                }
            },
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/p"},
        }
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "group_vars" / "all.yml").write_text("gx10_model_dir: /srv/models/x\n")
    (inventory / "host_vars" / "gx10-b").mkdir(parents=True)
    (inventory / "host_vars" / "gx10-b" / "mine.yml").write_text("rack: 7\n")
    (inventory / "host_vars" / "gx10-c.yml").write_text("rack: 8\n")
    return inventory


def _host_vars(inventory: Path, host: str) -> dict[str, Any]:
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 (slow import)
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    found: dict[str, Any] = variables.get_vars(host=manager.get_host(host))
    return found


def test_the_inventory_copy_names_the_wrapper_for_every_node_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    inventory = _inventory(tmp_path / "given")
    before = {p.relative_to(inventory): p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    copy = sync_reads.measuring_inventory(
        inventory, tmp_path / "run", ["gx10-a", "gx10-b", "gx10-c"]
    )
    after = {p.relative_to(inventory): p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    assert after == before  # the inventory itself is untouched
    for host, rack in (("gx10-a", None), ("gx10-b", 7), ("gx10-c", 8)):
        found = _host_vars(copy, host)
        # Wins over the host's own inventory variable and over `all`.
        assert found["ansible_python_interpreter"] == sync_reads.WRAPPER
        assert found.get("rack") == rack  # the node's other host_vars still apply
        assert found["gx10_model_dir"] == "/srv/models/x"
    assert (copy / "files" / "model-manifest.yml").read_text() == "kept: true\n"
    file_copy = sync_reads.measuring_inventory(
        inventory / "hosts.yml", tmp_path / "run2", ["gx10-a"]
    )
    assert file_copy.name == "hosts.yml"
    assert _host_vars(file_copy, "gx10-a")["ansible_python_interpreter"] == sync_reads.WRAPPER


def _record(dest: str, rchar: int, read_bytes: int = 0) -> dict[str, Any]:
    return {
        "module": sync_reads.MODEL_FETCH,
        "dest": dest,
        "rchar": rchar,
        "read_bytes": read_bytes,
    }


def test_rows_subtract_each_runs_own_code_and_a_dir_sources_reads() -> None:
    total = 55_153_008
    node = {
        "bytes_total": total,
        "bytes_fetched": total,
        "bytes_received": total,
        "bytes_hashed_receiving": total,
        "bytes_read_back": 0,
    }
    report = {"nodes": {"gx10-a": node, "gx10-b": {**node, "bytes_read_back": 600_000}}}
    base = sync_reads.BASELINE_DEST
    logs = {
        "gx10-a": [
            _record(base, 2_000_000),
            _record(base, 2_100_000),
            _record(base, 1_900_000),
            # fetch (read the dir source, and 300 kB of cache file) and verify
            _record("/srv/models/x", 2_000_000 + total + 300_000, 4096),
            _record("/srv/models/x", 2_000_000 + 20_000),
            {"module": "ansible.modules.file", "dest": "/srv/models/x", "rchar": 10**9},
        ],
        "gx10-b": [
            _record(base, 2_000_000),
            _record("/srv/models/x", 2_000_000),  # need
            _record("/srv/models/x", 2_000_000 + 600_000 + total),  # re-read everything
            _record("/srv/models/x", 2_000_000),  # verify
        ],
    }
    head, worker = sync_reads.rows(report, logs, dir_source_node="gx10-a")
    assert (head.runs, head.baseline, head.source_reads) == (2, 2_000_000, total)
    assert head.measured == 320_000
    assert head.block_reads == 4096
    assert head.ratio(head.measured) < 0.05
    assert worker.measured == 600_000 + total  # a node that re-read what it fetched
    assert worker.ratio(worker.measured) > 1
    assert sync_reads.print_rows([head], 0.05) is True
    assert sync_reads.print_rows([head, worker], 0.05) is False
    with pytest.raises(ValueError, match="gx10-b: no baseline run"):
        sync_reads.rows(report, {"gx10-a": logs["gx10-a"], "gx10-b": logs["gx10-b"][1:]})


def test_a_cut_log_line_is_skipped() -> None:
    text = json.dumps(_record("/d", 5)) + "\n" + '{"module": "ansible_coll'
    assert sync_reads.parse_log(text) == [_record("/d", 5)]


def test_it_refuses_to_run_without_yes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        sync_reads.main([])
    assert stopped.value.code == 2
    assert "pass --yes" in capsys.readouterr().err


# --- the whole measurement through Ansible, on localhost --------------------------------------

PLAYBOOK = """
- name: A sync's two model_fetch passes on one node, through the wrapper
  hosts: head
  gather_facts: false
  tasks:
    - name: Fetch
      gx10.cluster.model_fetch:
        files: "{{ files }}"
        dest: "{{ dest }}"
        source: {type: http, base_url: "{{ url }}"}
      register: fetched

    - name: Verify
      gx10.cluster.model_fetch:
        files: "{{ files }}"
        dest: "{{ dest }}"
      register: verified

    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ {'fetch': fetched, 'verify': verified} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""

SERVE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("serve", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
server = module.serve("127.0.0.1", 0, sys.argv[2])
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _checkpoint(root: Path) -> list[dict[str, Any]]:
    """Two 8 MiB shards and a small file, and their manifest entries."""
    from ansible_collections.gx10.cluster.plugins.module_utils import model_files  # noqa: PLC0415

    root.mkdir()
    files: list[dict[str, Any]] = []
    for index in (1, 2):
        data = os.urandom(8 * 1024 * 1024)
        name = f"model-0000{index}.safetensors"
        (root / name).write_bytes(data)
        files.append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    text = b'{"model_type": "tiny"}'
    (root / "config.json").write_bytes(text)
    sha1 = model_files.git_blob_sha1(text)
    files.append({"path": "config.json", "size": len(text), "git_sha1": sha1})
    return files


@contextmanager
def _serving(root: Path) -> Iterator[str]:
    """The peer server on a loopback port, in its own process (its reads are not ours)."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(ROOT / "roles/model_sync/files/gx10_serve_dir.py"),
         str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{int(server.stdout.readline())}/"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux I/O accounting")
def test_the_kernel_sees_a_fetch_through_ansible_read_back_almost_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/sync_reads.py in miniature: the wrapper as the interpreter of a real Ansible run
    (pipelined AnsiballZ payloads on stdin), the baseline through `ansible -m ... --check`, and the
    arithmetic. A fetch that re-read its files would show 16 MiB here."""
    from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: PLC0415
        ANSIBLE_PLAYBOOK,
        run_ansible_playbook,
    )

    if not ANSIBLE_PLAYBOOK.exists():
        pytest.skip("needs ansible-playbook next to the test interpreter")
    files = _checkpoint(tmp_path / "nas")
    total = sum(f["size"] for f in files)
    wrapper = tmp_path / "python3-io"
    wrapper.write_text(sync_reads.wrapper_for(sys.executable))
    wrapper.chmod(0o755)
    log = tmp_path / "io.jsonl"
    monkeypatch.setenv("GX10_BENCH_IO_LOG", str(log))  # connection local: the env reaches it
    inventory = tmp_path / "hosts.yml"
    node = {"ansible_connection": "local", "ansible_python_interpreter": str(wrapper)}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"head": {"hosts": {"a": node}}}}}))
    monkeypatch.setattr(sync_reads, "BASELINE_RUNS", 1)
    sync_reads.baseline(inventory, files)
    extra = {"files": files, "dest": str(tmp_path / "node"), "out": str(tmp_path / "out.json")}
    with _serving(tmp_path / "nas") as url:
        (tmp_path / "vars.json").write_text(json.dumps({**extra, "url": url}))
        (tmp_path / "play.yml").write_text(PLAYBOOK)
        run = run_ansible_playbook(
            tmp_path, inventory, tmp_path / "play.yml", "-e", f"@{tmp_path / 'vars.json'}",
            timeout=300,
        )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())
    records = sync_reads.parse_log(log.read_text())
    modules = [r["module"] for r in records]
    assert modules.count(sync_reads.MODEL_FETCH) == 3  # baseline, fetch, verify
    assert "ansible.modules.copy" in modules  # every module runs through the wrapper
    (base,) = [r for r in records if r["dest"] == sync_reads.BASELINE_DEST]
    assert base["check_mode"] is True
    fetch, verify = results["fetch"], results["verify"]
    node_report = {
        "bytes_total": total,
        "bytes_fetched": fetch["bytes_from_source"],
        "bytes_received": fetch["bytes_received"],
        "bytes_hashed_receiving": fetch["bytes_hashed_receiving"],
        "bytes_read_back": fetch["bytes_read_back"] + verify["bytes_read_back"],
    }
    (row,) = sync_reads.rows({"nodes": {"a": node_report}}, {"a": records})
    assert (row.received, row.read_back, row.runs) == (total, 0, 2)
    print(f"\nkernel: {row.measured} bytes read back of {total} ({row.ratio(row.measured):.4f} x),"
          f" {row.rchar} read by 2 runs, {row.baseline} a run's own code")  # fmt: skip
    assert row.ratio(row.measured) < 0.05
    assert row.rchar > row.baseline  # the runs were measured at all
