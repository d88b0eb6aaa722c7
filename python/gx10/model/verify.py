"""Verify a model directory against a manifest.

Each manifest file is ok, missing, size_mismatch, hash_mismatch or unreadable; files on disk that
the manifest does not list are reported as extra and never touched. Sizes are checked first (a
truncated shard costs a stat, not a read), then the rest is hashed in parallel.

A verification cache (`<dir>/.gx10-verify-cache.json` by default) records, per file, the digest
and the stamp the file had when it was hashed: size, mtime_ns, ctime_ns, inode and device. A later
run skips a file only if all five are unchanged (ctime catches a rewrite whose mtime was put back,
which a user cannot fake); `reverify=True` ignores the cache. The cache is written atomically
under a file lock, merged with what another verifier wrote meanwhile. A directory where it cannot
be written (read-only) is still verified; the report says the cache was not saved.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import filelock

from gx10.model.errors import VerifyError
from gx10.model.hashing import (
    READ_SIZE,
    Algo,
    Digest,
    FileStamp,
    HashJob,
    ProgressCallback,
    default_workers,
    hash_many,
)
from gx10.model.manifest import Manifest, ManifestFile, atomic_write_text, iter_tree

CACHE_NAME = ".gx10-verify-cache.json"
CACHE_VERSION = 1
LOCK_TIMEOUT_S = 60.0

Status = Literal["ok", "missing", "size_mismatch", "hash_mismatch", "unreadable", "extra"]


@dataclass(frozen=True, slots=True)
class FileResult:
    path: str
    status: Status
    expected_size: int | None = None
    """None for extra files."""
    actual_size: int | None = None
    """None when the file is missing."""
    algo: Algo | None = None
    expected_digest: str | None = None
    actual_digest: str | None = None
    """None if the file was not hashed (missing, wrong size, unreadable, extra)."""
    from_cache: bool = False
    """The digest came from the verification cache, not from reading the file."""
    detail: str | None = None

    def describe(self) -> str:
        """One line for a human: what is wrong with this file."""
        if self.status == "missing":
            return self.detail or "missing"
        if self.status == "size_mismatch":
            return f"size {self.actual_size} bytes, expected {self.expected_size}"
        if self.status == "hash_mismatch":
            text = f"{self.algo} {self.actual_digest}, expected {self.expected_digest}"
            return f"{self.detail}; {text}" if self.detail else text
        if self.status == "extra":
            return f"not in the manifest ({self.actual_size} bytes); left in place"
        return self.detail or self.status


@dataclass(frozen=True, slots=True)
class VerifyReport:
    directory: Path
    repo: str
    revision: str
    results: tuple[FileResult, ...]
    """Manifest files in manifest order, then extra files sorted by path."""
    total_bytes: int
    """Size of the checkpoint per the manifest."""
    hashed_bytes: int
    """Bytes read and hashed in this run."""
    cached_bytes: int
    """Bytes of files whose digest came from the cache."""
    elapsed_s: float
    jobs: int
    cache_path: Path | None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every manifest file is present with the right size and hash (extras do not count)."""
        return all(r.status in ("ok", "extra") for r in self.results)

    @property
    def failures(self) -> tuple[FileResult, ...]:
        return tuple(r for r in self.results if r.status not in ("ok", "extra"))

    @property
    def extras(self) -> tuple[FileResult, ...]:
        return tuple(r for r in self.results if r.status == "extra")

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for result in self.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "directory": str(self.directory),
            "repo": self.repo,
            "revision": self.revision,
            "counts": self.counts(),
            "total_bytes": self.total_bytes,
            "hashed_bytes": self.hashed_bytes,
            "cached_bytes": self.cached_bytes,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs": self.jobs,
            "cache_path": str(self.cache_path) if self.cache_path else None,
            "notes": list(self.notes),
            "failures": [_result_dict(r) for r in self.failures],
            "extras": [_result_dict(r) for r in self.extras],
            "files": [_result_dict(r) for r in self.results],
        }


