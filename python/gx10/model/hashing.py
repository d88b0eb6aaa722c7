"""File hashing: sha256 and git blob sha1, one file or many in parallel.

Threads, not processes: hashlib and file reads release the GIL on large buffers, so N threads keep
N cores busy without pickling or a second copy of the data. The kernel is told each file is read
sequentially (twice the read-ahead on Linux), so the size of our reads does not set the disk's
request size; it sets how much is copied before it is hashed. A buffer that stays in the core's
L2 cache between the copy and the hash is faster than a large one: on the dev VM (2 MiB L2 per
core), one thread from the page cache did 1.41 GB/s with 1 MiB reads, 1.38 with 4 MiB and 1.11
with 16 MiB (`bench/hash_throughput.py --read-mib N` measures it on a node).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Algo = Literal["sha256", "git-sha1"]
"""`sha256` of the content (what the Hub reports as `lfs.sha256`), or the git blob sha1
(`sha1(b"blob <size>\\0" + content)`, what the Hub reports as `blobId` and `git hash-object`
prints)."""

ProgressCallback = Callable[[int, int], None]
"""Called with (bytes hashed so far, bytes to hash in total). Called from worker threads, one call
at a time (a lock serializes them); the first call is (0, total)."""

READ_SIZE = 1024 * 1024


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Digest:
    """The digest of a file and the stamp it had while it was read."""

    algo: Algo
    hexdigest: str
    stamp: FileStamp
    changed: bool
    """True if the file's stamp differed after the read: the digest may not match any version."""


@dataclass(frozen=True, slots=True)
class HashJob:
    key: str
    path: Path
    algo: Algo
    size: int
    """Expected size in bytes, for the progress total."""


@dataclass(frozen=True, slots=True)
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
        if algo == "sha256":
            hasher = hashlib.sha256()
        else:
            hasher = hashlib.sha1(usedforsecurity=False)
            hasher.update(b"blob %d\0" % before.size)
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
    # Largest first: with equal-sized shards this changes nothing, with one big file among small
    # ones it keeps that file from starting last and running alone.
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
    def __init__(self, total: int, callback: ProgressCallback | None) -> None:
        self._total = total
        self._done = 0
        self._callback = callback
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._callback is not None:
            self._callback(0, self._total)

    def add(self, count: int) -> None:
        if self._callback is None:
            return
        with self._lock:
            self._done += count
            self._callback(self._done, max(self._total, self._done))
