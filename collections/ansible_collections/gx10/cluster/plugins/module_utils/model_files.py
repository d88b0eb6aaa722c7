# SPDX-License-Identifier: Apache-2.0
"""Model files: hashing, verification against a manifest, the verification cache, safe install.

Standard library only: this runs on the nodes (python3 and nothing else) inside the
gx10.cluster.model_fetch module, and on the controller through ``gx10.model``, which loads it
(``gx10._collection``) so there is one implementation of every rule. Its errors are
``model_errors``'s.

- Hashing: sha256 of the content (the Hub's ``lfs.sha256``) or the git blob sha1
  (``sha1(b"blob <size>\\0" + content)``, the Hub's ``blobId``, what ``git hash-object`` prints),
  one file or many in parallel. Parallel across files (a file's hash is one sequential chain).
  Threads, not processes: hashlib and file reads release the GIL on large buffers, so N threads
  keep N cores busy (as fast as a process pool, measured) without pickling results. A 1 MiB read
  into a buffer reused for every read stays in the core's L2 cache between the copy and the
  hash: 4-16 MiB reads spill out of it and are slower, and hashing an mmap of the file (no copy,
  but the hash then reads RAM) was no faster (``bench/hash_throughput.py``,
  docs/PERFORMANCE.md).
- Verification: every expected file is ok, missing, size_mismatch, hash_mismatch or unreadable;
  files the manifest does not list are "extra", reported and never touched. Sizes first (a
  truncated shard costs a stat), then the rest is hashed in parallel.
- The verification cache (``<dir>/.gx10-verify-cache.json``): per file the digest and the stamp
  (size, mtime_ns, ctime_ns, inode, dev) the file had while it was hashed. A file is skipped only
  if all five are unchanged (ctime catches a rewrite whose mtime was put back). Written atomically
  under an ``flock`` on ``<cache>.lock``, merged with what another verifier wrote meanwhile.
- Receive and install: a fetched file lands as ``<name>.partial`` through a ``Receiver``, which
  hashes every buffer in the same loop that writes it (after the whole buffer is written), so the
  bytes hashed are the bytes that reached the file and a freshly fetched file is never read back.
  A resumed ``.partial``'s existing bytes are read once to carry the hash on. After the last byte
  the digest is compared with the manifest's; only then is the file fsynced and renamed over the
  destination, and the verification cache records it with the installed file's stamp (so the
  verify pass after a fetch finds it there). ``install_verified`` does the same for a
  ``.partial`` that is already complete (it reads it in full). A destination only ever holds a
  verified file or what it held before. Shorter than expected: kept (a resumable download).
  Longer, or the wrong hash: removed (no resume can fix it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import (
    CacheLockTimeout,
    CorruptPartialError,
    IncompletePartialError,
    InstallError,
    VerifyError,
)

Algo = Literal["sha256", "git-sha1"]
Status = Literal["ok", "missing", "size_mismatch", "hash_mismatch", "unreadable", "extra"]

ProgressCallback = Callable[[int, int], None]
"""Called with (bytes hashed so far, bytes to hash in total), one call at a time (a lock
serializes the worker threads); the first call is (0, total), then at most one call per
PROGRESS_INTERVAL_S, and a last call with the final count."""

PROGRESS_INTERVAL_S = 0.1

READ_SIZE = 1024 * 1024
CACHE_NAME = ".gx10-verify-cache.json"
FETCHING_NAME = ".gx10-fetching"
"""Held under an exclusive flock by model_fetch while it fetches into the directory: the peer
server tells a node downstream in the sync chain whether this node is still fetching."""
CACHE_VERSION = 1
LOCK_TIMEOUT_S = 60.0
PARTIAL_SUFFIX = ".partial"
DIGEST_LENGTH: dict[str, int] = {"sha256": 64, "git-sha1": 40}


# --- hashing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file without reading it."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    dev: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@dataclass(frozen=True)
class Digest:
    """The digest of a file and the stamp it had while it was read."""

    algo: Algo
    hexdigest: str
    stamp: FileStamp
    changed: bool
    """True if the file's stamp differed after the read: the digest may not match any version."""


