"""The lab's two memory checks model the same node and agree on it.

The product's budget (module_utils/memory_budget.py through the validate stage's cluster plan)
plans a lab node with the lab inventory's `vllm_serve_kv_bytes_per_token` and
`gx10_node_memory_gib`; the vLLM simulator (vllm_sim/memory.py, test equipment that shares no
code or figure with the product) sizes the same node from its own knob, GX10_SIM_MEM_TOTAL_GIB,
the lab checkpoint's config.json and the flags the serve role renders. The inventory's figures
must be the simulator's, or the lab passes the product's check only because its own figure is
understated. inventories/lab4 links its group_vars/all.yml to the lab's, so the four-node lab
is checked with the same figures at tensor parallel 4.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_serve_contract import _lab_checkpoint, _settings

from gx10.lab.checkpoint import SHARD_BYTES, SHARDS
from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.vllm_sim import memory
from gx10.lab.simulators.vllm_sim.model import ModelInfo, load_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gx10.cluster.plugins.module_utils import memory_budget  # noqa: E402
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (  # noqa: E402
    NODE_VARS,
    build_plan,
    validate_cluster,
)
from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (  # noqa: E402
    checked_args,
)

LAB = ROOT / "inventories/lab"
LAB4 = ROOT / "inventories/lab4"
CONTEXT = 1048576  # the profile's max_model_len, which the lab serves
# The simulator's weights: the lab checkpoint's *.safetensors (the manifest adds the small files).
SHARDS_BYTES = sum(SHARD_BYTES + 4096 * index for index in range(1, SHARDS + 1))
GROUPS = {
    2: {"head": ["gx10-a"], "workers": ["gx10-b"]},
    4: {"head": ["gx10-a"], "workers": ["gx10-b", "gx10-c", "gx10-d"]},
}
# The lab and CI machines (24 GB) show the lab nodes a MemTotal of about 23.5 GiB; preflight
# judges the budget against it, so the lab must fit well below that.
PREFLIGHT_MEMTOTAL_GIB = 22.0


def lab_vars() -> dict[str, Any]:
    return yaml.safe_load((LAB / "group_vars/all.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lab_model(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    """The lab's synthetic checkpoint as the simulator loads it (sizes, not bytes)."""
    return load_model(str(_lab_checkpoint(tmp_path_factory.mktemp("lab") / "model")), True, None)


def sim_plan(model: ModelInfo, nodes: int, rank: int, total_gib: float) -> memory.MemoryPlan:
    """The simulator's plan for one rank: the flags the serve role renders for the lab, the lab
    inventory's simulator settings, and a node of `total_gib`."""
    args = vllm_sim.parse_args(checked_args(_settings("lab", rank, nnodes=nodes)))
    env = vllm_sim.SimEnv.from_env(
        {**lab_vars()["vllm_serve_extra_env"], "GX10_SIM_MEM_TOTAL_GIB": str(total_gib)}
    )
    assert env.problems() == []
    return memory.plan_memory(args, env, model, args.max_model_len or CONTEXT)


def lab_hostvars(nodes: int, **extravars: Any) -> dict[str, dict[str, Any]]:
    """What hostvars shows the validate stage for every lab node: the variables it reads."""
    values = lab_vars()
    if nodes == 4:  # inventories/lab4: the lab's figures, every rail on the switch stand-in
        values.update(yaml.safe_load((LAB4 / "group_vars/gx10.yml").read_text(encoding="utf-8")))
    values["gx10_model_manifest"] = str(LAB / "files/model-manifest.yml")  # {{ inventory_dir }}
    common = {key: value for key, value in {**values, **extravars}.items() if key in NODE_VARS}
    return {host: dict(common) for group in GROUPS[nodes].values() for host in group}


def product_inputs(nodes: int) -> memory_budget.Inputs:
    """The budget's inputs the validate stage plans for the head, from the lab inventory."""
    plan = build_plan(GROUPS[nodes], lab_hostvars(nodes))
    return memory_budget.Inputs.from_dict(plan["serving"]["memory"]["gx10-a"])


def test_lab4_uses_the_lab_figures() -> None:
    assert (LAB4 / "group_vars/all.yml").resolve() == (LAB / "group_vars/all.yml").resolve()


@pytest.mark.parametrize("rank", [0, 1])
def test_the_inventory_states_the_simulators_kv_bytes_per_token(
    lab_model: ModelInfo, rank: int
) -> None:
    values = lab_vars()
    plan = sim_plan(lab_model, 2, rank, values["gx10_node_memory_gib"])
    # 43 layers x 400 B (nvfp4_ds_mla), the latent whole on every tensor-parallel rank.
    assert (plan.kv.layers, plan.kv.token_bytes, plan.kv.dtype) == (43, 400, "nvfp4_ds_mla")
    assert plan.kv.bytes_per_token == values["vllm_serve_kv_bytes_per_token"]
    # The request the budget counts is the one vLLM checks: whole blocks of 256 tokens.
    assert plan.request_kv == CONTEXT * values["vllm_serve_kv_bytes_per_token"]


