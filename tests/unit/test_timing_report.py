"""gx10._dev.timing_report: the budget table, the report's sums and over-budget marks, make test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gx10._dev import timing_report

REPO = Path(__file__).resolve().parents[2]
PERFORMANCE = REPO / "docs" / "PERFORMANCE.md"
TABLE = """\
## Test suite budget

Some words.

| row | budget s | last run s |
|---|---|---|
| stage: lint | 150 | - |
| stage: unit | 330 | 301.5 |
| stage: e2e | 100 | - |
| total | 400 | - |
| `e2e: test_switch.py` | 50 | - |

## Next section

| row | budget s |
|---|---|
| stage: lint | 1 |
"""


def test_the_budget_table_has_a_row_for_every_stage_and_e2e_file() -> None:
    budgets = timing_report.parse_budget(PERFORMANCE.read_text(encoding="utf-8"))
    e2e = {path.name for path in (REPO / "tests" / "e2e").glob("test_*.py")}
    rows = set(budgets)
    assert {f"stage: {stage}" for stage in timing_report.STAGES} | {"total"} <= rows
    missing = sorted(f"e2e: {name}" for name in e2e if f"e2e: {name}" not in rows)
    assert not missing, f"docs/PERFORMANCE.md's budget table lacks {missing}"
    stale = sorted(row for row in rows if row.startswith("e2e: ") and row[5:] not in e2e)
    assert not stale, f"docs/PERFORMANCE.md budgets files tests/e2e does not have: {stale}"


def test_the_first_table_of_the_section_is_read() -> None:
    budgets = timing_report.parse_budget(TABLE, "PERF.md")
    assert {row: b.seconds for row, b in budgets.items()} == {
        "stage: lint": 150,
        "stage: unit": 330,
        "stage: e2e": 100,
        "total": 400,
        "e2e: test_switch.py": 50,
    }
    assert budgets["stage: lint"].line == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("## Test suite budget", "## Test budget"), "PERF.md: no '## Test suite budget' section"),
        (("| stage: unit | 330 |", "| stage: unit | soon |"), "PERF.md:8: budget 'soon'"),
        (("| stage: e2e |", "| e2e |"), "PERF.md:9: row 'e2e' is none of"),
        (
            ("| total | 400 | - |", "| stage: lint | 400 | - |"),
            "PERF.md:10: row 'stage: lint' again",
        ),
        (("| total | 400 | - |", "| total | 400 |"), "PERF.md:10: 2 cells, the header has 3"),
        (("| row | budget s |", "| row | seconds |"), "PERF.md:5: the header needs"),
        (("|---|---|---|\n", ""), "PERF.md:6: not a table's |---| line"),
    ],
)
def test_a_malformed_table_is_named_by_file_and_line(change: tuple[str, str], message: str) -> None:
    with pytest.raises(timing_report.BudgetError) as raised:
        timing_report.parse_budget(TABLE.replace(*change, 1), "PERF.md")
    assert str(raised.value).startswith(message), raised.value


def _test(nodeid: str, total: float, **extra: Any) -> dict[str, Any]:
    file = nodeid.partition("::")[0]
    times = {"setup_s": 0.0, "call_s": total, "teardown_s": 0.0, "total_s": total}
    return {"nodeid": nodeid, "file": file, "outcome": "passed", **times, **extra}


def _fixture_dir(root: Path) -> Path:
    """A run whose lint and unit passed and e2e failed (molecule "not run" for the test)."""
    stages = {
        "lint": {"start": 1000.0, "end": 1100.0, "rc": 0},
        "unit": {"start": 1100.0, "end": 1400.0, "rc": 0},
        "e2e": {"start": 1400.0, "end": 1600.0, "rc": 2},
    }
    e2e_files = {
        "tests/e2e/test_switch.py": {"tests": 2, "seconds": 120.0,
            "playbook_runs": {"site.yml": 2, "smoke.yml": 1}, "pair_restarts": 1,
            "restarts_unknown": 1, "provision_seconds": 110.0},
        "tests/e2e/test_site.py": {"tests": 1, "seconds": 30.0, "playbook_runs": {},
            "pair_restarts": 0, "restarts_unknown": 0, "provision_seconds": 0.0},
    }  # fmt: skip
    unit_tests = [_test(f"tests/unit/test_u.py::test_{i}", float(i)) for i in range(40)]
    e2e_tests = [_test("tests/e2e/test_switch.py::test_x", 100.5, outcome="failed")]
    root.mkdir()
    (root / "stages.json").write_text(json.dumps(stages))
    (root / "unit.json").write_text(json.dumps({"stage": "unit", "tests": unit_tests, "files": {}}))
    (root / "e2e.json").write_text(
        json.dumps({"stage": "e2e", "tests": e2e_tests, "files": e2e_files})
    )
    return root


def test_the_report_sums_stages_and_files_and_marks_rows_over_budget(tmp_path: Path) -> None:
    budgets = timing_report.parse_budget(TABLE)
    report = timing_report.build(_fixture_dir(tmp_path / "timing"), budgets)

    stages = {row["row"]: row for row in report["stages"]}
    assert [row["row"] for row in report["stages"]] == [
        "stage: lint", "stage: images", "stage: unit", "stage: molecule", "stage: e2e"
    ]  # fmt: skip
    assert stages["stage: lint"] | {"status": "ok"} == stages["stage: lint"]
    assert stages["stage: molecule"]["status"] == "not run"
    assert stages["stage: e2e"]["status"] == "failed (2)"
    assert stages["stage: e2e"]["over_s"] == 100.0
    assert stages["stage: unit"]["over_s"] is None  # 300 of 330
    assert report["total"]["seconds"] == 600.0
    assert report["total"]["over_s"] == 200.0

    files = report["e2e_files"]
    assert [row["row"] for row in files] == ["e2e: test_switch.py", "e2e: test_site.py"]
    assert files[0]["over_s"] == 70.0
    assert files[0]["playbook_runs"] == {"site.yml": 2, "smoke.yml": 1}
    assert files[1]["budget_s"] is None  # no row for it in this table

    assert len(report["slowest"]) == 30
    assert report["slowest"][0]["nodeid"] == "tests/e2e/test_switch.py::test_x"
    assert report["slowest"][1]["total_s"] == 39.0
    assert [row["row"] for row in report["over_budget"]] == [
        "stage: e2e", "total", "e2e: test_switch.py"
    ]  # fmt: skip


def test_print_writes_report_json_and_prints_the_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _fixture_dir(tmp_path / "timing")
    budget = tmp_path / "PERF.md"
    budget.write_text(TABLE)

    assert timing_report.main(["--dir", str(directory), "--budget", str(budget), "print"]) == 0

    out = capsys.readouterr().out
    assert json.loads((directory / "report.json").read_text())["total"]["over_s"] == 200.0
    assert re.search(r"^e2e +200\.0 +100\.0 +failed \(2\) +OVER by 100 s$", out, re.M), out
    assert re.search(r"^molecule +- +- +not run$", out, re.M), out
    assert re.search(
        r"^test_switch\.py +120\.0 +50\.0 +2 +1 \(\+1 unknown\) +site\.yml 2", out, re.M
    )
    assert "The 30 slowest tests:" in out
    assert "3 row(s) over budget (a report: nothing fails for it)." in out


def test_a_broken_budget_table_still_prints_the_times_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _fixture_dir(tmp_path / "timing")
    budget = tmp_path / "PERF.md"
    budget.write_text(TABLE.replace("| 150 |", "| x |"))

    assert timing_report.main(["--dir", str(directory), "--budget", str(budget), "print"]) == 1

    captured = capsys.readouterr()
    assert "The 30 slowest tests:" in captured.out
    assert f"{budget}:7: budget 'x' of 'stage: lint' is not seconds" in captured.err


def test_stage_start_and_end_are_recorded(tmp_path: Path) -> None:
    directory = tmp_path / "timing"
    timing_report.main(["--dir", str(directory), "stage-start", "lint"])
    timing_report.main(["--dir", str(directory), "stage-end", "lint", "0"])
    timing_report.main(["--dir", str(directory), "stage-start", "unit"])
    timing_report.main(["--dir", str(directory), "stage-end", "unit", "2"])
    stages = json.loads((directory / "stages.json").read_text())
    assert [(name, s["rc"]) for name, s in stages.items()] == [("lint", 0), ("unit", 2)]
    assert stages["lint"]["start"] <= stages["lint"]["end"] <= stages["unit"]["start"]


def _test_target() -> str:
    """The Makefile's timing variables and `test` recipe, as written."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^GX10_TEST_TIMING_DIR \?=.*?^\texit \$\$rc\n", text, re.M | re.S)
    assert match, "Makefile: the test recipe's timing lines are not found"
    return match.group(0)