@dataclass(frozen=True)
class HashJob:
    key: str
    path: Path
    algo: Algo
    size: int
    """Expected size in bytes, for the progress total."""


@dataclass(frozen=True)
class HashOutcome:
    job: HashJob
    digest: Digest | None
    error: str | None
    """Why the file could not be read (OSError text), when digest is None."""


def git_blob_sha1(data: bytes) -> str:
    """The git object id of `data` as a blob, as `git hash-object` prints it."""
    hasher = hashlib.sha1(usedforsecurity=False)
    hasher.update(b"blob %d\0" % len(data))
    hasher.update(data)
    return hasher.hexdigest()


class Hasher(Protocol):
    """What hashlib's sha256 and sha1 objects offer that the hashing here uses."""

    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...
    def hexdigest(self) -> str: ...


def new_hasher(algo: Algo, size: int) -> Hasher:
    """A hasher for a file of `size` bytes: sha256 of the content, or the git blob sha1, whose
    ``blob <size>\\0`` header comes first (so the size must be known before the first byte)."""
    if algo == "sha256":
        return hashlib.sha256()
    hasher = hashlib.sha1(usedforsecurity=False)
    hasher.update(b"blob %d\0" % size)
    return hasher


def hash_file(
    path: Path,
    algo: Algo,
    *,
    on_read: Callable[[int], None] | None = None,
    read_size: int = READ_SIZE,
) -> Digest:
    """Hash one file. Raises OSError if it cannot be opened or read."""
    with open(path, "rb", buffering=0) as handle:
        before = FileStamp.of(os.fstat(handle.fileno()))
        # Advice only: a filesystem (or OS) that refuses it still reads fine.
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        hasher = new_hasher(algo, before.size)
        buffer = bytearray(min(read_size, max(before.size, 1)))
        view = memoryview(buffer)
        while count := handle.readinto(buffer):
            hasher.update(view[:count])
            if on_read is not None:
                on_read(count)
        after = FileStamp.of(os.fstat(handle.fileno()))
    return Digest(algo, hasher.hexdigest(), before, changed=after != before)


def hash_many(
    jobs: Sequence[HashJob],
    *,
    workers: int,
    progress: ProgressCallback | None = None,
    read_size: int = READ_SIZE,
) -> list[HashOutcome]:
    """Hash files on `workers` threads; outcomes come back in the order of `jobs`.

    If the caller is interrupted (Ctrl-C) or the progress callback raises, the other workers stop
    at their next read instead of finishing multi-gigabyte files, and the exception propagates.
    """
    meter = _Meter(sum(job.size for job in jobs), progress)
    cancelled = threading.Event()
    failures: list[BaseException] = []

    def on_read(count: int) -> None:
        if cancelled.is_set():
            raise _Cancelled
        meter.add(count)

    def run(job: HashJob) -> HashOutcome:
        try:
            digest = hash_file(job.path, job.algo, on_read=on_read, read_size=read_size)
        except OSError as exc:
            return HashOutcome(job, None, exc.strerror or str(exc))
        except _Cancelled:
            raise
        except BaseException as exc:
            # map() only shows it once it reaches this job: stop the other workers now.
            failures.append(exc)
            cancelled.set()
            raise
        return HashOutcome(job, digest, None)

    meter.start()
    if not jobs:
        return []
    # Largest first: with one big file among small ones it keeps that file from running alone.
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].size)
    outcomes: list[HashOutcome | None] = [None] * len(jobs)
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs))))
    try:
        for index, outcome in zip(order, pool.map(run, [jobs[i] for i in order]), strict=True):
            outcomes[index] = outcome
    except BaseException as exc:
        cancelled.set()
        pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, _Cancelled) and failures:
            raise failures[0] from None  # the cause, not a worker that stopped because of it
        raise
    pool.shutdown(wait=True)
    meter.finish()
    return [outcome for outcome in outcomes if outcome is not None]


class _Cancelled(Exception):
    """Raised inside a worker to stop hashing after another worker or the caller failed."""


