#!/usr/bin/python3
"""bench/sync_reads.py's Python interpreter for the nodes: Python, plus the kernel's I/O counts.

Installed on each node for one benchmark run and named as `ansible_python_interpreter`, it runs
the real interpreter on the same arguments and stdin (Ansible pipes a module's AnsiballZ payload
into it), waits for it, and appends one JSON line to the log: the module (read from the payload),
whether it ran in check mode, its `dest` and `source` arguments, and the difference of this
process's /proc/self/io across the run. Linux adds a child's counters to its parent's when the
parent reaps it, so the difference is the module's: `rchar`, every byte it read() from a file or
a pipe (from the page cache or not; socket receives are not in it), and `read_bytes`, what the
block layer read for it. Standard library only; it never changes what the module sees or prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

PYTHON = os.environ.get("GX10_BENCH_PYTHON", "/usr/bin/python3")
LOG = os.environ.get("GX10_BENCH_IO_LOG", "/var/tmp/gx10-bench/io.jsonl")

_FQN = re.compile(rb"module_fqn='([\w.]+)'")
_CHECK = re.compile(rb'"_ansible_check_mode": (true|false)')
_DEST = re.compile(rb'"dest": "([^"]*)"')
_NO_SOURCE = re.compile(rb'"source": null')


def counters() -> dict[str, int]:
    try:
        with open("/proc/self/io", encoding="ascii") as handle:
            return {key: int(value) for key, value in (line.split(": ") for line in handle)}
    except OSError:
        return {}


def describe(payload: bytes) -> dict[str, object]:
    """What the AnsiballZ payload says about the module it runs."""
    fqn, check, dest = _FQN.search(payload), _CHECK.search(payload), _DEST.search(payload)
    return {
        "module": fqn.group(1).decode() if fqn else "",
        "check_mode": check.group(1) == b"true" if check else None,
        "dest": dest.group(1).decode(errors="replace") if dest else "",
        "verify_only": _NO_SOURCE.search(payload) is not None,
    }


def main() -> int:
    args = sys.argv[1:]
    # Pipelined: the payload is stdin. Otherwise the first argument is the module's file.
    payload = b"" if args else sys.stdin.buffer.read()
    started = time.monotonic()
    before = counters()
    child = subprocess.run([PYTHON, *args], input=payload if not args else None, check=False)
    after = counters()
    if before and after:
        if args:
            try:
                with open(args[0], "rb") as handle:
                    payload = handle.read()
            except OSError:
                payload = b""
        record = {
            "time": time.time(),
            "pid": os.getpid(),
            "rc": child.returncode,
            "seconds": round(time.monotonic() - started, 3),
            **describe(payload),
            **{key: after[key] - before.get(key, 0) for key in after},
        }
        try:
            with open(LOG, "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")
        except OSError:  # the measurement is lost, never the module's result
            pass
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main())
