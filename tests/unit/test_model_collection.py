"""gx10 reaches the gx10.cluster collection one way: `gx10._collection.load`, no sys.path change.

And one error hierarchy: gx10.model's errors are the collection's classes, which the CLI maps to
exit code 1 like its own `Gx10Error`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gx10._collection as collection
from gx10 import cli
from gx10.errors import Gx10Error

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "ansible_collections.gx10.cluster.plugins.module_utils"


def test_importing_gx10_model_leaves_sys_path_alone() -> None:
    probe = textwrap.dedent(
        """
        import json, sys
        before = list(sys.path)
        import gx10.model, gx10.doctor.rules, gx10.cli
        from gx10._collection import load
        load("fabric_parse")
        mod = sys.modules["ansible_collections.gx10.cluster.plugins.module_utils.model_files"]
        print(json.dumps({"same": sys.path == before, "file": mod.__file__}))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "GX10_HOME": str(ROOT)},
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["same"] is True
    assert (
        Path(out["file"]).resolve()
        == ROOT / f"collections/{PACKAGE.replace('.', '/')}/model_files.py"
    )


def test_load_returns_the_collections_module_once() -> None:
    first = collection.load("model_catalog")
    assert first.__name__ == f"{PACKAGE}.model_catalog"
    assert collection.load("model_catalog") is first
    assert sys.modules[f"{PACKAGE}.model_catalog"] is first


def test_load_without_a_collection_is_a_clear_gx10_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collection, "roots", list)
    with pytest.raises(Gx10Error, match=r"cannot find the gx10\.cluster collection.*GX10_HOME"):
        collection.load("no_such_module_utils")


def test_load_of_an_unknown_module_utils_names_it() -> None:
    with pytest.raises(Gx10Error, match="has no module_utils 'no_such_module_utils'"):
        collection.load("no_such_module_utils")


def test_the_model_errors_are_the_collections_classes() -> None:
    from gx10 import model  # noqa: PLC0415
    from gx10.model import errors  # noqa: PLC0415

    model_errors = collection.load("model_errors")
    for name in errors.__all__:
        assert getattr(errors, name) is getattr(model_errors, name), name
        assert issubclass(getattr(errors, name), model_errors.ModelError), name
    assert model.ManifestError is model_errors.ManifestError
    catalog = collection.load("model_catalog")
    assert model.check_fits is catalog.check_fits
    assert model.CatalogEntry is catalog.CatalogEntry
    manifest = collection.load("model_manifest")
    assert model.Manifest is manifest.Manifest
    assert model.load_manifest is manifest.load_manifest


def test_the_cli_maps_a_model_error_to_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "manifest.yml"
    bad.write_text("schema: 2\n", encoding="utf-8")
    code = cli.main(["model", "verify", "--manifest", str(bad), str(tmp_path)])
    assert code == cli.EXIT_ERROR == 1
    assert "gx10: error:" in capsys.readouterr().err
