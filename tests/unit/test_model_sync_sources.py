# SPDX-License-Identifier: Apache-2.0
"""roles/model_sync with each source type, through real ansible-playbook on localhost.

The head's part of the stage (plan on the controller, then fetch.yml) on one local node: a
directory source lands verified; a hub source naming another revision than the manifest's is
refused on the controller before the node is touched, its token never shown; an unset source
is refused on the head with an example of each type.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gx10.model.manifest import Manifest, ManifestFile, save_manifest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    REPO_ROOT,
    run_ansible_playbook,
    two_node_inventory,
)

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists() or not (REPO_ROOT / "ansible.cfg").exists(),
    reason="needs ansible-playbook next to the test interpreter and the repository ansible.cfg",
)

REPO = "acme/tiny"
REV = "0123456789abcdef0123456789abcdef01234567"
OTHER_REV = "fedcba9876543210fedcba9876543210fedcba98"
TOKEN = "hf_s3cretROLEtoken0123456789"

PLAYBOOK = """
- name: The head's part of the model stage
  hosts: head
  gather_facts: false
  tasks:
    - name: Plan on the controller
      ansible.builtin.include_role:
        name: model_sync
        tasks_from: plan.yml

    - name: Fetch on the head
      ansible.builtin.include_role:
        name: model_sync
        tasks_from: fetch.yml
"""


def _checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A two-file checkpoint in `nas/` and its manifest."""
    root = tmp_path / "nas"
    root.mkdir()
    config = b'{"model_type": "tiny"}'
    shard = os.urandom(200_000)
    (root / "config.json").write_bytes(config)
    (root / "model.safetensors").write_bytes(shard)
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()
    files = (
        ManifestFile("config.json", len(config), "git", git_sha1),
        ManifestFile("model.safetensors", len(shard), "lfs", hashlib.sha256(shard).hexdigest()),
    )
    manifest = tmp_path / "manifest.yml"
    save_manifest(Manifest(REPO, REV, files), manifest, source="the test")
    return root, manifest


def _run(tmp_path: Path, manifest: Path, source: Any) -> subprocess.CompletedProcess[str]:
    cluster_vars = {
        "gx10_plan": {
            "head": "gx10-a",
            "nodes": ["gx10-a"],
            "master_addr": "127.0.0.1",
            "model_dir": str(tmp_path / "node"),
        },
        # Never what the plan says in a real run (validate.yml computes one from the other); here
        # a decoy, so a role that read gx10_model_dir instead of the plan would be caught.
        "gx10_model_dir": str(tmp_path / "decoy"),
        "gx10_model_manifest": str(manifest),
        "gx10_model_source": source,
        "gx10_model_margin_bytes": 0,
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps(two_node_inventory({}, {}, cluster_vars)))
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK)
    return run_ansible_playbook(tmp_path, inventory, playbook, "-vvv", timeout=180)


def test_a_dir_source_lands_verified_on_the_head(tmp_path: Path) -> None:
    root, manifest = _checkpoint(tmp_path)
    run = _run(tmp_path, manifest, {"type": "dir", "path": str(root)})
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "node" / name).read_bytes() == (root / name).read_bytes()
    assert not (tmp_path / "decoy").exists()  # the directory is the plan's (gx10_plan.model_dir)
    flat = " ".join(out.split())
    assert "2 fetched" in flat
    assert f"{(root / 'model.safetensors').stat().st_size + 22} bytes read from the source" in flat


def test_a_hub_source_at_another_revision_is_refused_on_the_controller(tmp_path: Path) -> None:
    _, manifest = _checkpoint(tmp_path)
    source = {"type": "hub", "repo": REPO, "revision": OTHER_REV, "token": TOKEN}
    run = _run(tmp_path, manifest, source)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    flat = " ".join(out.split())
    assert "model plan refused: gx10_model_source is" in flat
    assert f"revision {OTHER_REV} is not the manifest's pinned revision {REV}" in flat
    assert TOKEN not in out
    assert not (tmp_path / "node").exists()  # the node was never touched


def test_an_unset_source_is_refused_with_an_example_of_each_type(tmp_path: Path) -> None:
    _, manifest = _checkpoint(tmp_path)
    run = _run(tmp_path, manifest, {})
    out = run.stdout + run.stderr
    assert run.returncode != 0
    flat = " ".join(out.split())
    assert "gx10_model_source is unset: set it in the inventory to one of" in flat
    assert "{type: http, base_url: http://HOST:PORT/PATH/}" in flat
    assert f"{{type: hub, repo: OWNER/NAME, revision: {REV}" in flat
    assert "{type: dir, path: /mnt/nas/CHECKPOINT}" in flat
    assert not (tmp_path / "node").exists()
