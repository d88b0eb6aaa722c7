# SPDX-License-Identifier: Apache-2.0
"""The vllm serve argument list: ranks, profiles, JSON flags, validation."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (
    VllmArgsError,
    build_args,
)

BASE = {
    "model": "/srv/models/DeepSeek-V4-Flash-0731",
    "served_model_name": "deepseek-v4-flash",
    "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "nnodes": 2,
    "node_rank": 0,
    "master_addr": "192.168.100.10",
    "master_port": 29500,
    "port": 8000,
    "kv_cache_dtype": "nvfp4_ds_mla",
    "max_model_len": 1048576,
    "speculative_config": {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    },
    "default_chat_template_kwargs": {"thinking": "high"},
    "enable_auto_tool_choice": True,
    "tool_call_parser": "deepseek_v4",
}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_head_serves_http_and_worker_is_headless() -> None:
    head = build_args(BASE)
    worker = build_args({**BASE, "node_rank": 1})
    assert head[:2] == ["serve", BASE["model"]]
    assert "--headless" not in head
    assert _flag(head, "--port") == "8000"
    assert "--headless" in worker
    assert "--port" not in worker
    assert "--host" not in worker
    for args in (head, worker):
        assert _flag(args, "--tensor-parallel-size") == "2"
        assert _flag(args, "--distributed-executor-backend") == "mp"
        assert _flag(args, "--master-addr") == "192.168.100.10"
    assert _flag(worker, "--node-rank") == "1"


def test_json_flags_survive_as_single_arguments() -> None:
    args = build_args(BASE)
    spec = _flag(args, "--speculative-config")
    assert json.loads(spec) == BASE["speculative_config"]
    assert " " not in spec
    assert json.loads(_flag(args, "--default-chat-template-kwargs")) == {"thinking": "high"}


@pytest.mark.parametrize(("profile", "seqs"), [("multi_user", "12"), ("long_context", "6")])
def test_profiles_set_max_num_seqs(profile: str, seqs: str) -> None:
    assert _flag(build_args({**BASE, "profile": profile}), "--max-num-seqs") == seqs


def test_tensor_parallel_must_span_every_gpu() -> None:
    with pytest.raises(VllmArgsError, match=r"is 4, but 2 node\(s\) x 1 GPU\(s\) = 2"):
        build_args({**BASE, "tensor_parallel_size": 4})


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(VllmArgsError, match="multi_user, long_context"):
        build_args({**BASE, "profile": "fast"})


def test_missing_settings_are_named() -> None:
    with pytest.raises(VllmArgsError, match="master_addr"):
        build_args({k: v for k, v in BASE.items() if k != "master_addr"})
