# SPDX-License-Identifier: Apache-2.0
"""The validate stage's serving checks (cluster_plan with module_utils/serve_plan.py).

The profile with its overrides, the same on every rank; the rendered flags against the image's
vLLM; the memory budget with gx10_node_memory_gib. Every problem names its variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (
    NODE_VARS,
    build_plan,
    validate_cluster,
)
from ansible_collections.gx10.cluster.plugins.module_utils.serve_plan import (
    INPUT_VARS,
    input_errors,
)

REPO = Path(__file__).resolve().parents[6]
TWO = {"head": ["gx10-a"], "workers": ["gx10-b"]}


def hostvars(**common: Any) -> dict[str, dict[str, Any]]:
    # The head's word that the engine may answer without the gateway (cluster_plan's rule, not
    # these tests' subject), unless the test's variables say otherwise.
    return {"gx10-a": {"gx10_allow_unauthenticated": True, **common}, "gx10-b": dict(common)}


def inventory_vars(name: str) -> dict[str, Any]:
    values = yaml.safe_load((REPO / "inventories" / name / "group_vars" / "all.yml").read_text())
    # What hostvars shows the validate stage: the variables it reads, templates resolved.
    values["gx10_model_manifest"] = str(REPO / "inventories" / name / "files/model-manifest.yml")
    return {key: value for key, value in values.items() if key in NODE_VARS}


def test_the_serving_variables_are_read_from_the_inventory() -> None:
    for name in (
        "vllm_serve_profile",
        "vllm_serve_max_model_len",
        "vllm_serve_kv_context_seqs",
        "vllm_serve_extra_args",
        "vllm_serve_extra_env",
        "vllm_serve_shm_size",
        "gx10_node_memory_gib",
        "gx10_node_reserve_gib",
        "gx10_model_manifest",
    ):
        assert name in NODE_VARS


@pytest.mark.parametrize("inventory", ["gx10", "lab"])
def test_the_shipped_inventories_validate_with_their_profile(inventory: str) -> None:
    plan = build_plan(TWO, hostvars(**inventory_vars(inventory)))
    serving = plan["serving"]
    assert serving["profile"] == "dspark-0731"
    assert serving["version"] == 1
    assert serving["vllm_version"] == "0.25.2.dev0+g752a3a504.d20260714"
    assert serving["spec_acceptance"] == [0.83, 0.87]
    for host in TWO["head"] + TWO["workers"]:
        assert serving["budget"][host]["fits"] is True
        assert serving["memory"][host]["tensor_parallel"] == 2


def test_the_plan_carries_the_speculative_config_the_ranks_render() -> None:
    """gx10 doctor judges the draft acceptance against it (playbooks/doctor.yml)."""
    serving = build_plan(TWO, hostvars())["serving"]
    assert serving["speculative_config"] == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    }
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    overridden = build_plan(TWO, hostvars(vllm_serve_speculative_config=mtp))["serving"]
    assert overridden["speculative_config"] == mtp
    # {} turns speculation off: nothing for the doctor to judge.
    off = build_plan(TWO, hostvars(vllm_serve_speculative_config={}))["serving"]
    assert off["speculative_config"] == {}


def test_the_lab_budget_uses_its_manifest_and_the_gx10_one_the_catalog() -> None:
    lab = build_plan(TWO, hostvars(**inventory_vars("lab")))["serving"]["memory"]["gx10-a"]
    assert lab["weights_bytes"] == 55153008  # the synthetic checkpoint's manifest
    assert "model-manifest.yml" in lab["weights_source"]
    gx10 = build_plan(TWO, hostvars(**inventory_vars("gx10")))["serving"]["memory"]["gx10-a"]
    # The gx10 inventory's manifest is built on site: until then the catalog's size counts.
    assert gx10["weights_bytes"] == 166_900_000_000
    assert "catalog deepseek-v4-flash-fp8; gx10_model_manifest" in gx10["weights_source"]
    assert "not built yet" in gx10["weights_source"]


def test_a_profile_that_does_not_fit_is_refused_naming_the_numbers() -> None:
    errors = validate_cluster(TWO, hostvars(vllm_serve_kv_context_seqs=3))
    assert len(errors) == 2  # each node's budget
    assert errors[0].startswith("memory on host gx10-a: profile dspark-0731 v1 does not fit")
    assert "need 116.8 GiB per rank: weights 77.7" in errors[0]
    assert "vllm_serve_kv_context_seqs (inventory)" in errors[0]
    assert "> available 101.5 GiB" in errors[0]
    assert "lower vllm_serve_max_model_len to at most 564086" in errors[0]


def test_a_node_too_small_for_its_share_is_refused() -> None:
    errors = validate_cluster(
        TWO,
        hostvars() | {"gx10-a": {"gx10_node_memory_gib": 100, "gx10_allow_unauthenticated": True}},
    )
    assert len(errors) == 1, errors
    assert errors[0].startswith("memory on host gx10-a:")
    assert (
        "(vllm_serve_gpu_memory_utilization (profile dspark-0731 v1) 0.835 x 100.0 GiB"
        in (errors[0])
    )


def test_the_shm_and_reserve_count_against_the_node() -> None:
    errors = validate_cluster(TWO, hostvars(vllm_serve_shm_size="16g"))
    assert len(errors) == 2, errors
    assert "the node cannot hold it: need 125.5 GiB: vLLM 101.5" in errors[1]
    assert "shm 16.0 (vllm_serve_shm_size) + reserve 8.0 (gx10_node_reserve_gib)" in errors[1]
    assert "lower vllm_serve_gpu_memory_utilization to at most 0.802" in errors[1]


def test_ranks_must_agree_on_the_profile_and_its_overrides() -> None:
    errors = validate_cluster(
        TWO,
        {
            "gx10-a": {},
            "gx10-b": {"vllm_serve_max_num_seqs": 12, "vllm_serve_extra_env": {"X": "1"}},
        },
    )
    assert any(
        "vllm_serve_max_num_seqs on host gx10-b is 12 but on gx10-a it is 6" in e for e in errors
    ), errors
    # The derived capture size differs with it, and is named too.
    assert any("vllm_serve_max_cudagraph_capture_size on host gx10-b" in e for e in errors)
    assert any("vllm_serve_extra_env gives host gx10-b another environment" in e for e in errors)


def test_a_bad_override_or_profile_is_named_per_host() -> None:
    errors = validate_cluster(TWO, hostvars(vllm_serve_max_num_seqs="many"))
    assert "vllm_serve_max_num_seqs must be an integer, got 'many' (host gx10-a)" in errors
    errors = validate_cluster(TWO, hostvars(vllm_serve_profile="multi_user"))
    assert any("vllm_serve_profile is 'multi_user', which is no profile" in e for e in errors)


def test_flags_the_images_vllm_refuses_are_refused_before_any_change() -> None:
    errors = validate_cluster(
        TWO,
        hostvars(
            vllm_serve_moe_backend="b12x",
            vllm_serve_extra_args=["--enable-reasoning", "--tensor-parallel-size", "4"],
        ),
    )
    text = "\n".join(errors)
    assert "vllm_serve_moe_backend (inventory): --moe-backend: invalid choice 'b12x'" in text
    assert "vllm_serve_extra_args[0]: --enable-reasoning is no longer a `vllm serve` flag" in text
    assert "vllm_serve_extra_args[1]: --tensor-parallel-size is given twice" in text


def test_tensor_parallel_and_memory_figures_are_checked() -> None:
    errors = validate_cluster(
        TWO, hostvars(vllm_serve_tensor_parallel_size=4, gx10_node_reserve_gib="lots")
    )
    text = "\n".join(errors)
    assert "vllm_serve_tensor_parallel_size is 4, but 2 node(s) x 1 GPU(s) = 2" in text
    assert "gx10_node_reserve_gib is 'lots'" in text


def test_a_manifest_gives_the_weights(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "schema": 1,
                "repo": "example/tiny",
                "revision": "a" * 40,
                "files": [
                    {
                        "path": "model.safetensors",
                        "size": 2_000_000,
                        "kind": "lfs",
                        "sha256": "b" * 64,
                    }
                ],
            }
        )
    )
    memory = build_plan(TWO, hostvars(gx10_model_manifest=str(manifest)))["serving"]["memory"]
    assert memory["gx10-b"]["weights_bytes"] == 2_000_000
    assert (
        memory["gx10-b"]["weights_source"] == "0.0 GB checkpoint, gx10_model_manifest manifest.yml"
    )
    # A manifest that is there but broken is named as such, not judged on the catalog's size.
    manifest.write_text("schema: [broken")
    errors = validate_cluster(TWO, hostvars(gx10_model_manifest=str(manifest)))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"gx10_model_manifest is {str(manifest)!r}, which is not a valid")
    assert "`gx10 model manifest`" in errors[0]
    assert "does not fit" not in errors[0]


# --- the serve stage's inputs, checked by the validate stage ------------------------------------


def test_the_roles_defaults_for_the_serve_inputs_pass() -> None:
    """Unset, each input is the vllm_serve role's default: the check accepts every one."""
    defaults = yaml.safe_load((REPO / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text())
    inputs = {name: defaults[name] for name in INPUT_VARS}
    assert set(inputs) == {
        "vllm_serve_phase_timeouts",
        "vllm_serve_cache_root",
        "vllm_serve_caches",
        "vllm_serve_cache_keep",
    }
    assert input_errors("gx10-a", inputs) == []
    assert validate_cluster(TWO, hostvars(**inputs)) == []


@pytest.mark.parametrize(
    ("values", "fragments"),
    [
        (
            {"vllm_serve_phase_timeouts": {"compiling": 60, "api": 0}},
            [
                "vllm_serve_phase_timeouts on host gx10-a: 'compiling' is no phase (phases: start, "
                "weights, compile, graph_capture, api); api: 0 is not a number of seconds >= 1",
                "e.g. vllm_serve_phase_timeouts: {compile: 3600}",
            ],
        ),
        (
            {"vllm_serve_phase_timeouts": [600]},
            ["vllm_serve_phase_timeouts on host gx10-a: [600] is not a mapping"],
        ),
        (
            {"vllm_serve_cache_root": "relative/cache"},
            [
                "vllm_serve_cache_root on host gx10-a is 'relative/cache': it must be an absolute",
                "e.g. vllm_serve_cache_root: /var/cache/gx10/vllm",
            ],
        ),
        ({"vllm_serve_cache_root": "/"}, ["vllm_serve_cache_root on host gx10-a is '/'"]),
        ({"vllm_serve_cache_root": "/a:b"}, ["without ':' (docker's volume separator)"]),
        (
            {"vllm_serve_caches": {"torch-cache": "inductor", "VLLM_CACHE_ROOT": "../up"}},
            [
                "vllm_serve_caches on host gx10-a has key 'torch-cache', subdirectory '../up'",
                "an environment variable's name",
            ],
        ),
        ({"vllm_serve_caches": ["inductor"]}, ["vllm_serve_caches on host gx10-a is ['inductor']"]),
        (
            {"vllm_serve_cache_keep": -1},
            ["vllm_serve_cache_keep on host gx10-a is -1: it must be a whole number, 0 or more"],
        ),
        ({"vllm_serve_cache_keep": True}, ["vllm_serve_cache_keep on host gx10-a is True"]),
    ],
)
def test_a_bad_serve_input_is_refused_by_the_validate_stage(
    values: dict[str, Any], fragments: list[str]
) -> None:
    """Refused before any stage runs (they were checked in the serve stage, after the network
    and model stages had changed the nodes); set on the head only here, so one message."""
    errors = validate_cluster(TWO, {"gx10-a": {"gx10_allow_unauthenticated": True, **values}})
    assert len(errors) == 1, errors
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_good_serve_inputs_pass_as_numbers_or_digit_strings() -> None:
    good = {
        "vllm_serve_phase_timeouts": {"compile": 7200, "api": 60},
        "vllm_serve_cache_root": "/srv/cache/vllm",
        "vllm_serve_caches": {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "tri.ton"},
        "vllm_serve_cache_keep": "0",
    }
    assert input_errors("gx10-a", good) == []
