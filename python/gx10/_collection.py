"""The one way into the gx10.cluster collection from the gx10 package.

The arrow runs one way: the collection stands alone (its plugins and ``module_utils`` import
nothing from ``gx10``, so it can be built with ``ansible-galaxy collection build`` and used
without ``python/``), and the package reuses its standard-library ``module_utils`` (the file
rules the nodes run, the manifest loader, the catalog, the doctor's parsers) through
``load(name)`` here, instead of repeating them.

The collection lives in the project checkout (``collections/``), not in this package: ``load``
looks in GX10_HOME's checkout, then in the checkout this package sits in, and raises a
``Gx10Error`` naming both when neither has it. It does not touch ``sys.path``: it registers the
collection's package chain (``ansible_collections`` ... ``module_utils``) in ``sys.modules`` with
the found directory as search path, the way the import system does for a package, so the
modules' own absolute imports (``ansible_collections.gx10.cluster.plugins.module_utils.x``)
resolve. A package of that chain already imported (a test's conftest, Ansible's loader) is kept.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from gx10.errors import Gx10Error, ProjectNotFoundError
from gx10.paths import project_home

PACKAGE = "ansible_collections.gx10.cluster.plugins.module_utils"
_CHAIN = PACKAGE.split(".")


def roots() -> list[Path]:
    """Directories holding ``ansible_collections/gx10/cluster``: GX10_HOME's, then this one's."""
    found = [Path(__file__).resolve().parents[2] / "collections"]
    with contextlib.suppress(ProjectNotFoundError):
        found.insert(0, project_home() / "collections")
    unique = list(dict.fromkeys(found))
    return [root for root in unique if (root / Path(*_CHAIN[:3])).is_dir()]


def root() -> Path:
    """The collections root ``load`` reads from; a Gx10Error if there is none."""
    found = roots()
    if not found:
        raise Gx10Error(
            "cannot find the gx10.cluster collection (collections/ansible_collections/gx10/"
            "cluster) in GX10_HOME's checkout or in this package's: run from the project "
            "checkout or set GX10_HOME"
        )
    return found[0]


def load(name: str) -> ModuleType:
    """``ansible_collections.gx10.cluster.plugins.module_utils.<name>``, imported once."""
    fullname = f"{PACKAGE}.{name}"
    loaded = sys.modules.get(fullname)
    if loaded is not None:
        return loaded
    base = root()
    _register_packages(base)
    try:
        return importlib.import_module(fullname)
    except ModuleNotFoundError as exc:
        if exc.name is not None and not exc.name.startswith(_CHAIN[0]):
            raise  # the module_utils needs something that is not installed: say so as is
        raise Gx10Error(
            f"the gx10.cluster collection in {base} has no module_utils {name!r} ({exc}); "
            "is the checkout complete?"
        ) from exc


def _register_packages(base: Path) -> None:
    """Put the package chain down to ``module_utils`` in sys.modules, rooted at ``base``."""
    directory = base
    parent: ModuleType | None = None
    for depth, part in enumerate(_CHAIN, start=1):
        directory = directory / part
        fullname = ".".join(_CHAIN[:depth])
        module = sys.modules.get(fullname)
        if module is None:
            module = _package(fullname, directory)
            sys.modules[fullname] = module
            if parent is not None:
                setattr(parent, part, module)
        parent = module


def _package(fullname: str, directory: Path) -> ModuleType:
    init = directory / "__init__.py"
    if init.is_file():  # a regular package: run its __init__
        spec = importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(directory)]
        )
    else:  # a namespace package, as Ansible collections are
        spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
    if spec is None:  # pragma: no cover - spec_from_file_location of an existing .py file
        raise Gx10Error(f"cannot load {init}")
    module = importlib.util.module_from_spec(spec)
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return module
