"""The end-to-end files bring the lab up and converge it only through the shared fixtures.

A bring-up or a site.yml converge is where the suite's time goes (docs/PERFORMANCE.md, "Test
suite budget"), so only tests/e2e/conftest.py does them, once for every file that can share them
(issue 24). Read from each tests/e2e/test_*.py with `ast`, nothing run:

- no call of gx10.lab's bring-up or reshape (`lab.up`, `lab.down`, `lab.ensure_rails`);
- no `provision(..., "site.yml")` (the default playbook too) in a pytest fixture, directly or
  through a helper of the same module;
- a test or helper that runs site.yml itself, because site.yml is the behaviour under test (a
  re-apply, a refusal), is listed in ALLOWED_SITE_RUNS with the reason.

Both lists can only shrink: an entry whose call is gone fails too, so it is removed with it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / "tests" / "e2e"
LAB_RESHAPE = frozenset({"up", "down", "ensure_rails"})  # gx10.lab's names that (re)build the lab
SITE = "site.yml"

# (file, function, what): what is "lab.<name>" or "site.yml" (a fixture's run), and why it is not
# one of conftest's shared fixtures. The list can only shrink: a stale entry fails too.
KNOWN_VIOLATIONS: dict[tuple[str, str, str], str] = {
    ("test_lab.py", "test_down_leaves_nothing_and_up_is_idempotent", "lab.down"): (
        "the lab's own life cycle is the test (the last file of the run)"
    ),
    ("test_lab.py", "test_down_leaves_nothing_and_up_is_idempotent", "lab.up"): (
        "the lab's own life cycle is the test (the last file of the run)"
    ),
    ("test_lab.py", "test_status_reports_a_missing_cable", "lab.up"): (
        "`lab up` recabling a cut cable is the test"
    ),
    ("test_model.py", "converged_after", SITE): (
        "a restore, not a converge: the model stage alone (--tags model), and only after a test "
        "that left a copy changed"
    ),
}

# (file, function): why this test (or helper) runs site.yml itself.
ALLOWED_SITE_RUNS: dict[tuple[str, str], str] = {
    ("test_site.py", "test_check_mode_runs_clean"): "site.yml in check mode is the test",
    ("test_site.py", "test_preflight_names_node_value_and_fix"): (
        "preflight's refusal of a memory floor no node meets, run as site.yml runs it"
    ),
    ("test_network.py", "test_bad_plan_fails_clearly_and_changes_nothing"): (
        "site.yml on a copy of the inventory with a bad rail plan: refused, nodes unchanged"
    ),
    ("test_network.py", "test_preflight_reports_a_rail_without_carrier"): (
        "site.yml with a rail pulled down: preflight names the rail on both ends"
    ),
    ("test_network.py", "test_unreachable_peer_names_the_rail_and_both_ends"): (
        "site.yml --tags network with ICMP dropped on rail1: the verify step names it"
    ),
    ("test_network.py", "test_node_replaced_by_a_fresh_machine_converges_on_re_apply"): (
        "the re-apply after a node is replaced by a bare one (a hardware swap) is the test, and "
        "the run after it is the suite's site.yml changed=0 check"
    ),
    ("test_model.py", "_model"): (
        "site.yml --tags model is the stage under test: each test injects a fault and runs it"
    ),
    ("test_serve.py", "test_every_missing_input_is_named_before_any_restart"): (
        "site.yml --tags model repairs the corrupted shard the refusal was tested on"
    ),
    ("test_switch.py", "test_reapply_changes_nothing"): (
        "the four-node re-apply's changed=0, no rank restarted, is the test"
    ),
    ("test_engine.py", "test_a_re_apply_changes_nothing"): (
        "the real engine's re-apply: changed=0, no rank restarted, is the test"
    ),
}


@dataclass(frozen=True, slots=True)
class Found:
    file: str
    function: str
    what: str  # "lab.up", ..., or SITE
    line: int
    call: str
    via: str | None = None  # the module's helper that runs site.yml

    def __str__(self) -> str:
        how = f"calls {self.call}" + (f", which runs {SITE}" if self.via else "")
        return f"tests/e2e/{self.file}:{self.line}: {self.function}() {how}"


def _is_fixture(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
            isinstance(target, ast.Name) and target.id == "fixture"
        ):
            return True
    return False


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _params(node: ast.AST) -> list[str]:
    if not isinstance(node, ast.FunctionDef):
        return []
    return [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]


def _default(node: ast.FunctionDef, param: str) -> ast.expr | None:
    """The default of a parameter, if it has one."""
    positional = [*node.args.posonlyargs, *node.args.args]
    defaults = dict(zip([a.arg for a in positional][::-1], node.args.defaults[::-1], strict=False))
    defaults |= {
        a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d
    }
    return defaults.get(param)


class Module:
    """One e2e file: its top-level functions, and which of them run site.yml, and how."""

    def __init__(self, path: Path) -> None:
        self.file = path.name
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.functions = {
            node.name: node for node in self.tree.body if isinstance(node, ast.FunctionDef)
        }
        # Names bound to gx10.lab's reshaping functions by `from gx10.lab import up as ...`.
        self.lab_names = {
            alias.asname or alias.name: alias.name
            for node in ast.walk(self.tree)
            if isinstance(node, ast.ImportFrom) and node.module in ("gx10.lab", "gx10.lab.manager")
            for alias in node.names
            if alias.name in LAB_RESHAPE
        }
        self.forwards: dict[str, str] = {}  # helper -> its parameter that is provision's playbook
        self.site: dict[str, list[Found]] = {}  # function -> its site.yml runs
        self._resolve()

    def _scopes(self) -> Iterator[tuple[str, ast.AST]]:
        """Each top-level function, and the module's own statements as "<module>"."""
        yield from self.functions.items()
        others = [node for node in self.tree.body if not isinstance(node, ast.FunctionDef)]
        yield "<module>", ast.Module(body=others, type_ignores=[])

    def _playbook(self, call: ast.Call) -> ast.expr | None:
        """What a call of provision() or of a helper forwarding its playbook runs (else None)."""
        callee = _callee(call)
        if callee == "provision":
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                return None  # *args or **kwargs: not known here
            return _argument(call, 1, "playbook") or ast.Constant(SITE)  # provision's default
        if isinstance(call.func, ast.Name) and callee in self.forwards:
            helper, param = self.functions[callee], self.forwards[callee]
            params = [a.arg for a in (*helper.args.posonlyargs, *helper.args.args)]
            position = params.index(param) if param in params else len(call.args)
            return _argument(call, position, param) or _default(helper, param)
        return None

    def _resolve(self) -> None:
        """Until nothing changes: a helper whose playbook argument is its own parameter forwards
        it; a call of provision() or a forwarder with site.yml, or of a helper that runs it,
        runs site.yml."""
        changed = True
        while changed:
            changed = False
            for name, scope in self._scopes():
                found: list[Found] = []
                for call in (n for n in ast.walk(scope) if isinstance(n, ast.Call)):
                    callee = _callee(call)
                    playbook = self._playbook(call)
                    if isinstance(playbook, ast.Name) and playbook.id in _params(scope):
                        if name not in self.forwards:
                            self.forwards[name] = playbook.id
                            changed = True
                    elif (
                        isinstance(playbook, ast.Constant)
                        and Path(str(playbook.value)).name == SITE
                    ):
                        found.append(Found(self.file, name, SITE, call.lineno, f"{callee}({SITE})"))
                    elif isinstance(call.func, ast.Name) and callee in self.site and callee != name:
                        found.append(
                            Found(self.file, name, SITE, call.lineno, f"{callee}()", via=callee)
                        )
                if found and self.site.get(name) != found:
                    self.site[name] = found
                    changed = True

    def lab_reshapes(self) -> Iterator[Found]:
        for name, scope in self._scopes():
            for call in (n for n in ast.walk(scope) if isinstance(n, ast.Call)):
                func, what = call.func, None
                if isinstance(func, ast.Attribute) and func.attr in LAB_RESHAPE:
                    owner = func.value
                    if (isinstance(owner, ast.Name) and owner.id == "lab") or (
                        isinstance(owner, ast.Attribute) and owner.attr == "lab"
                    ):
                        what = f"lab.{func.attr}"
                elif isinstance(func, ast.Name) and func.id in self.lab_names:
                    what = f"lab.{self.lab_names[func.id]}"
                if what:
                    yield Found(self.file, name, what, call.lineno, f"{what}()")

    def _is_fixture(self, name: str) -> bool:
        return name in self.functions and _is_fixture(self.functions[name])

    def fixture_converges(self) -> Iterator[Found]:
        for name, found in self.site.items():
            if self._is_fixture(name):
                yield from found

    def own_site_runs(self) -> Iterator[Found]:
        """site.yml run by a test or helper itself (not through another helper)."""
        for name, found in self.site.items():
            if not self._is_fixture(name):
                yield from (f for f in found if f.via is None)


