# SPDX-License-Identifier: Apache-2.0
"""The `vllm serve` argument list for one rank, as a list: no shell ever sees it.

JSON-valued flags (--speculative-config, --default-chat-template-kwargs) are serialised here, so
quoting can never mangle them (FIELD_NOTES section 4: JSON arguments must not pass a shell).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# Serving profiles from the reference deployment: 12 sequences for many users, 6 for one
# long-context user (139.3 tok/s "ceiling" with 6 was the setting, not the hardware).
PROFILES: Mapping[str, int] = {"multi_user": 12, "long_context": 6}

_REQUIRED = ("model", "served_model_name", "nnodes", "node_rank", "master_addr", "master_port")


class VllmArgsError(ValueError):
    """A serving setting is missing or invalid; the message names it and the fix."""


def _int(settings: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    value = settings.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise VllmArgsError(f"vllm_serve_{key} must be an integer >= {minimum}, got {value!r}")
    return value


def build_args(settings: Mapping[str, Any]) -> list[str]:
    """`serve MODEL --flag value ...` for the rank described by settings."""
    missing = [k for k in _REQUIRED if settings.get(k) in (None, "")]
    if missing:
        raise VllmArgsError(f"vllm serve settings missing: {', '.join(missing)}")
    nnodes = _int(settings, "nnodes")
    rank = _int(settings, "node_rank", minimum=0)
    gpus = _int(settings, "gpus_per_node") if settings.get("gpus_per_node") is not None else 1
    tp = (
        _int(settings, "tensor_parallel_size")
        if settings.get("tensor_parallel_size") is not None
        else nnodes * gpus
    )
    if tp != nnodes * gpus:
        raise VllmArgsError(
            f"vllm_serve_tensor_parallel_size is {tp}, but {nnodes} node(s) x {gpus} GPU(s) = "
            f"{nnodes * gpus}: tensor parallelism spans every GPU of every node; set it to "
            f"{nnodes * gpus} or leave it unset"
        )
    if rank >= nnodes:
        raise VllmArgsError(f"node rank {rank} is out of range for {nnodes} node(s)")
    profile = settings.get("profile", "multi_user")
    if profile not in PROFILES:
        raise VllmArgsError(
            f"vllm_serve_profile is {profile!r}: choose one of {', '.join(PROFILES)}"
        )
    max_num_seqs = settings.get("max_num_seqs") or PROFILES[str(profile)]

    args: list[str] = ["serve", str(settings["model"])]
    args += ["--tensor-parallel-size", str(tp)]
    args += ["--distributed-executor-backend", "mp"]
    args += ["--nnodes", str(nnodes), "--node-rank", str(rank)]
    args += ["--master-addr", str(settings["master_addr"])]
    args += ["--master-port", str(_int(settings, "master_port"))]
    if rank > 0:
        # Workers serve no HTTP; the head's /health and /v1/models are the readiness signal.
        args.append("--headless")
    if settings.get("trust_remote_code", True):
        args.append("--trust-remote-code")
    if settings.get("revision"):
        args += ["--revision", str(settings["revision"])]
    names = settings["served_model_name"]
    names = [names] if isinstance(names, str) else list(names)
    args += ["--served-model-name", *map(str, names)]
    for key, flag in (
        ("kv_cache_dtype", "--kv-cache-dtype"),
        ("block_size", "--block-size"),
        ("max_model_len", "--max-model-len"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("tokenizer_mode", "--tokenizer-mode"),
        ("tool_call_parser", "--tool-call-parser"),
        ("reasoning_parser", "--reasoning-parser"),
    ):
        if settings.get(key) not in (None, ""):
            args += [flag, str(settings[key])]
    args += ["--max-num-seqs", str(max_num_seqs)]
    for key, flag in (
        ("enable_prefix_caching", "--enable-prefix-caching"),
        ("enable_chunked_prefill", "--enable-chunked-prefill"),
        ("async_scheduling", "--async-scheduling"),
        ("enable_auto_tool_choice", "--enable-auto-tool-choice"),
    ):
        if settings.get(key):
            args.append(flag)
    for key, flag in (
        ("speculative_config", "--speculative-config"),
        ("default_chat_template_kwargs", "--default-chat-template-kwargs"),
    ):
        value = settings.get(key)
        if value:
            if not isinstance(value, Mapping):
                raise VllmArgsError(f"vllm_serve_{key} must be a mapping, got {value!r}")
            args += [flag, json.dumps(dict(value), separators=(",", ":"), sort_keys=True)]
    if rank == 0:
        args += ["--host", str(settings.get("host") or "0.0.0.0")]
        args += ["--port", str(_int(settings, "port") if settings.get("port") else 8000)]
    extra: Sequence[Any] = settings.get("extra_args") or []
    args += [str(a) for a in extra]
    return args
