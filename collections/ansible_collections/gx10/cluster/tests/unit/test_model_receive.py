# SPDX-License-Identifier: Apache-2.0
"""model_files.Receiver: a fetched file is hashed as it is written, never read back, and gets its
name only once the digest of the bytes that reached the file matches the manifest's."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils import model_files
from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import (
    CorruptPartialError,
    IncompletePartialError,
    InstallError,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    CACHE_NAME,
    Expected,
    Receiver,
    load_cache,
    partial_path,
    verify_files,
)

DATA = os.urandom(3 * 1024 * 1024 + 12345)
SHARD = Expected("model-00001.safetensors", len(DATA), "sha256", hashlib.sha256(DATA).hexdigest())
TEXT = b'{"model_type": "tiny", "pad": "' + b"x" * 5000 + b'"}'
CONFIG = Expected("config.json", len(TEXT), "git-sha1", model_files.git_blob_sha1(TEXT))


def _flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


def _receive(
    model: Path, entry: Expected, pieces: list[bytes], *, cache: bool = True
) -> tuple[Receiver, model_files.Installed]:
    target = model / entry.path
    with Receiver(
        partial_path(target), target, entry, cache_file=model / CACHE_NAME if cache else None
    ) as receiver:
        receiver.open_to_resume()
        for piece in pieces:
            receiver.write(piece)
        return receiver, receiver.install()


def _forbid_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test on any read of a model file to hash it: a verify pass's (hash_file) or a
    .partial's (Receiver reads with os.readv)."""

    def hash_file(path: Path, *args: object, **kwargs: object) -> model_files.Digest:
        raise AssertionError(f"{path} was read back to be hashed")

    def readv(fd: int, buffers: list[memoryview]) -> int:
        raise AssertionError(f"a .partial was read back (fd {fd})")

    monkeypatch.setattr(model_files, "hash_file", hash_file)
    monkeypatch.setattr(model_files.os, "readv", readv)


def test_received_bytes_are_hashed_as_written_and_never_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _forbid_reads(monkeypatch)
    pieces = [DATA[i : i + 700_001] for i in range(0, len(DATA), 700_001)]
    receiver, installed = _receive(model, SHARD, pieces)
    assert (model / SHARD.path).read_bytes() == DATA
    assert not partial_path(model / SHARD.path).exists()
    assert installed.digest == SHARD.digest
    assert installed.read_back == 0
    assert receiver.received == receiver.hashed_receiving == len(DATA)
    assert receiver.read_back == 0
    assert installed.cached


def test_the_cache_entry_has_the_installed_files_stamp_so_verify_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _receive(model, SHARD, [DATA])
    entry = load_cache(model / CACHE_NAME)[SHARD.path]
    assert entry.stamp == model_files.FileStamp.of((model / SHARD.path).stat())  # after the rename
    assert entry.digest == SHARD.digest
    _forbid_reads(monkeypatch)  # a verify that hashed the file would fail here
    report = verify_files(model, [SHARD])
    assert report.ok
    assert report.hashed_bytes == 0
    assert report.results[0].from_cache


