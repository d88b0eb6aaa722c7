"""The serializers the configs are written with: json and PyYAML for JSON and YAML, and a small
TOML writer for Codex's flat tables (the stdlib reads TOML but does not write it; the tests read
every generated file back with tomllib)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml


def json_text(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


def yaml_text(document: Any, header: str = "") -> str:
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
    return (header + body) if header else body


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes, \\uXXXX included).
        return json.dumps(value)
    raise TypeError(f"no TOML form for {type(value).__name__} here")


def toml_text(document: Mapping[str, Any], header: str = "") -> str:
    """Top-level scalars, then one level of tables (`[a.b]` for {"a": {"b": {...}}})."""
    lines = [header.rstrip("\n")] if header else []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in document.items():
        if isinstance(value, Mapping):
            for name, table in value.items():
                tables.append((f"{key}.{name}", table))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables:
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"
