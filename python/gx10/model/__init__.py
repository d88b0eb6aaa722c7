"""Model weights: the manifest, verification, the safe-write primitive and the checkpoint catalog.

- `manifest`: `Manifest`, built from the Hub or a trusted directory, saved in the inventory,
  validated strictly on load.
- `verify`: check a directory against a manifest, in parallel, with a verification cache.
- `fetch`: `install_verified`, the only way a fetched file gets its final name.
- `catalog`: the checkpoints we know and whether a plan's nodes can hold them.
"""

# ruff: noqa: E402  (the imports below need add_to_path() to have run)

from __future__ import annotations

from gx10._collection import add_to_path

# The file rules (hashing, verify, cache, install) are the gx10.cluster collection's model_files
# module_utils, which the nodes run too; every submodule imports them from there, so the path
# must be set before the submodule imports below.
add_to_path()

from gx10.model.catalog import CATALOG, CatalogEntry, FitReport, check_fits, lookup
from gx10.model.errors import (
    CatalogError,
    CorruptPartialError,
    HubAccessError,
    HubError,
    HubRepoNotFoundError,
    HubRevisionNotFoundError,
    IncompletePartialError,
    InstallError,
    ManifestError,
    PlanDoesNotFitError,
    VerifyError,
)
from gx10.model.fetch import Installed, install_verified, partial_path
from gx10.model.hashing import git_blob_sha1
from gx10.model.manifest import (
    Manifest,
    ManifestFile,
    load_manifest,
    manifest_from_directory,
    manifest_from_hub,
    parse_manifest,
    resolve_token,
    save_manifest,
)
from gx10.model.verify import FileResult, VerifyReport, verify

__all__ = [
    "CATALOG",
    "CatalogEntry",
    "CatalogError",
    "CorruptPartialError",
    "FileResult",
    "FitReport",
    "HubAccessError",
    "HubError",
    "HubRepoNotFoundError",
    "HubRevisionNotFoundError",
    "IncompletePartialError",
    "InstallError",
    "Installed",
    "Manifest",
    "ManifestError",
    "ManifestFile",
    "PlanDoesNotFitError",
    "VerifyError",
    "VerifyReport",
    "check_fits",
    "git_blob_sha1",
    "install_verified",
    "load_manifest",
    "lookup",
    "manifest_from_directory",
    "manifest_from_hub",
    "parse_manifest",
    "partial_path",
    "resolve_token",
    "save_manifest",
    "verify",
]