def verify(
    directory: Path,
    manifest: Manifest,
    *,
    jobs: int | None = None,
    reverify: bool = False,
    progress: ProgressCallback | None = None,
    use_cache: bool = True,
    cache_path: Path | None = None,
    read_size: int = READ_SIZE,
) -> VerifyReport:
    """Check every manifest file under `directory`; never modifies or deletes a model file.

    `progress` gets (bytes hashed, bytes to hash): files skipped thanks to the cache are not in
    the total. A directory that does not exist is a report with every file missing (a node that
    lost its copy), not an error; a path that exists but is not a directory is a `VerifyError`.
    """
    started = time.monotonic()
    workers = jobs if jobs is not None else default_workers()
    if workers < 1:
        raise VerifyError(f"jobs must be at least 1, got {workers}")
    if directory.exists() and not directory.is_dir():
        raise VerifyError(f"{directory} is not a directory; give the checkpoint directory")
    cache_file = (cache_path or directory / CACHE_NAME) if use_cache else None
    notes: list[str] = []
    if not directory.exists():
        notes.append(f"{directory} does not exist")
    cached = load_cache(cache_file, notes) if cache_file is not None and not reverify else {}

    results: dict[str, FileResult] = {}
    to_hash: list[HashJob] = []
    fresh: dict[str, CacheEntry | None] = {}
    cached_bytes = 0
    for entry in manifest.files:
        early = _check_without_reading(directory, entry)
        if isinstance(early, FileResult):
            results[entry.path] = early
            fresh[entry.path] = None
            continue
        hit = cached.get(entry.path)
        if hit is not None and hit.algo == entry.algo and hit.stamp == early:
            results[entry.path] = _judge(entry, hit.digest, early.size, from_cache=True)
            cached_bytes += entry.size
            continue
        to_hash.append(HashJob(entry.path, directory / entry.path, entry.algo, entry.size))

    by_path = manifest.by_path()
    outcomes = hash_many(to_hash, workers=workers, progress=progress, read_size=read_size)
    for outcome in outcomes:
        entry = by_path[outcome.job.key]
        digest = outcome.digest
        if digest is None:
            results[entry.path] = FileResult(
                entry.path,
                "unreadable",
                expected_size=entry.size,
                algo=entry.algo,
                expected_digest=entry.digest,
                detail=f"cannot read: {outcome.error}",
            )
            fresh[entry.path] = None
        elif digest.changed:
            results[entry.path] = FileResult(
                entry.path,
                "hash_mismatch",
                expected_size=entry.size,
                actual_size=digest.stamp.size,
                algo=entry.algo,
                expected_digest=entry.digest,
                actual_digest=digest.hexdigest,
                detail="the file changed while it was hashed",
            )
            fresh[entry.path] = None
        else:
            results[entry.path] = _judge(entry, digest.hexdigest, digest.stamp.size)
            fresh[entry.path] = CacheEntry.of(digest)

    listed = set(by_path)
    extras = [
        FileResult(rel, "extra", actual_size=_size_or_none(directory / rel))
        for rel in (sorted(iter_tree(directory)) if directory.is_dir() else [])
        if rel not in listed
    ]
    if cache_file is not None and directory.is_dir():
        _save_cache_noting(cache_file, fresh, notes)
    return VerifyReport(
        directory=directory,
        repo=manifest.repo,
        revision=manifest.revision,
        results=tuple(results[f.path] for f in manifest.files) + tuple(extras),
        total_bytes=manifest.total_size,
        hashed_bytes=sum(job.size for job in to_hash),
        cached_bytes=cached_bytes,
        elapsed_s=time.monotonic() - started,
        jobs=workers,
        cache_path=cache_file,
        notes=tuple(notes),
    )


def _check_without_reading(directory: Path, entry: ManifestFile) -> FileResult | FileStamp:
    """A result if a stat settles it (missing, wrong size), else the stamp to look up."""
    path = directory / entry.path
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return FileResult(entry.path, "missing", expected_size=entry.size, algo=entry.algo)
    except OSError as exc:
        return FileResult(
            entry.path,
            "unreadable",
            expected_size=entry.size,
            algo=entry.algo,
            detail=f"cannot stat: {exc.strerror or exc}",
        )
    if not path.is_file():
        return FileResult(
            entry.path,
            "missing",
            expected_size=entry.size,
            algo=entry.algo,
            detail="missing (a directory or special file is in its place)",
        )
    if st.st_size != entry.size:
        return FileResult(
            entry.path,
            "size_mismatch",
            expected_size=entry.size,
            actual_size=st.st_size,
            algo=entry.algo,
            expected_digest=entry.digest,
        )
    return FileStamp.of(st)


