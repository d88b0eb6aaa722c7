"""Cold and warm boot of the pair: how much the persistent compile caches save, as a ratio.

    .venv/bin/python bench/boot_cache.py [-i inventories/lab] [--runs 3] --yes

The target (issue 13): a restart reuses what the last boot compiled, so a warm boot takes a
fraction of a cold one. Each run removes every node's compile caches (vllm_serve_cache_root:
destructive, hence --yes), stops the pair (playbooks/stop.yml) and starts it (serve.yml): a cold
boot; then stops and starts it again: a warm boot. A boot's time is the head's own, from its first
log line to `Application startup complete.` (docker's log timestamps), so Ansible's overhead is
not in it. Prints each run, then the medians and warm / cold. Needs a converged pipeline (the
lab: `make lab`).

On the lab's real engine (`-i inventories/lab-vllm`), vLLM's CPU build writes its compiled
graphs to the same caches but fails to load them back on this torch build ("Compiling model
again due to a load failure"): its warm boot compiles again, and the run says so instead of
stopping (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "Application startup complete."
_STAMPED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")  # docker logs --timestamps
LOADED = "Directly load the compiled graph"  # the GPU build's line (the simulator's too)
LOAD_FAILED = "Compiling model again due to a load failure"  # the CPU build's, on a warm cache


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    }


def ad_hoc(inventory: str, pattern: str, module: str, args: str) -> dict[str, dict[str, object]]:
    """One ad-hoc module run; per host its result (the json callback's)."""
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), pattern, "-i", inventory,
         "-m", module, "-a", args],
        capture_output=True, text=True, check=False, timeout=600, env=_env(),
    )  # fmt: skip
    try:
        report = json.loads(run.stdout)
    except ValueError:
        message = f"ansible {module} failed ({run.returncode}):\n{run.stdout}{run.stderr}"
        raise SystemExit(message) from None
    hosts: dict[str, dict[str, object]] = report["plays"][0]["tasks"][0]["hosts"]
    failed = {h: r.get("msg") for h, r in hosts.items() if r.get("failed") or r.get("unreachable")}
    if failed:
        raise SystemExit(f"ansible {module} {args!r} failed on {failed}")
    return hosts


def playbook(inventory: str, name: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gx10", "provision", "-i", inventory, "-p", name],
        capture_output=True, text=True, check=False, timeout=7200,
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"{name} failed ({run.returncode}):\n{run.stdout[-4000:]}{run.stderr}")


def _stamp(line: str) -> float:
    whole = line.split(" ", 1)[0]
    head, _, fraction = whole.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{fraction or 0}")


def head_boot_seconds(inventory: str, container: str) -> tuple[float, str]:
    """The head's boot, first log line to ready, and what it did with the compile caches:
    "loaded", "load failed" (it found them, could not load them, and compiled again) or
    "compiled"."""
    hosts = ad_hoc(
        inventory, "head", "ansible.builtin.command", f"docker logs --timestamps {container}"
    )
    (result,) = hosts.values()
    # docker logs keeps the container's streams apart: the simulator writes its lines to stdout,
    # vLLM's uvicorn (`Application startup complete.`) to stderr. Both, in time order.
    # A progress bar's carriage returns split a line into pieces without a timestamp: left out.
    output = f"{result.get('stdout', '')}\n{result.get('stderr', '')}"
    lines = sorted((line for line in output.splitlines() if _STAMPED.match(line)), key=_stamp)
    ready = next((line for line in lines if READY in line), None)
    if not lines or ready is None:
        raise SystemExit("the head's log has no ready line")
    if any(LOADED in line for line in lines):
        cache = "loaded"
    elif any(LOAD_FAILED in line for line in lines):
        cache = "load failed"
    else:
        cache = "compiled"
    return _stamp(ready) - _stamp(lines[0]), cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "lab"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--cache-root", default="/var/cache/gx10/vllm", help="vllm_serve_cache_root"
    )
    parser.add_argument("--container", default="gx10-vllm", help="vllm_serve_container_name")
    parser.add_argument("--yes", action="store_true", help="remove every node's compile caches")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("each run removes every node's compile caches first: pass --yes")
    if not 1 <= args.runs <= 20:
        parser.error(f"--runs {args.runs}: give 1 to 20 runs")

    cold: list[float] = []
    warm: list[float] = []
    print(f"{'run':>4} {'cold s':>8} {'warm s':>8} {'warm/cold':>10}")
    for run in range(1, args.runs + 1):
        playbook(args.inventory, "stop.yml")
        ad_hoc(
            args.inventory,
            "head:workers",
            "ansible.builtin.file",
            f"path={args.cache_root} state=absent",
        )
        playbook(args.inventory, "serve.yml")
        seconds, cache = head_boot_seconds(args.inventory, args.container)
        if cache != "compiled":
            raise SystemExit(f"the cold boot found cached graphs ({cache}): not removed")
        cold.append(seconds)
        playbook(args.inventory, "stop.yml")
        playbook(args.inventory, "serve.yml")
        seconds, cache = head_boot_seconds(args.inventory, args.container)
        if cache == "compiled":
            raise SystemExit("the warm boot did not find the cached graphs")
        warm.append(seconds)
        note = "" if cache == "loaded" else "  (the engine could not load them: compiled again)"
        print(f"{run:>4} {cold[-1]:>8.2f} {warm[-1]:>8.2f} {warm[-1] / cold[-1]:>10.3f}{note}")
    median_cold, median_warm = statistics.median(cold), statistics.median(warm)
    print(
        f"median: cold {median_cold:.2f} s, warm {median_warm:.2f} s, "
        f"warm/cold {median_warm / median_cold:.3f} ({args.runs} runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
