"""gx10.bench.matrix: defaults, run files, flag overrides and every validation error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gx10.bench.matrix import (
    REFERENCE_PROMPTS,
    Limits,
    MatrixError,
    build_config,
    load_run_file,
    parse_int_list,
    server_problems,
)


def test_defaults_reproduce_the_reference_method() -> None:
    config = build_config()
    ids = {c.id for c in config.cases()}
    assert {f"p{p}-c1-unlocked" for p in REFERENCE_PROMPTS} <= ids
    assert {f"p256-c{c}-unlocked" for c in (1, 2, 4, 6, 8, 10, 12)} <= ids
    assert {"p2048-c12-unlocked", "p8192-c6-unlocked", "p8192-c12-unlocked"} <= ids
    assert "p524288-c12-unlocked" not in ids  # the sweeps, not their full product
    assert config.settings() == {
        "max_tokens": 2048,
        "temperature": 0.6,
        "top_p": 0.95,
        "thinking": True,
        "unique_prompts": True,
        "ignore_eos": False,
    }


def test_flags_make_one_product_and_override_scalars() -> None:
    config = build_config(
        None, {"prompt_lengths": "256,2k", "concurrency": "1,4", "max_tokens": 64}
    )
    assert [c.id for c in config.cases()] == [
        "p256-c1-unlocked",
        "p2048-c1-unlocked",
        "p256-c4-unlocked",
        "p2048-c4-unlocked",
    ]
    assert config.max_tokens == 64
    assert parse_int_list("32k, 512K ,1024", "x") == (32768, 524288, 1024)


def test_run_file_then_flags(tmp_path: Path) -> None:
    run = tmp_path / "run.yml"
    run.write_text(
        "max_tokens: 128\ntemperature: 0.2\nprompt_lengths: [1024, 4096]\nconcurrency: [2, 6]\n"
    )
    data = load_run_file(run)
    config = build_config(data)
    assert len(config.cases()) == 4
    assert config.max_tokens == 128
    assert config.temperature == 0.2
    # An axis not on the command line comes from the run file's single product.
    config = build_config(data, {"prompt_lengths": "512", "max_tokens": 16})
    assert [c.id for c in config.cases()] == ["p512-c2-unlocked", "p512-c6-unlocked"]
    assert config.max_tokens == 16
    sweeps = tmp_path / "sweeps.yml"
    sweeps.write_text(
        "sweeps:\n  - {prompt_lengths: [256, 1024], concurrency: [1]}\n"
        "  - {prompt_lengths: [256], concurrency: [1, 8]}\n"
    )
    assert [c.id for c in build_config(load_run_file(sweeps)).cases()] == [
        "p256-c1-unlocked",
        "p1024-c1-unlocked",
        "p256-c8-unlocked",
    ]


@pytest.mark.parametrize(
    ("run_file", "flags", "message"),
    [
        (None, {"prompt_lengths": "0,256"}, "prompt lengths must be positive integers, got [0]"),
        (None, {"concurrency": "-2"}, "concurrency levels must be positive integers, got [-2]"),
        (None, {"max_tokens": 0}, "max_tokens must be positive integers, got [0]"),
        (None, {"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        (None, {"temperature": -1.0}, "temperature must be >= 0"),
        (None, {"clock_caps": "fast"}, "clock cap 'fast': expected MHz"),
        (None, {"prompt_lengths": "abc"}, "prompt_lengths: 'abc' is not an integer"),
        ({"prompt_length": [256]}, None, "run file: unknown keys ['prompt_length']"),
        # The bench measures wall-clock time and has no simulator knob (issue 12).
        ({"time_scale": 0.02}, None, "run file: unknown keys ['time_scale']"),
        (
            {"sweeps": [{"concurrency": [1]}], "concurrency": [2]},
            None,
            "give either `sweeps` or top-level axes",
        ),
        ({"sweeps": [{"streams": [1]}]}, None, "sweeps[0]: unknown keys ['streams']"),
    ],
)
def test_invalid_matrices_are_refused_clearly(
    run_file: dict[str, object] | None, flags: dict[str, object] | None, message: str
) -> None:
    with pytest.raises(MatrixError) as error:
        build_config(run_file, flags)
    assert message in str(error.value)
    assert str(error.value).startswith("invalid bench matrix:")


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(MatrixError) as error:
        build_config(None, {"prompt_lengths": "-1", "concurrency": "0", "max_tokens": -5})
    assert str(error.value).count("\n  - ") == 3


def test_run_file_errors(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read run file"):
        load_run_file(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("- a list\n")
    with pytest.raises(MatrixError, match="expected a mapping"):
        load_run_file(bad)


def test_server_limits() -> None:
    config = build_config(None, {"prompt_lengths": "256,16384", "concurrency": "1,8"})
    limits = Limits(8192, 6, {"max_model_len": "from /v1/models", "max_num_seqs": "from /metrics"})
    problems = server_problems(config, config.cases(), limits)
    assert problems[0] == (
        "prompt lengths [16384] plus max_tokens 2048 exceed the model's max_model_len 8192 "
        "(from /v1/models)"
    )
    assert problems[1].startswith("concurrency [8] is above max_num_seqs 6 (from /metrics)")
    assert "--allow-queueing" in problems[1]
    queueing = build_config(
        None, {"prompt_lengths": "256", "concurrency": "1,8", "allow_queueing": True}
    )
    assert server_problems(queueing, queueing.cases(), limits) == []
    flagged = build_config(None, {"concurrency": "8", "max_num_seqs": 4})
    assert "(--max-num-seqs)" in server_problems(flagged, flagged.cases(), Limits(None, None))[0]
