"""Locate the gx10 project home: the repo root holding ansible.cfg and playbooks/."""

from __future__ import annotations

import os
from pathlib import Path

from gx10.errors import ProjectNotFoundError

HOME_ENV = "GX10_HOME"

# What makes a directory a project home; checked in this order so the error names the first gap.
_REQUIRED = (("ansible.cfg", "file"), ("playbooks", "dir"))


def project_home() -> Path:
    """Return the project home.

    `GX10_HOME` wins when set; otherwise the repo root two levels above this package
    (`<repo>/python/gx10/paths.py`), which is where an editable install or a checkout puts it.
    """
    env_value = os.environ.get(HOME_ENV, "").strip()
    if env_value:
        home = Path(env_value).expanduser().resolve()
        source = f"{HOME_ENV}={env_value}"
    else:
        home = Path(__file__).resolve().parents[2]
        source = f"the gx10 package location ({Path(__file__).resolve().parent})"
    _validate(home, source)
    return home


def playbooks_dir(home: Path) -> Path:
    return home / "playbooks"


def ansible_cfg(home: Path) -> Path:
    return home / "ansible.cfg"


def _validate(home: Path, source: str) -> None:
    if not home.is_dir():
        raise ProjectNotFoundError(
            f"project home {home} (from {source}) is not a directory; "
            f"set {HOME_ENV} to the gx10 repo root"
        )
    for name, kind in _REQUIRED:
        path = home / name
        present = path.is_file() if kind == "file" else path.is_dir()
        if not present:
            raise ProjectNotFoundError(
                f"{home} (from {source}) is not a gx10 project home: missing {name}"
                f"{'/' if kind == 'dir' else ''}; set {HOME_ENV} to the repo root that holds "
                "ansible.cfg and playbooks/"
            )
