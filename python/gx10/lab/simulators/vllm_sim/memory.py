"""A rank's memory as vLLM V1 accounts for it, and vLLM's own words when the engine does not fit.

Test equipment, independent of the product's memory budget (no code or figure is shared): every
number comes from the serve flags, the served checkpoint and the node, through vLLM's arithmetic,
so a profile the product lets through but vLLM would refuse fails here as it would on a GB10, with
vLLM's messages, at the point of the boot where vLLM raises them.

Per rank (one GPU per node; a GB10's GPU has no memory of its own, it shares the node's):

  total      the node's memory: /proc/meminfo MemTotal, or GX10_SIM_MEM_TOTAL_GIB
  free       what vLLM sees free at start. On unified-memory devices (Orin, Thor, Spark) vLLM takes
             psutil's available memory, /proc/meminfo MemAvailable (vllm/utils/mem_utils.py,
             MemorySnapshot.measure), so page cache the kernel could drop still counts as used.
             GX10_SIM_MEM_AVAILABLE_GIB sets it; with GX10_SIM_MEM_TOTAL_GIB alone it is the
             total (an idle node)
  requested  gpu_memory_utilization x total, vLLM's share. init_device refuses to start when
             free < requested (free_memory_error, vllm/v1/worker/gpu_worker.py)
  weights    the checkpoint's bytes (its *.safetensors files; GX10_SIM_WEIGHTS_GIB, the whole
             checkpoint, overrides) over tensor x pipeline parallel size: "Model loading took"
  runtime    documented constants for what is not weights or KV: NON_TORCH_GIB (CUDA context,
             NCCL buffers, workspaces), ACTIVATION_PEAK_GIB (torch's peak in the profile run), the
             sampler's fp32 logits for min(max_num_seqs, max_num_batched_tokens) requests (the
             part that grows with sequences), and CUDA_GRAPHS_GIB (none with --enforce-eager;
             recent vLLM subtracts its CUDA graph estimate from the cache's share)
  kv         requested - weights - runtime: "Available KV cache memory: X GiB", every rank
  per token  per layer at --kv-cache-dtype (kv_spec: MLA keeps one latent per token, the same on
             every TP rank), x num_hidden_layers / pipeline size, in pages of --block-size tokens
  blocks     kv // page // layers, the smallest over the ranks: "GPU KV cache size: N tokens"
             (N = blocks x block size) and "Maximum concurrency for L tokens per request: C x"
             (blocks over the blocks one request of max_model_len needs)

The engine core refuses to start when kv <= 0 (no_cache_memory_error) or when one request of
max_model_len needs more than kv (max_seq_len_error, with vLLM's estimate of the longest that
fits): vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory. max_num_seqs full-length
sequences are no condition for vLLM: past the concurrency it reports, requests wait for free
blocks (Engine.admit). MemoryPlan.kv_demand is that figure, reported in the simulator's own log
line, because a profile needs it when every sequence may reach the full context.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .env import SimEnv
from .errors import SimFatal
from .log import Log
from .model import ModelInfo

GIB = 1 << 30
MEMINFO = Path("/proc/meminfo")
CONSERVING_MEMORY = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"

# What is neither weights nor KV cache, per rank. Constants, not measurements: about what vLLM's
# profile run reports for a large MoE model at 8192 batched tokens (non-torch: the CUDA context,
# NCCL's buffers and the kernels' workspaces; the activation peak: torch's largest allocation in
# the profile run's forward pass), and the 0.31 GiB the graph capture line has always reported.
NON_TORCH_GIB = 1.0
ACTIVATION_PEAK_GIB = 1.5
CUDA_GRAPHS_GIB = 0.31
LOGIT_BYTES = 4  # the sampler's logits are float32
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's when --max-num-seqs is not given
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # the API server's default on a large GPU
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE

# Bytes per token and layer of DeepSeek's packed sparse-MLA cache formats. fp8_ds_mla: 512 fp8
# latent values, four float32 scales, 64 bf16 rope values (vllm/v1/kv_cache_interface.py,
# MLAAttentionSpec). nvfp4_ds_mla is the GB10 images' format, not upstream's: published as a
# "400 B/token page" (fp4 latent, its scales, bf16 rope) by the NVFP4 sparse-MLA ports.
DS_MLA_TOKEN_BYTES = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 400}
FP8_CACHE_DTYPES = frozenset(
    {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla"}
)
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4"})
# transformers' DeepseekV3Config defaults, for a config.json that leaves them out.
DEEPSEEK_DEFAULTS = {
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "vocab_size": 129280,
}
# transformers' PretrainedConfig / LlamaConfig defaults for the other (GQA) models.
GQA_DEFAULTS = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "hidden_size": 4096,
    "vocab_size": 32000,
}


def format_gib(size: float) -> float:
    """vLLM's format_gib: GiB rounded to two decimals (printed as Python prints a float)."""
    return round(size / GIB, 2)


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


