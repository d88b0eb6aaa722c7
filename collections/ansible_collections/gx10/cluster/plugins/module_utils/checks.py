# SPDX-License-Identifier: Apache-2.0
"""Judge named checks and explain every failure: the node, the check, the value, the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


def as_bool(value: Any, check: str) -> bool:
    """Interpret a check's `ok` strictly: a typo must not pass as success."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"check {check!r}: ok must be a boolean, got {value!r}")


def judge(node: str, checks: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Return (normalised checks, failure messages)."""
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    for raw in checks:
        name = str(raw.get("name") or "").strip()
        if not name:
            raise ValueError(f"every check needs a name, got {dict(raw)!r}")
        ok = as_bool(raw.get("ok"), name)
        entry = {
            "name": name,
            "ok": ok,
            "value": raw.get("value"),
            "expected": raw.get("expected"),
            "fix": raw.get("fix"),
        }
        results.append(entry)
        if not ok:
            line = f"{node}: {name}: found {entry['value']!s}"
            if entry["expected"] not in (None, ""):
                line += f", expected {entry['expected']!s}"
            if entry["fix"]:
                line += f". Fix: {entry['fix']}"
            failures.append(line)
    return results, failures