def _modules() -> list[Module]:
    return [Module(path) for path in sorted(E2E.glob("test_*.py"))]


def _violations() -> dict[tuple[str, str, str], list[Found]]:
    found: dict[tuple[str, str, str], list[Found]] = {}
    for module in _modules():
        for one in [*module.lab_reshapes(), *module.fixture_converges()]:
            found.setdefault((one.file, one.function, one.what), []).append(one)
    return found


def test_no_e2e_module_brings_the_lab_up_or_converges_it_in_a_fixture() -> None:
    found = _violations()
    new = [str(f) for key, fs in sorted(found.items()) if key not in KNOWN_VIOLATIONS for f in fs]
    assert not new, (
        "use the shared fixtures of tests/e2e/conftest.py (lab_up, serving_lab) instead:\n"
        + "\n".join(new)
    )


def test_the_known_violations_still_occur() -> None:
    """The list only shrinks: an entry fixed in its file goes from here too."""
    stale = sorted(set(KNOWN_VIOLATIONS) - set(_violations()))
    assert not stale, f"no longer in tests/e2e, remove from KNOWN_VIOLATIONS: {stale}"


def test_every_site_yml_run_in_a_test_is_listed_with_its_reason() -> None:
    runs: dict[tuple[str, str], list[Found]] = {}
    for module in _modules():
        for one in module.own_site_runs():
            runs.setdefault((one.file, one.function), []).append(one)
    unlisted = [
        str(f) for key, fs in sorted(runs.items()) if key not in ALLOWED_SITE_RUNS for f in fs
    ]
    assert not unlisted, (
        f"a test that runs {SITE} itself: use a shared fixture, or add it to ALLOWED_SITE_RUNS "
        "with the reason site.yml is the behaviour under test:\n" + "\n".join(unlisted)
    )
    stale = sorted(set(ALLOWED_SITE_RUNS) - set(runs))
    assert not stale, f"no {SITE} run left in these, remove from ALLOWED_SITE_RUNS: {stale}"


