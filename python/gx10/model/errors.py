"""Typed errors of the model layer.

Every one is a `Gx10Error`, so the CLI maps it to exit code 1 (setup error). A verification that
finds a bad file is not an error: `verify()` returns a report with `ok == False`.
"""

from __future__ import annotations

from gx10.errors import Gx10Error


class ManifestError(Gx10Error):
    """A manifest is malformed: the message names the field, the bad value and the fix."""


class HubError(Gx10Error):
    """The Hub could not be asked, or answered something we cannot use."""


class HubRepoNotFoundError(HubError):
    """The repository does not exist, or is private/gated and the token cannot see it."""


class HubRevisionNotFoundError(HubError):
    """The repository exists but has no such revision."""


class HubAccessError(HubError):
    """The repository is gated or the token lacks permission."""


class VerifyError(Gx10Error):
    """Verification could not start (the target is not a directory, bad job count)."""


class InstallError(Gx10Error):
    """A `.partial` file could not be installed; the destination is untouched."""


class CorruptPartialError(InstallError):
    """The `.partial` file has the wrong content or is too long; it has been removed."""


class IncompletePartialError(InstallError):
    """The `.partial` file is shorter than expected; it is kept so the fetch can resume."""


class CatalogError(Gx10Error):
    """Unknown checkpoint name."""


class PlanDoesNotFitError(Gx10Error):
    """A checkpoint does not fit the nodes of a plan; the message has the numbers."""