def default_workers() -> int:
    """The cores this process may run on (cgroup/affinity aware where the OS says)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Meter:
    """Bytes hashed so far, passed on to the progress callback at most every `interval` seconds.

    A call per read would cost the hashing threads more than the bar is worth: a rich progress
    update takes a lock and some microseconds, thousands of times a second at GB/s.
    """

    def __init__(
        self,
        total: int,
        callback: ProgressCallback | None,
        interval: float | None = None,
    ) -> None:
        self._total = total
        self._done = 0
        self._reported = 0
        self._due = 0.0
        self._interval = PROGRESS_INTERVAL_S if interval is None else interval
        self._callback = callback
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._callback is not None:
            self._due = time.monotonic() + self._interval
            self._callback(0, self._total)

    def add(self, count: int) -> None:
        if self._callback is None:
            return
        with self._lock:
            self._done += count
            now = time.monotonic()
            if now < self._due and self._done < self._total:
                return
            self._due = now + self._interval
            self._report()

    def finish(self) -> None:
        """Report the final count if the last reads fell inside an interval."""
        if self._callback is None:
            return
        with self._lock:
            if self._done != self._reported:
                self._report()

    def _report(self) -> None:
        assert self._callback is not None
        self._reported = self._done
        self._callback(self._done, max(self._total, self._done))


# --- expected files --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """One file the manifest pins: relative path, size, algorithm and hex digest."""

    path: str
    size: int
    algo: Algo
    digest: str


class Pinned(Protocol):
    """What ``install_verified`` needs of a pinned file: an ``Expected`` or a manifest's file."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def algo(self) -> Algo: ...
    @property
    def digest(self) -> str: ...


def path_problems(path: object) -> list[str]:
    """Why `path` cannot name a file inside a model directory (empty list: it can)."""
    if not isinstance(path, str) or not path:
        return [f"path: {path!r} is not a non-empty string"]
    fix = "paths are relative to the model directory, with / separators"
    problems = []
    if path.startswith("/"):
        problems.append(f"path: {path!r} is absolute; {fix}")
    if "\\" in path:
        problems.append(f"path: {path!r} has a backslash; {fix}")
    if "\0" in path:
        problems.append(f"path: {path!r} has a NUL byte")
    parts = path.split("/")
    if ".." in parts:
        problems.append(
            f"path: {path!r} has a '..' component, which could escape the model directory"
        )
    if any(part in ("", ".") for part in parts) and not path.startswith("/"):
        problems.append(f"path: {path!r} has an empty or '.' component; {fix}")
    if is_ignored(path):
        problems.append(f"path: {path!r} is a place gx10 never treats as a model file")
    if path.endswith(PARTIAL_SUFFIX):
        # It would collide with the name a fetch gives a file until it is verified, and a peer
        # server never serves such a name.
        problems.append(
            f"path: {path!r} ends in {PARTIAL_SUFFIX}, the name gx10 gives a file while it is "
            "fetched and not yet verified; gx10 cannot hold a model file by that name"
        )
    return problems


def expected_from_dicts(files: Sequence[Mapping[str, Any]]) -> list[Expected]:
    """Manifest file items (``path``, ``size``, ``sha256`` or ``git_sha1``) as Expected.

    Raises VerifyError listing every malformed item: the node re-checks what the controller
    validated, because a module argument can come from anywhere.
    """
    problems: list[str] = []
    result: list[Expected] = []
    seen: set[str] = set()
    for index, item in enumerate(files):
        where = f"files[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: not a mapping")
            continue
        path, size = item.get("path"), item.get("size")
        found = [key for key in ("sha256", "git_sha1") if item.get(key)]
        mine = [f"{where}: {p}" for p in path_problems(path)]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            mine.append(f"{where}: size {size!r} is not a non-negative integer")
        if len(found) != 1:
            mine.append(f"{where}: needs exactly one of sha256, git_sha1")
        else:
            algo: Algo = "sha256" if found[0] == "sha256" else "git-sha1"
            digest = item[found[0]]
            length = DIGEST_LENGTH[algo]
            if not isinstance(digest, str) or len(digest) != length or not _is_hex(digest):
                mine.append(f"{where}: {found[0]} {digest!r} is not {length} lowercase hex chars")
        if isinstance(path, str) and path in seen:
            mine.append(f"{where}: {path!r} is listed twice")
        if mine:
            problems.extend(mine)
            continue
        assert isinstance(path, str)
        assert isinstance(size, int)
        seen.add(path)
        result.append(Expected(path, size, algo, str(item[found[0]])))
    if problems:
        raise VerifyError("bad manifest file list: " + "; ".join(problems))
    return result


