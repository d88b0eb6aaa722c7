"""The memory guard's node tool (roles/memory_guard/files/gx10-memory-guard) against a fake /proc:
earlyoom's hook records a kill with evidence and tells the pair supervisor, the page cache drop
writes its level and records it, and the pressure watcher records when and only when it should."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "roles" / "memory_guard" / "files" / "gx10-memory-guard"
MEMINFO = """\
MemTotal:       124546000 kB
MemFree:          1000000 kB
MemAvailable:     {available} kB
Buffers:             1024 kB
Cached:           2048000 kB
SwapTotal:              0 kB
SwapFree:               0 kB
Shmem:             512000 kB
"""
PSI = """\
some avg10={some:.2f} avg60=20.00 avg300=5.00 total=123456
full avg10={full:.2f} avg60=10.00 avg300=2.00 total=6543
"""


def load_tool() -> types.ModuleType:
    loader = SourceFileLoader("gx10_memory_guard", str(TOOL))
    spec = spec_from_loader("gx10_memory_guard", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


guard = load_tool()


@dataclass
class Node:
    root: Path
    proc: Path
    config: Path
    journal: socket.socket | None

    @property
    def log(self) -> Path:
        return self.root / "log" / "memory-guard.jsonl"

    @property
    def pair_dir(self) -> Path:
        return self.root / "pair"

    def memory(self, available_kib: int, *, full: float = 0.0, some: float = 0.0) -> None:
        (self.proc / "meminfo").write_text(MEMINFO.format(available=available_kib))
        (self.proc / "pressure" / "memory").write_text(PSI.format(full=full, some=some))

    def process(self, pid: int, name: str, rss_kib: int, cmdline: str = "") -> None:
        (self.proc / str(pid)).mkdir()
        (self.proc / str(pid) / "status").write_text(f"Name:\t{name}\nVmRSS:\t{rss_kib} kB\n")
        (self.proc / str(pid) / "cmdline").write_text(cmdline.replace(" ", "\0"))

    def env(self, **extra: str) -> dict[str, str]:
        journal = self.journal.getsockname() if self.journal is not None else ""
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("EARLYOOM_")},
            "GX10_MEMORY_GUARD_CONFIG": str(self.config),
            "GX10_MEMORY_GUARD_PROC": str(self.proc),
            "GX10_MEMORY_GUARD_JOURNAL": journal,
            **extra,
        }

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(TOOL), *args],
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def journal_entries(self) -> list[dict[str, str]]:
        assert self.journal is not None
        entries = []
        self.journal.settimeout(0.2)
        while True:
            try:
                data = self.journal.recv(1 << 20).decode()
            except TimeoutError:
                return entries
            entries.append(dict(line.split("=", 1) for line in data.splitlines()))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    config = tmp_path / "memory-guard.json"
    config.write_text(
        json.dumps(
            {
                "schema": 1,
                "log_file": str(tmp_path / "log" / "memory-guard.jsonl"),
                "log_max_bytes": 4096,
                "pair_event_file": str(tmp_path / "pair" / "memory-event.json"),
                "drop_caches_file": str(tmp_path / "drop_caches"),
                "drop_caches_level": 3,
                "watch": {"interval": 5, "psi_full_threshold": 10, "warn_percent": 8},
            }
        )
    )
    # The journal's native socket: a datagram socket bound in tmp (a short path: AF_UNIX limit).
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = f"/tmp/gx10-mg-journal-{os.getpid()}-{id(tmp_path)}"
    journal.bind(path)
    built = Node(tmp_path, proc, config, journal)
    built.memory(3_000_000, full=30.5, some=45.1)
    built.process(123, "vllm", 5_242_880, "vllm serve /srv/models/x")
    built.process(124, "VLLM::Worker_TP", 1_048_576)
    built.process(456, "sshd", 2048, "sshd: /usr/sbin/sshd")
    yield built
    journal.close()
    os.unlink(path)


def test_the_hook_records_the_kill_with_evidence_and_tells_the_pair(node: Node) -> None:
    node.pair_dir.mkdir()
    done = node.run(EARLYOOM_PID="123", EARLYOOM_NAME="vllm", EARLYOOM_UID="0")
    assert done.returncode == 0, done.stderr
    [record] = node.records()
    assert record["kind"] == "kill"
    assert record["source"] == "earlyoom"
    assert record["victim"] == {"pid": 123, "name": "vllm", "uid": 0}
    assert record["memory"]["mem_available_mib"] == 3_000_000 // 1024
    assert record["memory"]["mem_total_mib"] == 124_546_000 // 1024
    assert record["memory"]["mem_available_percent"] == 2.41
    assert record["psi"]["full"]["avg10"] == 30.5
    assert record["psi"]["some"]["avg10"] == 45.1
    assert [p["name"] for p in record["top_rss"]] == ["vllm", "VLLM::Worker_TP", "sshd"]
    assert record["top_rss"][0] == {
        "pid": 123,
        "name": "vllm",
        "rss_mib": 5120,
        "cmdline": "vllm serve /srv/models/x",
    }
    assert record["time"].endswith("Z")
    # The pair supervisor's agent reads this file from its state directory.
    event = json.loads((node.pair_dir / "memory-event.json").read_text())
    assert event["victim"]["name"] == "vllm"
    assert event["memory"]["mem_available_mib"] == 2929
    assert record["pair_event_file"] == str(node.pair_dir / "memory-event.json")
    [entry] = node.journal_entries()
    assert entry["SYSLOG_IDENTIFIER"] == "gx10-memory-guard"
    assert entry["PRIORITY"] == "3"
    assert entry["MESSAGE"].startswith("earlyoom killed vllm (pid 123, uid 0): MemAvailable 2929")
    assert "PSI memory avg10 full 30.5%" in entry["MESSAGE"]
    assert json.loads(entry["GX10_RECORD"])["victim"]["pid"] == 123


def test_without_the_pair_supervisor_the_hook_only_records(node: Node) -> None:
    done = node.run("notify", EARLYOOM_PID="7", EARLYOOM_NAME="bad name\nx")
    assert done.returncode == 0, done.stderr
    [record] = node.records()
    assert record["victim"] == {"pid": 7, "name": "bad?name?x", "uid": None}
    assert record["pair_event_file"] is None
    assert not node.pair_dir.exists()


def test_no_journal_and_no_config_still_records_on_stderr_and_the_default_log(
    node: Node, tmp_path: Path
) -> None:
    node.journal = None
    done = node.run(GX10_MEMORY_GUARD_CONFIG=str(tmp_path / "absent.json"), EARLYOOM_NAME="x")
    # The default log (/var/log/gx10) is not writable here, or not ours: stderr carries it.
    assert "earlyoom killed x" in done.stderr


def test_the_drop_writes_its_level_and_records_memory_before_and_after(node: Node) -> None:
    done = node.run("drop-caches")
    assert done.returncode == 0, done.stderr
    assert (node.root / "drop_caches").read_text() == "3\n"
    [record] = node.records()
    assert record["kind"] == "drop-caches"
    assert record["ok"] is True
    assert record["level"] == 3
    assert record["memory_before"]["mem_available_mib"] == 2929
    assert record["memory"]["mem_available_mib"] == 2929
    [entry] = node.journal_entries()
    assert entry["MESSAGE"].startswith("dropped the page cache before a launch (level 3)")


def test_a_drop_that_cannot_write_fails_and_says_how_to_turn_it_off(node: Node) -> None:
    config = json.loads(node.config.read_text())
    config["drop_caches_file"] = str(node.root / "missing" / "drop_caches")
    node.config.write_text(json.dumps(config))
    done = node.run("drop-caches")
    assert done.returncode == 1
    [record] = node.records()
    assert record["ok"] is False
    assert "No such file" in record["error"]
    assert "gx10_drop_caches_before_launch: false" in done.stderr


def test_the_watcher_records_pressure_and_nothing_without_it(node: Node) -> None:
    node.memory(60_000_000, full=0.5)  # about 48% available, no stall
    assert node.run("watch", "--once").returncode == 0
    assert node.records() == []
    node.memory(60_000_000, full=12.0)
    assert node.run("watch", "--once").returncode == 0
    [record] = node.records()
    assert record["kind"] == "pressure"
    assert record["causes"] == ["PSI memory full avg10 12.0% >= 10%"]
    node.memory(8_000_000)  # 6.4% available: at or below the 8% warning line
    node.run("watch", "--once")
    assert node.records()[-1]["causes"] == ["MemAvailable 6.42% <= 8%"]


def test_the_watch_records_entering_repeats_and_recovery() -> None:
    watch = guard.Watch(psi_full_threshold=10.0, warn_percent=8.0, repeat=60.0)
    calm = {"mem_available_percent": 40.0}
    tight = {"mem_available_percent": 5.0}
    assert watch.step(100.0, calm, None) is None
    assert watch.step(105.0, tight, None) == ("pressure", ["MemAvailable 5.0% <= 8%"])
    assert watch.step(110.0, tight, None) is None  # still under pressure: not again yet
    stalled = {"full": {"avg10": 25.0}}
    assert watch.step(166.0, {"mem_available_percent": 3.0}, stalled) is not None  # a minute on
    assert watch.worst == {"psi_full_avg10": 25.0, "mem_available": 3.0}
    assert watch.step(170.0, calm, None) == ("recovered", [])
    assert watch.step(175.0, calm, None) is None
    assert watch.step(176.0, tight, None) == ("pressure", ["MemAvailable 5.0% <= 8%"])


def test_the_log_is_rotated_once_past_its_limit(node: Node) -> None:
    node.log.parent.mkdir(parents=True)
    node.log.write_text('{"kind": "old"}\n' * 300)  # past the config's 4096 bytes
    node.run(EARLYOOM_NAME="vllm")
    rotated = node.log.with_name("memory-guard.jsonl.1")
    assert rotated.read_text().count("old") == 300  # kept once, as .1
    assert [r["kind"] for r in node.records()] == ["kill"]
    node.run(EARLYOOM_NAME="vllm")  # under the limit again: appended
    assert [r["kind"] for r in node.records()] == ["kill", "kill"]


def test_meminfo_and_pressure_without_psi(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 250 kB\n")
    memory = guard.meminfo(str(tmp_path))
    assert memory["mem_available_percent"] == 25.0
    assert memory["swap_total_mib"] is None
    assert guard.pressure(str(tmp_path)) is None
