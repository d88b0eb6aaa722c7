"""The lab's synthetic checkpoint and the manifest committed for it stay in sync."""

from __future__ import annotations

from pathlib import Path

from gx10.lab import checkpoint
from gx10.model import load_manifest, manifest_from_directory

MANIFEST = Path(__file__).resolve().parents[2] / "inventories/lab/files/model-manifest.yml"


def test_the_committed_manifest_matches_a_fresh_synthetic_checkpoint(tmp_path: Path) -> None:
    size = checkpoint.generate(tmp_path / "ck")
    built = manifest_from_directory(
        tmp_path / "ck", repo=checkpoint.REPO, revision=checkpoint.REVISION, jobs=2
    )
    committed = load_manifest(MANIFEST)
    assert built == committed, (
        "inventories/lab/files/model-manifest.yml is stale: regenerate it with "
        "`python3 python/gx10/lab/checkpoint.py DIR MARKER` and "
        "`gx10 model manifest --from-dir DIR --repo ... --revision ... -o ...`"
    )
    assert size == committed.total_size


def test_the_checkpoint_has_the_reference_shape(tmp_path: Path) -> None:
    committed = load_manifest(MANIFEST)
    kinds = [f.kind for f in committed.files]
    assert kinds.count("lfs") == 48
    assert kinds.count("git") == 26
    assert 10 * 2**20 < committed.total_size < 100 * 2**20
