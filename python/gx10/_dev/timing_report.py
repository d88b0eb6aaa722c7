"""`make test`'s timing report: time per stage, per end-to-end file, per molecule scenario, the
slowest tests.

``python -m gx10._dev.timing_report stage-start NAME`` and ``stage-end NAME RC`` record a
stage's start, end and exit status in ``<dir>/stages.json`` (a stage may run beside others, as
lint, unit and the lab image build run at once: the report names what each ran beside, and its
total is wall time, from the first start to the last end); ``print`` reads those, the
pytest runs' JSONs (``<dir>/<stage>.json``, written by gx10._dev.pytest_timing) and the role
pipeline's (``<dir>/molecule.json``, written by gx10._dev.role_pipeline: each scenario's steps),
prints the report, writes it to ``<dir>/report.json``, and marks every row over its budget in
docs/PERFORMANCE.md's "Test suite budget" table. Being over budget never fails anything: this
is a report. ``<dir>`` is ``$GX10_TEST_TIMING_DIR``, else ``.cache/test-timing``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DIR = ".cache/test-timing"
BUDGET_FILE = Path("docs") / "PERFORMANCE.md"
BUDGET_HEADING = "## Test suite budget"
STAGES = ("lint", "images", "unit", "molecule", "e2e")
SLOWEST = 30
_ROW = re.compile(r"(stage: [a-z0-9_-]+|e2e: test_[A-Za-z0-9_]+\.py|molecule: [a-z0-9_]+|total)")
_NOT_PYTEST = ("stages.json", "report.json")


class BudgetError(Exception):
    """The budget table cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Budget:
    row: str
    seconds: float
    line: int


def _cells(line: str) -> list[str]:
    return [cell.strip().strip("`").strip() for cell in line.strip().strip("|").split("|")]


def parse_budget(text: str, path: str = str(BUDGET_FILE)) -> dict[str, Budget]:
    """The rows of the table under BUDGET_HEADING: `stage: NAME`, `e2e: test_X.py`,
    `molecule: SCENARIO`, `total`."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == BUDGET_HEADING)
    except StopIteration:
        raise BudgetError(f"{path}: no {BUDGET_HEADING!r} section") from None
    table: list[tuple[int, str]] = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if line.lstrip().startswith("|"):
            table.append((number, line))
        elif table:
            break  # the first table only
    if len(table) < 3:
        raise BudgetError(f"{path}:{start + 1}: {BUDGET_HEADING!r} has no table with rows")
    (head_line, head), (rule_line, rule) = table[0], table[1]
    header = [cell.lower() for cell in _cells(head)]
    if "row" not in header or "budget s" not in header:
        raise BudgetError(f"{path}:{head_line}: the header needs 'row' and 'budget s': {head}")
    if not all(re.fullmatch(r":?-+:?", cell) for cell in _cells(rule)):
        raise BudgetError(f"{path}:{rule_line}: not a table's |---| line: {rule}")
    budgets: dict[str, Budget] = {}
    for number, line in table[2:]:
        cells = _cells(line)
        if len(cells) != len(header):
            raise BudgetError(f"{path}:{number}: {len(cells)} cells, the header has {len(header)}")
        row, value = cells[header.index("row")], cells[header.index("budget s")]
        if not _ROW.fullmatch(row):
            raise BudgetError(
                f"{path}:{number}: row {row!r} is none of 'stage: NAME', 'e2e: test_X.py', "
                "'molecule: SCENARIO', 'total'"
            )
        if row in budgets:
            raise BudgetError(f"{path}:{number}: row {row!r} again (line {budgets[row].line})")
        try:
            seconds = float(value)
        except ValueError:
            raise BudgetError(
                f"{path}:{number}: budget {value!r} of {row!r} is not seconds"
            ) from None
        budgets[row] = Budget(row, seconds, number)
    return budgets


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def record_stage(directory: Path, name: str, rc: int | None = None) -> None:
    """Start a stage (rc None) or end it with its exit status, in stages.json.

    One writer at a time (a lock beside it): a stage in the background records while others do."""
    path = directory / "stages.json"
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "stages.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stages = _read(path) if path.exists() else {}
        if rc is None:
            stages[name] = {"start": time.time()}
        else:
            stages.setdefault(name, {"start": None}).update(end=time.time(), rc=rc)
        path.write_text(json.dumps(stages, indent=1) + "\n", encoding="utf-8")


def _row(
    name: str, seconds: float | None, budgets: Mapping[str, Budget], **extra: Any
) -> dict[str, Any]:
    budget = budgets.get(name)
    over = (
        round(seconds - budget.seconds, 1)
        if seconds is not None and budget is not None and seconds > budget.seconds
        else None
    )
    return {
        "row": name,
        "seconds": None if seconds is None else round(seconds, 1),
        "budget_s": None if budget is None else budget.seconds,
        "over_s": over,
        **extra,
    }


def _molecule_rows(
    pipeline: Mapping[str, Any], budgets: Mapping[str, Budget]
) -> list[dict[str, Any]]:
    """The role pipeline's rows, in its (stage) order: its one syntax check, then each scenario
    with its outcome and the seconds of the steps it ran (a scenario the run did not reach: no
    seconds; skipped prerequisites: not a step)."""
    rows = []
    syntax = pipeline.get("syntax")
    if syntax:
        rows.append(
            _row(
                "molecule: syntax",
                syntax["seconds"],
                budgets,
                outcome=syntax["outcome"],
                steps={},
                failed_step=None,
            )
        )
    for scenario in pipeline.get("scenarios", []):
        ran = [step for step in scenario["steps"] if step["outcome"] != "skipped"]
        failed = [step["step"] for step in ran if step["outcome"] == "failed"]
        rows.append(
            _row(f"molecule: {scenario['name']}",
                 scenario["seconds"] if scenario["steps"] else None, budgets,
                 outcome=scenario["outcome"], steps={step["step"]: step["seconds"] for step in ran},
                 failed_step=failed[0] if failed else None)
        )  # fmt: skip
    return rows


def _overlap(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether two stages, both started and ended, ran at the same time."""
    start, end = one.get("start"), one.get("end")
    other_start, other_end = other.get("start"), other.get("end")
    if start is None or end is None or other_start is None or other_end is None:
        return False
    return bool(start < other_end and other_start < end)


