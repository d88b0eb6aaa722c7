"""The safe-write primitive for fetching model files.

A fetched file lands as `<name>.partial` next to its destination; `install_verified` checks it
against the manifest and only then renames it into place, so the destination only ever holds a
verified file or whatever it held before. What happens to a bad `.partial`:

- shorter than expected: kept, and `IncompletePartialError` is raised. It is an interrupted
  download; the fetch resumes from its end instead of starting over.
- longer than expected, or the right size with the wrong hash: removed, and
  `CorruptPartialError` is raised. No resume can fix it, and keeping it would make the next fetch
  resume onto bad bytes; the next fetch starts from zero.
- changed while it was being verified (another writer): kept, `InstallError`.

In every case the destination is untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path

import filelock

from gx10.model.errors import CorruptPartialError, IncompletePartialError, InstallError
from gx10.model.hashing import FileStamp, hash_file
from gx10.model.manifest import ManifestFile
from gx10.model.verify import CACHE_NAME, CacheEntry, update_cache

PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True, slots=True)
class Installed:
    dest: Path
    size: int
    digest: str
    cached: bool
    """The verification cache learned the file, so the next verify does not read it again."""


def partial_path(dest: Path) -> Path:
    """Where a fetch writes `dest` before it is verified: `<dest>.partial`, same directory."""
    return dest.with_name(dest.name + PARTIAL_SUFFIX)


def install_verified(
    tmp_partial: Path,
    dest: Path,
    expected: ManifestFile,
    *,
    cache_root: Path | None = None,
    cache_path: Path | None = None,
) -> Installed:
    """Verify `tmp_partial` against `expected`, then atomically rename it to `dest`.

    `cache_root` is the model directory whose verification cache should record the installed file
    (as `expected.path`; `cache_path` overrides the cache file), so verifying the directory right
    after a fetch does not hash the file a second time. Failing to record it is not an error.
    """
    try:
        st = tmp_partial.stat()
    except FileNotFoundError:
        raise InstallError(f"{tmp_partial} does not exist; nothing to install") from None
    if not tmp_partial.is_file():
        raise InstallError(f"{tmp_partial} is not a regular file")
    if dest.is_dir():
        raise InstallError(f"cannot install {expected.path}: {dest} is a directory")
    if st.st_size < expected.size:
        raise IncompletePartialError(
            f"{tmp_partial} is incomplete: {st.st_size} of {expected.size} bytes; kept so the "
            f"fetch of {expected.path} can resume"
        )
    if st.st_size > expected.size:
        _remove(tmp_partial)
        raise CorruptPartialError(
            f"{tmp_partial} is corrupt: {st.st_size} bytes, expected {expected.size}; removed, "
            f"{expected.path} must be fetched again"
        )
    try:
        digest = hash_file(tmp_partial, expected.algo)
    except OSError as exc:
        raise InstallError(f"cannot read {tmp_partial}: {exc.strerror or exc}") from exc
    if digest.changed:
        raise InstallError(
            f"{tmp_partial} changed while it was verified; is a fetch still writing?"
        )
    if digest.hexdigest != expected.digest:
        _remove(tmp_partial)
        raise CorruptPartialError(
            f"{tmp_partial} is corrupt: {expected.algo} {digest.hexdigest}, expected "
            f"{expected.digest}; removed, {expected.path} must be fetched again"
        )
    _install(tmp_partial, dest, digest.stamp)
    cached = False
    if cache_root is not None:
        cached = _record(cache_path or cache_root / CACHE_NAME, dest, expected, digest.stamp)
    return Installed(dest, expected.size, digest.hexdigest, cached)


def _install(partial: Path, dest: Path, verified: FileStamp) -> None:
    try:
        # The data must be on disk before the name points at it, or a crash could leave a
        # verified name over unwritten blocks.
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
            if FileStamp.of(os.fstat(handle.fileno())) != verified:
                raise InstallError(f"{partial} changed after it was verified; not installed")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, dest)
    except OSError as exc:
        hint = " (the .partial must be on the same filesystem)" if exc.errno == errno.EXDEV else ""
        raise InstallError(
            f"cannot install {partial} as {dest}: {exc.strerror or exc}{hint}; "
            "the verified .partial is kept"
        ) from exc
    _fsync_dir(dest.parent)


def _record(cache_file: Path, dest: Path, expected: ManifestFile, verified: FileStamp) -> bool:
    try:
        st = dest.stat()
        # The rename changes ctime only; anything else means the file is not the one we hashed.
        if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (
            verified.inode,
            verified.dev,
            verified.size,
            verified.mtime_ns,
        ):
            return False
        entry = CacheEntry(FileStamp.of(st), expected.algo, expected.digest)
        update_cache(cache_file, {expected.path: entry})
    except (OSError, filelock.Timeout):  # the cache only saves time; the file is installed
        return False
    return True


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
