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

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gx10._collection import load
from gx10.model.manifest import Manifest

# The rules live in the collection (the nodes run them too); this module adds the manifest.
if TYPE_CHECKING:
    from ansible_collections.gx10.cluster.plugins.module_utils import model_files
else:
    model_files = load("model_files")

CACHE_NAME = model_files.CACHE_NAME
CACHE_VERSION = model_files.CACHE_VERSION
LOCK_TIMEOUT_S = model_files.LOCK_TIMEOUT_S
READ_SIZE = model_files.READ_SIZE
CacheEntry = model_files.CacheEntry
Expected = model_files.Expected
FileResult = model_files.FileResult
Status = model_files.Status
Verification = model_files.Verification
load_cache = model_files.load_cache
update_cache = model_files.update_cache

__all__ = [
    "CACHE_NAME",
    "CACHE_VERSION",
    "LOCK_TIMEOUT_S",
    "CacheEntry",
    "FileResult",
    "Status",
    "Verification",
    "VerifyReport",
    "expected_of",
    "load_cache",
    "update_cache",
    "verify",
]


@dataclass(frozen=True)
class VerifyReport(Verification):
    """A verify pass (the collection's `Verification`) and the manifest it checked against."""

    repo: str
    revision: str

    def to_dict(self) -> dict[str, Any]:
        # The manifest's identity next to the directory, ahead of the figures.
        base = super().to_dict()
        return {
            "ok": base["ok"],
            "directory": base["directory"],
            "repo": self.repo,
            "revision": self.revision,
            **base,
        }


def expected_of(manifest: Manifest) -> list[Expected]:
    """The manifest's files as the collection's Expected records."""
    return [Expected(f.path, f.size, f.algo, f.digest) for f in manifest.files]


def verify(
    directory: Path,
    manifest: Manifest,
    *,
    jobs: int | None = None,
    reverify: bool = False,
    progress: model_files.ProgressCallback | None = None,
    use_cache: bool = True,
    cache_path: Path | None = None,
    read_size: int = READ_SIZE,
) -> VerifyReport:
    """Check every manifest file under `directory`; never modifies or deletes a model file.

    `progress` gets (bytes hashed, bytes to hash): files skipped thanks to the cache are not in
    the total. A directory that does not exist is a report with every file missing (a node that
    lost its copy), not an error; a path that exists but is not a directory is a `VerifyError`.
    """
    found = model_files.verify_files(
        directory,
        expected_of(manifest),
        jobs=jobs,
        reverify=reverify,
        progress=progress,
        use_cache=use_cache,
        cache_path=cache_path,
        read_size=read_size,
    )
    found_fields = {field.name: getattr(found, field.name) for field in fields(found)}
    return VerifyReport(**found_fields, repo=manifest.repo, revision=manifest.revision)
