"""The engine: admission, timing, counters, and death.

Plan (a validated request) lives here: the engine runs it, the API (api.py) builds it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .env import SimEnv
from .gpu_load import engine_load
from .log import Log
from .perf import PERF_MODELS, PerfModel
from .tool_calls import ToolCall

STALL_POLL_SECONDS = 0.2
# The draft acceptance the timing models' decode rates were measured at (FIELD_NOTES section 1:
# 83-87% with DSpark k=5; GX10_SIM_SPEC_ACCEPTANCE's default).
CALIBRATED_SPEC_ACCEPTANCE = 0.85
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class EngineDeadError(Exception):
    pass


TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=dict)
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))


def position_acceptance(rate: float, k: int) -> float:
    """The chance q that a draft position is accepted once every position before it was, such
    that accepted / proposed draft tokens is `rate` on average.

    A draft is verified left to right and the first rejection ends it (vLLM's rejection
    sampler), so position i (0-based) is accepted with probability q^(i+1) and a step accepts
    q + q^2 + ... + q^k of its k draft tokens: the mean of q^1..q^k must be `rate`. That mean
    grows with q, so bisection finds it.
    """
    rate = min(max(float(rate), 0.0), 1.0)
    if k <= 1 or rate in (0.0, 1.0):
        return rate
    low, high = rate, 1.0  # q^i <= q, so the mean is at most q: q >= rate
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(1, k + 1)) / k < rate:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class PrefixCache:
    """vLLM's automatic prefix caching, reduced to what timing needs: block hashes chained from
    the start of the prompt (a block only matches if every block before it matched), least
    recently used blocks evicted first."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()

    def match(self, hashes: Sequence[str]) -> int:
        """How many leading blocks of `hashes` are cached (and mark them recently used)."""
        hits = 0
        with self.lock:
            for digest in hashes:
                if digest not in self.blocks:
                    break
                self.blocks.move_to_end(digest)
                hits += 1
        return hits

    def insert(self, hashes: Sequence[str]) -> None:
        if self.capacity <= 0:
            return
        with self.lock:
            for digest in hashes:
                self.blocks[digest] = None
                self.blocks.move_to_end(digest)
            while len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)


def block_hashes(pieces: Sequence[str], block_size: int) -> tuple[str, ...]:
    """Chained hashes of the prompt's full blocks of `block_size` tokens."""
    out: list[str] = []
    parent = b""
    for start in range(0, len(pieces) - block_size + 1, block_size):
        block = "\x00".join(pieces[start : start + block_size]).encode("utf-8")
        parent = hashlib.blake2b(parent + block, digest_size=16).digest()
        out.append(parent.hex())
    return tuple(out)


@dataclass
class KvLease:
    """The KV blocks one running request holds (its prompt and output so far, whole blocks)."""

    blocks: int = 0


@dataclass
class Plan:
    """A request once validated: prompt size, budget, and what the model will say."""

    prompt_tokens: int
    max_tokens: int
    rng: random.Random
    reasoning_tokens: int
    answer_tokens: int
    tool_calls: list[ToolCall]
    ignore_eos: bool
    block_hashes: tuple[str, ...] = ()
    # The answer's words when they are known (after a tool result); generated prose otherwise.
    answer_text: str | None = None
    # The battery's break modes active for this request (breaks.py).
    breaks: frozenset[str] = frozenset()


