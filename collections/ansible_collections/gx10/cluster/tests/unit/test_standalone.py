# SPDX-License-Identifier: Apache-2.0
"""The collection stands alone: a copy of it, without python/ and with ``gx10`` unimportable,
imports every plugin and module_util, runs model_plan's logic, and builds with ansible-galaxy.

The arrow between the collection and the gx10 package runs one way (gx10 loads the collection
through ``gx10._collection``); this test fails if any plugin or module_util imports ``gx10``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# tests/unit -> tests -> cluster
COLLECTION = Path(__file__).resolve().parents[2]
CHECKOUT = COLLECTION.parents[3]
ANSIBLE_GALAXY = Path(sys.executable).with_name("ansible-galaxy")
TIMEOUT_S = 600  # generous: the machine is shared; a hang still ends

REPO = "gx10-lab/tiny-checkpoint"
REVISION = "0123456789abcdef0123456789abcdef01234567"

# Runs in the subprocess: sys.argv[1] is the copy's collections root, sys.argv[2] the checkout.
PROBE = textwrap.dedent(
    """
    import importlib
    import importlib.abc
    import json
    import sys
    from pathlib import Path

    root, checkout = Path(sys.argv[1]), Path(sys.argv[2])


    class NoGx10(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "gx10" or name.startswith("gx10."):
                raise ModuleNotFoundError(f"no module named {name!r} (blocked)", name=name)
            return None


    sys.meta_path.insert(0, NoGx10())
    hidden = {str(checkout / "python"), str(checkout / "collections")}
    sys.path[:] = [p for p in sys.path if p not in hidden]
    sys.path.insert(0, str(root))
    try:
        import gx10  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("gx10 is still importable")

    plugins = root / "ansible_collections" / "gx10" / "cluster" / "plugins"
    imported = []
    for path in sorted(plugins.rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        module = importlib.import_module(name)
        assert str(Path(module.__file__).resolve()).startswith(str(root.resolve())), name
        imported.append(name)
    assert not [m for m in sys.modules if m == "gx10" or m.startswith("gx10.")]

    from ansible_collections.gx10.cluster.plugins.action.model_plan import plan

    ok = plan({"manifest": sys.argv[3], "nodes": 2, "source": None})
    refused = plan({"manifest": sys.argv[4], "nodes": 2, "source": None})
    print(json.dumps({"imported": imported, "ok": ok, "refused": refused}))
    """
)


def _copy_collection(tmp_path: Path) -> Path:
    """Only the collection, as ansible-galaxy would ship it (no tests, no caches)."""
    root = tmp_path / "collections"
    shutil.copytree(
        COLLECTION,
        root / "ansible_collections" / "gx10" / "cluster",
        ignore=shutil.ignore_patterns("tests", "__pycache__", "*.pyc"),
    )
    return root


def _manifest(path: Path, files: list[dict[str, object]]) -> Path:
    doc = {"schema": 1, "repo": REPO, "revision": REVISION, "files": files}
    path.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
    return path


def test_the_collection_imports_and_plans_without_the_gx10_package(tmp_path: Path) -> None:
    root = _copy_collection(tmp_path)
    good = _manifest(
        tmp_path / "good.yml",
        [{"path": "config.json", "size": 2, "kind": "git", "git_sha1": "a" * 40}],
    )
    bad = _manifest(tmp_path / "bad.yml", [{"path": "../escape", "size": -1, "kind": "lfs"}])
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), str(CHECKOUT), str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    names = set(out["imported"])
    prefix = "ansible_collections.gx10.cluster.plugins"
    for expected in ("model_errors", "model_manifest", "model_catalog", "model_files"):
        assert f"{prefix}.module_utils.{expected}" in names
    assert f"{prefix}.action.model_plan" in names
    assert f"{prefix}.modules.model_fetch" in names
    ok = out["ok"]
    assert "failed" not in ok, ok
    assert (ok["repo"], ok["revision"], ok["total_bytes"]) == (REPO, REVISION, 2)
    assert ok["checkpoint"] == REPO  # not in the catalog: its own size
    assert ok["files"] == [{"path": "config.json", "size": 2, "kind": "git", "git_sha1": "a" * 40}]
    refused = out["refused"]
    assert refused["failed"] is True
    assert refused["msg"].startswith("model plan refused:")
    assert "size: -1 is negative" in refused["msg"]


@pytest.mark.skipif(not ANSIBLE_GALAXY.exists(), reason="needs ansible-galaxy next to python")
def test_the_collection_builds_with_ansible_galaxy(tmp_path: Path) -> None:
    root = _copy_collection(tmp_path)
    out = tmp_path / "dist"
    run = subprocess.run(
        [
            str(ANSIBLE_GALAXY),
            "collection",
            "build",
            str(root / "ansible_collections" / "gx10" / "cluster"),
            "--output-path",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.name for p in out.iterdir()] == ["gx10-cluster-0.1.0.tar.gz"]