def _make_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_ins: str) -> Any:
    """The real recipe, with stand-in stages (make targets): its process, then its report."""
    (tmp_path / "docs").mkdir()
    shutil.copy(PERFORMANCE, tmp_path / "docs" / "PERFORMANCE.md")
    (tmp_path / "Makefile").write_text(
        "SHELL := /bin/bash\n.SHELLFLAGS := -eu -o pipefail -c\n"
        + _test_target().replace("python -m", f"{sys.executable} -m")
        + "venv host-deps browser-deps proxy-deps prometheus-tools:\n"
        + stand_ins
    )
    monkeypatch.delenv("GX10_TEST_TIMING_DIR", raising=False)
    monkeypatch.delenv("MAKEFLAGS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO / "python"))
    return subprocess.run(
        ["make", "--no-print-directory", "test"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, check=False, env={**os.environ},
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_stops_at_a_failed_stage_prints_the_report_and_keeps_its_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """unit fails while molecule runs beside it, on the images built first: e2e does not run;
    the build and molecule were waited for, their output shown."""
    timing = tmp_path / ".cache" / "test-timing"
    stale = timing / "e2e.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")  # from an earlier run: cleared
    stand_ins = (
        "lint:\n\t@echo linted\n"
        # unit ends (failing) only once molecule has begun: they run at once.
        + _waits_for("unit", "molecule", then="exit 3")
        + "images:\n\t@sleep 1; echo built\n"
        + _waits_for("molecule", "unit", then="echo molecule ran")
        + "e2e:\n\t@echo e2e ran\n"
    )

    proc = _make_test(tmp_path, monkeypatch, stand_ins)

    assert proc.returncode == 2, proc.stdout + proc.stderr  # make's status for the failed unit
    assert "linted" in proc.stdout
    shown = proc.stdout.partition("lab images, then molecule (beside lint and unit; exit 0):\n")[2]
    assert shown.startswith("built\nmolecule ran\n"), proc.stdout
    assert "e2e ran" not in proc.stdout
    assert re.search(r"^unit +[0-9.]+ +[0-9.]+ +failed \(2\)", proc.stdout, re.M), proc.stdout
    assert re.search(r"^e2e +- +[0-9.]+ +not run", proc.stdout, re.M), proc.stdout
    report = json.loads((timing / "report.json").read_text())
    rows = {row["row"]: row for row in report["stages"]}
    statuses = {name: row["status"] for name, row in rows.items() if name.startswith("stage: ")}
    assert statuses == {"stage: lint": "ok", "stage: unit": "failed (2)", "stage: images": "ok",
                        "stage: molecule": "ok", "stage: e2e": "not run"}  # fmt: skip
    assert "unit" in rows["stage: molecule"]["beside"]
    assert "images" not in rows["stage: molecule"]["beside"]  # the images first, then molecule
    assert (timing / "roles.log").read_text().endswith("molecule ran\n")  # ended before make did
    assert not stale.exists()


def _waits_for(name: str, *others: str, then: str) -> str:
    """A stand-in target that goes on (`then`) once each of `others` has begun (10 s at most)."""
    began = " && ".join(f"[ -e {other}.began ]" for other in others)
    return (
        f"{name}:\n\t@touch {name}.began; for i in $$(seq 200); do {began} && break; "
        f"sleep 0.05; done; {then}\n"
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_runs_lint_unit_and_the_build_at_once_and_stops_before_molecule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of lint, unit and the image build waits until the other two have begun: they run
    at once. The build fails: unit still ends, its and lint's output shown, molecule never runs."""
    stand_ins = (
        _waits_for("lint", "images", "unit", then="echo linted")
        + _waits_for("images", "lint", "unit", then="echo mmdebstrap broke; exit 4")
        + _waits_for("unit", "lint", "images", then="echo unit ran")
        + "molecule e2e:\n\t@echo $@ ran\n"
    )

    proc = _make_test(tmp_path, monkeypatch, stand_ins)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unit ran" in proc.stdout
    assert "molecule ran" not in proc.stdout
    linted = proc.stdout.partition("lint (beside unit, the image build and molecule; exit 0):\n")[2]
    assert linted.startswith("linted\n"), proc.stdout
    shown = proc.stdout.partition("lab images, then molecule (beside lint and unit; exit 2):\n")[2]
    assert "mmdebstrap broke" in shown.partition("Test timing report")[0], proc.stdout
    assert re.search(r"^images +[0-9.]+ +[0-9.]+ +failed \(2\) +lint, unit\b", proc.stdout, re.M)
    assert re.search(r"^total +[0-9.]+ +[0-9.]+ +wall time", proc.stdout, re.M), proc.stdout
    report = json.loads((tmp_path / ".cache" / "test-timing" / "report.json").read_text())
    rows = {row["row"]: row for row in report["stages"]}
    assert [rows[f"stage: {name}"]["status"] for name in timing_report.STAGES] == [
        "ok", "failed (2)", "ok", "not run", "not run"
    ]  # fmt: skip
    assert set(rows["stage: lint"]["beside"]) == {"images", "unit"}
    assert set(rows["stage: images"]["beside"]) == {"lint", "unit"}
    assert set(rows["stage: unit"]["beside"]) == {"lint", "images"}
    assert rows["stage: molecule"]["beside"] == []
    # The total is wall time: from the first start to the last end, not the stages' sum.
    stages = json.loads((tmp_path / ".cache" / "test-timing" / "stages.json").read_text())
    wall = max(s["end"] for s in stages.values()) - min(s["start"] for s in stages.values())
    assert report["total"]["seconds"] == round(wall, 1)


def step(name: str, seconds: float, outcome: str = "passed") -> dict[str, Any]:
    return {"step": name, "seconds": seconds, "outcome": outcome}


def test_the_role_pipeline_s_scenarios_are_rows_in_its_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gx10._dev.role_pipeline's molecule.json: a row per scenario, its steps' seconds."""
    directory = _fixture_dir(tmp_path / "timing")
    pipeline = {
        "stage": "molecule", "seconds": 300.0, "outcome": "failed",
        "failed": {"scenario": "fabric", "step": "verify", "message": "pytest exited 1"},
        "syntax": step("syntax", 4.0),
        "scenarios": [
            {"name": "rail_network", "seconds": 120.0, "outcome": "passed",
             "steps": [step("setup", 20.0), step("converge", 100.0)]},
            {"name": "fabric", "seconds": 60.5, "outcome": "failed",
             "steps": [step("prerequisites", 0.0, "skipped"), step("verify", 60.5, "failed")]},
            {"name": "gpu_clock", "seconds": 0.0, "outcome": "not run", "steps": []},
        ],
    }  # fmt: skip
    (directory / "molecule.json").write_text(json.dumps(pipeline))
    budget = tmp_path / "PERF.md"
    budget.write_text(TABLE.replace("| total |", "| molecule: rail_network | 100 | - |\n| total |"))

    assert timing_report.main(["--dir", str(directory), "--budget", str(budget), "print"]) == 0

    report = json.loads((directory / "report.json").read_text())
    rows = report["molecule_scenarios"]
    assert [(row["row"], row["seconds"], row["outcome"]) for row in rows] == [
        ("molecule: syntax", 4.0, "passed"),
        ("molecule: rail_network", 120.0, "passed"),
        ("molecule: fabric", 60.5, "failed"),
        ("molecule: gpu_clock", None, "not run"),
    ]
    assert rows[1]["steps"] == {"setup": 20.0, "converge": 100.0}
    assert "molecule: rail_network" in [row["row"] for row in report["over_budget"]]
    assert len(report["slowest"]) == 30  # the pipeline's JSON has no tests: only pytest's count
    out = capsys.readouterr().out
    assert re.search(
        r"^rail_network +120\.0 +100\.0 +passed +setup 20\.0, converge 100\.0 +OVER by 20 s$",
        out,
        re.M,
    ), out
    assert re.search(r"^fabric +60\.5 +- +failed +verify 60\.5!$", out, re.M), out
    assert re.search(r"^gpu_clock +- +- +not run$", out, re.M), out