class Engine:
    """Shared state of the head's engine: slots, counters, and the peer/engine health."""

    def __init__(
        self,
        env: SimEnv,
        max_num_seqs: int,
        spec_tokens: int,
        log: Log,
        *,
        block_size: int = 16,
        prefix_caching: bool = True,
        kv_blocks: int | None = None,
        cache_config: Mapping[str, str] | None = None,
    ) -> None:
        self.env = env
        self.max_num_seqs = max_num_seqs
        self.spec_tokens = spec_tokens
        self.log = log
        self.perf = PERF_MODELS.get(env.perf_model, PerfModel)()
        self.cond = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.decoding = 0
        self.block_size = max(block_size, 1)
        self.prefix_cache = PrefixCache(
            env.prefix_cache_tokens // self.block_size if prefix_caching else 0
        )
        self.prefill_lock = threading.Lock()
        # The KV cache pool (memory.py: the blocks every rank can hold; None: not modelled) and
        # the blocks the running requests hold; vllm:cache_config_info's labels.
        self.kv_blocks = kv_blocks
        self.kv_used = 0
        self.cache_config = dict(cache_config or {})
        self.counters = Counters(spec_accepted_per_pos=[0] * spec_tokens)
        # GX10_SIM_SPEC_ACCEPTANCE is the rate the counters show (accepted / draft tokens); each
        # draft position is accepted with the chance that gives it (position_acceptance).
        self.spec_position_acceptance = position_acceptance(env.spec_acceptance, spec_tokens)
        # A decode step takes about the same time whatever it accepts (the target verifies all
        # k drafts in one pass), so tokens per second follow tokens per step, 1 + k x rate: a
        # draft accepted at 0.40 instead of 0.85 costs 43% of the decode speed at k=5.
        self.spec_speed = (1 + spec_tokens * env.spec_acceptance) / (
            1 + spec_tokens * CALIBRATED_SPEC_ACCEPTANCE
        )
        self.created = time.time()  # the counters' start (their _created series)
        self.peer_lost = threading.Event()
        self.dead = threading.Event()
        self._stuck_timer: threading.Timer | None = None
        self._stall_logged = False
        # Told the GPU load (engine_load) whenever the running count changes; see GpuLoad.
        self.load_listener: Callable[[float], None] | None = None

    def blocks_for(self, tokens: int) -> int:
        return -(max(tokens, 0) // -self.block_size)

    def _kv_fits(self, blocks: int) -> bool:
        """A waiting request starts when its prompt's blocks are free: a simplification of vLLM's
        scheduler, which allocates a prompt's blocks chunk by chunk and preempts a running
        request when they run out. With nothing running it always fits: the boot check made
        room for one request of max_model_len."""
        if self.kv_blocks is None or self.running == 0:
            return True
        return self.kv_used + blocks <= self.kv_blocks

    def admit(self, prompt_tokens: int = 0) -> KvLease:
        """Wait for a sequence slot (max_num_seqs) and the prompt's KV blocks; hold both."""
        need = self.blocks_for(prompt_tokens)
        with self.cond:
            self.waiting += 1
            try:
                while (
                    self.running >= self.max_num_seqs or not self._kv_fits(need)
                ) and not self.dead.is_set():
                    self.cond.wait(0.1)
            finally:
                self.waiting -= 1
            if self.dead.is_set():
                raise EngineDeadError
            self.running += 1
            self.kv_used += need
            self._load_changed()
        return KvLease(need)

    def grow(self, lease: KvLease, tokens: int) -> None:
        """The request now has `tokens` tokens (prompt and output): blocks as it fills them.

        vLLM preempts a running request when none is free; the simulator lets the step run and
        the usage shows a full cache (kv_usage at most 1)."""
        need = self.blocks_for(tokens)
        if need > lease.blocks:
            with self.cond:
                self.kv_used += need - lease.blocks
            lease.blocks = need

    def release(self, lease: KvLease | None = None) -> None:
        with self.cond:
            self.running -= 1
            if lease is not None:
                self.kv_used -= lease.blocks
                lease.blocks = 0
            self.cond.notify_all()
            self._load_changed()

    def kv_usage(self) -> float:
        """vllm:kv_cache_usage_perc: the share of the pool's blocks the running requests hold."""
        if not self.kv_blocks:
            return 0.0
        return min(self.kv_used / self.kv_blocks, 1.0)

    def _load_changed(self) -> None:
        if self.load_listener is not None:
            self.load_listener(engine_load(self.running, self.max_num_seqs))

    def sleep(self, seconds: float) -> None:
        """Model time passing; a step needs every rank, so a lost peer wedges it."""
        if self.peer_lost.is_set():
            self._start_stuck_timer()
            self.dead.wait()
        if self.dead.is_set():
            raise EngineDeadError
        if (
            seconds > 0
            and self.env.time_scale > 0
            and self.dead.wait(seconds * self.env.time_scale)
        ):
            raise EngineDeadError

    def sleep_until(self, deadline: float) -> None:
        """Sleep to a monotonic deadline: steps timed this way do not accumulate oversleep."""
        if self.peer_lost.is_set() or self.dead.is_set():
            self.sleep(0.0)
        remaining = deadline - time.monotonic()
        if remaining > 0 and self.dead.wait(remaining):
            raise EngineDeadError

    def clock_cap(self) -> float | None:
        """The SM clock cap the GPU runs under: nvidia-smi's -lgc state, else the env knob."""
        try:
            text = (self.env.state_dir / "locked_clocks").read_text(encoding="utf-8")
            return float(text.strip().split(",")[-1])
        except (OSError, ValueError):
            return self.env.sm_clock_mhz

    def prefill(self, plan: Plan, clock: float | None) -> int:
        """Time the prompt's prefill (one at a time if the model says so); returns cached tokens."""
        lock = self.prefill_lock if self.perf.serial_prefill else contextlib.nullcontext()
        with lock:
            cached = self.prefix_cache.match(plan.block_hashes) * self.block_size
            cached = min(cached, max(plan.prompt_tokens - 1, 0))
            with self.cond:
                self.counters.prefix_hits += cached
                decoding = self.decoding
            self.sleep(
                self.perf.prefill_seconds(plan.prompt_tokens, cached, self.running, decoding, clock)
            )
            self.prefix_cache.insert(plan.block_hashes)
        return cached

    def _start_stuck_timer(self) -> None:
        with self.cond:
            if self._stuck_timer is None and not self.dead.is_set():
                self._stuck_timer = threading.Timer(self.env.execute_model_timeout, self.die)
                self._stuck_timer.daemon = True
                self._stuck_timer.start()

    def die(self) -> None:
        if self.dead.is_set():
            return
        engine_log = self.log.child(f"(EngineCore_DP0 pid={os.getpid()}) ")
        engine_log.error_at(
            "core.py:710",
            "EngineCore encountered a fatal error.\n"
            "TimeoutError: RPC call to execute_model timed out.",
        )
        self.log.error_at(
            "async_llm.py:480",
            "AsyncLLM output_handler failed.\n"
            f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}",
        )
        self.dead.set()
        with self.cond:
            self.cond.notify_all()

    def stalled(self) -> bool:
        """Stall mode (test equipment): the switch is a file, read at every step."""
        return self.env.stall_file.exists()

    def wait_while_stalled(self) -> None:
        """Hold a step while the stall file exists: HTTP answers, generation makes no token.

        A wedged engine as users of GB10 pairs report it: no error and no progress. The wait
        ends when the file is removed (the request then goes on) or the engine dies.
        """
        if not self.stalled():
            return
        if not self._stall_logged:
            self._stall_logged = True
            self.log.warning_at("core.py:711", "engine stalled (gx10 lab stall): no step runs")
        while self.stalled():
            if self.dead.wait(STALL_POLL_SECONDS):
                raise EngineDeadError
        self._stall_logged = False
        self.log.info_at("core.py:711", "engine stall cleared: steps run again")

    def spec_step(self, rng: random.Random) -> int:
        """Tokens produced by one decode step (1 + accepted drafts); counts the drafts as vLLM's
        SpecDecodingStats.observe_draft does (k proposed, the accepted prefix, per position)."""
        k = self.spec_tokens
        if k <= 0:
            return 1
        accepted = 0
        while accepted < k and rng.random() < self.spec_position_acceptance:
            accepted += 1
        with self.cond:
            for pos in range(accepted):
                self.counters.spec_accepted_per_pos[pos] += 1
            self.counters.spec_drafts += 1
            self.counters.spec_draft_tokens += k
            self.counters.spec_accepted += accepted
        return 1 + accepted