def test_a_flipped_byte_in_transit_is_caught_before_the_rename(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _receive(model, SHARD, [DATA])  # a verified copy is in place
    dest = model / SHARD.path
    before = (dest.stat().st_ino, dest.stat().st_mtime_ns)
    with pytest.raises(CorruptPartialError) as caught:
        _receive(model, SHARD, [DATA[:100], _flipped(DATA, 2_000_000)[100:]])
    assert f"expected {SHARD.digest}; removed" in str(caught.value)
    assert (dest.stat().st_ino, dest.stat().st_mtime_ns) == before  # never replaced
    assert dest.read_bytes() == DATA
    assert not partial_path(dest).exists()  # no resume can fix it


def test_too_many_bytes_are_corrupt_and_too_few_are_kept_to_resume(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(CorruptPartialError, match=f"{len(DATA) + 1} bytes, expected {len(DATA)}"):
        _receive(model, SHARD, [DATA, b"!"])
    assert not partial_path(model / SHARD.path).exists()
    with pytest.raises(IncompletePartialError, match=f"1000 of {len(DATA)} bytes; kept"):
        _receive(model, SHARD, [DATA[:1000]])
    assert partial_path(model / SHARD.path).read_bytes() == DATA[:1000]
    assert not (model / SHARD.path).exists()


def test_a_resumed_partial_has_its_prefix_read_once_and_hashed(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    partial_path(model / SHARD.path).write_bytes(DATA[:1_234_567])
    target = model / SHARD.path
    with Receiver(partial_path(target), target, SHARD) as receiver:
        assert receiver.open_to_resume() == 1_234_567
        receiver.write(DATA[1_234_567:])
        installed = receiver.install()
    assert receiver.read_back == installed.read_back == 1_234_567
    assert receiver.received == receiver.hashed_receiving == len(DATA) - 1_234_567
    assert target.read_bytes() == DATA


def test_a_corrupt_prefix_is_caught_although_only_the_rest_was_received(tmp_path: Path) -> None:
    """The hash covers the bytes already in the .partial, not just what this attempt sent."""
    model = tmp_path / "model"
    model.mkdir()
    partial_path(model / SHARD.path).write_bytes(_flipped(DATA, 10)[:500_000])
    with pytest.raises(CorruptPartialError):
        _receive(model, SHARD, [DATA[500_000:]])
    assert not (model / SHARD.path).exists()


def test_a_partial_longer_than_the_file_is_emptied_and_restarted(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    partial_path(model / SHARD.path).write_bytes(DATA + b"tail")
    receiver, _ = _receive(model, SHARD, [DATA])
    assert receiver.read_back == 0
    assert (model / SHARD.path).read_bytes() == DATA


def test_restart_drops_the_prefix_and_its_hash(tmp_path: Path) -> None:
    """A server that ignores the Range sends the file from byte 0."""
    model = tmp_path / "model"
    model.mkdir()
    partial_path(model / SHARD.path).write_bytes(DATA[:300_000])
    target = model / SHARD.path
    with Receiver(partial_path(target), target, SHARD) as receiver:
        assert receiver.open_to_resume() == 300_000
        receiver.restart()
        assert receiver.offset == 0
        receiver.write(DATA)
        receiver.install()
    assert receiver.read_back == 300_000
    assert target.read_bytes() == DATA


def test_git_blob_sha1_has_the_whole_files_header_across_a_resume(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    partial_path(model / CONFIG.path).write_bytes(TEXT[:1000])
    receiver, installed = _receive(model, CONFIG, [TEXT[1000:3000], TEXT[3000:]])
    assert installed.digest == CONFIG.digest == model_files.git_blob_sha1(TEXT)
    assert receiver.read_back == 1000
    assert (model / CONFIG.path).read_bytes() == TEXT
    with pytest.raises(CorruptPartialError, match="git-sha1"):
        _receive(model, CONFIG, [_flipped(TEXT, 4000)])


def test_short_writes_are_continued_and_only_whole_buffers_are_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def short(fd: int, data: memoryview) -> int:
        count = os.write(fd, data[: min(len(data), 4093)])
        calls.append(count)
        return count

    monkeypatch.setattr(model_files, "_write", short)
    model = tmp_path / "model"
    model.mkdir()
    receiver, _ = _receive(model, SHARD, [DATA[:1_000_000], DATA[1_000_000:]])
    assert (model / SHARD.path).read_bytes() == DATA
    assert sum(calls) == len(DATA)
    assert max(calls) == 4093
    assert len(calls) >= len(DATA) / 4093  # every write was short, and continued
    assert receiver.received == receiver.hashed_receiving == len(DATA)


def test_a_write_that_fails_midway_is_an_install_error_and_the_rest_is_not_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = 0

    def full_disk(fd: int, data: memoryview) -> int:
        nonlocal written
        if written >= 1_500_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        count = os.write(fd, data[: min(100_000, 1_500_000 - written)])
        written += count
        return count

    monkeypatch.setattr(model_files, "_write", full_disk)
    model = tmp_path / "model"
    model.mkdir()
    target = model / SHARD.path
    with Receiver(partial_path(target), target, SHARD) as receiver:
        receiver.open_to_resume()
        with pytest.raises(InstallError, match="No space left on device") as caught:
            receiver.write(DATA)
    assert str(partial_path(target)) in str(caught.value)
    # 1 MiB was written and hashed; the next 0.5 MB reached the file but were not hashed.
    assert receiver.hashed_receiving == model_files.READ_SIZE
    assert receiver.received == 1_500_000
    assert partial_path(target).stat().st_size == 1_500_000
    # A write that makes no progress at all must not spin.
    monkeypatch.setattr(model_files, "_write", lambda fd, data: 0)
    with Receiver(partial_path(target), target, SHARD) as receiver:
        receiver.open_to_resume()
        assert receiver.read_back == 1_500_000  # the next attempt reads back what is there
        with pytest.raises(InstallError, match="a write made no progress"):
            receiver.write(DATA[1_500_000:])


def test_a_second_receiver_of_the_same_file_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    target = model / SHARD.path
    with Receiver(partial_path(target), target, SHARD) as first:
        first.open_to_resume()
        first.write(DATA[:1000])
        with (
            Receiver(partial_path(target), target, SHARD) as second,
            pytest.raises(InstallError, match="being written by another fetch"),
        ):
            second.open_to_resume()
        first.write(DATA[1000:])
        first.install()
    assert target.read_bytes() == DATA


def test_an_empty_partial_is_not_left_behind(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    target = model / SHARD.path
    with Receiver(partial_path(target), target, SHARD) as receiver:
        receiver.open_to_resume()
    assert not partial_path(target).exists()
    with Receiver(partial_path(target), target, SHARD) as receiver:
        receiver.open_to_resume()
        receiver.write(DATA[:10])
    assert partial_path(target).read_bytes() == DATA[:10]  # something to resume from: kept


def test_an_empty_file_is_installed(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    empty = Expected("empty.txt", 0, "git-sha1", model_files.git_blob_sha1(b""))
    _, installed = _receive(model, empty, [])
    assert (model / "empty.txt").read_bytes() == b""
    assert installed.cached


def test_install_verified_reads_a_complete_partial_in_full(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    target = model / SHARD.path
    partial_path(target).write_bytes(DATA)
    installed = model_files.install_verified(partial_path(target), target, SHARD, cache_root=model)
    assert installed.read_back == len(DATA)
    assert installed.cached
    assert target.read_bytes() == DATA
