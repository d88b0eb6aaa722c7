# SPDX-License-Identifier: Apache-2.0
"""The errors of the model layer: one hierarchy, rooted at ``ModelError``.

Standard library only (the nodes import it through ``model_files``). The modules and action
plugins of this collection raise these, and the gx10 Python package re-exports these very classes
as ``gx10.model.errors`` (no copy): ``gx10`` maps ``ModelError`` to its setup-error exit code next
to its own ``Gx10Error``. Every message says what is wrong and what to do.

A verification that finds a bad file is not an error: it returns a result with ``ok == False``.
"""

from __future__ import annotations


class ModelError(Exception):
    """Root of every error the model code (manifest, catalog, files, Hub) raises on purpose."""


class ManifestError(ModelError):
    """A manifest is malformed: the message names the field, the bad value and the fix."""


class CatalogError(ModelError):
    """Unknown checkpoint name."""


class PlanDoesNotFitError(ModelError):
    """A checkpoint does not fit the nodes of a plan; the message has the numbers."""


class VerifyError(ModelError):
    """Verification could not start (the target is not a directory, bad job count, bad list)."""


class CacheLockTimeout(ModelError):
    """Another verifier held the verification cache lock for longer than the timeout."""


class InstallError(ModelError):
    """A ``.partial`` file could not be installed; the destination is untouched."""


class CorruptPartialError(InstallError):
    """The ``.partial`` file has the wrong content or is too long; it has been removed."""


class IncompletePartialError(InstallError):
    """The ``.partial`` file is shorter than expected; it is kept so the fetch can resume."""


class HubError(ModelError):
    """The Hub could not be asked, or answered something we cannot use."""


class HubRepoNotFoundError(HubError):
    """The repository does not exist, or is private/gated and the token cannot see it."""


class HubRevisionNotFoundError(HubError):
    """The repository exists but has no such revision."""


class HubAccessError(HubError):
    """The repository is gated or the token lacks permission."""
