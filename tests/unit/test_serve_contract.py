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

from gx10.lab.simulators import vllm_sim

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
