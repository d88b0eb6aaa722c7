"""The playbook layout: site.yml validates once and runs every stage once; each stage playbook
runs alone, validating first. Read from the YAML (import_playbook chains), then checked with
`ansible-playbook --list-tasks` against the lab inventory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
STAGES = PLAYBOOKS / "stages"
VALIDATE = PLAYBOOKS / "validate.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
STAGE_NAMES = (
    "preflight",
    "network",
    "nccl",
    "fabric",
    "model",
    "clock",
    "metrics",
    "image",
    "serve",
    "smoke",
)


def imports(playbook: Path) -> list[Path]:
    """The playbooks `playbook` imports, directly, in order (paths as Ansible resolves them)."""
    plays = yaml.safe_load(playbook.read_text()) or []
    found = []
    for play in plays:
        target = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
        if target:
            found.append((playbook.parent / target).resolve())
    return found


def reached(playbook: Path) -> list[Path]:
    """Every playbook file a run of `playbook` goes through, in order, repeats kept."""
    order = [playbook.resolve()]
    for child in imports(playbook):
        order.extend(reached(child))
    return order


def plays_of(playbook: Path) -> list[dict]:
    return [play for play in yaml.safe_load(playbook.read_text()) or [] if "hosts" in play]


def test_every_stage_has_its_content_file_and_a_playbook() -> None:
    assert sorted(p.stem for p in STAGES.glob("*.yml")) == sorted(STAGE_NAMES)
    for stage in STAGE_NAMES:
        assert (PLAYBOOKS / f"{stage}.yml").is_file(), stage
        # Stage content only: no validation inside, so site.yml can validate once.
        assert imports(STAGES / f"{stage}.yml") == [], stage
        assert plays_of(STAGES / f"{stage}.yml"), stage


def test_site_validates_once_and_runs_every_stage_once_in_order() -> None:
    order = reached(PLAYBOOKS / "site.yml")
    counts = Counter(order)
    assert counts[VALIDATE.resolve()] == 1, order
    assert order[1] == VALIDATE.resolve(), "site.yml must validate before any stage"
    stages = [p for p in order if p.parent == STAGES.resolve()]
    assert [p.stem for p in stages] == list(STAGE_NAMES)
    # site.yml goes through no stage playbook (each of those validates again).
    assert not [p for p in order if p.parent == PLAYBOOKS.resolve() and p.stem in STAGE_NAMES]


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_each_stage_playbook_validates_first_then_runs_its_stage(stage: str) -> None:
    order = reached(PLAYBOOKS / f"{stage}.yml")
    assert order[1] == VALIDATE.resolve(), order
    assert Counter(order)[VALIDATE.resolve()] == 1, order
    assert (STAGES / f"{stage}.yml").resolve() in order, order
    # The serve stage needs the image stage's pinned reference: it brings it.
    expected = ["image", "serve"] if stage == "serve" else [stage]
    assert [p.stem for p in order if p.parent == STAGES.resolve()] == expected


def roles_used(playbook: Path) -> set[str]:
    """Roles a playbook file applies (``roles:``, include_role, import_role), not its imports."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "roles" and isinstance(value, list):
                    found.update(r if isinstance(r, str) else r["role"] for r in value)
                elif key.endswith(("include_role", "import_role")) and isinstance(value, dict):
                    found.add(value["name"])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load(playbook.read_text()))
    return found


def reads_the_plan(role: str) -> bool:
    """The role's defaults, vars or tasks read gx10_plan."""
    files = [
        *(ROOT / "roles" / role).glob("defaults/*.yml"),
        *(ROOT / "roles" / role).glob("vars/*.yml"),
        *(ROOT / "roles" / role).glob("tasks/*.yml"),
    ]
    return any("gx10_plan" in path.read_text() for path in files)


def test_the_model_dir_roles_read_the_plan() -> None:
    """Their default checkpoint directory is the plan's (gx10_plan.model_dir)."""
    for role, variable in (
        ("preflight", "preflight_model_dir"),
        ("model_sync", "model_sync_dir"),
        ("vllm_serve", "vllm_serve_model_dir"),
    ):
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        assert defaults[variable] == "{{ gx10_plan.model_dir }}", (role, defaults[variable])
        assert reads_the_plan(role), role


@pytest.mark.parametrize(
    "playbook",
    sorted(p.name for p in PLAYBOOKS.glob("*.yml") if p.name != "validate.yml"),
)
def test_every_playbook_that_needs_the_plan_validates_first(playbook: str) -> None:
    order = reached(PLAYBOOKS / playbook)
    needs = sorted(
        {role for path in order for role in roles_used(path) if reads_the_plan(role)}
        | {path.name for path in order if "gx10_plan" in path.read_text()}
    )
    if needs:
        # order[0] is the playbook itself; the first import must be validate.yml.
        assert order[1:2] == [VALIDATE.resolve()], (
            f"{playbook} uses {', '.join(needs)}, which read gx10_plan: import validate.yml first"
        )


def test_stage_plays_keep_their_tags() -> None:
    for stage in STAGE_NAMES:
        for play in plays_of(STAGES / f"{stage}.yml"):
            assert stage in play.get("tags", []), (stage, play.get("name"))
    (validate,) = plays_of(VALIDATE)
    assert validate["tags"] == ["always"]


def test_skipped_hosts_are_not_displayed() -> None:
    cfg = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^display_skipped_hosts\s*=\s*false\s*$", cfg, re.M), cfg


def list_tasks(*args: str) -> str:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(ROOT / "inventories" / "lab"), "--list-tasks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def play_names(listing: str) -> list[str]:
    # "  play #1 (localhost): Validate the inventory\tTAGS: [always]"
    pattern = r"^\s*play #\d+ \([^)]*\): ([^\t\n]*)"
    return [m.group(1).strip() for m in re.finditer(pattern, listing, re.M)]


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook in the venv")
def test_ansible_lists_one_validate_play_for_site_and_tags_select_stages() -> None:
    listing = list_tasks(str(PLAYBOOKS / "site.yml"), "--tags", "network")
    names = play_names(listing)
    assert names.count("Validate the inventory") == 1, names
    assert names[0] == "Validate the inventory", names
    # Every stage's plays are listed (tags filter tasks, not plays) ...
    assert "Configure the rails on every node" in names, names
    assert "Preflight every node" in names, names
    # ... but with --tags network only the validate and network tasks are selected.
    assert "rail_network : Write the rails netplan file" in listing, listing
    # (A role's argument validation is tagged always: it is listed for every role.)
    assert not re.search(r"preflight : (?!Validating arguments)", listing), listing
    assert "Check the bench variables" not in listing