def test_the_simulator_models_the_node_the_product_plans() -> None:
    values = lab_vars()
    env = vllm_sim.SimEnv.from_env(values["vllm_serve_extra_env"])
    assert env.mem_total_gib == float(values["gx10_node_memory_gib"])
    assert env.mem_available_gib is None  # an idle node: all of it free at start


@pytest.mark.parametrize("nodes", [2, 4])
def test_both_checks_start_the_lab_profile_on_the_lab_node(
    lab_model: ModelInfo, nodes: int
) -> None:
    node = float(lab_vars()["gx10_node_memory_gib"])
    budget = memory_budget.evaluate(product_inputs(nodes), node)
    assert budget.fits, budget.problems
    assert budget.inputs.max_model_len == CONTEXT
    assert budget.inputs.tensor_parallel == nodes
    for rank in range(nodes):
        plan = sim_plan(lab_model, nodes, rank, node)
        assert (plan.max_model_len, plan.max_num_seqs, plan.utilization) == (CONTEXT, 6, 0.835)
        assert plan.weights == SHARDS_BYTES // nodes  # tensor parallel over every node
        assert plan.node.total == int(node * memory.GIB)
        assert memory.free_memory_error(plan) is None
        assert memory.kv_cache_error(plan.available_kv, plan.kv, CONTEXT) is None
        # One full-length request fits, as vLLM requires; the pool is about one such request.
        assert 1 <= memory.max_concurrency(plan.num_blocks, plan.kv, CONTEXT) < 2


@pytest.mark.parametrize("nodes", [2, 4])
def test_both_checks_refuse_a_node_half_that_size(lab_model: ModelInfo, nodes: int) -> None:
    half = float(lab_vars()["gx10_node_memory_gib"]) / 2
    budget = memory_budget.evaluate(product_inputs(nodes), half)
    assert not budget.fits
    assert "does not fit in vLLM's share of memory" in budget.problems[0]
    plan = sim_plan(lab_model, nodes, 0, half)
    refused = memory.kv_cache_error(plan.available_kv, plan.kv, CONTEXT) or ""
    assert "To serve at least one request with the models's max seq len (1048576)" in refused
    assert "(16.8 GiB KV cache is needed" in refused


def test_preflight_accepts_the_lab_on_the_lab_and_ci_machines() -> None:
    """Preflight judges the same inputs against the nodes' real MemTotal (the host's): the
    budget fits with a margin below the 23.5 GiB these machines show."""
    budget = memory_budget.evaluate(product_inputs(2), PREFLIGHT_MEMTOTAL_GIB, "MemTotal")
    assert budget.fits, budget.problems


def test_the_figures_the_e2e_tests_expect(lab_model: ModelInfo) -> None:
    """Twice the context is refused by the validate stage with these numbers
    (tests/unit/test_validate_refusals.py runs it on the lab inventory), and 18 of the lab node's
    24 GiB free stops a rank at start with vLLM's message (a figure of the lab's own: the lab
    shows the product's wait passing on vLLM's start-up refusals with the context test of
    tests/e2e/test_serve.py, and this message is the simulator's, checked here)."""
    errors = validate_cluster(GROUPS[2], lab_hostvars(2, vllm_serve_max_model_len=2 * CONTEXT))
    assert len(errors) == 2, errors  # each node's budget
    assert errors[0].startswith("memory on host gx10-a: profile dspark-0731 v1 does not fit")
    assert "KV 33.6 (2097152 tokens, vllm_serve_max_model_len (inventory)" in errors[0]
    assert "x 17200 B, vllm_serve_kv_bytes_per_token (inventory)" in errors[0]
    assert "> available 20.0 GiB" in errors[0]
    assert "lower vllm_serve_max_model_len to at most" in errors[0]
    args = vllm_sim.parse_args(checked_args(_settings("lab", 0)))
    busy = vllm_sim.SimEnv.from_env(
        {**lab_vars()["vllm_serve_extra_env"], "GX10_SIM_MEM_AVAILABLE_GIB": "18"}
    )
    plan = memory.plan_memory(args, busy, lab_model, CONTEXT)
    assert memory.free_memory_error(plan) == (
        "Free memory on device (18.0/24.0 GiB) on startup is less than desired GPU "
        "memory utilization (0.835, 20.04 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )
