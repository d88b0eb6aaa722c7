"""Put the gx10.cluster collection on the import path (one source for shared, stdlib-only rules).

The collection's ``module_utils`` are standard-library only so they run on the nodes; the
controller side (the doctor, ``gx10.model``) imports the same modules instead of repeating them.
They live in the project checkout (``collections/``), not in this package.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from gx10.errors import ProjectNotFoundError
from gx10.paths import project_home

PACKAGE = "ansible_collections.gx10.cluster.plugins.module_utils"


def roots() -> list[Path]:
    """Directories holding ``ansible_collections/gx10``: GX10_HOME's, then this checkout's."""
    found = [Path(__file__).resolve().parents[2] / "collections"]
    with contextlib.suppress(ProjectNotFoundError):
        found.insert(0, project_home() / "collections")
    return [root for root in found if (root / "ansible_collections" / "gx10").is_dir()]


def add_to_path() -> None:
    """Append the collection roots to sys.path (idempotent)."""
    for root in roots():
        if str(root) not in sys.path:
            sys.path.append(str(root))
