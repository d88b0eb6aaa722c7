"""Each role's variable table, generated from its ``meta/argument_specs.yml``.

``python -m gx10._dev.role_docs`` rewrites the table between the markers in every
``roles/<role>/README.md``; ``--check`` changes nothing and fails, naming the role, when a README
or ``defaults/main.yml`` disagrees with the spec (``make lint`` runs it). The spec is the one
source: a README's table is never edited by hand.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BEGIN = "<!-- BEGIN argument_specs (generated from meta/argument_specs.yml by `make docs`) -->"
END = "<!-- END argument_specs -->"
HEADING = "## Variables"
_MARKUP = re.compile(r"\b([ICMBUVOLR])\(([^()]*)\)")


class RoleDocsError(Exception):
    """A role's spec, defaults or README cannot be read or reconciled."""


@dataclass(frozen=True, slots=True)
class Problem:
    role: str
    message: str

    def __str__(self) -> str:
        return f"roles/{self.role}: {self.message}"


def markup(text: str) -> str:
    """Ansible's documentation markup (I(), C(), M(), B(), U(), L(), O(), V(), R()) as Markdown."""

    def one(match: re.Match[str]) -> str:
        kind, body = match.group(1), match.group(2)
        if kind == "B":
            return f"**{body}**"
        if kind == "L":
            label, _, url = body.partition(",")
            return f"[{label.strip()}]({url.strip()})"
        if kind == "U":
            return f"<{body}>"
        if kind == "R":
            return body.partition(",")[0].strip()
        return f"`{body}`"

    return _MARKUP.sub(one, text)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _inline(value: Any) -> str:
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    dumped = dumped.removesuffix("...").strip()
    return f"`{dumped}`"


def _type(option: Mapping[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    elements = option.get("elements")
    return f"{kind} of {elements}" if elements else kind


def _description(option: Mapping[str, Any]) -> str:
    raw = option.get("description", "")
    parts = [raw] if isinstance(raw, str) else [str(part) for part in raw]
    text = " ".join(markup(part) for part in parts)
    choices = option.get("choices")
    if choices:
        text = f"{text} One of {', '.join(_inline(choice) for choice in choices)}."
    return _cell(text)


def _default(name: str, option: Mapping[str, Any], defaults_text: Mapping[str, str]) -> str:
    if option.get("required"):
        return "(required)"
    if name in defaults_text:
        return _cell(f"`{defaults_text[name]}`")
    if "default" in option:
        return _cell(_inline(option["default"]))
    return "(unset)"


def _defaults_source(path: Path) -> dict[str, str]:
    """Each top-level key of defaults/main.yml with its value as written (a template stays one)."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise RoleDocsError(f"{path}: expected a mapping of variables")
    return {str(key): _written(value) for key, value in data.items()}


def _written(value: Any) -> str:
    if isinstance(value, str):
        return value if value else '""'
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10_000)
        .strip()
        .removesuffix("...")
        .strip()
    )


def _names(options: Mapping[str, Any]) -> str:
    return ", ".join(f"`{key}`" for key in sorted(options))


def load_specs(role: Path) -> dict[str, dict[str, Any]]:
    path = role / "meta" / "argument_specs.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RoleDocsError(f"{path}: {err}") from err
    specs = (data or {}).get("argument_specs")
    if not isinstance(specs, dict) or "main" not in specs:
        raise RoleDocsError(f"{path}: expected argument_specs with a main entry point")
    return specs


def table(role: Path) -> str:
    """The generated block (markers included) for one role."""
    specs = load_specs(role)
    options: Mapping[str, Any] = specs["main"].get("options") or {}
    defaults_text = _defaults_source(role / "defaults" / "main.yml")
    lines = [BEGIN, "", "| variable | type | default | meaning |", "|---|---|---|---|"]
    for name in sorted(options):
        option = options[name] or {}
        default = _default(name, option, defaults_text)
        lines.append(f"| `{name}` | {_type(option)} | {default} | {_description(option)} |")
    others = sorted(name for name in specs if name != "main")
    same = [name for name in others if (specs[name].get("options") or {}) == options]
    different = [name for name in others if name not in same]
    if same:
        points = ", ".join(f"`{name}`" for name in same)
        lines += ["", f"The entry points {points} take the same variables."]
    for name in different:
        sub = specs[name].get("options") or {}
        lines += [
            "",
            f"Entry point `{name}`: {_names(sub) or 'no variables'}.",
        ]
    lines += ["", END]
    return "\n".join(lines)


def render(readme: str, block: str) -> str:
    """The README with its generated block replaced, or put under ``## Variables``."""
    if BEGIN in readme and END in readme:
        head, _, rest = readme.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + block + tail
    lines = readme.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith(HEADING):
            end = next(
                (j for j in range(index + 1, len(lines)) if lines[j].startswith("## ")),
                len(lines),
            )
            body = [line for line in lines[index + 1 : end] if not line.lstrip().startswith("|")]
            prose = "".join(body).strip()
            section = f"{HEADING}\n\n" + (f"{prose}\n\n" if prose else "") + f"{block}\n\n"
            return "".join(lines[:index]) + section + "".join(lines[end:])
    return readme.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"


def check_defaults(role: Path) -> list[Problem]:
    """defaults/main.yml declares exactly the spec's optional variables, with the spec's values."""
    name = role.name
    options: Mapping[str, Any] = load_specs(role)["main"].get("options") or {}
    path = role / "defaults" / "main.yml"
    data = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    problems = [
        Problem(
            name,
            f"defaults/main.yml sets `{key}`, which meta/argument_specs.yml does not declare: "
            "declare it there or remove it",
        )
        for key in sorted(set(data) - set(options))
    ]
    for key in sorted(options):
        option = options[key] or {}
        if key not in data or "default" not in option:
            continue
        value = data[key]
        if isinstance(value, str) and "{{" in value:
            continue
        if value != option["default"]:
            problems.append(
                Problem(
                    name,
                    f"`{key}`: defaults/main.yml says {value!r}, meta/argument_specs.yml says "
                    f"{option['default']!r}; make them agree",
                )
            )
    return problems


def roles(root: Path) -> list[Path]:
    return sorted(path.parent.parent for path in (root / "roles").glob("*/meta/argument_specs.yml"))


def run(root: Path, *, check: bool) -> list[Problem]:
    problems: list[Problem] = []
    for role in roles(root):
        readme_path = role / "README.md"
        readme = readme_path.read_text() if readme_path.is_file() else f"# {role.name}\n"
        wanted = render(readme, table(role))
        problems += check_defaults(role)
        if wanted == readme:
            continue
        if check:
            diff = "".join(
                difflib.unified_diff(
                    readme.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    f"roles/{role.name}/README.md",
                    "generated",
                    n=1,
                )
            )
            problems.append(
                Problem(
                    role.name, f"README.md's variable table is stale (run `make docs`):\n{diff}"
                )
            )
        else:
            readme_path.write_text(wanted)
            print(f"roles/{role.name}/README.md: variable table regenerated")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gx10._dev.role_docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; fail when stale")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: .)")
    args = parser.parse_args(argv)
    try:
        problems = run(args.root, check=args.check)
    except RoleDocsError as err:
        print(f"role_docs: {err}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
