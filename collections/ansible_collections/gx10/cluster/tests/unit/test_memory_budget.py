# SPDX-License-Identifier: Apache-2.0
"""The unified-memory budget: what fits, what does not, and the numbers in the message."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter.memory_budget import FilterModule
from ansible_collections.gx10.cluster.plugins.module_utils.memory_budget import (
    GIB,
    BudgetError,
    Inputs,
    evaluate,
    gib,
    parse_size,
)

FILTER = FilterModule().filters()["memory_budget"]

# The dspark-0731 profile on two GB10 nodes: 166.9 GB over TP 2, 1M tokens x 11305 B.
PROFILE = Inputs(
    profile="profile dspark-0731 v1",
    weights_bytes=166_900_000_000,
    weights_source="166.9 GB checkpoint, catalog deepseek-v4-flash-fp8",
    tensor_parallel=2,
    kv_bytes_per_token=11305,
    max_model_len=1048576,
    kv_seqs=1,
    runtime_overhead_gib=6.0,
    gpu_memory_utilization=0.835,
    shm_bytes=8 * GIB,
    reserve_gib=8.0,
    origins={"max_model_len": "vllm_serve_max_model_len (inventory)"},
)


def with_(**changes: Any) -> Inputs:
    return dataclasses.replace(PROFILE, **changes)


def test_the_profile_fits_a_gb10_node_with_the_numbers() -> None:
    budget = evaluate(PROFILE, 121.6)
    assert budget.fits
    assert budget.weights_gib == pytest.approx(77.72, abs=0.01)
    assert budget.kv_gib == pytest.approx(11.04, abs=0.01)
    assert budget.engine_need_gib == pytest.approx(94.76, abs=0.01)
    assert budget.engine_share_gib == pytest.approx(0.835 * 121.6)
    assert budget.node_need_gib == pytest.approx(0.835 * 121.6 + 16)
    assert "vLLM needs 94.8 GiB per rank (weights 77.7 + KV 11.0 + runtime 6.0)" in budget.summary


def test_too_many_full_length_sequences_do_not_fit_and_the_message_has_the_numbers() -> None:
    budget = evaluate(with_(kv_seqs=3), 121.6)
    assert not budget.fits
    (problem,) = budget.problems
    assert "need 116.8 GiB per rank: weights 77.7" in problem
    assert "KV 33.1 (1048576 tokens, vllm_serve_max_model_len (inventory), x 3" in problem
    assert "runtime 6.0 (vllm_serve_runtime_overhead_gib)" in problem
    assert "> available 101.5 GiB (vllm_serve_gpu_memory_utilization 0.835 x 121.6 GiB" in problem
    # 0.961 of the node for the engine, 0.868 the most the node allows: a shorter context or
    # fewer full-length sequences.
    assert budget.fixes == (
        "lower vllm_serve_max_model_len to at most 564086 or vllm_serve_kv_context_seqs",
    )


def test_weights_alone_on_one_node_do_not_fit_anything() -> None:
    budget = evaluate(with_(tensor_parallel=1), 121.6)
    assert not budget.fits
    assert "weights 155.4" in budget.problems[0]
    (fix,) = budget.fixes
    assert fix.startswith("nothing fits on this node: weights and runtime alone need 161.4 GiB")
    assert "on more nodes" in fix


def test_a_longer_context_says_how_long_it_may_be() -> None:
    budget = evaluate(with_(max_model_len=2_500_000), 121.6)
    assert not budget.fits
    fixes = "; ".join(budget.fixes)
    # At 0.835 of 121.6 GiB, 17.8 GiB of KV: 1,692,259 tokens of 11305 B.
    assert "lower vllm_serve_max_model_len to at most 1692259" in fixes


def test_the_node_must_hold_vllm_shm_and_the_reserve() -> None:
    budget = evaluate(with_(gpu_memory_utilization=0.9), 121.6)
    assert not budget.fits
    (problem,) = budget.problems
    assert "need 125.4 GiB: vLLM 109.4" in problem
    assert (
        "shm 8.0 (vllm_serve_shm_size) + reserve 8.0 (gx10_node_reserve_gib) > 121.6 GiB" in problem
    )
    assert "lower vllm_serve_gpu_memory_utilization to at most 0.868" in "; ".join(budget.fixes)


def test_a_smaller_node_refuses_what_a_larger_one_takes() -> None:
    assert evaluate(PROFILE, 121.6).fits
    small = evaluate(PROFILE, 100.0, "MemTotal of gx10-a")
    assert not small.fits
    assert "MemTotal of gx10-a" in small.problems[0]


def test_inputs_travel_through_the_plan_as_plain_data() -> None:
    data = PROFILE.to_dict()
    assert Inputs.from_dict(data) == PROFILE
    with pytest.raises(BudgetError, match="run the validate stage"):
        Inputs.from_dict({"profile": "p"})


@pytest.mark.parametrize(
    ("text", "size"),
    [("8g", 8 * GIB), ("64gb", 64 * GIB), ("512m", 512 << 20), ("1024", 1024), ("1G", GIB)],
)
def test_docker_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["8 gigs", "", "-1g", True, None])
def test_a_bad_size_names_the_variable(text: Any) -> None:
    with pytest.raises(BudgetError, match=r"vllm_serve_shm_size is .* not a size"):
        parse_size(text)


def test_a_bad_memory_figure_names_the_variable() -> None:
    assert gib("121.6", "gx10_node_memory_gib") == 121.6
    with pytest.raises(BudgetError, match="gx10_node_memory_gib is 'lots'"):
        gib("lots", "gx10_node_memory_gib")
    with pytest.raises(BudgetError, match="at least 1"):
        gib(0, "gx10_node_memory_gib", minimum=1)


def test_the_filter_judges_the_plans_inputs_with_a_given_memory() -> None:
    fits = FILTER(PROFILE.to_dict(), 121.6)
    assert fits["fits"] is True
    assert fits["problems"] == []
    refused = FILTER(PROFILE.to_dict(), "64", "MemTotal of gx10-b")
    assert refused["fits"] is False
    assert "MemTotal of gx10-b" in refused["problems"][0]
    assert refused["fix"]
    with pytest.raises(AnsibleFilterError, match="run the validate stage first"):
        FILTER(None, 121.6)
    with pytest.raises(AnsibleFilterError, match="MemTotal is 'x'"):
        FILTER(PROFILE.to_dict(), "x", "MemTotal")


def test_a_low_utilisation_says_how_high_it_must_be() -> None:
    budget = evaluate(with_(gpu_memory_utilization=0.7), 121.6)
    assert not budget.fits
    assert "> available 85.1 GiB" in budget.problems[0]
    # 94.76 / 121.6 = 0.7793, rounded up; the node allows up to 0.868.
    assert budget.fixes == ("raise vllm_serve_gpu_memory_utilization to at least 0.780",)
