"""The errors of the model layer: the gx10.cluster collection's ``model_errors`` classes.

One hierarchy, not a copy: these names ARE the collection's classes (the model_plan action and the
nodes' model_fetch raise them too), rooted at ``ModelError``. They are deliberately not
``Gx10Error`` subclasses, because the collection imports nothing from ``gx10``; the CLI maps
``ModelError`` to exit code 1 (setup error) next to ``Gx10Error``, as it did when these were
``Gx10Error``s. A verification that finds a bad file is not an error: `verify()` returns a report
with ``ok == False``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gx10._collection import load

if TYPE_CHECKING:
    from ansible_collections.gx10.cluster.plugins.module_utils import model_errors
else:
    model_errors = load("model_errors")

ModelError = model_errors.ModelError
ManifestError = model_errors.ManifestError
CatalogError = model_errors.CatalogError
PlanDoesNotFitError = model_errors.PlanDoesNotFitError
VerifyError = model_errors.VerifyError
CacheLockTimeout = model_errors.CacheLockTimeout
InstallError = model_errors.InstallError
CorruptPartialError = model_errors.CorruptPartialError
IncompletePartialError = model_errors.IncompletePartialError
HubError = model_errors.HubError
HubRepoNotFoundError = model_errors.HubRepoNotFoundError
HubRevisionNotFoundError = model_errors.HubRevisionNotFoundError
HubAccessError = model_errors.HubAccessError

__all__ = [
    "CacheLockTimeout",
    "CatalogError",
    "CorruptPartialError",
    "HubAccessError",
    "HubError",
    "HubRepoNotFoundError",
    "HubRevisionNotFoundError",
    "IncompletePartialError",
    "InstallError",
    "ManifestError",
    "ModelError",
    "PlanDoesNotFitError",
    "VerifyError",
]