def _is_hex(value: str) -> bool:
    return all(c in "0123456789abcdef" for c in value)


def is_ignored(relpath: str) -> bool:
    """Paths inside a model directory that are never model files."""
    first = relpath.split("/", 1)[0]
    return (
        first == ".git"
        or relpath.startswith(".cache/huggingface/")
        or first.startswith(".gx10-verify-cache")
        or relpath == FETCHING_NAME
    )


def iter_tree(directory: Path) -> Iterator[str]:
    """Relative POSIX paths of the regular files (or links to them) under `directory`."""
    for root, dirs, names in os.walk(directory):
        base = Path(root).relative_to(directory).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = [d for d in dirs if not is_ignored(prefix + d + "/")]
        for name in names:
            rel = prefix + name
            if not is_ignored(rel) and (Path(root) / name).is_file():
                yield rel


# --- verification ----------------------------------------------------------------------------


@dataclass(frozen=True)
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "expected_size": self.expected_size,
            "actual_size": self.actual_size,
            "algo": self.algo,
            "expected_digest": self.expected_digest,
            "actual_digest": self.actual_digest,
            "from_cache": self.from_cache,
            "detail": self.detail,
            "message": self.describe(),
        }


@dataclass(frozen=True)
class Verification:
    """What one verify pass found (``gx10.model.VerifyReport`` adds the manifest's identity)."""

    directory: Path
    results: tuple[FileResult, ...]
    """Expected files in the given order, then extra files sorted by path."""
    total_bytes: int
    """Size of every expected file together."""
    hashed_bytes: int
    """Bytes read and hashed in this pass."""
    cached_bytes: int
    """Bytes of files whose digest came from the verification cache."""
    elapsed_s: float
    jobs: int
    cache_path: Path | None
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Every expected file is present with the right size and hash (extras do not count)."""
        return all(r.status in ("ok", "extra") for r in self.results)

    @property
    def failures(self) -> tuple[FileResult, ...]:
        return tuple(r for r in self.results if r.status not in ("ok", "extra"))

    @property
    def extras(self) -> tuple[FileResult, ...]:
        return tuple(r for r in self.results if r.status == "extra")

    def counts(self) -> dict[str, int]:
        """How many files have each status."""
        counts: dict[str, int] = {}
        for result in self.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "directory": str(self.directory),
            "counts": self.counts(),
            "total_bytes": self.total_bytes,
            "hashed_bytes": self.hashed_bytes,
            "cached_bytes": self.cached_bytes,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs": self.jobs,
            "cache_path": str(self.cache_path) if self.cache_path else None,
            "notes": list(self.notes),
            "failures": [r.to_dict() for r in self.failures],
            "extras": [r.to_dict() for r in self.extras],
            "files": [r.to_dict() for r in self.results],
        }


def verify_files(
    directory: Path,
    expected: Sequence[Expected],
    *,
    jobs: int | None = None,
    reverify: bool = False,
    progress: ProgressCallback | None = None,
    use_cache: bool = True,
    cache_path: Path | None = None,
    read_size: int = READ_SIZE,
) -> Verification:
    """Check every expected file under `directory`; never modifies or deletes a model file.

    A directory that does not exist is every file missing (a node that lost its copy), not an
    error; a path that exists but is not a directory is a VerifyError.
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
    for entry in expected:
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

    by_path = {entry.path: entry for entry in expected}
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

    extras = [
        FileResult(rel, "extra", actual_size=_size_or_none(directory / rel))
        for rel in (sorted(iter_tree(directory)) if directory.is_dir() else [])
        if rel not in by_path
    ]
    if cache_file is not None and directory.is_dir():
        save_cache_noting(cache_file, fresh, notes)
    return Verification(
        directory=directory,
        results=tuple(results[e.path] for e in expected) + tuple(extras),
        total_bytes=sum(e.size for e in expected),
        hashed_bytes=sum(job.size for job in to_hash),
        cached_bytes=cached_bytes,
        elapsed_s=time.monotonic() - started,
        jobs=workers,
        cache_path=cache_file,
        notes=tuple(notes),
    )


