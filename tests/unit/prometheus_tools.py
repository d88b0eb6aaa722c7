"""promtool and node exporter for the unit tests: on PATH, else where `make prometheus-tools`
unpacks them from Debian's packages (.cache/prometheus-tools). Tests that need one skip, naming
the make target, where it is missing."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
UNPACKED = ROOT / ".cache" / "prometheus-tools"
# Debian's name for node exporter, then upstream's.
NAMES = {"promtool": ("promtool",), "node-exporter": ("prometheus-node-exporter", "node_exporter")}


def find(tool: str) -> Path | None:
    for name in NAMES[tool]:
        found = shutil.which(name)
        if found:
            return Path(found)
        if (UNPACKED / name).is_file():
            return UNPACKED / name
    return None


def need(tool: str) -> Path:
    """The tool's path, or skip the test saying how to get it."""
    path = find(tool)
    if path is None:
        pytest.skip(
            f"{tool} is not on PATH nor in {UNPACKED}: run `make prometheus-tools` (it unpacks "
            "Debian's prometheus and prometheus-node-exporter packages there)"
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def node_exporter(textfile_dir: Path, *collectors: str) -> Iterator[str]:
    """A node exporter on a loopback port with only the textfile collector (and `collectors`),
    reading `textfile_dir`; yields its /metrics URL, ends it (by its pid) afterwards."""
    binary = need("node-exporter")
    port = free_port()
    argv = [
        str(binary),
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
        *(f"--collector.{name}" for name in collectors),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(url, timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    _, err = proc.communicate(timeout=5) if proc.poll() is not None else ("", "")
                    raise AssertionError(f"node exporter did not answer at {url}: {err}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
