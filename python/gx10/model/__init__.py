"""Model weights: the manifest, verification, the safe-write primitive and the checkpoint catalog.

- `manifest`: `Manifest`, built from the Hub or a trusted directory, saved in the inventory,
  validated strictly on load.
- `verify`: check a directory against a manifest, in parallel, with a verification cache.
- `install_verified`: the only way a fetched file gets its final name (the collection's
  `model_files`).
- the catalog (`CATALOG`, `lookup`, `check_fits`): the checkpoints we know and whether a plan's
  nodes can hold them (the collection's `model_catalog`).
- `errors`: the collection's `model_errors` classes, rooted at `ModelError`.

The manifest model, the catalog, the errors and the file rules live in the gx10.cluster
collection's module_utils and are loaded through `gx10._collection.load`, the package's one way
into the collection; the collection imports nothing from gx10.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gx10._collection import load
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
    ModelError,
    PlanDoesNotFitError,
    VerifyError,
)
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

# The catalog and the file rules are the collection's, as the nodes and the model_plan action
# run them (gx10._collection loads them; nothing here changes sys.path).
if TYPE_CHECKING:
    from ansible_collections.gx10.cluster.plugins.module_utils import model_catalog, model_files
else:
    model_catalog = load("model_catalog")
    model_files = load("model_files")

CATALOG = model_catalog.CATALOG
USABLE_GB_PER_NODE = model_catalog.USABLE_GB_PER_NODE
CatalogEntry = model_catalog.CatalogEntry
FitReport = model_catalog.FitReport
check_fits = model_catalog.check_fits
lookup = model_catalog.lookup
Installed = model_files.Installed
install_verified = model_files.install_verified
partial_path = model_files.partial_path
git_blob_sha1 = model_files.git_blob_sha1

__all__ = [
    "CATALOG",
    "USABLE_GB_PER_NODE",
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
    "ModelError",
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
