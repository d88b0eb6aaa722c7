"""A vLLM simulator pair on loopback for the bench tests (reusing test_vllm_sim's Launcher)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from test_vllm_sim import Launcher, healthy, wait_until

SERVED = "ds4-flash"
MAX_MODEL_LEN = 20000
MAX_NUM_SEQS = 4


@contextlib.contextmanager
def sim_pair(workdir: Path, time_scale: float, *extra: str, block_size: int = 16) -> Iterator[str]:
    """Head + worker with the reference perf model; yields the head's URL; kills both by PID."""
    launcher = Launcher(workdir)
    env = {"GX10_SIM_TIME_SCALE": str(time_scale), "GX10_SIM_STATE_DIR": str(workdir / "smi")}
    try:
        head, _worker, url = launcher.pair(
            "--served-model-name",
            SERVED,
            "--trust-remote-code",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--max-num-seqs",
            str(MAX_NUM_SEQS),
            "--block-size",
            str(block_size),
            *extra,
            head_env=env,
            worker_env=env,
        )
        wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
        assert head.alive(), head.output()
        yield url
    finally:
        launcher.close()