# --------------------------------------------------------------------------------------------
# The node
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeMemory:
    total: int  # bytes
    free: int  # bytes vLLM sees free at start
    source: str  # where `total` came from, for the simulator's own log line


_MEMINFO_LINE = re.compile(r"^(\w+):\s+(\d+)(?:\s+kB)?\s*$")


def read_meminfo(path: Path = MEMINFO) -> dict[str, int]:
    """/proc/meminfo in bytes, by field."""
    out: dict[str, int] = {}
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        found = _MEMINFO_LINE.match(line)
        if found:
            key, value = found.groups()
            out[key] = int(value) * (1024 if line.rstrip().endswith("kB") else 1)
    return out


def node_memory(env: SimEnv, meminfo: Path = MEMINFO) -> NodeMemory:
    """The node's memory: the knobs, else /proc/meminfo (MemTotal, and MemAvailable as free)."""
    if env.mem_total_gib is not None:
        total = int(env.mem_total_gib * GIB)
        free = total if env.mem_available_gib is None else int(env.mem_available_gib * GIB)
        return NodeMemory(total, min(free, total), "GX10_SIM_MEM_TOTAL_GIB")
    try:
        info = read_meminfo(meminfo)
    except OSError as error:
        raise SimFatal(
            "RuntimeError",
            f"[gx10-sim] cannot read the node's memory from {meminfo} ({error}): "
            "set GX10_SIM_MEM_TOTAL_GIB to the node's memory in GiB",
        ) from error
    total = info.get("MemTotal", 0)
    if total <= 0:
        raise SimFatal(
            "RuntimeError",
            f"[gx10-sim] no MemTotal in {meminfo}: set GX10_SIM_MEM_TOTAL_GIB to the node's "
            "memory in GiB",
        )
    free = info.get("MemAvailable", info.get("MemFree", total))
    if env.mem_available_gib is not None:
        free = int(env.mem_available_gib * GIB)
    return NodeMemory(total, min(free, total), f"{meminfo} MemTotal")


# --------------------------------------------------------------------------------------------
# The checkpoint: weights and the KV cache's shape
# --------------------------------------------------------------------------------------------


