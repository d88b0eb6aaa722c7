"""Accuracy and cost of `gx10 bench` against the lab simulator's known rates.

    .venv/bin/python bench/bench_accuracy.py [--max-tokens 256] [--prompt 256] [--repeat 1]

Starts a vLLM simulator pair (head + headless worker) on loopback with the reference performance
model at GX10_SIM_TIME_SCALE=1 (real time: client overheads then weigh what they weigh against a
real server), runs `gx10 bench` at concurrency 1, 6 and 12 on a short prompt, and compares:

- TTFT (mean over the case's requests), per-session decode tok/s (mean) and aggregate tok/s with
  what the simulator's model predicts for the same case (vllm_sim.predict_case: the engine's
  admission, one-at-a-time prefill and per-step decode rates, replayed as a discrete-event
  schedule). The model's figures are in simulated seconds and the bench's in wall seconds: they
  are converted with SCALE (the identity at 1). The target is within 3%.
- The harness's own CPU time while it drives the 12-stream case (resource.getrusage of this
  process: every harness thread, not the simulator, which runs in child processes), as a share
  of one core over the case's wall time. The target is under 10%. The figure covers the whole
  `run_bench` call: prompt padding via /tokenize, /metrics samples, streaming, results files and
  the progress display.

Every process it starts is killed by its PID at the end.
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from bench_helpers import SERVED  # noqa: E402
from test_vllm_sim import Launcher, healthy, wait_until  # noqa: E402

from gx10.bench.client import Endpoint  # noqa: E402
from gx10.bench.matrix import build_config  # noqa: E402
from gx10.bench.runner import run_bench  # noqa: E402
from gx10.lab.simulators import vllm_sim  # noqa: E402

MAX_NUM_SEQS = 12
SCALE = 1.0  # GX10_SIM_TIME_SCALE: wall seconds = simulated seconds x SCALE


def expected(prompt: int, streams: int, tokens: int) -> dict[str, float]:
    schedule = vllm_sim.predict_case(
        vllm_sim.ReferencePerfModel(), prompt, streams, tokens, max_num_seqs=MAX_NUM_SEQS
    )
    simulated = {
        "ttft_s": statistics.fmean(first for first, _ in schedule),
        "decode_tps": statistics.fmean((tokens - 1) / (end - first) for first, end in schedule),
        "aggregate_tps": streams * tokens / max(end for _, end in schedule),
    }
    # As the bench measures them: wall seconds (x SCALE), so rates per wall second (/ SCALE).
    return {
        "ttft_s": simulated["ttft_s"] * SCALE,
        "decode_tps": simulated["decode_tps"] / SCALE,
        "aggregate_tps": simulated["aggregate_tps"] / SCALE,
    }


def measured(case: dict[str, Any]) -> dict[str, float]:
    return {
        "ttft_s": case["ttft_s"]["mean"],
        "decode_tps": case["decode_tps"]["mean"],
        "aggregate_tps": case["aggregate_tps"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--concurrency", default="1,6,12")
    parser.add_argument("--verbose", action="store_true", help="show the bench's progress")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[tuple[int, str, float, float, float]] = []
    cpu_share: dict[int, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gx10-bench-accuracy-") as tmp:
        work = Path(tmp)
        launcher = Launcher(work / "sim")
        env = {"GX10_SIM_TIME_SCALE": f"{SCALE:g}", "GX10_SIM_STATE_DIR": str(work / "smi")}
        try:
            head, _worker, url = launcher.pair(
                "--served-model-name",
                SERVED,
                "--trust-remote-code",
                "--max-model-len",
                "65536",
                "--max-num-seqs",
                str(MAX_NUM_SEQS),
                "--block-size",
                "256",
                head_env=env,
                worker_env=env,
            )
            wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
            for streams in levels:
                config = build_config(
                    None,
                    {
                        "prompt_lengths": str(args.prompt),
                        "concurrency": str(streams),
                        "max_tokens": args.max_tokens,
                    },
                )
                console = Console(
                    stderr=True, highlight=False, file=None if args.verbose else io.StringIO()
                )
                usage_before = resource.getrusage(resource.RUSAGE_SELF)
                wall_before = time.perf_counter()
                outcome = run_bench(
                    config,
                    Endpoint.parse(url, model=SERVED),
                    work / f"out-c{streams}",
                    lock_path=work / "bench.lock",
                    console=console,
                    command=["bench_accuracy.py"],
                )
                wall = time.perf_counter() - wall_before
                usage_after = resource.getrusage(resource.RUSAGE_SELF)
                cpu = (usage_after.ru_utime - usage_before.ru_utime) + (
                    usage_after.ru_stime - usage_before.ru_stime
                )
                cpu_share[streams] = (cpu, wall, cpu / wall)
                (case,) = outcome.cases
                if case["status"] != "ok":
                    print(f"case c={streams} failed: {case['errors']}", file=sys.stderr)
                    return 1
                tokens = {r["completion_tokens"] for r in case["request_results"]}
                if tokens != {args.max_tokens}:
                    print(f"unexpected completion lengths {tokens}", file=sys.stderr)
                    return 1
                want = expected(args.prompt, streams, args.max_tokens)
                got = measured(case)
                for key in ("ttft_s", "decode_tps", "aggregate_tps"):
                    rows.append((streams, key, got[key], want[key], got[key] / want[key] - 1))
        finally:
            launcher.close()
    print(
        f"gx10 bench accuracy vs the simulator's reference model: prompt {args.prompt} tokens, "
        f"max_tokens {args.max_tokens}, time scale {SCALE:g}, max_num_seqs {MAX_NUM_SEQS}"
    )
    print(f"{'streams':>7}  {'figure':<14} {'measured':>10} {'expected':>10} {'error':>8}")
    worst = 0.0
    for streams, key, got, want, err in rows:
        worst = max(worst, abs(err))
        print(f"{streams:>7}  {key:<14} {got:>10.3f} {want:>10.3f} {err:>+8.2%}")
    print(f"worst error {worst:.2%} (target 3%)")
    for streams, (cpu, wall, share) in cpu_share.items():
        print(
            f"harness CPU at {streams:>2} streams: {cpu:.2f} s over {wall:.2f} s wall = "
            f"{share:.1%} of one core (target < 10% at 12)"
        )
    ok = worst <= 0.03 and cpu_share.get(12, (0, 0, 0.0))[2] < 0.10
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