def build(directory: Path, budgets: Mapping[str, Budget]) -> dict[str, Any]:
    """The report from the stage records, pytest JSONs and role pipeline JSON in `directory`."""
    path = directory / "stages.json"
    stages: dict[str, dict[str, Any]] = _read(path) if path.exists() else {}
    runs = {p.stem: _read(p) for p in sorted(directory.glob("*.json")) if p.name not in _NOT_PYTEST}
    stage_rows = []
    names = [*STAGES, *(s for s in stages if s not in STAGES)]
    for name in names:
        record = stages.get(name, {})
        start, end = record.get("start"), record.get("end")
        seconds = end - start if start is not None and end is not None else None
        rc = record.get("rc")
        status = "not run" if not record else "ok" if rc == 0 else f"failed ({rc})"
        beside = [o for o in names if o != name and _overlap(record, stages.get(o, {}))]
        stage_rows.append(
            _row(f"stage: {name}", seconds, budgets, rc=rc, status=status, beside=beside)
        )
    starts = [s["start"] for s in stages.values() if s.get("start") is not None]
    ends = [s["end"] for s in stages.values() if s.get("end") is not None]
    total = _row("total", max(ends) - min(starts) if starts and ends else None, budgets)

    files = []
    for file, one in runs.get("e2e", {}).get("files", {}).items():
        restarts = {
            "pair_restarts": one["pair_restarts"],
            "restarts_unknown": one["restarts_unknown"],
        }
        files.append(
            _row(
                f"e2e: {Path(file).name}",
                one["seconds"],
                budgets,
                file=file,
                tests=one["tests"],
                playbook_runs=one["playbook_runs"],
                provision_seconds=one["provision_seconds"],
                **restarts,
            )
        )
    files.sort(key=lambda row: -(row["seconds"] or 0.0))

    scenarios = _molecule_rows(runs.get("molecule", {}), budgets)

    tests = [
        {"stage": stage, **test} for stage, run in runs.items() for test in run.get("tests", [])
    ]
    tests.sort(key=lambda test: -test["total_s"])
    rows = [*stage_rows, total, *files, *scenarios]
    return {
        "directory": str(directory),
        "stages": stage_rows,
        "total": total,
        "e2e_files": files,
        "molecule_scenarios": scenarios,
        "slowest": tests[:SLOWEST],
        "over_budget": [row for row in rows if row["over_s"] is not None],
    }


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Plain columns (CI logs are not terminals), a column of numbers aligned right."""
    columns = list(zip(headers, *rows, strict=True))
    widths = [max(map(len, column)) for column in columns]
    right = [all(re.fullmatch(r"-|[0-9.]+", cell) for cell in column[1:]) for column in columns]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if flush else cell.ljust(width)
            for cell, width, flush in zip(cells, widths, right, strict=True)
        ).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _over(row: Mapping[str, Any]) -> str:
    return f"OVER by {row['over_s']:.0f} s" if row["over_s"] is not None else ""


def render(report: Mapping[str, Any]) -> str:
    out = [f"Test timing report ({report['directory']}/report.json)", ""]
    total = {**report["total"], "row": "total", "status": "wall time"}
    stage_lines = [
        (
            row["row"].removeprefix("stage: "),
            _s(row["seconds"]),
            _s(row["budget_s"]),
            row["status"],
            ", ".join(row.get("beside", [])),
            _over(row),
        )
        for row in [*report["stages"], total]
    ]
    out += _table(("stage", "time s", "budget s", "status", "beside", ""), stage_lines)
    if report["e2e_files"]:
        file_lines = []
        for row in report["e2e_files"]:
            runs = ", ".join(f"{book} {n}" for book, n in row["playbook_runs"].items()) or "-"
            restarts = str(row["pair_restarts"])
            if row["restarts_unknown"]:
                restarts += f" (+{row['restarts_unknown']} unknown)"
            file_lines.append(
                (row["row"].removeprefix("e2e: "), _s(row["seconds"]), _s(row["budget_s"]),
                 str(row["tests"]), restarts, runs, _over(row))
            )  # fmt: skip
        out += ["", *_table(("e2e file", "time s", "budget s", "tests", "pair restarts",
                             "playbook runs", ""), file_lines)]  # fmt: skip
    if report.get("molecule_scenarios"):
        scenario_lines = [
            (row["row"].removeprefix("molecule: "), _s(row["seconds"]), _s(row["budget_s"]),
             row["outcome"], ", ".join(
                 f"{step} {s:.1f}" + ("!" if step == row["failed_step"] else "")
                 for step, s in row["steps"].items()),
             _over(row))
            for row in report["molecule_scenarios"]
        ]  # fmt: skip
        out += ["", *_table(("molecule scenario", "time s", "budget s", "outcome",
                             "steps (s; ! failed)", ""), scenario_lines)]  # fmt: skip
    if report["slowest"]:
        slow_lines = [
            (f"{test['total_s']:.1f}", _s(test.get("setup_s")), _s(test.get("call_s")),
             _s(test.get("teardown_s")), test["outcome"], test["nodeid"])
            for test in report["slowest"]
        ]  # fmt: skip
        out += ["", f"The {len(slow_lines)} slowest tests:"]
        out += _table(("time s", "setup", "call", "teardown", "outcome", "test"), slow_lines)
    over = report["over_budget"]
    out += [
        "",
        f"{len(over)} row(s) over budget (a report: nothing fails for it)."
        if over
        else "Every row within budget.",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gx10._dev.timing_report", description=__doc__)
    parser.add_argument(
        "--dir", type=Path, default=Path(os.environ.get("GX10_TEST_TIMING_DIR") or DEFAULT_DIR)
    )
    parser.add_argument("--budget", type=Path, default=BUDGET_FILE, help="default: %(default)s")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("stage-start").add_argument("name")
    end = commands.add_parser("stage-end")
    end.add_argument("name")
    end.add_argument("rc", type=int)
    commands.add_parser("print")
    args = parser.parse_args(argv)
    if args.command == "stage-start":
        record_stage(args.dir, args.name)
        return 0
    if args.command == "stage-end":
        record_stage(args.dir, args.name, args.rc)
        return 0
    try:
        budgets = parse_budget(args.budget.read_text(encoding="utf-8"), str(args.budget))
        problem = None
    except (OSError, BudgetError) as err:
        budgets, problem = {}, err
    report = build(args.dir, budgets)
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(render(report))
    if problem is not None:
        print(f"timing_report: no budgets: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
