# SPDX-License-Identifier: Apache-2.0
"""The model of the image's `vllm serve` parser and the argv check against it."""

from __future__ import annotations

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.vllm_cli import (
    ANEMLL_0_1_1,
    check_argv,
    parse_length,
    parser_for,
)

GOOD = [
    "serve",
    "/srv/models/m",
    "--tensor-parallel-size",
    "2",
    "--kv-cache-dtype",
    "nvfp4_ds_mla",
    "--moe-backend",
    "flashinfer_b12x",
    "--max-model-len",
    "1M",
    "--gpu-memory-utilization",
    "0.835",
    "--no-enable-prefix-caching",
    "--headless",
    "--served-model-name",
    "a",
    "b",
    "--speculative-config",
    '{"method":"dspark","num_speculative_tokens":5}',
]


def one(argv: list[str], sources: list[str] | None = None) -> str:
    errors = check_argv(argv, sources)
    assert len(errors) == 1, errors
    return errors[0]


def test_the_profiles_kind_of_argv_passes() -> None:
    assert check_argv(GOOD) == []


def test_vllms_own_spellings_pass() -> None:
    """FlexibleArgumentParser: --flag=value, underscores, aliases, dotted JSON keys."""
    argv = [
        "serve",
        "m",
        "--max_num_seqs=12",
        "-tp",
        "2",
        "--speculative-config.method",
        "dspark",
        "--default-chat-template-kwargs.thinking=true",
        "--enable-log-requests",
    ]
    assert check_argv(argv) == []


def test_an_unknown_flag_is_named_with_its_variable_and_a_suggestion() -> None:
    error = one(
        ["serve", "m", "--max-num-seq", "6"], ["fixed", "model", "vllm_serve_extra_args[0]", "x"]
    )
    assert error.startswith("vllm_serve_extra_args[0]: --max-num-seq is not a `vllm serve` flag")
    assert "0.25.2.dev0+g752a3a504.d20260714" in error
    assert "did you mean --max-num-seqs?" in error


def test_an_unknown_flags_value_is_not_taken_for_a_second_model() -> None:
    assert len(check_argv(["serve", "m", "--frobnicate", "7", "--headless"])) == 1


def test_a_bad_choice_names_the_choices_and_the_closest() -> None:
    error = one(["serve", "m", "--kv-cache-dtype", "nvfp4_mla"])
    assert "--kv-cache-dtype: invalid choice 'nvfp4_mla' (did you mean nvfp4_ds_mla?)" in error
    assert "fp8_ds_mla" in error


@pytest.mark.parametrize(
    ("flag", "fix"),
    [
        ("--max-seq-len-to-capture", "--max-cudagraph-capture-size"),
        ("--enable-reasoning", "--reasoning-parser alone turns reasoning on"),
        ("--speculative-model", "--speculative-config"),
        ("--disable-log-requests", "not logged by default"),
        ("--worker-use-ray", "--distributed-executor-backend ray"),
    ],
)
def test_a_removed_flag_says_what_replaces_it(flag: str, fix: str) -> None:
    error = one(["serve", "m", flag, "8192"], ["f", "m", "vllm_serve_extra_args[0]", "v"])
    assert f"vllm_serve_extra_args[0]: {flag} is no longer a `vllm serve` flag" in error
    assert fix in error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-num-seqs", "six"], "--max-num-seqs: 'six' is not an integer"),
        (["--max-num-seqs", "0"], "--max-num-seqs: 0 is out of range: it must be at least 1"),
        (["--max-model-len", "lots"], "'lots' is not a length such as 1048576 or 32k"),
        (["--gpu-memory-utilization", "1.2"], "it must be at most 1"),
        (["--gpu-memory-utilization", "0"], "it must be above 0"),
        (["--gpu-memory-utilization", "most"], "'most' is not a number"),
        (["--speculative-config", "{method: dspark}"], "is not valid JSON"),
        (["--speculative-config", "[5]"], "is not a JSON object"),
        (["--headless=yes"], "--headless takes no value"),
        (["--max-num-seqs"], "--max-num-seqs expects a value"),
        (["--max-num-seqs", "--headless"], "--max-num-seqs expects a value"),
        (["--block-size.x", "1"], "--block-size takes no dotted key"),
        (["--max-num-seqs", "6", "--max-num-seqs", "7"], "--max-num-seqs is given twice"),
        (["extra-model"], "unexpected argument 'extra-model'"),
        (["--no-headless"], "--no-headless is not a `vllm serve` flag"),
    ],
)
def test_bad_values_and_shapes_are_refused(argv: list[str], message: str) -> None:
    assert message in one(["serve", "m", *argv])


def test_lengths_parse_as_vllm_parses_them() -> None:
    assert parse_length("1048576") == 1048576
    assert parse_length("32k") == 32000
    assert parse_length("32K") == 32768
    assert parse_length("1M") == 1048576
    assert parse_length("1.5m") == 1500000
    with pytest.raises(ValueError, match=r"1\.5M"):
        parse_length("1.5M")


def test_the_parser_model_names_its_version_and_sources() -> None:
    assert parser_for("0.25.2.dev0+g752a3a504.d20260714") is ANEMLL_0_1_1
    assert "Anemll/dspark-vllm-gx10 upstream.lock" in ANEMLL_0_1_1.source
    with pytest.raises(KeyError, match="a new image needs a reviewed parser model"):
        parser_for("0.99.0")


def test_sources_must_match_the_arguments() -> None:
    with pytest.raises(ValueError, match="one source per argument"):
        check_argv(["serve", "m"], ["only one"])
