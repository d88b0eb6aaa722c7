"""gx10._dev.role_pipeline: the molecule scenarios as one pipeline, with a fake command runner.

The scenarios are the project's own (molecule/*/), read as the pipeline reads them; nothing runs
against a lab: every ansible-playbook and pytest call goes to a recorder that answers as told.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gx10._dev import role_pipeline
from gx10._dev.role_pipeline import SCENARIOS, Pipeline, PipelineError

REPO = Path(__file__).resolve().parents[2]
MOLECULE = REPO / "molecule"
LAB = f"{REPO}/inventories/lab"
ENVIRON = {"PATH": "/usr/bin:/bin", "GX10_MARK": "kept"}
NOT_RUN = {"syntax", "create", "prepare", "destroy"}
RECAP_CLEAN = """
PLAY RECAP *********************************************************************
gx10-a                     : ok=9    changed=0    unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
gx10-b                     : ok=9    changed=0    unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
localhost                  : ok=3    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
"""  # noqa: E501 - ansible's own lines
# A second converge as ansible-playbook prints it (default callback, yaml results), three tasks
# and a handler changing things, one of them delegated and one in a loop.
RECAP_CHANGED = """
PLAY [Validate the inventory] **************************************************

TASK [Check the inventory shape and the rail plan] *****************************
skipping: [localhost]

PLAY [Apply the GPU clock policy on every node] ********************************

TASK [gpu_clock : Install the clock tool] **************************************
ok: [gx10-a]
changed: [gx10-b]

TASK [gpu_clock : Write the policy] ********************************************
changed: [gx10-a] => (item=/etc/gx10/gpu-clock.conf)
changed: [gx10-a] => (item=/etc/gx10/gpu-clock.env)
ok: [gx10-b] => (item=/etc/gx10/gpu-clock.conf)

