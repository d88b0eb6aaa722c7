"""The role tests as one pipeline over the lab: every molecule scenario, in stage order (issue 24).

``python -m gx10._dev.role_pipeline [--scenario NAME ...] [--list]``, from the project's root,
against the lab as it is (``make molecule`` brings it up first and leaves it up: the end-to-end
stage starts from the state this leaves). Each scenario (``molecule/<name>/``) runs what
``molecule test`` runs for it, but for create, prepare and destroy:

- prerequisites: the stages its ``prerequisites.yml`` imports that this run has not applied yet
  (a prerequisites run applies its stages, a scenario's converge the stages it imports), all in
  one ansible-playbook run of a generated playbook, validate.yml first;
- setup: its ``setup.yml``, the scenario's own reset (without a prerequisites.yml, its whole
  ``prepare.yml`` is setup);
- every step of its molecule.yml ``scenario.test_sequence`` but syntax, create, prepare and
  destroy, in that order, as molecule runs it: side_effect, check (converge with ``--check``),
  converge, idempotence (converge again: a task that reports a change fails it, named), verify
  (testinfra: pytest on the scenario's tests), cleanup.

ansible-playbook gets the scenario's ``ansible.executor.args.ansible_playbook``, its
``ansible.cfg.defaults`` (as ANSIBLE_* variables, over the project's ansible.cfg) and
``ansible.env``, molecule's skip tags, and the MOLECULE_* variables the playbooks and tests read;
pytest gets the verifier's options as molecule passes them. One ``ansible-playbook
--syntax-check`` over the scenarios' converge playbooks runs first. The first failing step stops
the run (exit 1), naming scenario and step. Each step's seconds are printed as it ends, a table
at the end; with GX10_TEST_TIMING_DIR set they go to ``$GX10_TEST_TIMING_DIR/molecule.json``
for the timing report (gx10._dev.timing_report).

``molecule test -s NAME`` still runs one scenario alone: its prepare.yml imports
prerequisites.yml and setup.yml.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

TIMING_DIR_ENV = "GX10_TEST_TIMING_DIR"
TIMING_FILE = "molecule.json"


@dataclass(frozen=True, slots=True)
class Declared:
    """A scenario in the pipeline: its name, the site.yml stage its role runs in, the role."""

    name: str
    stage: str
    role: str


# The scenarios in stage order: site.yml's stages (playbooks/stages/), and within a stage the
# order its playbook runs the roles (serve: the memory guard first, then the supervisor, the
# gateway last). hardware_swap re-applies the network after rail_network converged it.
# tests/unit/test_role_pipeline.py keeps this list and molecule/ in step, and the order with
# site.yml's.
SCENARIOS: tuple[Declared, ...] = (
    Declared("preflight", "preflight", "preflight"),
    Declared("rail_network", "network", "rail_network"),
    Declared("hardware_swap", "network", "rail_network"),
    Declared("nccl_env", "nccl", "nccl_env"),
    Declared("fabric", "fabric", "fabric"),
    Declared("model_sync", "model", "model_sync"),
    Declared("gpu_clock", "clock", "gpu_clock"),
    Declared("metrics_exporter", "metrics", "metrics_exporter"),
    Declared("memory_guard", "serve", "memory_guard"),
    Declared("vllm_supervisor", "serve", "vllm_supervisor"),
    Declared("api_gateway", "serve", "api_gateway"),
)

# The steps of a test_sequence the pipeline runs, and those it leaves out with the reason.
RUN_STEPS = frozenset({"side_effect", "check", "converge", "idempotence", "verify", "cleanup"})
LEFT_OUT = {
    "dependency": "no scenario has dependencies",
    "syntax": "one --syntax-check over every scenario runs first",
    "create": "the lab is up (make molecule brings it up)",
    "prepare": "prerequisites (once per run) and setup",
    "destroy": "the lab stays up for the next scenario and the end-to-end stage",
}
# The summary's columns, in the order a scenario runs them.
COLUMNS: tuple[str, ...] = ("prerequisites", "setup", "side_effect", "check", "converge")
COLUMNS += ("idempotence", "verify", "cleanup")
# molecule's provisioner options: every run skips these tags, idempotence one more.
SKIP_TAGS = "molecule-notest,notest"
IDEMPOTENCE_SKIP_TAGS = SKIP_TAGS + ",molecule-idempotence-notest"
# ansible.cfg [defaults] keys a molecule.yml may set, as ansible-core's environment variables.
CFG_ENV = {"collections_path": "ANSIBLE_COLLECTIONS_PATH", "roles_path": "ANSIBLE_ROLES_PATH"}
# What the one --syntax-check takes from the scenarios, which must agree on it.
SYNTAX_ENV = ("ANSIBLE_CONFIG", *CFG_ENV.values())
IMPORT_KEYS = ("ansible.builtin.import_playbook", "import_playbook")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_VAR = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.*)\]")
_CHANGED = re.compile(r"^changed: \[(?P<host>[^\]]+)\]")
_RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)", re.M)

# Runs one command: argv, environment, working directory -> exit status and output.
Runner = Callable[[Sequence[str], Mapping[str, str], Path], tuple[int, str]]
Clock = Callable[[], float]


class PipelineError(Exception):
    """A scenario's files cannot be read into the pipeline; the message names the file."""


