"""A small, bounded wrapper around the docker and ip CLIs used by the lab."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from gx10.lab.errors import LabError

DEFAULT_TIMEOUT = 120.0


def run(
    args: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    input_bytes: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with a hard timeout; raise LabError naming the command on failure."""
    exe = shutil.which(args[0])
    if exe is None:
        raise LabError(
            f"`{args[0]}` is not installed on this machine; the lab needs it (see README)."
        )
    try:
        raw = subprocess.run(
            [exe, *args[1:]],
            input=input_bytes,
            capture_output=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(args)}` did not finish within {timeout:.0f} s") from exc
    proc = subprocess.CompletedProcess(
        raw.args,
        raw.returncode,
        raw.stdout.decode(errors="replace"),
        raw.stderr.decode(errors="replace"),
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise LabError(f"`{' '.join(args)}` failed (exit {proc.returncode}): {detail}")
    return proc


def docker(
    *args: str,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    input_bytes: bytes | None = None,
) -> str:
    """Run `docker ARGS` and return its stripped stdout."""
    proc = run(["docker", *args], timeout=timeout, check=check, input_bytes=input_bytes)
    return proc.stdout.strip()


def exists(kind: str, name: str) -> bool:
    """True if a docker object (container, image, network, volume) of that name exists."""
    proc = run(["docker", kind, "inspect", name], check=False, timeout=30)
    return proc.returncode == 0


def node_exec(node: str, *args: str, timeout: float = 60, check: bool = True) -> str:
    """Run a command inside a lab node (docker exec) and return stdout."""
    return docker("exec", node, *args, timeout=timeout, check=check)
