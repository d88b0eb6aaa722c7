"""The serving profiles' citation table in roles/vllm_serve/README.md, generated from the data.

``python -m gx10._dev.profile_docs`` rewrites the block between the markers from
``module_utils/serve_profiles.py`` (every value with its source); ``--check`` changes nothing and
fails when the README is stale. tests/unit/test_profile_docs.py runs the check, so the table a
reader sees is always the one the serve role renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gx10 import _collection

BEGIN = (
    "<!-- BEGIN serve_profiles (generated from module_utils/serve_profiles.py by "
    "`python -m gx10._dev.profile_docs`) -->"
)
END = "<!-- END serve_profiles -->"
README = Path("roles/vllm_serve/README.md")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value: Any) -> str:
    if isinstance(value, dict | list | bool):
        return f"`{json.dumps(value, separators=(', ', ': '))}`"
    return f"`{value}`"


def block() -> str:
    """The generated section (markers included): one table per profile."""
    profiles = _collection.load("serve_profiles")
    lines = [BEGIN]
    for profile in profiles.PROFILES.values():
        resolved = profiles.resolve(profile.name).values
        lines += [
            "",
            f"### `{profile.name}` version {profile.version}",
            "",
            _cell(profile.summary) + ".",
            "",
            f"Reviewed on `{profile.image}`, vLLM `{profile.vllm_version}` "
            f"({_cell(profile.vllm_version_source)}); the memory numbers are for the catalog "
            f"checkpoint `{profile.checkpoint}`.",
            "",
        ]
        if profile.base:
            lines += [
                f"Derived from `{profile.base}`: every value is that profile's but these "
                "deltas, each with the reason the base's value cannot run here:",
                "",
                *(f"- `{key}`: {_cell(reason)}" for key, reason in profile.deltas.items()),
                "",
            ]
        lines += [
            "| variable | renders | value | source |",
            "|---|---|---|---|",
        ]
        for setting in profiles.SETTINGS:
            entry = profile.values[setting.key]
            where = f"`{setting.flag}`" if setting.flag else "memory budget"
            if isinstance(entry, profiles.Derived):
                value = f"{_cell(entry.rule)} (here {_value(resolved[setting.key])})"
            else:
                value = _value(entry.value)
            lines.append(f"| `{setting.variable}` | {where} | {value} | {_cell(entry.source)} |")
        for key, entry in profile.env.items():
            lines.append(
                f"| `vllm_serve_extra_env` | `{key}` (environment) | {_value(entry.value)} | "
                f"{_cell(entry.source)} |"
            )
        if profile.spec_acceptance:
            low, high = profile.spec_acceptance
            lines.append(
                f"| (doctor) | draft acceptance | `{low:g}`-`{high:g}` | "
                f"{_cell(profile.spec_acceptance_source)} |"
            )
    lines += ["", END]
    return "\n".join(lines)


def render(readme: str, generated: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"{README}: the markers {BEGIN!r} and {END!r} are missing")
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + generated + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gx10._dev.profile_docs")
    parser.add_argument("--check", action="store_true", help="fail if the README is stale")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the project checkout")
    args = parser.parse_args(argv)
    path = args.root / README
    current = path.read_text()
    wanted = render(current, block())
    if current == wanted:
        return 0
    if args.check:
        print(f"{path}: the serving profile table is stale: run python -m gx10._dev.profile_docs")
        return 1
    path.write_text(wanted)
    print(f"{path}: serving profile table regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
