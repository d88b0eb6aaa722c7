"""The role's `vllm serve` arguments are accepted by the simulator's vLLM argument parser.

Ties three things together: the vllm_serve role's defaults, the argument builder
(gx10.cluster.vllm_args), and the simulator's copy of vLLM's command line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gx10.lab.checkpoint import SHARD_BYTES, SHARDS, shard_name, small_files
from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.vllm_sim import memory
from gx10.lab.simulators.vllm_sim.model import load_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (  # noqa: E402
    DEFAULT_MODEL_DIR,
)
from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (  # noqa: E402
    build_args,
)


def _settings(rank: int) -> dict[str, Any]:
    defaults = yaml.safe_load((ROOT / "roles/vllm_serve/defaults/main.yml").read_text())
    d = {k.removeprefix("vllm_serve_"): v for k, v in defaults.items()}
    return {
        "model": DEFAULT_MODEL_DIR,  # the role's default: gx10_plan.model_dir
        "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        "served_model_name": d["served_model_name"],
        "nnodes": 2,
        "node_rank": rank,
        "gpus_per_node": d["gpus_per_node"],
        "master_addr": "192.168.100.10",
        "master_port": d["master_port"],
        "port": 8000,
        "profile": d["profile"],
        "max_num_seqs": d["max_num_seqs"],
        "max_model_len": d["max_model_len"],
        "kv_cache_dtype": d["kv_cache_dtype"],
        "block_size": d["block_size"],
        "max_num_batched_tokens": d["max_num_batched_tokens"],
        "gpu_memory_utilization": d["gpu_memory_utilization"],
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "async_scheduling": True,
        "speculative_config": d["speculative_config"],
        "default_chat_template_kwargs": d["default_chat_template_kwargs"],
        "tokenizer_mode": d["tokenizer_mode"],
        "tool_call_parser": d["tool_call_parser"],
        "enable_auto_tool_choice": True,
        "reasoning_parser": d["reasoning_parser"],
    }


@pytest.mark.parametrize("rank", [0, 1])
def test_role_defaults_parse_as_vllm_serve_arguments(rank: int) -> None:
    args = build_args(_settings(rank))
    ns = vllm_sim.parse_args(args)
    assert ns.tensor_parallel_size == 2
    assert ns.node_rank == rank
    assert ns.headless is (rank == 1)
    assert ns.max_model_len == 1048576
    assert ns.max_num_seqs == 12
    assert ns.speculative_config == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    }
    assert ns.kv_cache_dtype == "nvfp4_ds_mla"


def _lab_checkpoint(root: Path) -> Path:
    """The lab's synthetic checkpoint as the simulator sizes it: its config.json, and shards of
    its exact sizes (sparse files: the memory model reads sizes, not bytes)."""
    root.mkdir()
    (root / "config.json").write_text(small_files()["config.json"])
    for index in range(1, SHARDS + 1):
        with (root / shard_name(index)).open("wb") as shard:
            shard.truncate(SHARD_BYTES + 4096 * index)
    return root


@pytest.mark.parametrize("rank", [0, 1])
def test_the_lab_serves_within_the_simulators_memory_model(rank: int, tmp_path: Path) -> None:
    """The role's flags, the lab checkpoint and the lab inventory's simulator settings fit vLLM's
    arithmetic on every rank (the lab's serve stage would otherwise fail at the KV cache check),
    and the 16 GiB node of tests/e2e/test_serve.py does not, with the figures that test expects."""
    lab = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())
    env = vllm_sim.SimEnv.from_env(lab["vllm_serve_extra_env"])
    assert env.problems() == []
    args = vllm_sim.parse_args(build_args(_settings(rank)))
    model = load_model(str(_lab_checkpoint(tmp_path / "model")), True, None)
    max_len = args.max_model_len or model.max_position_embeddings
    plan = memory.plan_memory(args, env, model, max_len)
    assert plan.node.total == int(121.6 * memory.GIB)
    assert memory.free_memory_error(plan) is None
    assert memory.kv_cache_error(plan.available_kv, plan.kv, max_len) is None
    assert memory.max_concurrency(plan.num_blocks, plan.kv, max_len) > 5
    small = vllm_sim.SimEnv.from_env(
        {**lab["vllm_serve_extra_env"], "GX10_SIM_MEM_TOTAL_GIB": "16"}
    )
    short = memory.plan_memory(args, small, model, max_len)
    refused = memory.kv_cache_error(short.available_kv, short.kv, max_len) or ""
    assert "(16.8 GiB KV cache is needed" in refused
    assert "available KV cache memory (10.52 GiB)" in refused