TASK [gpu_clock : Record the cap on the controller] ****************************
\x1b[0;33mchanged: [gx10-b -> localhost]\x1b[0m

RUNNING HANDLER [gpu_clock : Restart the clock unit] ***************************
changed: [gx10-a]

PLAY RECAP *********************************************************************
gx10-a                     : ok=3    changed=2    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
gx10-b                     : ok=3    changed=2    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
localhost                  : ok=0    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
"""  # noqa: E501 - ansible's own lines


@dataclass(frozen=True)
class Call:
    scenario: str | None
    kind: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    imports: list[str] | None  # the stages a generated prerequisites playbook imports


class Recorder:
    """The command runner: records each call, answers rc 0 (a clean recap for idempotence),
    or what `answers` says for a (scenario, kind)."""

    def __init__(self, answers: Mapping[tuple[str | None, str], tuple[int, str]] = {}) -> None:
        self.calls: list[Call] = []
        self.answers = dict(answers)

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
        argv = list(argv)
        scenario = env.get("MOLECULE_SCENARIO_NAME")
        kind, imported = self.kind(argv, scenario)
        self.calls.append(Call(scenario, kind, argv, dict(env), cwd, imported))
        default = (0, RECAP_CLEAN if kind == "idempotence" else "")
        return self.answers.get((scenario, kind), default)

    @staticmethod
    def kind(argv: list[str], scenario: str | None) -> tuple[str, list[str] | None]:
        if argv[0] == "pytest":
            return "verify", None
        assert argv[0] == "ansible-playbook", argv
        if "--syntax-check" in argv:
            return "syntax", None
        if "--check" in argv:
            return "check", None
        if role_pipeline.IDEMPOTENCE_SKIP_TAGS in argv:
            return "idempotence", None
        playbook = Path(argv[-1])
        if MOLECULE not in playbook.parents:  # generated, in the scenario's ephemeral directory
            plays = yaml.safe_load(playbook.read_text())
            stages = [
                role_pipeline.stage_name(REPO, Path(play["ansible.builtin.import_playbook"]))
                for play in plays
            ]
            return "prerequisites", [str(stage) for stage in stages]
        assert scenario is not None
        if playbook.name in ("setup.yml", "prepare.yml"):
            return "setup", None
        if playbook.name == "converge.yml":
            return "converge", None
        return playbook.stem, None  # side_effect, cleanup


def pipeline(
    tmp_path: Path,
    names: Sequence[str] | None = None,
    run: Recorder | None = None,
    clock: role_pipeline.Clock | None = None,
) -> tuple[Pipeline, Recorder, io.StringIO]:
    run = run or Recorder()
    out = io.StringIO()
    scenarios = [
        role_pipeline.load_scenario(REPO, one.name, tmp_path / one.name, ENVIRON)
        for one in role_pipeline.select(names)
    ]
    extra = {"clock": clock} if clock is not None else {}
    return Pipeline(REPO, scenarios, run, environ=ENVIRON, out=out, **extra), run, out


def molecule_steps(name: str) -> list[str]:
    config = yaml.safe_load((MOLECULE / name / "molecule.yml").read_text())
    return [step for step in config["scenario"]["test_sequence"] if step not in NOT_RUN]


def imports_of(playbook: Path) -> list[str]:
    return [str(target.relative_to(REPO)) for _, target in role_pipeline.imports(playbook)]


# --- the declared list and the scenarios' files ----------------------------------------------


def test_the_declared_list_names_every_scenario_of_molecule_once() -> None:
    names = [one.name for one in SCENARIOS]
    dirs = {path.name for path in MOLECULE.iterdir() if path.is_dir() and path.name != "shared"}
    assert len(names) == len(set(names)), names
    missing = sorted(dirs - set(names))
    assert not missing, f"molecule/ scenarios missing from role_pipeline.SCENARIOS: {missing}"
    stale = sorted(set(names) - dirs)
    assert not stale, f"role_pipeline.SCENARIOS names scenarios molecule/ lacks: {stale}"


def test_the_declared_order_is_site_yml_s_stage_order_and_each_stage_s_role_order() -> None:
    stages = role_pipeline.site_stages(REPO)
    assert stages[0] == "validate"
    positions = []
    for one in SCENARIOS:
        assert one.stage in stages, (one, stages)
        text = (REPO / "playbooks" / "stages" / f"{one.stage}.yml").read_text()
        found = re.search(rf"^\s*(?:- role|name): {one.role}\s*$", text, re.M)
        assert found, f"{one.name}: role {one.role} does not run in stages/{one.stage}.yml"
        positions.append((stages.index(one.stage), found.start()))
    assert positions == sorted(positions), [one.name for one in SCENARIOS]


def test_each_scenario_converges_its_stage_or_its_role_alone(tmp_path: Path) -> None:
    for one in SCENARIOS:
        scenario = role_pipeline.load_scenario(REPO, one.name, tmp_path, ENVIRON)
        assert not scenario.applies or one.stage in scenario.applies, (one, scenario.applies)
    alone = role_pipeline.load_scenario(REPO, "memory_guard", tmp_path, ENVIRON)
    assert alone.applies == ()  # the role as the serve stage applies it, without the launch


def test_prepare_is_prerequisites_then_setup_so_molecule_alone_runs_as_before() -> None:
    for one in SCENARIOS:
        directory = MOLECULE / one.name
        prepare = directory / "prepare.yml"
        if (directory / "prerequisites.yml").exists():
            setup = ["setup.yml"] if (directory / "setup.yml").exists() else []
            books = ["prerequisites.yml", *setup]
            assert imports_of(prepare) == [f"molecule/{one.name}/{book}" for book in books]
            assert len(yaml.safe_load(prepare.read_text())) == len(books)
            first = imports_of(directory / "prerequisites.yml")[0]
            assert first == "playbooks/validate.yml", one.name
        else:
            # Its whole prepare is setup: no stage imported there (those go to prerequisites.yml).
            assert role_pipeline.applied_stages(REPO, prepare) == [], one.name


def test_a_setup_that_reads_the_plan_validates_first() -> None:
    for setup in sorted(MOLECULE.glob("*/setup.yml")):
        if "gx10_plan" in setup.read_text():
            assert imports_of(setup)[:1] == ["playbooks/validate.yml"], setup


def test_a_scenario_that_changes_the_labs_shape_puts_it_back_in_cleanup(
    tmp_path: Path,
) -> None:
    """The end-to-end stage starts from what the pipeline leaves: the lab inventory's defaults.
    A scenario that turns supervision or the gateway on or off with extra variables turns it
    back in its cleanup (the gateway is the lab's default now: no scenario sets it)."""
    turned_on = []
    for one in SCENARIOS:
        scenario = role_pipeline.load_scenario(REPO, one.name, tmp_path, ENVIRON)
        extra: dict[str, object] = {}
        for arg in scenario.ansible_args:
            if arg.startswith("--extra-vars="):
                extra.update(json.loads(arg.removeprefix("--extra-vars=")))
        if {"vllm_supervisor_enabled", "gx10_gateway_enabled"} & extra.keys():
            turned_on.append(one.name)
            assert scenario.steps[-1] == "cleanup", one.name
    assert turned_on == ["vllm_supervisor"]
    # The supervisor's cleanup is its setup (the pair and the supervisor taken away), reused.
    assert imports_of(MOLECULE / "vllm_supervisor" / "cleanup.yml") == [
        "molecule/vllm_supervisor/setup.yml"
    ]


def test_a_prerequisites_file_holds_stage_imports_only(tmp_path: Path) -> None:
    (tmp_path / "molecule" / "x").mkdir(parents=True)
    prerequisites = tmp_path / "molecule" / "x" / "prerequisites.yml"
    prerequisites.write_text(
        "- name: Validate\n  ansible.builtin.import_playbook: ../../playbooks/validate.yml\n"
        "- name: A play of its own\n  hosts: all\n  tasks: []\n"
    )
    with pytest.raises(PipelineError, match="only import_playbook entries belong here"):
        role_pipeline.read_prerequisites(tmp_path, prerequisites)
    prerequisites.write_text(
        "- name: Network\n  ansible.builtin.import_playbook: ../../playbooks/stages/network.yml\n"
    )
    with pytest.raises(PipelineError, match=r"the first import must be playbooks/validate\.yml"):
        role_pipeline.read_prerequisites(tmp_path, prerequisites)


def test_molecule_yml_variables_are_expanded_and_an_unset_one_is_an_error() -> None:
    env = {"MOLECULE_PROJECT_DIRECTORY": "/p"}
    assert role_pipeline.interpolate("${MOLECULE_PROJECT_DIRECTORY}/x $$y", env, "f") == "/p/x $y"
    with pytest.raises(PipelineError, match=r"f: \$\{NOPE\} is not set"):
        role_pipeline.interpolate("${NOPE}", env, "f")
    with pytest.raises(PipelineError, match="only"):
        role_pipeline.interpolate("${NOPE:-x}", env, "f")


# --- the run ---------------------------------------------------------------------------------


def test_the_scenarios_run_in_the_declared_order_each_with_its_molecule_steps(
    tmp_path: Path,
) -> None:
    run, recorder, out = pipeline(tmp_path)
    assert run.run() == 0, out.getvalue()

    assert recorder.calls[0].kind == "syntax"
    order = list(dict.fromkeys(call.scenario for call in recorder.calls[1:]))
    assert order == [one.name for one in SCENARIOS]
    for one, record in zip(SCENARIOS, run.records, strict=True):
        directory = MOLECULE / one.name
        prerequisites = (directory / "prerequisites.yml").exists()
        setup = (directory / "setup.yml").exists() or (
            not prerequisites and (directory / "prepare.yml").exists()
        )
        expected = ["prerequisites"] * prerequisites + ["setup"] * setup
        expected += molecule_steps(one.name)
        assert [step.step for step in record.steps] == expected, one.name
        assert record.outcome == "passed"
        ran = [call.kind for call in recorder.calls if call.scenario == one.name]
        skipped = [step.step for step in record.steps if step.outcome == "skipped"]
        assert ran == [step for step in expected if step not in skipped], one.name
    assert molecule_steps("hardware_swap")[0] == "side_effect"  # before check, as in its sequence
    assert "role pipeline passed: 11 scenario(s)" in out.getvalue()


def test_prerequisites_run_once_in_one_playbook_validate_first(tmp_path: Path) -> None:
    run, recorder, out = pipeline(tmp_path)
    assert run.run() == 0, out.getvalue()

    prerequisites = [call for call in recorder.calls if call.kind == "prerequisites"]
    # network: rail_network's converge applied it; nccl and model: their scenarios' converges.
    assert [(call.scenario, call.imports) for call in prerequisites] == [
        ("vllm_supervisor", ["validate", "image"])
    ]
    skipped = {
        record.name: step.detail["applied_by"]
        for record in run.records
        for step in record.steps
        if step.step == "prerequisites" and step.outcome == "skipped"
    }
    assert skipped["fabric"] == {"network": "hardware_swap converge"}
    assert re.search(r"^fabric +skip +- +- +[0-9.]+ ", out.getvalue(), re.M), out.getvalue()
    assert skipped["api_gateway"] == {
        "network": "hardware_swap converge",
        "nccl": "nccl_env converge",
        "image": "vllm_supervisor converge",
        "model": "model_sync converge",
    }


def test_a_scenario_alone_runs_all_its_prerequisites(tmp_path: Path) -> None:
    run, recorder, out = pipeline(tmp_path, ["api_gateway"])
    assert run.run() == 0, out.getvalue()
    assert [(call.kind, call.imports) for call in recorder.calls] == [
        ("syntax", None),
        ("prerequisites", ["validate", "network", "nccl", "image", "model"]),
        ("setup", None),
        ("check", None),
        ("converge", None),
        ("idempotence", None),
        ("verify", None),
    ]


def test_selected_scenarios_run_in_pipeline_order_sharing_prerequisites(tmp_path: Path) -> None:
    run, recorder, out = pipeline(tmp_path, ["model_sync", "fabric", "nccl_env"])
    assert run.run() == 0, out.getvalue()
    assert [record.name for record in run.records] == ["nccl_env", "fabric", "model_sync"]
    prerequisites = [call for call in recorder.calls if call.kind == "prerequisites"]
    assert [(call.scenario, call.imports) for call in prerequisites] == [
        ("nccl_env", ["validate", "network"])
    ]
    assert "prerequisites already applied in this run: network (nccl_env prerequisites)" in (
        out.getvalue()
    )


def test_each_step_gets_molecule_s_arguments_and_environment(tmp_path: Path) -> None:
    run, recorder, out = pipeline(tmp_path, ["hardware_swap", "vllm_supervisor"])
    assert run.run() == 0, out.getvalue()
    calls = {(call.scenario, call.kind): call for call in recorder.calls}

    supervisor = MOLECULE / "vllm_supervisor"
    extra = '--extra-vars={"vllm_supervisor_enabled": true}'
    skip = ["--skip-tags", "molecule-notest,notest"]
    converge = str(supervisor / "converge.yml")
    assert calls["vllm_supervisor", "converge"].argv == [
        "ansible-playbook", *skip, f"--inventory={LAB}", extra, converge
    ]  # fmt: skip
    assert calls["vllm_supervisor", "check"].argv == [
        "ansible-playbook", "--check", *skip, f"--inventory={LAB}", extra, converge
    ]  # fmt: skip
    assert calls["vllm_supervisor", "idempotence"].argv == [
        "ansible-playbook", "--skip-tags", "molecule-notest,notest,molecule-idempotence-notest",
        f"--inventory={LAB}", extra, converge,
    ]  # fmt: skip
    assert calls["vllm_supervisor", "cleanup"].argv[-1] == str(supervisor / "cleanup.yml")
    assert calls["vllm_supervisor", "verify"].argv == [
        "pytest", "--ansible-inventory", LAB, "--connection", "ansible", "-p", "no:cacheprovider",
        str(supervisor / "tests" / "test_vllm_supervisor.py"),
    ]  # fmt: skip
    assert calls[None, "syntax"].argv == [
        "ansible-playbook", "--syntax-check", f"--inventory={LAB}",
        str(MOLECULE / "hardware_swap" / "converge.yml"), converge,
    ]  # fmt: skip

    for call in recorder.calls:
        assert call.env["GX10_MARK"] == "kept"  # the pipeline's own environment passes through
        assert call.env["PATH"].endswith(":/usr/bin:/bin")  # after this interpreter's directory
        assert call.env["ANSIBLE_CONFIG"] == f"{REPO}/ansible.cfg"
        assert call.env["ANSIBLE_COLLECTIONS_PATH"] == f"{REPO}/collections"
        assert call.env["ANSIBLE_ROLES_PATH"] == f"{REPO}/roles"
        assert call.env["MOLECULE_PROJECT_DIRECTORY"] == str(REPO)
        if call.scenario is None:
            assert call.cwd == REPO
            continue
        directory = MOLECULE / call.scenario
        assert call.cwd == directory
        assert call.env["MOLECULE_SCENARIO_NAME"] == call.scenario
        assert call.env["MOLECULE_SCENARIO_DIRECTORY"] == str(directory)
        assert call.env["MOLECULE_FILE"] == str(directory / "molecule.yml")
        # The side effect records the old MACs there, the verifier reads them back.
        assert call.env["MOLECULE_EPHEMERAL_DIRECTORY"] == str(tmp_path / call.scenario)
    assert calls["hardware_swap", "verify"].env["MOLECULE_VERIFIER_TEST_DIRECTORY"] == str(
        MOLECULE / "hardware_swap" / "tests"
    )
    assert calls["hardware_swap", "side_effect"].argv[-1] == str(
        MOLECULE / "hardware_swap" / "side_effect.yml"
    )


def test_idempotence_names_each_task_that_changed() -> None:
    assert role_pipeline.changed_hosts(RECAP_CHANGED) == {"gx10-a": 2, "gx10-b": 2}
    assert role_pipeline.changed_hosts(RECAP_CLEAN) == {}
    assert role_pipeline.changed_hosts("no recap at all") is None
    assert role_pipeline.changed_tasks(RECAP_CHANGED) == [
        "[gx10-b] => gpu_clock : Install the clock tool",
        "[gx10-a] => gpu_clock : Write the policy",
        "[gx10-b -> localhost] => gpu_clock : Record the cap on the controller",
        "[gx10-a] => gpu_clock : Restart the clock unit",
    ]


def test_a_changed_second_converge_fails_the_pipeline_naming_the_tasks(tmp_path: Path) -> None:
    recorder = Recorder({("gpu_clock", "idempotence"): (0, RECAP_CHANGED)})
    run, _, out = pipeline(tmp_path, ["gpu_clock", "metrics_exporter"], recorder)
    assert run.run() == 1
    text = out.getvalue()
    assert "role pipeline FAILED: scenario gpu_clock, step idempotence" in text
    assert "gx10-a changed=2, gx10-b changed=2" in text
    assert "* [gx10-a] => gpu_clock : Write the policy" in text
    assert "* [gx10-a] => gpu_clock : Restart the clock unit" in text
    assert [call.scenario for call in recorder.calls][-1] == "gpu_clock"  # metrics never ran
    assert [record.outcome for record in run.records] == ["failed", "not run"]


def test_the_first_failing_step_stops_the_pipeline(tmp_path: Path) -> None:
    recorder = Recorder({("model_sync", "converge"): (2, "fatal: [gx10-b]: FAILED!\n")})
    run, _, out = pipeline(tmp_path, run=recorder)
    assert run.run() == 1
    last = recorder.calls[-1]
    assert (last.scenario, last.kind) == ("model_sync", "converge")
    outcomes = {record.name: record.outcome for record in run.records}
    assert outcomes["fabric"] == "passed"
    assert outcomes["model_sync"] == "failed"
    assert outcomes["gpu_clock"] == outcomes["api_gateway"] == "not run"
    steps = run.records[[one.name for one in SCENARIOS].index("model_sync")].steps
    assert [(step.step, step.outcome) for step in steps] == [
        ("prerequisites", "skipped"), ("setup", "passed"), ("check", "passed"),
        ("converge", "failed"),
    ]  # fmt: skip
    text = out.getvalue()
    failed = "role pipeline FAILED: scenario model_sync, step converge: ansible-playbook exited 2"
    assert failed in text
    assert re.search(r"^model_sync .* failed$", text, re.M), text
    assert re.search(r"^gpu_clock +(- +)+- +not run$", text, re.M), text


def test_a_failed_prerequisites_run_marks_no_stage_applied(tmp_path: Path) -> None:
    recorder = Recorder({("nccl_env", "prerequisites"): (4, "")})
    run, _, _ = pipeline(tmp_path, ["nccl_env", "fabric"], recorder)
    assert run.run() == 1
    assert run.applied == {}
    assert run.failure is not None
    assert run.failure.step == "prerequisites"


def test_a_failed_syntax_check_runs_nothing_else(tmp_path: Path) -> None:
    recorder = Recorder({(None, "syntax"): (4, "ERROR! ...")})
    run, _, out = pipeline(tmp_path, ["fabric"], recorder)
    assert run.run() == 1
    assert [call.kind for call in recorder.calls] == ["syntax"]
    assert "role pipeline FAILED: scenario pipeline, step syntax" in out.getvalue()


def test_each_step_s_time_is_printed_and_tabled(tmp_path: Path) -> None:
    ticks = iter(float(n) for n in range(1000))
    run, _, out = pipeline(tmp_path, ["fabric"], clock=lambda: next(ticks))
    assert run.run() == 0
    text = out.getvalue()
    assert "=== fabric: converge passed in 1.0 s" in text
    header = next(line for line in text.splitlines() if line.startswith("scenario "))
    assert header.split() == [
        "scenario", "prerequisites", "setup", "side_effect", "check", "converge", "idempotence",
        "verify", "cleanup", "total", "s", "outcome",
    ]  # fmt: skip
    assert re.search(r"^fabric +1\.0 +- +- +1\.0 +1\.0 +1\.0 +1\.0 +- +5\.0 +passed$", text, re.M)
    document = run.as_json()
    assert document["scenarios"][0]["steps"][0] == {
        "step": "prerequisites", "seconds": 1.0, "outcome": "passed", "stages": ["network"]
    }  # fmt: skip


def test_main_writes_molecule_json_for_the_timing_report(tmp_path: Path) -> None:
    timing = tmp_path / "timing"
    recorder = Recorder({("fabric", "verify"): (1, "1 failed")})
    environ = {**ENVIRON, "GX10_TEST_TIMING_DIR": str(timing)}
    argv = ["--scenario", "fabric", "--scenario", "nccl_env"]
    assert role_pipeline.main(argv, run=recorder, environ=environ, project=REPO) == 1

    document = json.loads((timing / "molecule.json").read_text())
    assert document["stage"] == "molecule"
    assert document["outcome"] == "failed"
    failed = document["failed"]
    assert (failed["scenario"], failed["step"]) == ("fabric", "verify")
    assert failed["message"].startswith("pytest exited 1: pytest --ansible-inventory")
    assert document["syntax"]["outcome"] == "passed"
    assert [(s["name"], s["outcome"]) for s in document["scenarios"]] == [
        ("nccl_env", "passed"), ("fabric", "failed")
    ]  # fmt: skip
    fabric = document["scenarios"][1]
    assert [(step["step"], step["outcome"]) for step in fabric["steps"]] == [
        ("prerequisites", "skipped"), ("check", "passed"), ("converge", "passed"),
        ("idempotence", "passed"), ("verify", "failed"),
    ]  # fmt: skip
    assert all(isinstance(step["seconds"], float) for step in fabric["steps"])
    # The total is the steps' unrounded sum, rounded once; each step is rounded to the ms too, so
    # the two agree within half a ms per step (fast stand-in steps take a fraction of one).
    steps_total = sum(step["seconds"] for step in fabric["steps"])
    assert fabric["seconds"] == pytest.approx(steps_total, abs=0.0005 * len(fabric["steps"]))


def test_main_writes_no_json_without_the_timing_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert role_pipeline.main(["--scenario", "preflight"], run=Recorder(), environ=ENVIRON,
                              project=REPO) == 0  # fmt: skip
    assert not list(tmp_path.rglob("molecule.json"))


def test_list_prints_the_plan_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder()
    assert role_pipeline.main(["--list"], run=recorder, environ=ENVIRON, project=REPO) == 0
    assert recorder.calls == []
    text = capsys.readouterr().out
    assert "vllm_supervisor (stage serve, role vllm_supervisor)" in text
    assert "  prerequisites: run validate, image; applied already: network" in text
    assert "  steps: side_effect, check, converge, idempotence, verify" in text


def test_an_unknown_scenario_is_refused() -> None:
    with pytest.raises(SystemExit):
        role_pipeline.main(["--scenario", "nope"], run=Recorder(), environ=ENVIRON, project=REPO)
    with pytest.raises(PipelineError, match="no scenario"):
        role_pipeline.select(["nope"])


def test_the_real_runner_shows_and_returns_the_output_and_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = (
        "import os; print('in', os.getcwd()); print(os.environ['GX10_MARK']); raise SystemExit(3)"
    )
    env = {**os.environ, "GX10_MARK": "kept"}
    rc, output = role_pipeline.run_command([sys.executable, "-c", code], env, tmp_path)
    assert (rc, output) == (3, f"in {tmp_path}\nkept\n")
    assert capsys.readouterr().out == output
    rc, output = role_pipeline.run_command([str(tmp_path / "missing")], env, tmp_path)
    assert rc == 127
    assert "missing" in output
