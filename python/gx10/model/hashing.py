"""File hashing: sha256 and git blob sha1, one file or many in parallel.

The implementation is the gx10.cluster collection's ``model_files`` module_utils (standard library
only), so the nodes hash with exactly the code the controller tests; this module re-exports it.
See that module for why threads and why 1 MiB reads (`bench/hash_throughput.py` measures it).
"""

from __future__ import annotations

from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    READ_SIZE,
    Algo,
    Digest,
    FileStamp,
    HashJob,
    HashOutcome,
    ProgressCallback,
    default_workers,
    git_blob_sha1,
    hash_file,
    hash_many,
)

__all__ = [
    "READ_SIZE",
    "Algo",
    "Digest",
    "FileStamp",
    "HashJob",
    "HashOutcome",
    "ProgressCallback",
    "default_workers",
    "git_blob_sha1",
    "hash_file",
    "hash_many",
]
