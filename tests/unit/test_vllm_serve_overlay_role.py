# SPDX-License-Identifier: Apache-2.0
"""The vllm_serve role's overlay tasks through real ansible-playbook, on localhost, with a fake
`docker` client first on PATH (the collection's tests/unit/fake_docker.py; never the real one).

tasks/overlay.yml (the plan: check the replacements, hash the image's own files, place the
replacements, remove unused ones) and tasks/overlay_verify.yml (after the start: every rank
runs the replacements), in the house sequence: check mode, converge, converge again.
"""

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
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.tests.unit import fake_docker  # noqa: E402
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
    two_node_inventory,
)

pytestmark = [
    pytest.mark.heavy,  # long tests: make unit hands this file out first
    pytest.mark.skipif(
        not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
    ),
]

IMAGE = "gx10-registry:5000/anemll/dspark-vllm-gx10@sha256:" + "d" * 64
TARGET = "/usr/local/lib/gx10-sim/vllm_sim/deepseek_v4_encoding.py"
BASE_TEXT = "# the image's encoding\n"
FIX_TEXT = "# the image's encoding\n# and the fix\n"
BASE, FIX = fake_docker.sha256(BASE_TEXT), fake_docker.sha256(FIX_TEXT)

PLAYBOOK = """
- name: The serve role's overlay steps on one node
  hosts: gx10-a
  gather_facts: false
  tasks:
    - name: Plan (check the replacements and the image, place the files)
      ansible.builtin.include_role:
        name: vllm_serve
        tasks_from: overlay.yml

    - name: After the start, every rank runs the replacements
      ansible.builtin.include_role:
        name: vllm_serve
        tasks_from: overlay_verify.yml
      vars:
        __vllm_serve_overlay_ranks: [gx10-a]
      when: verify | default(false) | bool
"""


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node with the image (its own file at TARGET) and a rank container running the fix."""
    bin_dir = fake_docker.install(
        tmp_path,
        {
            "images": {IMAGE: {TARGET: BASE_TEXT}},
            "containers": {"gx10-vllm": {"files": {TARGET: FIX_TEXT}, "mounts": []}},
        },
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("docker") == str(bin_dir / "docker")  # never the real client
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "fix.py").write_text(FIX_TEXT)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    return tmp_path


def overlay(tmp_path: Path, **changes: Any) -> list[dict[str, Any]]:
    return [
        {
            "path": TARGET,
            "source": str(tmp_path / "files" / "fix.py"),
            "base_sha256": BASE,
            "sha256": FIX,
            "why": "test equipment: the lab's encoding with a marker line",
            **changes,
        }
    ]


def run(tmp_path: Path, *args: str, **role_vars: Any) -> subprocess.CompletedProcess[str]:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "vllm_serve_image": IMAGE,
        "vllm_serve_model_dir": "/srv/models/DeepSeek-V4-Flash-0731",
        "vllm_serve_overlay_dir": str(tmp_path / "overlay"),
        **role_vars,
    }
    inventory = {"all": {"hosts": {"gx10-a": host}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", *args, timeout=180
    )


def changed(output: str) -> int:
    match = re.search(r"^gx10-a\s*:.*changed=(\d+)", output, re.MULTILINE)
    assert match, output
    return int(match.group(1))


def test_check_converge_idempotent_and_verified(node: Path) -> None:
    files = overlay(node)
    check = run(node, "--check", vllm_serve_overlay=files)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not (node / "overlay").exists()
    # The image's own files were hashed in check mode too, never pulled.
    sums = [c for c in fake_docker.calls(node) if c[:1] == ["run"]]
    assert sums
    assert sums[0][:5] == ["run", "--rm", "--pull", "never", "--network"]

    first = run(node, "-e", "verify=true", vllm_serve_overlay=files)
    assert first.returncode == 0, first.stdout + first.stderr
    placed = node / "overlay" / f"{FIX}-deepseek_v4_encoding.py"
    assert placed.read_text() == FIX_TEXT
    assert placed.stat().st_mode & 0o777 == 0o644
    assert ["exec", "--user", "0:0", "gx10-vllm", "sha256sum", "--", TARGET] in fake_docker.calls(
        node
    )

    second = run(node, "-e", "verify=true", vllm_serve_overlay=files)
    assert second.returncode == 0, second.stdout + second.stderr
    assert changed(second.stdout) == 0


def test_an_image_it_was_not_reviewed_for_is_refused_before_anything_is_placed(
    node: Path,
) -> None:
    fake_docker.update(node, images={IMAGE: {TARGET: "# a newer image's encoding\n"}})
    newer = fake_docker.sha256("# a newer image's encoding\n")
    refused = run(node, vllm_serve_overlay=overlay(node))
    assert refused.returncode != 0
    assert f"gx10-a: the image {IMAGE} has {TARGET} with sha256 {newer}" in refused.stdout
    assert f"reviewed against base_sha256 {BASE}" in refused.stdout
    assert "review the overlay for this image" in refused.stdout
    assert not (node / "overlay").exists()


def test_a_bad_replacement_is_refused_on_the_controller(node: Path) -> None:
    (node / "files" / "fix.py").write_text(FIX_TEXT + "# edited\n")
    refused = run(node, vllm_serve_overlay=overlay(node))
    assert refused.returncode != 0
    assert "serve overlay failed on gx10-a" in refused.stdout
    assert "runtime fixes (vllm_serve_overlay)" in refused.stdout
    assert "the file is not the one reviewed" in refused.stdout
    assert not [c for c in fake_docker.calls(node) if c[:1] == ["run"]]
    assert not (node / "overlay").exists()
    (node / "files" / "fix.py").write_text(FIX_TEXT)
    nowhere = run(node, vllm_serve_overlay=overlay(node), vllm_serve_overlay_dir="overlay")
    assert nowhere.returncode != 0
    assert "directory of replacement files (vllm_serve_overlay_dir): found overlay" in (
        nowhere.stdout
    )


def test_a_rank_without_the_replacement_fails_naming_node_path_and_hash(node: Path) -> None:
    fake_docker.update(node, containers={"gx10-vllm": {"files": {TARGET: BASE_TEXT}, "mounts": []}})
    failed = run(node, "-e", "verify=true", vllm_serve_overlay=overlay(node))
    assert failed.returncode != 0
    assert f"gx10-a: the rank gx10-vllm sees {TARGET} with sha256 {BASE}" in failed.stdout
    assert f"not the replacement's {FIX}" in failed.stdout


def test_unused_replacements_go_unless_the_running_rank_mounts_them(node: Path) -> None:
    first = run(node, vllm_serve_overlay=overlay(node))
    assert first.returncode == 0, first.stdout + first.stderr
    old = node / "overlay" / f"{FIX}-deepseek_v4_encoding.py"
    # A new replacement, while the rank still runs with the old one mounted: both stay.
    newer_text = FIX_TEXT + "# and a later fix\n"
    (node / "files" / "newer.py").write_text(newer_text)
    newer = fake_docker.sha256(newer_text)
    files = overlay(node, source=str(node / "files" / "newer.py"), sha256=newer)
    fake_docker.update(
        node, containers={"gx10-vllm": {"files": {TARGET: FIX_TEXT}, "mounts": [str(old)]}}
    )
    second = run(node, vllm_serve_overlay=files)
    assert second.returncode == 0, second.stdout + second.stderr
    assert old.exists()
    assert (node / "overlay" / f"{newer}-deepseek_v4_encoding.py").read_text() == newer_text
    # Once the rank runs the new one, the old file goes; with no overlay, every file goes.
    fake_docker.update(node, containers={"gx10-vllm": {"files": {}, "mounts": []}})
    third = run(node, vllm_serve_overlay=files)
    assert third.returncode == 0, third.stdout + third.stderr
    assert not old.exists()
    emptied = run(node, vllm_serve_overlay=[])
    assert emptied.returncode == 0, emptied.stdout + emptied.stderr
    assert list((node / "overlay").iterdir()) == []


VALIDATE = f"""
- name: Validate the inventory and compute the cluster plan
  ansible.builtin.import_playbook: {ROOT}/playbooks/validate.yml