class StepFailed(Exception):
    """A step failed; the pipeline stops here."""

    def __init__(self, scenario: str, step: str, message: str) -> None:
        super().__init__(f"{scenario}: {step} failed: {message}")
        self.scenario = scenario
        self.step = step
        self.message = message


@dataclass(frozen=True, slots=True)
class Stage:
    """One import of a prerequisites.yml: the play's name, the stage, the stage's playbook."""

    name: str
    stage: str
    path: Path


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scenario as the pipeline runs it, read from molecule/<name>/."""

    name: str
    directory: Path
    prerequisites: tuple[Stage, ...]
    validate: Path | None  # the validate.yml its prerequisites.yml imports first
    setup: Path | None
    steps: tuple[str, ...]
    playbooks: Mapping[str, Path]  # converge, and side_effect/cleanup when steps has them
    applies: tuple[str, ...]  # the stages its converge imports
    ansible_args: tuple[str, ...]
    env: Mapping[str, str]  # MOLECULE_*, ANSIBLE_*: over the pipeline's environment
    verifier_args: tuple[str, ...]
    verifier_env: Mapping[str, str]
    tests: tuple[Path, ...]
    ephemeral: Path


@dataclass(slots=True)
class StepRecord:
    step: str
    seconds: float
    outcome: str  # passed, failed, skipped
    detail: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "seconds": round(self.seconds, 3),
            "outcome": self.outcome,
            **self.detail,
        }


@dataclass(slots=True)
class ScenarioRecord:
    name: str
    outcome: str = "not run"  # passed, failed
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": round(self.seconds, 3),
            "outcome": self.outcome,
            "steps": [step.as_json() for step in self.steps],
        }


# --- reading the scenarios -------------------------------------------------------------------


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise PipelineError(f"{path}: {err}") from None


def interpolate(value: str, env: Mapping[str, str], where: str) -> str:
    """``${NAME}`` and ``$NAME`` from `env` (``$$`` is a dollar), as molecule does; an unset
    name, or a form molecule knows and this does not (``${NAME:-default}``), is an error."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") if match.group("braced") is not None else match.group("bare")
        if not _NAME.fullmatch(name):
            raise PipelineError(f"{where}: {match.group(0)!r}: only ${{NAME}} is supported")
        if name not in env:
            raise PipelineError(f"{where}: {match.group(0)} is not set")
        return env[name]

    return _VAR.sub(one, value)


