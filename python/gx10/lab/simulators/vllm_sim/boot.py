"""A rank's boot after the rendezvous: weights, torch.compile (cold or from its cache), the KV
cache's memory, CUDA graph capture, each logged with vLLM's own lines.

``profile`` is what vLLM does before the engine core sizes the KV cache (load the weights, the
profile run that compiles, then "Available KV cache memory" from the rank's MemoryPlan);
``capture`` what it does after (CUDA graphs). The caller checks the KV cache in between
(memory.kv_cache_error), as vLLM's engine core does with every rank's figure.

The compile phase depends on the cache directory the way vLLM's does: the compiled graphs live
under ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_<r>_0/`` (``<hash>`` from the model, the
parallel layout and the engine version), and the JIT caches the image's kernels use
(``TRITON_CACHE_DIR``, ``FLASHINFER_WORKSPACE_BASE``, ``TILELANG_CACHE_DIR``, ``DG_JIT_CACHE_DIR``,
``B12X_CUTE_COMPILE_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``) get their entries on a cold boot. A
warm boot (the rank's graphs present) loads them in a small fraction of the cold compile time; an
empty or new directory (a new image digest, a wiped cache) compiles again. ``--enforce-eager``
skips compile and capture, as vLLM does.

Test equipment knobs: ``GX10_SIM_BOOT_SECONDS`` (weights), ``GX10_SIM_COMPILE_SECONDS`` (a cold
compile), ``GX10_SIM_CAPTURE_SECONDS`` and ``GX10_SIM_HANG_PHASE`` (``weights``, ``compile`` or
``graph_capture``: that phase never ends, for the serve stage's per-phase timeouts).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

from .env import SimEnv
from .log import Log
from .memory import MemoryPlan, format_gib, log_available
from .model import ModelInfo

# The JIT caches of the community image's kernels, by the variable that moves each.
JIT_CACHE_VARS = (
    "TRITON_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "TILELANG_CACHE_DIR",
    "DG_JIT_CACHE_DIR",
    "B12X_CUTE_COMPILE_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
)
WARM_FRACTION = 0.05  # a cached graph loads in about a twentieth of its compile time
COMPILE_RANGE = "(1, 8192)"


def cache_root(env: SimEnv) -> Path:
    """vLLM's cache root: VLLM_CACHE_ROOT, else XDG_CACHE_HOME/vllm, else ~/.cache/vllm."""
    if env.raw.get("VLLM_CACHE_ROOT"):
        return Path(env.raw["VLLM_CACHE_ROOT"])
    base = env.raw.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm"


def compile_hash(env: SimEnv, model: ModelInfo, world: int, max_len: int) -> str:
    """The cache key of this engine's graphs: model, layout and engine version (vLLM hashes its
    whole config; these are the parts that differ between the lab's launches)."""
    key = json.dumps([model.path, model.architecture, world, max_len, env.version])
    return hashlib.sha256(key.encode()).hexdigest()[:10]


class Boot:
    """One rank's boot phases; ``run`` raises InterruptedError when told to stop."""

    def __init__(
        self,
        env: SimEnv,
        stop: threading.Event,
        log: Log,
        model: ModelInfo,
        *,
        rank: int,
        world: int,
        max_len: int,
        eager: bool,
        memory: MemoryPlan,
    ) -> None:
        self.env, self.stop, self.log, self.model = env, stop, log, model
        self.rank, self.world, self.max_len, self.eager = rank, world, max_len, eager
        self.memory = memory

    def _wait(self, seconds: float, phase: str) -> None:
        if self.env.hang_phase == phase:
            self.stop.wait()
            raise InterruptedError
        if self.stop.wait(seconds):
            raise InterruptedError

    def run(self) -> None:
        """The whole boot (a caller with nothing to check between profile and capture)."""
        self.profile()
        self.capture()

    def profile(self) -> None:
        """Weights, the profile run (torch.compile unless eager), the KV cache's memory."""
        self.weights()
        if not self.eager:
            self.compile()
        log_available(self.log, self.memory, self.rank)

    def weights(self) -> None:
        log, started = self.log, time.monotonic()
        log.info_at("gpu_model_runner.py:2602", f"Starting to load model {self.model.path}...")
        log.info_at("default_loader.py:267", f"Loading weights from {self.model.path}")
        self._wait(self.env.boot_seconds, "weights")
        took = time.monotonic() - started
        log.info_at("default_loader.py:299", f"Loading weights took {took:.2f} seconds")
        log.info_at(
            "gpu_model_runner.py:2634",
            f"Model loading took {format_gib(self.memory.weights)} GiB memory and "
            f"{took:.6f} seconds",
        )

    def _rank_dir(self) -> Path:
        digest = compile_hash(self.env, self.model, self.world, self.max_len)
        return cache_root(self.env) / "torch_compile_cache" / digest / f"rank_{self.rank}_0"

    def compile(self) -> None:
        log, rank_dir = self.log, self._rank_dir()
        log.info_at(
            "backends.py:614",
            f"Using cache directory: {rank_dir / 'backbone'} for vLLM's torch.compile",
        )
        graph = rank_dir / "backbone" / "computation_graph.py"
        started = time.monotonic()
        if graph.is_file() and self.env.hang_phase != "compile":
            self._wait(self.env.compile_seconds * WARM_FRACTION, "compile")
            took = time.monotonic() - started
            log.info_at(
                "backends.py:218",
                f"Directly load the compiled graph(s) for compile range {COMPILE_RANGE} from the "
                f"cache, took {took:.3f} s",
            )
        else:
            log.info_at("backends.py:548", "Dynamo bytecode transform time: 0.01 s")
            self._wait(self.env.compile_seconds, "compile")
            took = time.monotonic() - started
            log.info_at(
                "backends.py:227",
                f"Compiling a graph for compile range {COMPILE_RANGE} takes {took:.2f} s",
            )
            self._write_caches(graph)
        log.info_at("monitor.py:34", f"torch.compile takes {took:.2f} s in total")

    def _write_caches(self, graph: Path) -> None:
        """What a cold compile leaves: the rank's graphs, and an entry in each JIT cache."""
        try:
            graph.parent.mkdir(parents=True, exist_ok=True)
            graph.write_text(f"# compiled graph of {self.model.path}, rank {self.rank}\n")
            for name in JIT_CACHE_VARS:
                where = self.env.raw.get(name)
                if where:
                    entry = Path(where) / f"gx10-sim-rank{self.rank}-{graph.parent.parent.name}"
                    entry.parent.mkdir(parents=True, exist_ok=True)
                    entry.write_text("kernel\n")
        except OSError as error:  # a read-only or full cache: vLLM warns and serves uncached
            self.log.warning_at("backends.py:240", f"cannot save the compiled graph: {error}")

    def capture(self) -> None:
        log, started = self.log, time.monotonic()
        if self.eager:
            log.info_at("gpu_model_runner.py:3390", "Skipping CUDA graph capture (enforce_eager)")
            return
        log.raw("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 0%|          | 0/67")
        self._wait(self.env.capture_seconds, "graph_capture")
        log.raw("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67")
        took = time.monotonic() - started
        log.info_at(
            "gpu_model_runner.py:3480",
            f"Graph capturing finished in {took:.0f} secs, took "
            f"{format_gib(self.memory.cuda_graphs)} GiB",
        )