def _module_of(source: str, tmp_path: Path) -> Module:
    path = tmp_path / "test_demo.py"
    path.write_text(source, encoding="utf-8")
    return Module(path)


def test_the_checks_see_through_helpers_defaults_and_aliases(tmp_path: Path) -> None:
    module = _module_of(
        """
import pytest
from gx10 import lab, provision
from gx10.lab import down as teardown

def _run(playbook, **extravars):
    return provision(INVENTORY, playbook, extravars=extravars)

def _converge():
    return _run("playbooks/site.yml")

@pytest.fixture(scope="module")
def via_helper():
    return _converge()

@pytest.fixture
def by_default():
    provision(INVENTORY)

@pytest.fixture
def by_keyword():
    provision(INVENTORY, playbook="site.yml", tags=["model"])

def _start(*, playbook="site.yml"):
    provision(INVENTORY, playbook)

@pytest.fixture
def other_playbook():
    provision(INVENTORY, "serve.yml")
    _run("stop.yml")
    _start(playbook="serve.yml")
    provision(*ARGS)

@pytest.fixture
def forwarded_default():
    _start()

def test_reshape():
    lab.up(lab.LabConfig.sized(4))
    teardown()
    lab.reboot("gx10-b")

def test_reapply():
    _run("site.yml")
""",
        tmp_path,
    )
    fixtures = {f.function for f in module.fixture_converges()}
    assert fixtures == {"via_helper", "by_default", "by_keyword", "forwarded_default"}
    assert {(f.function, f.what) for f in module.lab_reshapes()} == {
        ("test_reshape", "lab.up"),
        ("test_reshape", "lab.down"),
    }
    assert {(f.function, f.call) for f in module.own_site_runs()} == {
        ("_converge", "_run(site.yml)"),
        ("test_reapply", "_run(site.yml)"),
    }


def test_every_e2e_file_has_its_place_in_the_run() -> None:
    """conftest orders the files (the shared converge's files, then the real engine's own
    converge of the two nodes, the reshape, then the lab's own down and up); a file it does not
    name would run wherever collection put it."""
    tree = ast.parse((REPO / "tests" / "e2e" / "conftest.py").read_text())
    tuples = {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    order = tuples["SHARED_CONVERGE"] + tuples["LAST"]
    files = sorted(path.name for path in (REPO / "tests" / "e2e").glob("test_*.py"))
    assert sorted(order) == files
    assert len(set(order)) == len(order)
    assert tuples["LAST"] == ("test_engine.py", "test_switch.py", "test_lab.py")