def _judge(entry: ManifestFile, digest: str, size: int, *, from_cache: bool = False) -> FileResult:
    status: Status = "ok" if digest == entry.digest else "hash_mismatch"
    return FileResult(
        entry.path,
        status,
        expected_size=entry.size,
        actual_size=size,
        algo=entry.algo,
        expected_digest=entry.digest,
        actual_digest=digest,
        from_cache=from_cache,
    )


def _size_or_none(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _result_dict(result: FileResult) -> dict[str, Any]:
    return {
        "path": result.path,
        "status": result.status,
        "expected_size": result.expected_size,
        "actual_size": result.actual_size,
        "algo": result.algo,
        "expected_digest": result.expected_digest,
        "actual_digest": result.actual_digest,
        "from_cache": result.from_cache,
        "detail": result.detail,
        "message": result.describe(),
    }


# --- the verification cache ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A digest and the stamp its file had while it was read."""

    stamp: FileStamp
    algo: Algo
    digest: str

    @classmethod
    def of(cls, digest: Digest) -> CacheEntry:
        return cls(digest.stamp, digest.algo, digest.hexdigest)

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.stamp.size,
            "mtime_ns": self.stamp.mtime_ns,
            "ctime_ns": self.stamp.ctime_ns,
            "inode": self.stamp.inode,
            "dev": self.stamp.dev,
            "algo": self.algo,
            "digest": self.digest,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CacheEntry | None:
        """None for anything malformed: a bad entry costs a re-hash, never a false ok."""
        try:
            numbers = [data[k] for k in ("size", "mtime_ns", "ctime_ns", "inode", "dev")]
            algo, digest = data["algo"], data["digest"]
        except (KeyError, TypeError):
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        if algo not in ("sha256", "git-sha1") or not isinstance(digest, str):
            return None
        return cls(FileStamp(*numbers), algo, digest)


def load_cache(cache_file: Path, notes: list[str] | None = None) -> dict[str, CacheEntry]:
    """Entries of a cache file; empty if there is none or it is unreadable or malformed."""
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        if notes is not None:
            notes.append(f"ignored the verification cache {cache_file}: {exc}")
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        if notes is not None:
            notes.append(f"ignored the verification cache {cache_file}: unknown format")
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    loaded = {str(k): CacheEntry.from_dict(v) for k, v in entries.items() if isinstance(v, dict)}
    return {path: entry for path, entry in loaded.items() if entry is not None}


def update_cache(cache_file: Path, changes: Mapping[str, CacheEntry | None]) -> None:
    """Merge `changes` into the cache file (None removes an entry), atomically, under a lock.

    Raises OSError if the cache cannot be written and filelock.Timeout if another process holds
    the lock for longer than LOCK_TIMEOUT_S.
    """
    with _locked(cache_file):
        entries = load_cache(cache_file)
        for path, entry in changes.items():
            if entry is None:
                entries.pop(path, None)
            else:
                entries[path] = entry
        document = {
            "version": CACHE_VERSION,
            "entries": {path: entries[path].to_dict() for path in sorted(entries)},
        }
        atomic_write_text(cache_file, json.dumps(document, indent=1) + "\n")


def _save_cache_noting(
    cache_file: Path, changes: Mapping[str, CacheEntry | None], notes: list[str]
) -> None:
    try:
        update_cache(cache_file, changes)
    except filelock.Timeout:
        notes.append(f"verification cache not saved: {cache_file} is locked by another verifier")
    except OSError as exc:
        notes.append(f"verification cache not saved to {cache_file}: {exc.strerror or exc}")


@contextlib.contextmanager
def _locked(cache_file: Path) -> Iterator[None]:
    lock = filelock.FileLock(f"{cache_file}.lock", timeout=LOCK_TIMEOUT_S)
    with lock:
        yield
