# SPDX-License-Identifier: Apache-2.0
"""The serving profiles table: every value cited, precedence, environment, versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.plugins.module_utils import model_catalog, vllm_cli
from ansible_collections.gx10.cluster.plugins.module_utils.serve_profiles import (
    BY_KEY,
    DEFAULT_PROFILE,
    DSPARK_0731_LAB_CPU_V1,
    DSPARK_0731_V1,
    PROFILES,
    SETTING_KEYS,
    SETTINGS,
    Cited,
    Derived,
    ProfileError,
    derive,
    lookup,
    profile_value,
    resolve,
    resolve_env,
)

REPO = Path(__file__).resolve().parents[6]
# A citation names a public repository (owner/name), an issue of one, or the field notes.
CITATION = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|FIELD_NOTES\.md")


@pytest.mark.parametrize("profile", list(PROFILES.values()), ids=lambda p: p.label)
def test_every_setting_has_a_cited_value_or_rule(profile: Any) -> None:
    assert set(profile.values) == set(SETTING_KEYS)
    for key, entry in profile.values.items():
        assert isinstance(entry, Cited | Derived), key
        assert CITATION.search(entry.source), (key, entry.source)
    for key, entry in profile.env.items():
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), key
        assert isinstance(entry.value, str), key  # env values are strings, as written
        assert CITATION.search(entry.source), (key, entry.source)
    assert CITATION.search(profile.vllm_version_source)
    # The checkpoint is the catalog's, the parser model is the image's vLLM.
    assert model_catalog.lookup(profile.checkpoint)
    assert vllm_cli.parser_for(profile.vllm_version).image == profile.image


def test_the_0731_profile_carries_what_the_maintained_recipes_run() -> None:
    values = resolve(DEFAULT_PROFILE).values
    assert DEFAULT_PROFILE == "dspark-0731"
    assert values["moe_backend"] == "flashinfer_b12x"
    assert values["long_prefill_token_threshold"] == 1024
    assert values["max_cudagraph_capture_size"] == 40
    assert (values["max_model_len"], values["max_num_seqs"]) == (1048576, 6)
    assert values["gpu_memory_utilization"] == 0.835
    # The 0731 encoder's spelling: thinking is a switch, the effort is separate.
    assert values["default_chat_template_kwargs"] == {
        "thinking": True,
        "reasoning_effort": "low",
        "drop_thinking": False,
    }
    env = resolve_env(DEFAULT_PROFILE)
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "1800"
    assert env["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"
    assert DSPARK_0731_V1.spec_acceptance == (0.83, 0.87)


@pytest.mark.parametrize("profile", list(PROFILES.values()), ids=lambda p: p.label)
def test_the_doctor_expects_the_profiles_draft_acceptance(profile: Any) -> None:
    """gx10 doctor judges the served draft against the model catalog's figure for the method
    and k (model_catalog.expected_spec_acceptance); the profile states its own: they agree."""
    spec = resolve(profile.name).values["speculative_config"]
    if not spec:
        assert profile.spec_acceptance is None  # no drafter, no acceptance to expect
        return
    found = model_catalog.expected_spec_acceptance(spec["method"], spec["num_speculative_tokens"])
    assert found is not None
    entry, figure = found
    assert entry.name == profile.checkpoint
    assert (figure.low, figure.high) == profile.spec_acceptance


def test_the_lab_engines_profile_is_the_0731_one_but_for_its_named_deltas() -> None:
    """Issue 25: the real engine in the lab runs dspark-0731 as GB10 does, changing only what
    vLLM's CPU build cannot take; each delta is named with its reason."""
    lab, base = DSPARK_0731_LAB_CPU_V1, DSPARK_0731_V1
    assert lab.base == base.label
    assert set(lab.deltas) == {"speculative_config", "env VLLM_CPU_KVCACHE_SPACE"}
    changed = {key for key in SETTING_KEYS if lab.values[key] != base.values[key]}
    assert changed == {key for key in lab.deltas if not key.startswith("env ")}
    assert {key: entry for key, entry in lab.env.items() if key in base.env} == dict(base.env)
    assert set(lab.env) - set(base.env) == {"VLLM_CPU_KVCACHE_SPACE"}
    values, base_values = resolve(lab.name).values, resolve(base.name).values
    assert values["speculative_config"] == {}
    # A derived value follows the deltas by its rule (no drafter: capture sizes of 1 token).
    follows = {key for key, entry in base.values.items() if isinstance(entry, Derived)}
    assert {k: v for k, v in values.items() if k not in {*lab.deltas, *follows}} == {
        k: v for k, v in base_values.items() if k not in {*lab.deltas, *follows}
    }
    assert values["max_cudagraph_capture_size"] == 8  # 6 seqs x (0 + 1), to a multiple of 8
    for reason in lab.deltas.values():
        assert "docs/LAB.md" in reason, reason
    assert vllm_cli.parser_for(lab.vllm_version) is vllm_cli.VLLM_CPU_0_32_0


def test_a_derived_profile_names_only_real_settings() -> None:
    with pytest.raises(ValueError, match="no_such_setting"):
        derive(
            DSPARK_0731_V1,
            name="x",
            summary="x",
            image="x",
            vllm_version="x",
            vllm_version_source="x",
            values={"no_such_setting": Cited(1, "a/b")},
        )


