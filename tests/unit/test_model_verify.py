"""verify(): each kind of damage, extra files, the verification cache, progress."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
import tiny_repo

from gx10.model import FileResult, Manifest, VerifyError, manifest_from_directory, verify
from gx10.model.verify import CACHE_NAME, load_cache, update_cache

SHARD = "model-00001-of-00002.safetensors"


class Meter:
    """A progress callback that remembers what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self.calls.append((done, total))

    @property
    def hashed(self) -> int:
        return self.calls[-1][0] if self.calls else 0

    @property
    def total(self) -> int:
        return self.calls[-1][1] if self.calls else 0


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Manifest]:
    directory = tmp_path / "model"
    tiny_repo.write(directory)
    manifest = manifest_from_directory(directory, repo=tiny_repo.REPO, revision=tiny_repo.REVISION)
    return directory, manifest


def statuses(results: Iterable[FileResult]) -> dict[str, str]:
    return {r.path: r.status for r in results}


def test_intact_copy_is_ok_and_fully_hashed(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    meter = Meter()
    report = verify(directory, manifest, jobs=2, progress=meter)
    assert report.ok
    assert set(statuses(report.results).values()) == {"ok"}
    assert meter.calls[0] == (0, manifest.total_size)
    assert meter.hashed == manifest.total_size == report.hashed_bytes
    assert report.cached_bytes == 0
    assert report.failures == ()


def test_one_byte_flip_is_a_hash_mismatch(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    shard = directory / SHARD
    data = bytearray(shard.read_bytes())
    data[40_000] ^= 0x01
    shard.write_bytes(data)
    report = verify(directory, manifest, use_cache=False)
    assert not report.ok
    (bad,) = report.failures
    assert (bad.path, bad.status) == (SHARD, "hash_mismatch")
    assert bad.actual_digest != bad.expected_digest
    assert bad.algo == "sha256"
    assert SHARD not in {r.path for r in report.results if r.status == "ok"}


def test_flip_in_a_small_git_file(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    config = directory / "config.json"
    config.write_bytes(config.read_bytes().replace(b"2", b"3", 1))
    report = verify(directory, manifest, use_cache=False)
    assert [(r.path, r.status, r.algo) for r in report.failures] == [
        ("config.json", "hash_mismatch", "git-sha1")
    ]


def test_truncation_is_a_size_mismatch_without_reading(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    os.truncate(directory / SHARD, 1000)
    meter = Meter()
    report = verify(directory, manifest, use_cache=False, progress=meter)
    (bad,) = report.failures
    assert (bad.path, bad.status, bad.actual_size, bad.expected_size) == (
        SHARD,
        "size_mismatch",
        1000,
        65_536,
    )
    assert meter.total == manifest.total_size - 65_536  # the short file was never read


def test_missing_file_and_missing_directory(model: tuple[Path, Manifest], tmp_path: Path) -> None:
    directory, manifest = model
    (directory / "inference" / "requirements.txt").unlink()
    report = verify(directory, manifest, use_cache=False)
    assert [(r.path, r.status) for r in report.failures] == [
        ("inference/requirements.txt", "missing")
    ]
    gone = verify(tmp_path / "lost-its-copy", manifest)  # a node after a hardware swap
    assert not gone.ok
    assert {r.status for r in gone.results} == {"missing"}
    assert any("does not exist" in note for note in gone.notes)


def test_directory_in_place_of_a_file_is_missing(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    (directory / "README.md").unlink()
    (directory / "README.md").mkdir()
    report = verify(directory, manifest, use_cache=False)
    (bad,) = report.failures
    assert (bad.path, bad.status) == ("README.md", "missing")
    assert "directory" in bad.describe()


def test_extra_files_are_reported_and_left_alone(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    (directory / "model-00003-of-00002.safetensors.partial").write_bytes(b"half")
    (directory / "inference" / "notes.txt").write_text("mine")
    (directory / ".cache" / "huggingface").mkdir(parents=True)
    (directory / ".cache" / "huggingface" / "x.lock").write_text("")
    report = verify(directory, manifest)
    assert report.ok  # extras do not fail a verify
    assert [(r.path, r.actual_size) for r in report.extras] == [
        ("inference/notes.txt", 4),
        ("model-00003-of-00002.safetensors.partial", 4),
    ]
    assert (directory / "inference" / "notes.txt").read_text() == "mine"
    assert CACHE_NAME not in {r.path for r in report.extras}


def test_unreadable_file(model: tuple[Path, Manifest]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    directory, manifest = model
    (directory / "config.json").chmod(0)
    report = verify(directory, manifest, use_cache=False)
    assert [(r.path, r.status) for r in report.failures] == [("config.json", "unreadable")]


def test_symlink_loop_is_unreadable(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    (directory / "config.json").unlink()
    (directory / "config.json").symlink_to("config.json")
    report = verify(directory, manifest, use_cache=False)
    (bad,) = report.failures
    assert (bad.path, bad.status) == ("config.json", "unreadable")
    assert "cannot stat" in bad.describe()


def test_not_a_directory_and_bad_jobs(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    with pytest.raises(VerifyError, match="is not a directory"):
        verify(directory / "config.json", manifest)
    with pytest.raises(VerifyError, match="jobs must be at least 1"):
        verify(directory, manifest, jobs=0)


# --- the cache -------------------------------------------------------------------------------


def test_warm_cache_skips_unchanged_files(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    assert verify(directory, manifest).ok
    meter = Meter()
    again = verify(directory, manifest, progress=meter)
    assert again.ok
    assert meter.calls == [(0, 0)]  # nothing read
    assert again.hashed_bytes == 0
    assert again.cached_bytes == manifest.total_size
    assert all(r.from_cache for r in again.results)


def test_modified_file_with_same_size_is_rehashed(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    verify(directory, manifest)
    shard = directory / SHARD
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    with open(shard, "r+b") as handle:  # in place: same inode, same size, new mtime
        handle.write(data)
    before = shard.stat()
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    meter = Meter()
    report = verify(directory, manifest, progress=meter)
    assert meter.hashed == 65_536  # exactly that file
    assert [(r.path, r.status, r.from_cache) for r in report.failures] == [
        (SHARD, "hash_mismatch", False)
    ]


def test_mtime_put_back_is_still_caught(model: tuple[Path, Manifest]) -> None:
    """A rewrite that restores the old mtime (touch -r, cp -p over it) changes ctime."""
    directory, manifest = model
    verify(directory, manifest)
    shard = directory / SHARD
    before = shard.stat()
    data = bytearray(shard.read_bytes())
    data[1] ^= 0xFF
    with open(shard, "r+b") as handle:
        handle.write(data)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    if shard.stat().st_ctime_ns == before.st_ctime_ns:
        pytest.skip("this filesystem's ctime did not move (coarse clock)")
    report = verify(directory, manifest)
    assert [(r.path, r.status) for r in report.failures] == [(SHARD, "hash_mismatch")]


def test_replaced_file_new_inode_is_rehashed(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    verify(directory, manifest)
    config = directory / "config.json"
    st = config.stat()
    replacement = directory / "config.json.new"
    replacement.write_bytes(config.read_bytes())
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, config)  # same bytes, size and mtime, another inode
    meter = Meter()
    report = verify(directory, manifest, progress=meter)
    assert report.ok
    assert meter.hashed == st.st_size
    assert [r.path for r in report.results if not r.from_cache] == ["config.json"]


def test_reverify_hashes_everything(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    verify(directory, manifest)
    meter = Meter()
    report = verify(directory, manifest, reverify=True, progress=meter)
    assert report.ok
    assert meter.hashed == manifest.total_size
    assert not any(r.from_cache for r in report.results)


def test_forged_cache_entry_for_a_changed_file_is_not_trusted(
    model: tuple[Path, Manifest],
) -> None:
    directory, manifest = model
    verify(directory, manifest)
    shard = directory / SHARD
    shard.write_bytes(b"\0" * 65_536)  # same size; cache still says the old digest
    report = verify(directory, manifest)
    assert [(r.path, r.status) for r in report.failures] == [(SHARD, "hash_mismatch")]
    cache = load_cache(directory / CACHE_NAME)
    # The cache now holds the digest of the zeros, not the old one.
    assert cache[SHARD].digest == report.failures[0].actual_digest


def test_corrupt_cache_is_ignored_not_trusted(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    (directory / CACHE_NAME).write_text("{not json")
    meter = Meter()
    report = verify(directory, manifest, progress=meter)
    assert report.ok
    assert meter.hashed == manifest.total_size
    assert any("ignored the verification cache" in note for note in report.notes)
    assert json.loads((directory / CACHE_NAME).read_text())["version"] == 1  # rewritten


def test_read_only_directory_verifies_without_cache(
    model: tuple[Path, Manifest], tmp_path: Path
) -> None:
    directory, manifest = model
    (tmp_path / "a-file").write_text("")
    # Root writes anywhere; a cache under a regular file is unwritable even for root.
    report = verify(directory, manifest, cache_path=tmp_path / "a-file" / "cache.json")
    assert report.ok
    assert any("verification cache not saved" in note for note in report.notes)


def test_concurrent_cache_updates_merge(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    verify(directory, manifest)
    cache_file = directory / CACHE_NAME
    entries = load_cache(cache_file)
    one, two = sorted(entries)[:2]

    def writer(path: str) -> None:
        for _ in range(20):
            update_cache(cache_file, {path: entries[path]})

    threads = [threading.Thread(target=writer, args=(p,)) for p in (one, two)]
    update_cache(cache_file, {one: None, two: None})
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert load_cache(cache_file) == entries
    leftovers = [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_to_dict_names_failing_paths(model: tuple[Path, Manifest]) -> None:
    directory, manifest = model
    (directory / "config.json").unlink()
    document = verify(directory, manifest).to_dict()
    assert document["ok"] is False
    assert [f["path"] for f in document["failures"]] == ["config.json"]
    assert document["counts"] == {"missing": 1, "ok": len(manifest.files) - 1}
    json.dumps(document)


def test_failing_progress_stops_every_worker(model: tuple[Path, Manifest]) -> None:
    """Ctrl-C (here: a callback that raises) must not wait for the other files to finish."""
    directory, manifest = model
    calls: list[int] = []

    def explode(done: int, total: int) -> None:
        calls.append(done)
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify(directory, manifest, jobs=2, progress=explode, read_size=4096, use_cache=False)
    # One 4 KiB read per worker at most after the first one raised, not the ~26 reads left.
    assert len(calls) <= 3
