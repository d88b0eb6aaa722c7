"""Show doctor findings: a table for people, JSON for tools."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from gx10.doctor.rules import Finding, has_errors


def print_findings(console: Console, findings: Sequence[Finding]) -> None:
    """One row per finding (severity, node, code, what, evidence, fix), then a verdict line."""
    if not findings:
        console.print("[green]doctor: no known fault found[/green]")
        return
    table = Table(show_lines=True, title="gx10 doctor")
    for column in ("severity", "node", "code", "finding", "evidence", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        style = "red" if f.severity == "error" else "yellow"
        table.add_row(
            f"[{style}]{f.severity}[/{style}]", f.node, f.code, f.summary, f.evidence, f.fix
        )
    console.print(table)
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    verdict = "[red]not healthy[/red]" if has_errors(findings) else "[yellow]healthy[/yellow]"
    console.print(f"doctor: {errors} error(s), {warnings} warning(s): {verdict}")


def findings_json(findings: Sequence[Finding]) -> str:
    """``{ok, errors, warnings, findings: [...]}``; ok is false when any finding is an error."""
    errors = sum(1 for f in findings if f.severity == "error")
    return json.dumps(
        {
            "ok": not has_errors(findings),
            "errors": errors,
            "warnings": len(findings) - errors,
            "findings": [f.to_dict() for f in findings],
        },
        indent=2,
    )