"""


def test_the_validate_stage_checks_the_overlay_from_the_inventory_and_extra_vars(
    tmp_path: Path,
) -> None:
    """The replacement named as the inventory names it (under its inventory_dir), then the
    same overlay given as extra vars (as the e2e test does) with a replacement edited since."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "fix.py").write_text(FIX_TEXT)
    entry = {
        "path": TARGET,
        "source": "{{ inventory_dir }}/files/fix.py",
        "base_sha256": BASE,
        "sha256": FIX,
        "why": "test equipment",
    }
    data = two_node_inventory({}, {}, {"vllm_serve_overlay": [entry]})
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(data))
    (tmp_path / "play.yml").write_text(VALIDATE)
    good = run_ansible_playbook(tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml",
                                timeout=120)  # fmt: skip
    assert good.returncode == 0, good.stdout + good.stderr
    assert "failed=0" in good.stdout  # the template resolved to the file, which matched

    (tmp_path / "files" / "fix.py").write_text(FIX_TEXT + "# edited\n")
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"vllm_serve_overlay": [
        {**entry, "source": str(tmp_path / "files" / "fix.py")}
    ]}))  # fmt: skip
    refused = run_ansible_playbook(tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml",
                                   "-e", f"@{extra}", timeout=120)  # fmt: skip
    assert refused.returncode != 0
    assert "Inventory validation failed (1 problem):" in refused.stdout
    assert f"vllm_serve_overlay[0] (path {TARGET}).source {tmp_path}/files/fix.py has" in (
        refused.stdout
    )
