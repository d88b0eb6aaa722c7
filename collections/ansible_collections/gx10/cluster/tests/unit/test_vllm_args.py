# SPDX-License-Identifier: Apache-2.0
"""The vllm serve argument list: ranks, the profile and its overrides, JSON flags, the checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter.vllm_args import FilterModule
from ansible_collections.gx10.cluster.plugins.module_utils.serve_profiles import (
    DSPARK_0731_V1,
    SETTINGS,
    Cited,
)
from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (
    VllmArgsError,
    build_args,
    build_traced,
    checked_args,
)

BASE: dict[str, Any] = {
    "model": "/srv/models/DeepSeek-V4-Flash-0731",
    "served_model_name": "deepseek-v4-flash",
    "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "nnodes": 2,
    "node_rank": 0,
    "master_addr": "192.168.100.10",
    "master_port": 29500,
    "port": 8000,
    "profile": "dspark-0731",
}
FILTERS = FilterModule().filters()


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


def _rendered(value: Any, kind: str) -> str:
    if kind == "json":
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if s.flag is not None], ids=lambda s: s.key
)
def test_every_flag_of_the_profile_renders_with_its_cited_value(setting: Any) -> None:
    args = build_args(BASE)
    entry = DSPARK_0731_V1.values[setting.key]
    assert entry.source
    if setting.kind == "bool":
        assert (setting.flag if entry.value else "--no-" + setting.flag[2:]) in args
        return
    expected = entry.value if isinstance(entry, Cited) else entry.compute({})
    if isinstance(entry, Cited):
        assert _flag(args, setting.flag) == _rendered(expected, setting.kind)
    else:  # derived: the capture size follows the resolved sequences and speculative tokens
        assert _flag(args, setting.flag) == "40"


def test_the_inventory_overrides_the_profile_and_derived_values_follow() -> None:
    args = build_args({**BASE, "max_num_seqs": 12, "gpu_memory_utilization": 0.8})
    assert _flag(args, "--max-num-seqs") == "12"
    assert _flag(args, "--gpu-memory-utilization") == "0.8"
    # 12 x (5 + 1) = 72: the capture size is derived from the resolved values...
    assert _flag(args, "--max-cudagraph-capture-size") == "72"
    # ...unless the inventory sets it, which wins.
    pinned = build_args({**BASE, "max_num_seqs": 12, "max_cudagraph_capture_size": 32})
    assert _flag(pinned, "--max-cudagraph-capture-size") == "32"
    # Undefined (None) keeps the profile's value.
    assert _flag(build_args({**BASE, "max_num_seqs": None}), "--max-num-seqs") == "6"


def test_switches_off_and_empty_values_turn_flags_off() -> None:
    args = build_args(
        {
            **BASE,
            "enable_prefix_caching": False,
            "tool_call_parser": "",
            "speculative_config": {},
        }
    )
    assert "--no-enable-prefix-caching" in args
    assert "--enable-prefix-caching" not in args
    assert "--tool-call-parser" not in args
    assert "--enable-auto-tool-choice" not in args
    assert "--speculative-config" not in args
    # Without speculation the capture size is the sequences alone, rounded up to 8.
    assert _flag(args, "--max-cudagraph-capture-size") == "8"


def test_json_flags_survive_as_single_arguments() -> None:
    args = build_args({**BASE, "default_chat_template_kwargs": {"thinking": False}})
    spec = _flag(args, "--speculative-config")
    assert json.loads(spec)["num_speculative_tokens"] == 5
    assert " " not in spec
    assert json.loads(_flag(args, "--default-chat-template-kwargs")) == {"thinking": False}


def test_every_argument_names_the_variable_that_produced_it() -> None:
    traced = dict(build_traced({**BASE, "max_num_seqs": 12, "extra_args": ["--seed", "7"]}))
    assert traced["--max-num-seqs"] == "vllm_serve_max_num_seqs (inventory)"
    assert traced["--moe-backend"] == "vllm_serve_moe_backend (profile dspark-0731 v1)"
    assert traced["--seed"] == "vllm_serve_extra_args[0]"
    assert traced["--enable-auto-tool-choice"].startswith("vllm_serve_tool_call_parser")


def test_tensor_parallel_must_span_every_gpu() -> None:
    with pytest.raises(VllmArgsError, match=r"is 4, but 2 node\(s\) x 1 GPU\(s\) = 2"):
        build_args({**BASE, "tensor_parallel_size": 4})


def test_unknown_profile_names_the_variable_and_the_choices() -> None:
    with pytest.raises(VllmArgsError, match=r"vllm_serve_profile is 'fast'.*dspark-0731"):
        build_args({**BASE, "profile": "fast"})


def test_a_bad_override_names_its_variable() -> None:
    with pytest.raises(VllmArgsError, match="vllm_serve_max_num_seqs must be at least 1, got 0"):
        build_args({**BASE, "max_num_seqs": 0})
    with pytest.raises(VllmArgsError, match="vllm_serve_gpu_memory_utilization must be at most 1"):
        build_args({**BASE, "gpu_memory_utilization": 1.5})
    with pytest.raises(VllmArgsError, match="vllm_serve_speculative_config must be a mapping"):
        build_args({**BASE, "speculative_config": [1]})


def test_missing_settings_are_named() -> None:
    with pytest.raises(VllmArgsError, match="master_addr"):
        build_args({k: v for k, v in BASE.items() if k != "master_addr"})


def test_the_images_parser_refuses_a_bad_choice_naming_the_variable() -> None:
    with pytest.raises(VllmArgsError) as caught:
        checked_args({**BASE, "moe_backend": "b12x"})
    message = str(caught.value)
    assert "vllm_serve_moe_backend (inventory): --moe-backend: invalid choice 'b12x'" in message
    assert "flashinfer_b12x" in message


def test_extra_args_with_a_removed_or_repeated_flag_are_refused() -> None:
    with pytest.raises(VllmArgsError) as caught:
        checked_args(
            {**BASE, "extra_args": ["--max-seq-len-to-capture", "8192", "--max-num-seqs", "9"]}
        )
    message = str(caught.value)
    assert "vllm_serve_extra_args[0]: --max-seq-len-to-capture is no longer" in message
    assert "--max-cudagraph-capture-size" in message
    assert "vllm_serve_extra_args[2]: --max-num-seqs is given twice" in message
    assert "vllm_serve_max_num_seqs (profile dspark-0731 v1)" in message


def test_the_filters_fail_like_ansible_filters() -> None:
    assert FILTERS["vllm_args"](dict(BASE))[:2] == ["serve", BASE["model"]]
    with pytest.raises(AnsibleFilterError, match="vllm_serve_block_size must be an integer"):
        FILTERS["vllm_args"]({**BASE, "block_size": "big"})
    env = FILTERS["vllm_profile_env"]("dspark-0731", {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": 600})
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "600"
    with pytest.raises(AnsibleFilterError, match="no environment variable name"):
        FILTERS["vllm_profile_env"]("dspark-0731", {"1BAD": "x"})