def _interpolated(data: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(data, str):
        return interpolate(data, env, where)
    if isinstance(data, list):
        return [_interpolated(item, env, where) for item in data]
    if isinstance(data, dict):
        return {key: _interpolated(value, env, where) for key, value in data.items()}
    return data


def imports(playbook: Path) -> list[tuple[str, Path]]:
    """The (name, playbook) of each import_playbook in `playbook`, paths made absolute."""
    plays = _load_yaml(playbook)
    if not isinstance(plays, list):
        raise PipelineError(f"{playbook}: not a list of plays")
    found = []
    for play in plays:
        target = next((play[key] for key in IMPORT_KEYS if key in play), None)
        if target is not None:
            found.append((str(play.get("name", "")), (playbook.parent / str(target)).resolve()))
    return found


def stage_name(project: Path, playbook: Path) -> str | None:
    """'validate' for playbooks/validate.yml, a stage's name for playbooks/stages/<stage>.yml."""
    playbooks = (project / "playbooks").resolve()
    if playbook == playbooks / "validate.yml":
        return "validate"
    if playbook.parent == playbooks / "stages":
        return playbook.stem
    return None


def site_stages(project: Path) -> list[str]:
    """site.yml's stages in order (validate first)."""
    stages = []
    for _, target in imports(project / "playbooks" / "site.yml"):
        stage = stage_name(project, target)
        if stage is None:
            raise PipelineError(f"playbooks/site.yml imports {target}, not a stage")
        stages.append(stage)
    return stages


def applied_stages(
    project: Path, playbook: Path, _seen: frozenset[Path] = frozenset()
) -> list[str]:
    """The stages `playbook` applies: the stage playbooks it imports, at any depth (a converge
    may import playbooks/<stage>.yml, which imports validate.yml and the stage)."""
    stages: list[str] = []
    for _, target in imports(playbook):
        stage = stage_name(project, target)
        if stage is None and target not in _seen and target.exists():
            stages += applied_stages(project, target, _seen | {playbook})
        elif stage is not None and stage != "validate":
            stages.append(stage)
    return list(dict.fromkeys(stages))


def read_prerequisites(project: Path, path: Path) -> tuple[Path, tuple[Stage, ...]]:
    """A prerequisites.yml: validate.yml first, then stage playbooks, nothing else."""
    found = imports(path)
    plays = _load_yaml(path)
    if len(found) != len(plays):
        raise PipelineError(
            f"{path}: only import_playbook entries belong here (setup.yml has plays)"
        )
    if not found or stage_name(project, found[0][1]) != "validate":
        raise PipelineError(f"{path}: the first import must be playbooks/validate.yml")
    stages = []
    for name, target in found[1:]:
        stage = stage_name(project, target)
        if stage is None or stage == "validate":
            raise PipelineError(f"{path}: {target} is not a playbooks/stages/ playbook")
        if not target.exists():
            raise PipelineError(f"{path}: {target} does not exist")
        stages.append(Stage(name, stage, target))
    return found[0][1], tuple(stages)


def dict2args(options: Mapping[str, Any]) -> list[str]:
    """molecule's util.dict2args: sorted keys, -k for one letter, --key otherwise, True a flag."""
    args: list[str] = []
    for key, value in sorted(options.items()):
        if value is False:
            continue
        args.append(f"{'-' if len(key) == 1 else '--'}{key}".replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


def _tool_path(environ: Mapping[str, str]) -> str:
    """PATH with this interpreter's directory first: ansible-playbook, pytest and the gx10 the
    playbooks call are the venv's, as under make."""
    here = str(Path(sys.executable).parent)
    entries = [entry for entry in environ.get("PATH", "").split(os.pathsep) if entry]
    return os.pathsep.join([here, *(entry for entry in entries if entry != here)])


def _ansible(config: Mapping[str, Any], where: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The ANSIBLE_* variables (ansible.cfg, ansible.env) and ansible-playbook's arguments."""
    ansible = config.get("ansible", {})
    executor = ansible.get("executor", {})
    if executor.get("backend", "ansible-playbook") != "ansible-playbook":
        raise PipelineError(f"{where}: only the ansible-playbook backend is supported")
    unsupported = sorted(set(config.get("provisioner", {})) - {"name"})
    if unsupported:
        raise PipelineError(f"{where}: provisioner {unsupported} is not supported here")
    env: dict[str, str] = {}
    for section, options in ansible.get("cfg", {}).items():
        for key, value in options.items():
            if section != "defaults" or key not in CFG_ENV:
                raise PipelineError(
                    f"{where}: ansible.cfg {section}.{key} has no environment variable here "
                    f"(known: defaults {sorted(CFG_ENV)})"
                )
            env[CFG_ENV[key]] = str(value)
    env.update({str(key): str(value) for key, value in ansible.get("env", {}).items()})
    args = tuple(str(arg) for arg in executor.get("args", {}).get("ansible_playbook", []))
    return env, args


def _steps(config: Mapping[str, Any], where: Path) -> tuple[str, ...]:
    sequence = config.get("scenario", {}).get("test_sequence")
    if not sequence:
        raise PipelineError(f"{where}: no scenario.test_sequence")
    unknown = [step for step in sequence if step not in RUN_STEPS and step not in LEFT_OUT]
    if unknown:
        raise PipelineError(f"{where}: steps {unknown} are not known to the pipeline")
    return tuple(step for step in sequence if step in RUN_STEPS)


def _verifier(
    config: Mapping[str, Any], directory: Path, where: Path
) -> tuple[tuple[str, ...], dict[str, str], Path]:
    """pytest's options as molecule's testinfra verifier passes them, its env, the tests dir."""
    verifier = config.get("verifier", {})
    if verifier.get("name", "testinfra") != "testinfra" or verifier.get("enabled") is False:
        raise PipelineError(f"{where}: only an enabled testinfra verifier is supported")
    options = {"connection": "ansible", "p": "no:cacheprovider", **verifier.get("options", {})}
    if "ansible-inventory" not in options:
        raise PipelineError(
            f"{where}: verifier.options has no ansible-inventory (molecule's default is its own "
            "inventory, which this pipeline does not write)"
        )
    env = {str(key): str(value) for key, value in verifier.get("env", {}).items()}
    return tuple(dict2args(options)), env, directory / verifier.get("directory", "tests")


def load_scenario(
    project: Path, name: str, ephemeral: Path, environ: Mapping[str, str] = os.environ
) -> Scenario:
    """molecule/<name>/ as the pipeline runs it; `ephemeral` is its MOLECULE_EPHEMERAL_DIRECTORY."""
    directory = project / "molecule" / name
    molecule_file = directory / "molecule.yml"
    molecule_env = {
        "MOLECULE_PROJECT_DIRECTORY": str(project),
        "MOLECULE_SCENARIO_DIRECTORY": str(directory),
        "MOLECULE_SCENARIO_NAME": name,
        "MOLECULE_EPHEMERAL_DIRECTORY": str(ephemeral),
        "MOLECULE_FILE": str(molecule_file),
    }
    raw = _load_yaml(molecule_file)
    if not isinstance(raw, dict):
        raise PipelineError(f"{molecule_file}: not a mapping")
    config: dict[str, Any] = _interpolated(raw, {**environ, **molecule_env}, str(molecule_file))
    ansible_env, ansible_args = _ansible(config, molecule_file)
    env = {**molecule_env, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), **ansible_env}
    steps = _steps(config, molecule_file)

    named = config.get("ansible", {}).get("playbooks", {})
    playbooks: dict[str, Path] = {}
    for kind in ("converge", *(s for s in ("side_effect", "cleanup") if s in steps)):
        path = (directory / named.get(kind, f"{kind}.yml")).resolve()
        if not path.exists():
            raise PipelineError(f"{molecule_file}: the {kind} playbook {path} does not exist")
        playbooks[kind] = path

    # With a prerequisites.yml, prepare.yml is prerequisites.yml + setup.yml (if any); without
    # one, setup.yml, else the whole of prepare.yml, is the scenario's own reset.
    validate: Path | None = None
    prerequisites: tuple[Stage, ...] = ()
    candidates = [directory / "setup.yml"]
    if (directory / "prerequisites.yml").exists():
        validate, prerequisites = read_prerequisites(project, directory / "prerequisites.yml")
    else:
        candidates.append(directory / named.get("prepare", "prepare.yml"))
    setup = next((path for path in candidates if path.exists()), None)

    verifier_args, verifier_env, tests_dir = _verifier(config, directory, molecule_file)
    tests = tuple(sorted(tests_dir.rglob("test_*.py"))) if tests_dir.is_dir() else ()
    return Scenario(
        name=name,
        directory=directory,
        prerequisites=prerequisites,
        validate=validate,
        setup=setup,
        steps=steps,
        playbooks=playbooks,
        applies=tuple(applied_stages(project, playbooks["converge"])),
        ansible_args=ansible_args,
        env=env,
        verifier_args=verifier_args,
        verifier_env={**env, "MOLECULE_VERIFIER_TEST_DIRECTORY": str(tests_dir), **verifier_env},
        tests=tests,
        ephemeral=ephemeral,
    )


def select(names: Sequence[str] | None) -> list[Declared]:
    """The declared scenarios named (all when none), in the declared order."""
    if not names:
        return list(SCENARIOS)
    known = {one.name for one in SCENARIOS}
    unknown = sorted(set(names) - known)
    if unknown:
        raise PipelineError(f"no scenario {unknown} (known: {', '.join(sorted(known))})")
    return [one for one in SCENARIOS if one.name in names]


# --- the idempotence check -------------------------------------------------------------------


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def changed_hosts(output: str) -> dict[str, int] | None:
    """The PLAY RECAP's changed count of every host that changed something; None: no recap."""
    recap = _RECAP.findall(strip_ansi(output))
    if not recap:
        return None
    return {host: int(changed) for host, changed in recap if int(changed)}


def changed_tasks(output: str) -> list[str]:
    """Each task (or handler) that reported a change, as molecule names them: ``[host] => task``."""
    task = "(before any task)"
    found: list[str] = []
    for line in strip_ansi(output).splitlines():
        if match := _TASK.match(line):
            task = match.group("name")
        elif match := _CHANGED.match(line):
            entry = f"[{match.group('host')}] => {task}"
            if entry not in found:
                found.append(entry)
    return found


# --- running ---------------------------------------------------------------------------------


def run_command(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
    """Run `argv`, its output (stderr with stdout) shown as it comes and returned."""
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
    except OSError as err:
        return 127, f"{argv[0]}: {err}\n"
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    return proc.wait(), "".join(lines)


def _playbook_argv(
    scenario: Scenario, playbook: Path, *, check: bool = False, idempotence: bool = False
) -> list[str]:
    """As molecule's provisioner runs it: its options (sorted), the scenario's args, the book."""
    return [
        "ansible-playbook",
        *(["--check"] if check else []),
        "--skip-tags",
        IDEMPOTENCE_SKIP_TAGS if idempotence else SKIP_TAGS,
        *scenario.ansible_args,
        str(playbook),
    ]


def prerequisites_playbook(validate: Path, stages: Iterable[Stage]) -> str:
    """A playbook importing validate.yml, then `stages`."""
    plays = [
        {"name": "Validate the inventory and compute the cluster plan",
         "ansible.builtin.import_playbook": str(validate)},
        *({"name": stage.name or f"The {stage.stage} stage",
           "ansible.builtin.import_playbook": str(stage.path)} for stage in stages),
    ]  # fmt: skip
    header = "# Generated by gx10._dev.role_pipeline: the prerequisite stages not applied yet.\n"
    return "---\n" + header + yaml.safe_dump(plays, sort_keys=False, width=1000)


class Pipeline:
    """The scenarios, run in order against the lab through `run`."""

    def __init__(
        self,
        project: Path,
        scenarios: Sequence[Scenario],
        run: Runner = run_command,
        *,
        environ: Mapping[str, str] = os.environ,
        clock: Clock = time.monotonic,
        out: TextIO | None = None,
    ) -> None:
        self.project = project
        self.scenarios = list(scenarios)
        self.run_command = run
        self.environ = {**environ, "PATH": _tool_path(environ)}
        self.clock = clock
        self.out = out if out is not None else sys.stdout
        self.applied: dict[str, str] = {}  # stage -> what applied it in this run
        self.syntax: StepRecord | None = None
        self.records = [ScenarioRecord(scenario.name) for scenario in self.scenarios]
        self.failure: StepFailed | None = None
        self.seconds = 0.0
        for scenario in self.scenarios[1:]:
            for key in SYNTAX_ENV:
                if scenario.env.get(key) != self.scenarios[0].env.get(key):
                    raise PipelineError(
                        f"{self.scenarios[0].name} and {scenario.name} differ in {key}: the one "
                        "--syntax-check cannot serve both"
                    )

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _exec(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
        self.say(f"$ {shlex.join(argv)}")
        return self.run_command(argv, {**self.environ, **env}, cwd)

    def _timed(
        self,
        record: ScenarioRecord | None,
        step: str,
        action: Callable[[], dict[str, Any] | None],
    ) -> None:
        """Run one step, print its time, record it; a failure (StepFailed) is recorded too."""
        where = record.name if record is not None else "pipeline"
        self.say(f"\n=== {where}: {step}")
        started = self.clock()
        outcome, detail = "failed", {}
        try:
            detail = action() or {}
            outcome = "passed"
        finally:
            seconds = self.clock() - started
            entry = StepRecord(step, seconds, outcome, detail)
            if record is None:
                self.syntax = entry
            else:
                record.steps.append(entry)
            self.say(f"=== {where}: {step} {outcome} in {seconds:.1f} s")

    def _playbook(self, scenario: Scenario, step: str, argv: Sequence[str]) -> str:
        rc, output = self._exec(argv, scenario.env, scenario.directory)
        if rc != 0:
            raise StepFailed(
                scenario.name, step, f"ansible-playbook exited {rc}: {shlex.join(argv)}"
            )
        return output

    def needed(self, scenario: Scenario) -> list[Stage]:
        return [stage for stage in scenario.prerequisites if stage.stage not in self.applied]

    def _prerequisites(self, scenario: Scenario) -> dict[str, Any]:
        stages = self.needed(scenario)
        assert scenario.validate is not None
        path = scenario.ephemeral / "prerequisites.yml"
        path.write_text(prerequisites_playbook(scenario.validate, stages), encoding="utf-8")
        self._playbook(scenario, "prerequisites", _playbook_argv(scenario, path))
        for stage in stages:
            self.applied[stage.stage] = f"{scenario.name} prerequisites"
        return {"stages": [stage.stage for stage in stages]}

    def _setup(self, scenario: Scenario) -> dict[str, Any]:
        assert scenario.setup is not None
        self._playbook(scenario, "setup", _playbook_argv(scenario, scenario.setup))
        return {"playbook": scenario.setup.name}

    def _idempotence(self, scenario: Scenario) -> None:
        converge = scenario.playbooks["converge"]
        argv = _playbook_argv(scenario, converge, idempotence=True)
        output = self._playbook(scenario, "idempotence", argv)
        hosts = changed_hosts(output)
        if hosts is None:
            raise StepFailed(scenario.name, "idempotence", "no PLAY RECAP in the output to judge")
        if hosts:
            tasks = changed_tasks(output) or ["(no task line names it: see the output above)"]
            counts = ", ".join(f"{host} changed={n}" for host, n in sorted(hosts.items()))
            raise StepFailed(
                scenario.name,
                "idempotence",
                f"the second converge changed something ({counts}):\n"
                + "\n".join(f"* {task}" for task in tasks),
            )

    def _verify(self, scenario: Scenario) -> dict[str, Any] | None:
        if not scenario.tests:
            self.say(f"{scenario.name}: no tests in its verifier directory: skipped, as molecule")
            return {"tests": 0}
        argv = ["pytest", *scenario.verifier_args, *map(str, scenario.tests)]
        rc, _ = self._exec(argv, scenario.verifier_env, scenario.directory)
        if rc != 0:
            raise StepFailed(scenario.name, "verify", f"pytest exited {rc}: {shlex.join(argv)}")
        return None

    def _step(self, scenario: Scenario, step: str) -> Callable[[], dict[str, Any] | None]:
        books = scenario.playbooks

        def side_effect() -> None:
            self._playbook(scenario, step, _playbook_argv(scenario, books["side_effect"]))

        def check() -> None:
            self._playbook(scenario, step, _playbook_argv(scenario, books["converge"], check=True))

        def converge() -> dict[str, Any]:
            self._playbook(scenario, step, _playbook_argv(scenario, books["converge"]))
            for stage in scenario.applies:
                self.applied[stage] = f"{scenario.name} converge"
            return {"stages": list(scenario.applies)}

        def cleanup() -> None:
            self._playbook(scenario, step, _playbook_argv(scenario, books["cleanup"]))

        actions: dict[str, Callable[[], dict[str, Any] | None]] = {
            "side_effect": side_effect,
            "check": check,
            "converge": converge,
            "idempotence": lambda: self._idempotence(scenario),
            "verify": lambda: self._verify(scenario),
            "cleanup": cleanup,
        }
        return actions[step]

    def _scenario(self, scenario: Scenario, record: ScenarioRecord) -> None:
        scenario.ephemeral.mkdir(parents=True, exist_ok=True)
        record.outcome = "failed"
        if scenario.prerequisites:
            if self.needed(scenario):
                self._timed(record, "prerequisites", lambda: self._prerequisites(scenario))
            else:
                by = {stage.stage: self.applied[stage.stage] for stage in scenario.prerequisites}
                self.say(
                    f"\n=== {scenario.name}: prerequisites already applied in this run: "
                    + ", ".join(f"{stage} ({what})" for stage, what in by.items())
                )
                record.steps.append(
                    StepRecord("prerequisites", 0.0, "skipped", {"stages": [], "applied_by": by})
                )
        if scenario.setup is not None:
            self._timed(record, "setup", lambda: self._setup(scenario))
        for step in scenario.steps:
            self._timed(record, step, self._step(scenario, step))
        record.outcome = "passed"

    def _syntax(self) -> None:
        """One --syntax-check over every converge playbook, with the arguments all the
        scenarios pass (the inventory; extra variables change no syntax)."""
        first = self.scenarios[0]
        common = [arg for arg in first.ansible_args
                  if all(arg in scenario.ansible_args for scenario in self.scenarios)]  # fmt: skip
        env = {key: first.env[key] for key in SYNTAX_ENV if key in first.env}
        env["MOLECULE_PROJECT_DIRECTORY"] = str(self.project)
        argv = ["ansible-playbook", "--syntax-check", *common]
        argv += [str(scenario.playbooks["converge"]) for scenario in self.scenarios]
        rc, _ = self._exec(argv, env, self.project)
        if rc != 0:
            raise StepFailed("pipeline", "syntax", f"ansible-playbook --syntax-check exited {rc}")

    def run(self) -> int:
        """Every scenario in order; 0 when all passed, 1 at the first failed step."""
        started = self.clock()
        try:
            if self.scenarios:
                self._timed(None, "syntax", self._syntax)
            for scenario, record in zip(self.scenarios, self.records, strict=True):
                self._scenario(scenario, record)
        except StepFailed as failed:
            self.failure = failed
        finally:
            self.seconds = self.clock() - started
        self.say("")
        self.say(self.summary())
        if self.failure is not None:
            self.say(
                f"\nrole pipeline FAILED: scenario {self.failure.scenario}, step "
                f"{self.failure.step}: {self.failure.message}"
            )
            return 1
        self.say(f"\nrole pipeline passed: {len(self.scenarios)} scenario(s)")
        return 0

    def summary(self) -> str:
        """A table of each scenario's step seconds."""
        headers = ("scenario", *COLUMNS, "total s", "outcome")
        rows = []
        if self.syntax is not None:
            cells = ["-"] * len(COLUMNS)
            rows.append(("(syntax)", *cells, f"{self.syntax.seconds:.1f}", self.syntax.outcome))
        for record in self.records:
            steps = {step.step: step for step in record.steps}
            cells = [_cell(steps.get(column)) for column in COLUMNS]
            total = f"{record.seconds:.1f}" if record.steps else "-"
            rows.append((record.name, *cells, total, record.outcome))
        rows.append(("total", *["" for _ in COLUMNS], f"{self.seconds:.1f}", ""))
        widths = [max(len(str(row[i])) for row in (headers, *rows)) for i in range(len(headers))]
        lines = [
            "  ".join(
                str(cell).ljust(width) if i in (0, len(headers) - 1) else str(cell).rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in (headers, *rows)
        ]
        return "\n".join(["Role pipeline (seconds; ! failed, skip: nothing to run)", *lines])

    def as_json(self) -> dict[str, Any]:
        failure = self.failure
        return {
            "stage": "molecule",
            "seconds": round(self.seconds, 3),
            "outcome": "passed" if failure is None else "failed",
            "failed": None
            if failure is None
            else {"scenario": failure.scenario, "step": failure.step, "message": failure.message},
            "syntax": None if self.syntax is None else self.syntax.as_json(),
            "scenarios": [record.as_json() for record in self.records],
        }


def _cell(step: StepRecord | None) -> str:
    """A step's cell in the summary: - not in the scenario, skip, seconds (! failed)."""
    if step is None:
        return "-"
    if step.outcome == "skipped":
        return "skip"
    return f"{step.seconds:.1f}" + ("!" if step.outcome == "failed" else "")


# --- the command -----------------------------------------------------------------------------


def describe(scenarios: Sequence[Scenario], declared: Sequence[Declared]) -> str:
    """What the pipeline will run, scenario by scenario, if every step passes."""
    applied: dict[str, str] = {}
    lines = []
    for one, scenario in zip(declared, scenarios, strict=True):
        lines.append(f"{scenario.name} (stage {one.stage}, role {one.role})")
        run = [stage.stage for stage in scenario.prerequisites if stage.stage not in applied]
        done = [
            f"{stage.stage} ({applied[stage.stage]})"
            for stage in scenario.prerequisites
            if stage.stage in applied
        ]
        if not scenario.prerequisites:
            text = "-"
        else:
            text = "run " + ", ".join(["validate", *run]) if run else "none to run"
        if done:
            text += "; applied already: " + ", ".join(done)
        lines.append(f"  prerequisites: {text}")
        for stage in run:
            applied[stage] = f"{scenario.name} prerequisites"
        lines.append(f"  setup: {scenario.setup.name if scenario.setup else '-'}")
        lines.append(f"  steps: {', '.join(scenario.steps)}")
        lines.append(f"  converge applies: {', '.join(scenario.applies) or '-'}")
        if "converge" in scenario.steps:
            for stage in scenario.applies:
                applied[stage] = f"{scenario.name} converge"
    return "\n".join(lines)


def write_timing(pipeline: Pipeline, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TIMING_FILE
    path.write_text(json.dumps(pipeline.as_json(), indent=1) + "\n", encoding="utf-8")
    return path


def main(
    argv: Sequence[str] | None = None,
    run: Runner = run_command,
    environ: Mapping[str, str] | None = None,
    project: Path | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gx10._dev.role_pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        choices=[one.name for one in SCENARIOS],
        help="run this scenario (repeatable; in the pipeline's order, each with its prerequisites)",
    )
    parser.add_argument("--list", action="store_true", help="print what would run, run nothing")
    parser.add_argument(
        "--project", type=Path, default=None, help="the project's root (default: the cwd)"
    )
    args = parser.parse_args(argv)
    environ = dict(os.environ) if environ is None else dict(environ)
    root = (args.project or project or Path.cwd()).resolve()
    if not (root / "molecule").is_dir() or not (root / "playbooks" / "site.yml").is_file():
        print(
            f"role_pipeline: {root} is not gx10's project root (molecule/, playbooks/site.yml)",
            file=sys.stderr,
        )
        return 2
    declared = select(args.scenario)
    ephemeral = Path(tempfile.mkdtemp(prefix="gx10-role-pipeline-"))
    try:
        scenarios = [
            load_scenario(root, one.name, ephemeral / one.name, environ) for one in declared
        ]
        if args.list:
            print(describe(scenarios, declared))
            return 0
        pipeline = Pipeline(root, scenarios, run=run, environ=environ)
        try:
            rc = pipeline.run()
        finally:
            timing = environ.get(TIMING_DIR_ENV)
            if timing:
                print(f"timing: {write_timing(pipeline, Path(timing))}")
        return rc
    except PipelineError as err:
        print(f"role_pipeline: {err}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(ephemeral, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