def _check_without_reading(directory: Path, entry: Expected) -> FileResult | FileStamp:
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


def _judge(entry: Expected, digest: str, size: int, *, from_cache: bool = False) -> FileResult:
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


# --- the verification cache ------------------------------------------------------------------


@dataclass(frozen=True)
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


def update_cache(
    cache_file: Path,
    changes: Mapping[str, CacheEntry | None],
    *,
    timeout: float = LOCK_TIMEOUT_S,
) -> None:
    """Merge `changes` into the cache file (None removes an entry), atomically, under a lock.

    Raises OSError if the cache cannot be written and CacheLockTimeout if another process holds
    the lock for longer than `timeout` seconds.
    """
    with locked(Path(f"{cache_file}.lock"), timeout):
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


def save_cache_noting(
    cache_file: Path, changes: Mapping[str, CacheEntry | None], notes: list[str]
) -> None:
    """update_cache, with a failure noted instead of raised: the cache only saves time."""
    try:
        update_cache(cache_file, changes)
    except CacheLockTimeout:
        notes.append(f"verification cache not saved: {cache_file} is locked by another verifier")
    except OSError as exc:
        notes.append(f"verification cache not saved to {cache_file}: {exc.strerror or exc}")


@contextlib.contextmanager
def locked(lock_file: Path, timeout: float) -> Iterator[None]:
    """An exclusive ``flock`` on `lock_file` (created if needed), waited for up to `timeout` s."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CacheLockTimeout(
                        f"{lock_file} is held by another process after {timeout:.0f} s"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a hidden temp file in the same directory and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name.lstrip('.')}."  # a leftover stays hidden and keeps the name's prefix
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            # mkstemp makes 0600; keep the mode of the file we replace, else the usual 0644.
            os.fchmod(handle.fileno(), _mode_of(path, default=0o644))
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode_of(path: Path, *, default: int) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return default


# --- receive and install ---------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    dest: Path
    size: int
    digest: str
    cached: bool
    """The verification cache learned the file, so the next verify does not read it again."""
    read_back: int = 0
    """Bytes of the ``.partial`` read from disk to hash them: a resumed prefix, or the whole
    file for ``install_verified``; 0 for bytes hashed as they were received."""


def partial_path(dest: Path) -> Path:
    """Where a fetch writes `dest` before it is verified: `<dest>.partial`, same directory."""
    return dest.with_name(dest.name + PARTIAL_SUFFIX)


def _write(fd: int, data: memoryview) -> int:
    """os.write, named so a test can make writes short."""
    return os.write(fd, data)


class Receiver:
    """One file's bytes on their way into its ``.partial``, hashed as they are written.

    The same loop writes a buffer, in full (a short write is continued until every byte of it is
    in the file), and then hashes that very buffer: the digest is that of the bytes that reached
    the file, in file order, and nothing is read back. A ``.partial`` left by an earlier attempt is
    read once (``open_to_resume``) to carry the hash on from its end. ``install`` compares the
    digest with the manifest's, fsyncs, renames over the destination and records the file in the
    verification cache. The ``.partial`` is held under an exclusive ``flock`` meanwhile, so a
    second fetch of the same file cannot interleave its bytes with ours.

    What this does not catch: a disk that corrupts the data after the write (the page cache held
    what was hashed); the next ``reverify`` does. Use as a context manager (it closes the file).
    """

    def __init__(
        self,
        partial: Path,
        dest: Path,
        expected: Pinned,
        *,
        cache_file: Path | None = None,
        read_size: int = READ_SIZE,
    ) -> None:
        self.partial = partial
        self.dest = dest
        self.expected = expected
        self.cache_file = cache_file
        self.received = 0
        """Bytes written into the ``.partial`` from the source by this receiver."""
        self.hashed_receiving = 0
        """Of those, bytes hashed as they were written (all but a buffer a failed write cut)."""
        self.read_back = 0
        """Bytes of the ``.partial`` read from disk to hash them (a resumed prefix)."""
        self._read_size = max(1, read_size)
        self._fd = -1
        self._offset = 0
        self._hasher = new_hasher(expected.algo, expected.size)
        self._resuming = False
        self._installed = False

    @property
    def offset(self) -> int:
        """Bytes in the ``.partial`` so far, all of them hashed: where the next write goes."""
        return self._offset

    @property
    def size(self) -> int:
        """The size the manifest pins."""
        return self.expected.size

    def __enter__(self) -> Receiver:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the ``.partial`` (releasing its lock); one that was opened to resume and is still
        empty is removed: it holds nothing to resume from."""
        if self._fd < 0:
            return
        try:
            if self._resuming and not self._installed and self._offset == 0:
                with contextlib.suppress(OSError):
                    mine = os.fstat(self._fd)
                    there = os.stat(self.partial)
                    if (there.st_ino, there.st_dev, there.st_size) == (mine.st_ino, mine.st_dev, 0):
                        os.unlink(self.partial)
        finally:
            os.close(self._fd)
            self._fd = -1

    def open_to_resume(self) -> int:
        """Open (or create) the ``.partial``, hash what it already holds, and return that length,
        where the fetch resumes. One longer than the file can be is emptied first. Raises
        InstallError if it cannot be opened, locked or read."""
        try:
            self._fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InstallError(f"cannot open {self.partial}: {exc.strerror or exc}") from exc
        self._resuming = True
        self._lock()
        try:
            if os.fstat(self._fd).st_size > self.size:  # cannot be resumed onto; start over
                os.ftruncate(self._fd, 0)
        except OSError as exc:
            raise InstallError(f"cannot resize {self.partial}: {exc.strerror or exc}") from exc
        self._hash_existing()
        return self._offset

    def open_existing(self) -> None:
        """Open a ``.partial`` that is already written and hash all of it (``install_verified``).
        Raises InstallError if it cannot be opened, locked or read."""
        try:
            self._fd = os.open(self.partial, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise InstallError(f"{self.partial} does not exist; nothing to install") from None
        except OSError as exc:
            raise InstallError(f"cannot read {self.partial}: {exc.strerror or exc}") from exc
        self._lock()
        self._hash_existing()

    def _lock(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallError(
                f"{self.partial} is being written by another fetch (it holds the file's lock); "
                "let that one finish, or stop it, then run again"
            ) from None

    def _hash_existing(self) -> None:
        """Read the file from its start and hash it: the only read-back a fetch does."""
        try:
            before = FileStamp.of(os.fstat(self._fd))
            # Advice only: a filesystem (or OS) that refuses it still reads fine.
            with contextlib.suppress(OSError, AttributeError):
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            os.lseek(self._fd, 0, os.SEEK_SET)
            buffer = bytearray(min(self._read_size, max(before.size, 1)))
            view = memoryview(buffer)
            done = 0
            while done < before.size:
                count = os.readv(self._fd, [view[: min(len(buffer), before.size - done)]])
                if not count:
                    break
                self._hasher.update(view[:count])
                done += count
                self.read_back += count
            after = FileStamp.of(os.fstat(self._fd))
        except OSError as exc:
            raise InstallError(f"cannot read {self.partial}: {exc.strerror or exc}") from exc
        if after != before or done != before.size:
            raise InstallError(
                f"{self.partial} changed while it was verified; is a fetch still writing?"
            )
        self._offset = done

    def restart(self) -> None:
        """Empty the ``.partial`` and start the hash over (the source ignored the resume)."""
        try:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
        except OSError as exc:
            raise InstallError(f"cannot empty {self.partial}: {exc.strerror or exc}") from exc
        self._offset = 0
        self._hasher = new_hasher(self.expected.algo, self.expected.size)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append `data` to the ``.partial`` and hash it, a slice of at most `read_size` at a
        time (the slice is still in the core's cache when it is hashed). Raises InstallError if
        the file cannot take it (a full disk): the bytes are then not all hashed, and the next
        attempt reads back what the file holds."""
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self._read_size):
            piece = view[start : start + self._read_size]
            written = 0
            while written < len(piece):
                try:
                    count = _write(self._fd, piece[written:])
                except OSError as exc:
                    raise InstallError(
                        f"cannot write {self.partial}: {exc.strerror or exc}"
                    ) from exc
                if count <= 0:
                    raise InstallError(f"cannot write {self.partial}: a write made no progress")
                written += count
                self.received += count
            # Only now, and exactly this buffer: the bytes hashed are the bytes the file got.
            self._hasher.update(piece)
            self.hashed_receiving += len(piece)
            self._offset += len(piece)

    def install(self) -> Installed:
        """Judge the ``.partial`` by its hash, then rename it over the destination.

        Raises IncompletePartialError (short: kept to resume), CorruptPartialError (too long or the
        wrong hash: removed; the destination untouched) or InstallError.
        """
        expected = self.expected
        try:
            os.fsync(self._fd)  # the data is on disk before the name points at it
            st = os.fstat(self._fd)
        except OSError as exc:
            raise InstallError(f"cannot flush {self.partial}: {exc.strerror or exc}") from exc
        if st.st_size != self._offset:
            raise InstallError(
                f"{self.partial} changed while it was verified; is a fetch still writing?"
            )
        if self._offset < expected.size:
            raise IncompletePartialError(
                f"{self.partial} is incomplete: {self._offset} of {expected.size} bytes; kept so "
                f"the fetch of {expected.path} can resume"
            )
        if self._offset > expected.size:
            _remove(self.partial)
            raise CorruptPartialError(
                f"{self.partial} is corrupt: {self._offset} bytes, expected {expected.size}; "
                f"removed, {expected.path} must be fetched again"
            )
        digest = self._hasher.hexdigest()
        if digest != expected.digest:
            _remove(self.partial)
            raise CorruptPartialError(
                f"{self.partial} is corrupt: {expected.algo} {digest}, expected "
                f"{expected.digest}; removed, {expected.path} must be fetched again"
            )
        if self.dest.is_dir():
            raise InstallError(f"cannot install {expected.path}: {self.dest} is a directory")
        verified = FileStamp.of(st)
        try:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.partial, self.dest)
        except OSError as exc:
            hint = (
                " (the .partial must be on the same filesystem)" if exc.errno == errno.EXDEV else ""
            )
            raise InstallError(
                f"cannot install {self.partial} as {self.dest}: {exc.strerror or exc}{hint}; "
                "the verified .partial is kept"
            ) from exc
        self._installed = True
        _fsync_dir(self.dest.parent)
        cached = False
        if self.cache_file is not None:
            cached = _record(self.cache_file, self.dest, expected, verified)
        return Installed(self.dest, expected.size, digest, cached, self.read_back)


def install_verified(
    tmp_partial: Path,
    dest: Path,
    expected: Pinned,
    *,
    cache_root: Path | None = None,
    cache_path: Path | None = None,
) -> Installed:
    """Verify `tmp_partial` against `expected` (reading it in full), then atomically rename it to
    `dest`. A fetch hashes as it receives instead (``Receiver``) and reads nothing back.

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
    # A size settles these without reading the file.
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
    cache_file = (cache_path or cache_root / CACHE_NAME) if cache_root is not None else None
    with Receiver(tmp_partial, dest, expected, cache_file=cache_file) as receiver:
        receiver.open_existing()
        return receiver.install()


def _record(cache_file: Path, dest: Path, expected: Pinned, verified: FileStamp) -> bool:
    """Put the installed `dest` in the cache with its own stamp (the rename changed its ctime),
    as a verify pass that hashed it would have; False if it could not."""
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
    except (OSError, CacheLockTimeout):  # the cache only saves time; the file is installed
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
