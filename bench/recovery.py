"""Recovery of the supervised pair after each fault, as a ratio of a cold start on the same run.

    .venv/bin/python bench/recovery.py [--runs 1] [--faults worker-crash,stall,...] --yes

The target (issue 11): the pair repairs itself with nobody watching, and a repair costs about what
a start costs. On the lab only: the faults are the lab's test equipment (`gx10 lab reboot`,
`power-cut`, `kill-rank`, `stall`, the RDMA simulator's GID shift), which is why it asks for --yes.

First the pair is served with supervision on (serve.yml with vllm_supervisor_enabled; changed=0
when it already is). Then, per run:

* **cold start**: both agents and ranks stopped (head first), then both agents started (worker
  first), as at boot; the time until the pair serves;
* **each fault**, injected into a serving pair (the head's breaker reset first, so the earlier
  faults' restarts do not trip it): the time from the injection until the pair serves again.

"Serves" is the head agent's state `serving` in a generation newer than before, and a one-token
completion answered through the head's API with its key. The compile caches stay warm throughout
(they persist across restarts by design), so a cold start here is a start from stopped ranks.
Prints a row per run and fault, then the medians and each fault's recovery / cold start.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gx10 import lab, provision

ROOT = Path(__file__).resolve().parents[1]

HEAD, WORKER = "gx10-a", "gx10-b"
AGENT = "/usr/local/lib/gx10/pair/gx10-pair"
RDMA_CONTROL = "/run/gx10-sim/rdma"
LIMIT = 600.0  # seconds a recovery may take before the run is declared failed


def sh(node: str, script: str, *, check: bool = True, timeout: float = 60) -> str:
    done = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script],
        capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise SystemExit(f"{node}: `{script}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def head_status() -> dict[str, object]:
    try:
        data = json.loads(sh(HEAD, f"python3 {AGENT} status --json", check=False, timeout=20))
    except (ValueError, subprocess.TimeoutExpired):
        return {}
    return data if isinstance(data, dict) else {}


def generation() -> int:
    value = head_status().get("generation")
    return value if isinstance(value, int) else 0


# One token through the head's API, as the agent's stall probe asks for it (run on the head).
COMPLETION = """
import json, urllib.request
config = json.load(open("/etc/gx10/pair.json"))
rank = config["rank"]
base = rank["health_urls"][0].split("/", 3)
headers = {"Content-Type": "application/json"}
if rank.get("api_key_file"):
    headers["Authorization"] = "Bearer " + open(rank["api_key_file"]).read().strip()
body = json.dumps({"model": rank["model"], "prompt": "ping", "max_tokens": 1}).encode()
request = urllib.request.Request(base[0] + "//" + base[2] + "/v1/completions", body, headers)
with urllib.request.urlopen(request, timeout=10) as response:
    print(json.load(response)["usage"]["completion_tokens"])
"""


def answers() -> bool:
    try:
        done = subprocess.run(
            ["docker", "exec", "-i", HEAD, "python3", "-"],
            input=COMPLETION, capture_output=True, text=True, check=False, timeout=20,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and done.stdout.strip() not in ("", "0")


def until_serving(after_generation: int, started: float) -> float:
    """Seconds from ``started`` until the head serves a generation newer than the given one."""
    while time.monotonic() - started < LIMIT:
        status = head_status()
        current = status.get("generation")
        fresh = isinstance(current, int) and current > after_generation
        if fresh and status.get("state") == "serving" and answers():
            return time.monotonic() - started
        if status.get("state") == "tripped":
            raise SystemExit(f"the breaker tripped: {status.get('breaker')}")
        time.sleep(0.5)
    raise SystemExit(f"the pair did not serve again within {LIMIT:.0f} s: {head_status()}")


def serving_now() -> None:
    until_serving(-1, time.monotonic())


def cold_start() -> float:
    before = generation()
    for node in (HEAD, WORKER):
        sh(node, "systemctl stop gx10-pair.service gx10-vllm-rank.service")
    started = time.monotonic()
    for node in (WORKER, HEAD):
        sh(node, "systemctl start gx10-pair.service")
    return until_serving(before, started)


def _quiet(line: str) -> None:
    del line


def _gid_shift(shift: int | None) -> Callable[[], None]:
    def inject() -> None:
        if shift is None:
            sh(WORKER, f"rm -f {RDMA_CONTROL}/shift; touch {RDMA_CONTROL}/reset")
        else:
            sh(WORKER, f"mkdir -p {RDMA_CONTROL} && echo {shift} > {RDMA_CONTROL}/shift")

    return inject


FAULTS: dict[str, Callable[[], object]] = {
    "worker-crash": lambda: lab.kill_rank(WORKER, log=_quiet),
    "head-crash": lambda: lab.kill_rank(HEAD, log=_quiet),
    "stall": lambda: lab.stall(HEAD, log=_quiet),
    "gid-shift": _gid_shift(4),
    "gid-shift-back": _gid_shift(None),
    "worker-reboot": lambda: lab.reboot(WORKER, log=_quiet),
    "head-reboot": lambda: lab.reboot(HEAD, log=_quiet),
    "power-cut": lambda: lab.power_cut(log=_quiet),
}


def fault(name: str) -> float:
    serving_now()
    sh(HEAD, f"python3 {AGENT} reset", check=False)
    before = generation()
    started = time.monotonic()
    FAULTS[name]()
    return until_serving(before, started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default=str(ROOT / "inventories" / "lab"))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated, in order (default all: {','.join(FAULTS)})",
    )
    parser.add_argument("--yes", action="store_true", help="inject faults into the lab's pair")
    args = parser.parse_args(argv)
    if not args.yes:
        parser.error("this reboots, power-cuts and crashes the lab's nodes: pass --yes")
    if not 1 <= args.runs <= 10:
        parser.error(f"--runs {args.runs}: give 1 to 10 runs")
    faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = [name for name in faults if name not in FAULTS]
    if unknown or not faults:
        parser.error(f"--faults {args.faults!r}: unknown {unknown}; choose from {list(FAULTS)}")

    served = provision(args.inventory, "serve.yml", extravars={"vllm_supervisor_enabled": True})
    if not served.ok:
        raise SystemExit(f"serve.yml with supervision failed: {served.failed_tasks}")
    seconds: dict[str, list[float]] = {"cold-start": [], **{name: [] for name in faults}}
    print(f"{'run':>4} {'what':<16} {'s':>8} {'/ cold':>8}", flush=True)
    for run in range(1, args.runs + 1):
        cold = cold_start()
        seconds["cold-start"].append(cold)
        print(f"{run:>4} {'cold-start':<16} {cold:>8.1f} {1.0:>8.2f}", flush=True)
        for name in faults:
            took = fault(name)
            seconds[name].append(took)
            print(f"{run:>4} {name:<16} {took:>8.1f} {took / cold:>8.2f}", flush=True)
    cold_median = statistics.median(seconds["cold-start"])
    print(f"median over {args.runs} run(s):")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"     {name:<16} {median:>8.1f} {median / cold_median:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
