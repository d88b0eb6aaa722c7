"""Errors raised while building or running the lab."""

from __future__ import annotations

from gx10.errors import Gx10Error


class LabError(Gx10Error):
    """The lab could not be built, started, inspected or removed."""