def test_the_role_readme_cites_every_choice_of_the_profile() -> None:
    readme = (REPO / "roles/vllm_serve/README.md").read_text()
    for key in SETTING_KEYS:
        assert f"`vllm_serve_{key}`" in readme, key
    for key in DSPARK_0731_V1.env:
        assert f"`{key}`" in readme, key
    assert DSPARK_0731_V1.vllm_version in readme


def test_the_role_hands_every_setting_to_the_filter() -> None:
    """roles/vllm_serve/vars/main.yml passes each vllm_serve_<key> (null when undefined)."""
    settings = yaml.safe_load((REPO / "roles/vllm_serve/vars/main.yml").read_text())[
        "__vllm_serve_settings"
    ]
    for key in SETTING_KEYS:
        assert settings[key] == f"{{{{ vllm_serve_{key} | default(none) }}}}", key
    defaults = yaml.safe_load((REPO / "roles/vllm_serve/defaults/main.yml").read_text())
    # A default here would hide the profile's value: unset must mean "the profile's".
    assert not {f"vllm_serve_{key}" for key in SETTING_KEYS} & set(defaults)


def test_inventory_values_override_and_null_keeps_the_profile() -> None:
    resolved = resolve(DEFAULT_PROFILE, {"max_num_seqs": 12, "max_model_len": None})
    assert resolved.values["max_num_seqs"] == 12
    assert resolved.values["max_model_len"] == 1048576
    assert resolved.origin("max_num_seqs") == "vllm_serve_max_num_seqs (inventory)"
    assert resolved.origin("max_model_len") == "vllm_serve_max_model_len (profile dspark-0731 v1)"
    # The derived capture size follows: 12 x (5 + 1) = 72.
    assert resolved.values["max_cudagraph_capture_size"] == 72


def test_overrides_from_the_command_line_are_coerced() -> None:
    """`-e vllm_serve_max_num_seqs=12` arrives as a string."""
    resolved = resolve(
        DEFAULT_PROFILE,
        {"max_num_seqs": "12", "gpu_memory_utilization": "0.8", "async_scheduling": "false"},
    )
    assert resolved.values["max_num_seqs"] == 12
    assert resolved.values["gpu_memory_utilization"] == 0.8
    assert resolved.values["async_scheduling"] is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_num_seqs": "many"}, "vllm_serve_max_num_seqs must be an integer, got 'many'"),
        ({"max_num_seqs": True}, "vllm_serve_max_num_seqs must be an integer, got True"),
        ({"gpu_memory_utilization": 0}, "vllm_serve_gpu_memory_utilization must be above 0"),
        ({"enable_prefix_caching": "maybe"}, "vllm_serve_enable_prefix_caching must be true"),
        ({"reasoning_config": "{not json"}, "vllm_serve_reasoning_config must be a mapping"),
        ({"moe_backend": ["a"]}, "vllm_serve_moe_backend must be a string"),
        (
            {"speculative_config": {"method": "dspark", "num_speculative_tokens": 0}},
            "vllm_serve_speculative_config.num_speculative_tokens must be a positive integer",
        ),
        ({"max_num_seq": 3}, "vllm_serve_max_num_seq is not a setting"),
    ],
)
def test_a_bad_override_is_named_with_its_value(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        resolve(DEFAULT_PROFILE, overrides)
    assert any(message in error for error in caught.value.errors), caught.value.errors


def test_every_bad_override_is_reported_at_once() -> None:
    with pytest.raises(ProfileError) as caught:
        resolve(DEFAULT_PROFILE, {"max_num_seqs": "x", "block_size": -1})
    assert len(caught.value.errors) == 2


def test_an_unknown_profile_names_the_variable_and_the_choices() -> None:
    with pytest.raises(ProfileError, match=r"vllm_serve_profile is 'multi_user'.*dspark-0731"):
        lookup("multi_user")
    with pytest.raises(ProfileError):
        profile_value(None, "max_model_len")
    assert profile_value("dspark-0731", "max_model_len") == 1048576


def test_the_extra_environment_overrides_and_removes_profile_keys() -> None:
    env = resolve_env(
        DEFAULT_PROFILE,
        {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": 300, "CUTE_DSL_ARCH": None, "MY_FLAG": True},
    )
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "300"
    assert "CUTE_DSL_ARCH" not in env
    assert env["MY_FLAG"] == "true"
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.1a"  # the rest stays the profile's


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"BAD-NAME": "x"}, "no environment variable name"),
        ({"A": {"b": 1}}, "vllm_serve_extra_env[A] must be a plain value"),
        ({"A": "x\ny"}, "must be one line"),
        (["A=1"], "vllm_serve_extra_env must be a mapping"),
    ],
)
def test_a_bad_extra_environment_is_named(extra: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        resolve_env(DEFAULT_PROFILE, extra)


def test_every_flag_setting_is_a_flag_of_the_images_vllm() -> None:
    parser = vllm_cli.parser_for(DSPARK_0731_V1.vllm_version)
    for setting in SETTINGS:
        if setting.flag is not None:
            assert parser.find(setting.flag) is not None, setting.flag
    assert BY_KEY["gpu_memory_utilization"].exclusive_minimum
