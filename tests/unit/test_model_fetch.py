"""install_verified: a `.partial` becomes the file only once it matches the manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tiny_repo

from gx10.model import (
    CorruptPartialError,
    IncompletePartialError,
    InstallError,
    ManifestFile,
    git_blob_sha1,
    install_verified,
    partial_path,
    verify,
)
from gx10.model.manifest import Manifest
from gx10.model.verify import CACHE_NAME, load_cache

SHARD = "model-00001-of-00002.safetensors"
GOOD = tiny_repo.FILES[SHARD]
EXPECTED = ManifestFile(SHARD, len(GOOD), "lfs", hashlib.sha256(GOOD).hexdigest())


def flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x80
    return bytes(out)


def test_good_partial_is_renamed_into_place(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    partial = partial_path(dest)
    assert partial.name == SHARD + ".partial"
    partial.write_bytes(GOOD)
    inode = partial.stat().st_ino
    installed = install_verified(partial, dest, EXPECTED)
    assert installed.digest == EXPECTED.digest
    assert dest.read_bytes() == GOOD
    assert dest.stat().st_ino == inode  # renamed, not copied
    assert not partial.exists()


def test_corrupt_partial_never_replaces_a_verified_file(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    dest.write_bytes(GOOD)
    partial = partial_path(dest)
    partial.write_bytes(flipped(GOOD, 1234))
    with pytest.raises(CorruptPartialError) as caught:
        install_verified(partial, dest, EXPECTED)
    message = str(caught.value)
    assert str(partial) in message
    assert f"expected {EXPECTED.digest}" in message
    assert "must be fetched again" in message
    assert dest.read_bytes() == GOOD  # the verified file is untouched
    assert not partial.exists()  # removed: resuming onto bad bytes can never succeed


def test_corrupt_partial_does_not_create_the_destination(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    partial = partial_path(dest)
    partial.write_bytes(flipped(GOOD, 0))
    with pytest.raises(CorruptPartialError):
        install_verified(partial, dest, EXPECTED)
    assert not dest.exists()


def test_too_long_partial_is_corrupt(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    partial = partial_path(dest)
    partial.write_bytes(GOOD + b"\0")
    with pytest.raises(CorruptPartialError, match=f"{len(GOOD) + 1} bytes, expected {len(GOOD)}"):
        install_verified(partial, dest, EXPECTED)
    assert not partial.exists()


def test_short_partial_is_kept_for_resume(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    dest.write_bytes(b"old")
    partial = partial_path(dest)
    partial.write_bytes(GOOD[:1000])
    with pytest.raises(IncompletePartialError, match=f"1000 of {len(GOOD)} bytes; kept"):
        install_verified(partial, dest, EXPECTED)
    assert partial.read_bytes() == GOOD[:1000]
    assert dest.read_bytes() == b"old"


def test_good_partial_replaces_a_bad_destination(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    dest.write_bytes(flipped(GOOD, 7))
    partial = partial_path(dest)
    partial.write_bytes(GOOD)
    install_verified(partial, dest, EXPECTED)
    assert dest.read_bytes() == GOOD


def test_missing_partial_and_directory_in_the_way(tmp_path: Path) -> None:
    dest = tmp_path / SHARD
    with pytest.raises(InstallError, match="does not exist"):
        install_verified(partial_path(dest), dest, EXPECTED)
    dest.mkdir()
    partial_path(dest).write_bytes(GOOD)
    with pytest.raises(InstallError, match="is a directory"):
        install_verified(partial_path(dest), dest, EXPECTED)
    assert partial_path(dest).exists()


def test_nested_destination_and_git_kind(tmp_path: Path) -> None:
    data = tiny_repo.FILES["inference/requirements.txt"]
    expected = ManifestFile("inference/requirements.txt", len(data), "git", git_blob_sha1(data))
    partial = tmp_path / "requirements.txt.partial"
    partial.write_bytes(data)
    dest = tmp_path / "inference" / "requirements.txt"
    install_verified(partial, dest, expected)
    assert dest.read_bytes() == data


def test_installed_file_is_in_the_verification_cache(tmp_path: Path) -> None:
    """Verifying right after a fetch does not read the fetched file a second time."""
    model = tmp_path / "model"
    tiny_repo.write(model)
    manifest = Manifest(tiny_repo.REPO, tiny_repo.REVISION, (EXPECTED,))
    (model / SHARD).unlink()
    partial = partial_path(model / SHARD)
    partial.write_bytes(GOOD)
    installed = install_verified(partial, model / SHARD, EXPECTED, cache_root=model)
    assert installed.cached
    assert load_cache(model / CACHE_NAME)[SHARD].digest == EXPECTED.digest
    hashed: list[int] = []
    report = verify(model, manifest, progress=lambda done, _total: hashed.append(done))
    assert report.ok
    assert hashed == [0]
    assert report.results[0].from_cache
