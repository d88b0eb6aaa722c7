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

from pathlib import Path

from ansible_collections.gx10.cluster.plugins.module_utils import model_files
from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    PARTIAL_SUFFIX,
    Expected,
    Installed,
    partial_path,
)
from gx10.model.errors import CorruptPartialError, IncompletePartialError, InstallError
from gx10.model.manifest import ManifestFile

__all__ = ["PARTIAL_SUFFIX", "Installed", "install_verified", "partial_path"]


def install_verified(
    tmp_partial: Path,
    dest: Path,
    expected: ManifestFile,
    *,
    cache_root: Path | None = None,
    cache_path: Path | None = None,
) -> Installed:
    """The collection's `model_files.install_verified` (one implementation, which the nodes run),
    for a manifest file, raising gx10's `InstallError` kinds (`Gx10Error`s) instead of its own."""
    pinned = Expected(expected.path, expected.size, expected.algo, expected.digest)
    try:
        return model_files.install_verified(
            tmp_partial, dest, pinned, cache_root=cache_root, cache_path=cache_path
        )
    except model_files.IncompletePartialError as exc:
        raise IncompletePartialError(str(exc)) from exc.__cause__
    except model_files.CorruptPartialError as exc:
        raise CorruptPartialError(str(exc)) from exc.__cause__
    except model_files.InstallError as exc:
        raise InstallError(str(exc)) from exc.__cause__