def checkpoint_bytes(model_dir: Path) -> int:
    """The checkpoint's weights on disk: its *.safetensors files, else the index's total_size."""
    total = sum(p.stat().st_size for p in model_dir.glob("*.safetensors") if p.is_file())
    if total:
        return total
    try:
        index = json.loads((model_dir / "model.safetensors.index.json").read_text("utf-8"))
        size = index["metadata"]["total_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return size if isinstance(size, int) and size > 0 else 0


def is_mla(model: ModelInfo) -> bool:
    """DeepSeek's multi-head latent attention: one compressed latent per token and layer."""
    config = model.config
    return (
        "kv_lora_rank" in config
        or str(config.get("model_type", "")) in MLA_MODEL_TYPES
        or model.architecture.startswith("Deepseek")
    )


def model_dtype_bytes(args: argparse.Namespace, config: Mapping[str, Any]) -> int:
    """Bytes of the model's dtype (--dtype, or the checkpoint's torch_dtype with "auto")."""
    dtype = args.dtype if args.dtype != "auto" else str(config.get("torch_dtype", "bfloat16"))
    return 4 if dtype in ("float", "float32") else 2


@dataclass(frozen=True)
class KvSpec:
    """One rank's KV cache layout: `token_bytes` per token and layer, pages of `block_size`."""

    dtype: str
    layers: int
    token_bytes: int
    block_size: int
    mla: bool

    @property
    def page_bytes(self) -> int:
        """One block of one layer."""
        return self.block_size * self.token_bytes

    @property
    def bytes_per_token(self) -> int:
        """One token over all this rank's layers."""
        return self.token_bytes * self.layers

    def bytes_for(self, tokens: int) -> int:
        """The KV one request of `tokens` tokens takes: whole pages, every layer (vLLM's
        FullAttentionSpec.max_memory_usage_bytes times the layers)."""
        return cdiv(tokens, self.block_size) * self.page_bytes * self.layers


def kv_spec(args: argparse.Namespace, model: ModelInfo) -> KvSpec:
    """The rank's KV layout from config.json and the flags (vLLM's attention specs).

    MLA (DeepSeek): one latent of kv_lora_rank + qk_rope_head_dim values per token and layer,
    not split by tensor parallelism (every TP rank keeps the whole latent); fp8_ds_mla and
    nvfp4_ds_mla are packed formats of fixed size (DS_MLA_TOKEN_BYTES). Other models: keys and
    values of num_key_value_heads / tensor parallel size (at least one) heads of head_dim.
    """
    config = model.config
    mla = is_mla(model)
    defaults = DEEPSEEK_DEFAULTS if mla else GQA_DEFAULTS
    cache_dtype = args.kv_cache_dtype
    if cache_dtype in FP8_CACHE_DTYPES:
        element = 1
    elif cache_dtype in ("bfloat16", "float16"):
        element = 2
    else:  # auto: the model's dtype
        element = model_dtype_bytes(args, config)
    if mla:
        width = _int(config, "kv_lora_rank", defaults["kv_lora_rank"]) + _int(
            config, "qk_rope_head_dim", defaults["qk_rope_head_dim"]
        )
        token = DS_MLA_TOKEN_BYTES.get(cache_dtype, width * element)
    else:
        heads = _int(config, "num_attention_heads", defaults["num_attention_heads"])
        kv_heads = _int(config, "num_key_value_heads", heads)
        head_dim = _int(
            config, "head_dim", _int(config, "hidden_size", defaults["hidden_size"]) // heads
        )
        token = 2 * max(kv_heads // max(args.tensor_parallel_size, 1), 1) * head_dim * element
    layers = _int(config, "num_hidden_layers", defaults["num_hidden_layers"])
    pipeline = max(args.pipeline_parallel_size, 1)
    return KvSpec(
        dtype=cache_dtype,
        layers=cdiv(layers, pipeline),
        token_bytes=token,
        block_size=args.block_size or DEFAULT_BLOCK_SIZE,
        mla=mla,
    )


# --------------------------------------------------------------------------------------------
# The plan: one rank's memory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's memory, in bytes, as vLLM's profiling would find it."""

    node: NodeMemory
    utilization: float
    weights: int
    non_torch: int
    activation_peak: int
    cuda_graphs: int
    kv: KvSpec
    max_model_len: int
    max_num_seqs: int

    @property
    def requested(self) -> int:
        """vLLM's share of the node: gpu_memory_utilization x total."""
        return int(self.node.total * self.utilization)

    @property
    def non_kv(self) -> int:
        """vLLM's non_kv_cache_memory: weights + activation peak + non-torch."""
        return self.weights + self.activation_peak + self.non_torch

    @property
    def available_kv(self) -> int:
        """What the KV cache gets (negative when the rest does not even fit)."""
        return self.requested - self.non_kv - self.cuda_graphs

    @property
    def num_blocks(self) -> int:
        """KV blocks this rank can hold (vLLM's get_num_blocks)."""
        if self.available_kv <= 0:
            return 0
        return self.available_kv // self.kv.page_bytes // self.kv.layers

    @property
    def request_kv(self) -> int:
        """The KV one request of max_model_len needs."""
        return self.kv.bytes_for(self.max_model_len)

    @property
    def kv_demand(self) -> int:
        """The KV max_num_seqs requests of max_model_len need: the footprint at full load."""
        return self.request_kv * self.max_num_seqs

    @property
    def footprint(self) -> int:
        """What the engine holds once up: everything but the KV, plus the KV pool it allocated."""
        return (
            self.non_kv + self.cuda_graphs + self.num_blocks * self.kv.page_bytes * self.kv.layers
        )


def plan_memory(
    args: argparse.Namespace,
    env: SimEnv,
    model: ModelInfo,
    max_model_len: int,
    meminfo: Path = MEMINFO,
) -> MemoryPlan:
    """This rank's memory plan from the flags, the checkpoint and the node."""
    utilization = args.gpu_memory_utilization
    if not 0 < utilization <= 1:
        raise SimFatal(
            "pydantic_core._pydantic_core.ValidationError",
            "1 validation error for CacheConfig\ngpu_memory_utilization\n  Input should be "
            + ("greater than 0" if utilization <= 0 else "less than or equal to 1")
            + f" [type={'greater_than' if utilization <= 0 else 'less_than_equal'}, "
            f"input_value={utilization}, input_type=float]",
        )
    ranks = max(args.tensor_parallel_size, 1) * max(args.pipeline_parallel_size, 1)
    checkpoint = (
        int(env.weights_gib * GIB)
        if env.weights_gib is not None
        else checkpoint_bytes(Path(model.path))
    )
    max_num_seqs = args.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    batched = args.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    vocab = _int(
        model.config,
        "vocab_size",
        (DEEPSEEK_DEFAULTS if is_mla(model) else GQA_DEFAULTS)["vocab_size"],
    )
    logits = min(max_num_seqs, batched) * vocab * LOGIT_BYTES
    eager = bool(getattr(args, "enforce_eager", False))
    return MemoryPlan(
        node=node_memory(env, meminfo),
        utilization=utilization,
        weights=checkpoint // ranks,
        non_torch=int(NON_TORCH_GIB * GIB),
        activation_peak=int(ACTIVATION_PEAK_GIB * GIB) + logits,
        cuda_graphs=0 if eager else int(CUDA_GRAPHS_GIB * GIB),
        kv=kv_spec(args, model),
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )


# --------------------------------------------------------------------------------------------
# vLLM's checks and messages
# --------------------------------------------------------------------------------------------


def free_memory_error(plan: MemoryPlan) -> str | None:
    """init_device's check (vllm/v1/worker/gpu_worker.py): vLLM's share must be free at start."""
    if plan.node.free >= plan.requested:
        return None
    return (
        f"Free memory on device ({format_gib(plan.node.free)}/{format_gib(plan.node.total)} GiB) "
        f"on startup is less than desired GPU memory utilization ({plan.utilization}, "
        f"{format_gib(plan.requested)} GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )


def estimate_max_model_len(available: int, kv: KvSpec, max_model_len: int) -> int:
    """vLLM's estimate_max_model_len: the longest request whose KV fits (binary search), 0 if
    even one token does not."""

    def fits(length: int) -> bool:
        return kv.bytes_for(length) <= available

    left, right = 1, max_model_len
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


def kv_cache_error(available: int, kv: KvSpec, max_model_len: int) -> str | None:
    """_check_enough_kv_cache_memory (vllm/v1/core/kv_cache_utils.py), for one rank."""
    if available <= 0:
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"when initializing the engine. See {CONSERVING_MEMORY} for more details."
        )
    needed = kv.bytes_for(max_model_len)
    if needed <= available:
        return None
    estimated = estimate_max_model_len(available, kv, max_model_len)
    estimated_msg = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    # "models's" is vLLM's own spelling.
    return (
        f"To serve at least one request with the models's max seq len ({max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({format_gib(available)} GiB). {estimated_msg}Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "
        f"See {CONSERVING_MEMORY} for more details."
    )


def max_concurrency(blocks: int, kv: KvSpec, max_model_len: int) -> float:
    """get_max_concurrency_for_kv_cache_config: the pool over one full request's blocks."""
    return blocks / cdiv(max_model_len, kv.block_size)


# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------


def log_available(log: Log, plan: MemoryPlan, rank: int) -> None:
    """What a worker logs at the end of its profile run (vllm/v1/worker/gpu_worker.py), then the
    simulator's own account of the plan (marked [gx10-sim]: no vLLM line)."""
    log.debug_at(
        "gpu_worker.py:421",
        f"Initial free memory: {format_gib(plan.node.free)} GiB; Requested memory: "
        f"{plan.utilization:f} (util), {format_gib(plan.requested)} GiB",
    )
    log.debug_at(
        "gpu_worker.py:431",
        f"Memory profiling takes 0.00 seconds. Total non KV cache memory: "
        f"{format_gib(plan.non_kv)}GiB; torch peak memory increase: "
        f"{format_gib(plan.activation_peak)}GiB; non-torch forward increase memory: "
        f"{format_gib(plan.non_torch)}GiB; weights memory: {format_gib(plan.weights)}GiB.",
    )
    log.info_at(
        "gpu_worker.py:440", f"Available KV cache memory: {format_gib(plan.available_kv)} GiB"
    )
    kv = plan.kv
    log.info_at(
        "gx10_sim.py:1",
        f"[gx10-sim] memory model, rank {rank}: node {format_gib(plan.node.total)} GiB "
        f"({plan.node.source}), free {format_gib(plan.node.free)} GiB; vLLM's share "
        f"{format_gib(plan.requested)} GiB ({plan.utilization} x total) = weights "
        f"{format_gib(plan.weights)} + runtime "
        f"{format_gib(plan.non_torch + plan.activation_peak + plan.cuda_graphs)} + KV "
        f"{format_gib(plan.available_kv)}; KV {kv.bytes_per_token} B/token ({kv.layers} layers "
        f"x {kv.token_bytes} B, {kv.dtype}); {plan.max_num_seqs} sequence(s) of "
        f"{plan.max_model_len:,} tokens need {format_gib(plan.kv_demand)} GiB of KV",
    )


def log_kv_config(log: Log, blocks: int, kv: KvSpec, max_model_len: int) -> None:
    """The engine core's report once the cache is sized (_report_kv_cache_config)."""
    log.info_at("kv_cache_utils.py:1708", f"GPU KV cache size: {blocks * kv.block_size:,} tokens")
    log.info_at(
        "kv_cache_utils.py:1712",
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{max_concurrency(blocks, kv, max_model_len):.2f}x",
    )


def cache_config_labels(
    args: argparse.Namespace, kv: KvSpec, blocks: int, engine: int = 0
) -> dict[str, str]:
    """vllm:cache_config_info's labels: CacheConfig.metrics_info() (every field as str()), the
    fields the simulator models, then the engine index."""
    return {
        "block_size": str(kv.block_size),
        "gpu_memory_utilization": str(args.gpu_memory_utilization),
        "cache_dtype": str(kv.dtype),
        "num_gpu_blocks_override": "None",
        "enable_prefix_caching": str(args.enable_prefix_caching is not False),
        "num_gpu_blocks": str(blocks),
        "num_cpu_blocks": "0",
        "engine": str(engine),
    }
