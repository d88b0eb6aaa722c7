"""Load pure-Python helpers from the gx10.cluster collection (one source for shared rules).

The collection's ``module_utils`` are standard-library only; the doctor reuses them (bandwidth
bands, remedies) instead of repeating them. They live in the project checkout, not in this package.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from types import ModuleType

from gx10.errors import Gx10Error, ProjectNotFoundError
from gx10.paths import project_home

_PACKAGE = "ansible_collections.gx10.cluster.plugins.module_utils"


def _roots() -> list[Path]:
    roots = [Path(__file__).resolve().parents[3] / "collections"]
    with contextlib.suppress(ProjectNotFoundError):
        roots.insert(0, project_home() / "collections")
    return [root for root in roots if (root / "ansible_collections" / "gx10").is_dir()]


def module_utils(name: str) -> ModuleType:
    """``ansible_collections.gx10.cluster.plugins.module_utils.<name>``."""
    for root in _roots():
        if str(root) not in sys.path:
            sys.path.append(str(root))
    try:
        return importlib.import_module(f"{_PACKAGE}.{name}")
    except ModuleNotFoundError as exc:
        raise Gx10Error(
            f"cannot load the gx10.cluster collection's {name} (looked in "
            f"{', '.join(str(r) for r in _roots()) or 'no collections directory'}): run from the "
            "project checkout or set GX10_HOME"
        ) from exc
