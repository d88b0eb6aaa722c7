"""Load pure-Python helpers from the gx10.cluster collection (one source for shared rules).

The collection's ``module_utils`` are standard-library only; the doctor reuses them (bandwidth
bands, remedies) instead of repeating them. They live in the project checkout, not in this package.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gx10._collection import PACKAGE as _PACKAGE
from gx10._collection import add_to_path, roots
from gx10.errors import Gx10Error


def module_utils(name: str) -> ModuleType:
    """``ansible_collections.gx10.cluster.plugins.module_utils.<name>``."""
    add_to_path()
    try:
        return importlib.import_module(f"{_PACKAGE}.{name}")
    except ModuleNotFoundError as exc:
        raise Gx10Error(
            f"cannot load the gx10.cluster collection's {name} (looked in "
            f"{', '.join(str(r) for r in roots()) or 'no collections directory'}): run from the "
            "project checkout or set GX10_HOME"
        ) from exc
