"""The `home` fixture: a fresh mini project home (see mini_project.py) for each test module; the
unit run's file order (files marked `heavy` first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mini_project import SECRET, write_project


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project home, with GX10_HOME pointing at it and SECRET in the environment."""
    root = tmp_path_factory.mktemp("home")
    write_project(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GX10_HOME", str(root))
        mp.setenv("GX10_TEST_SECRET", SECRET)
        # Keep the default temp artifact dirs of these runs inside the test's tmp tree.
        mp.setattr("tempfile.tempdir", str(tmp_path_factory.mktemp("artifacts")))
        yield root


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `heavy` first (both test directories: the hook sees every item), each file's
    tests kept together and in order. `make unit` hands whole files to its workers in this order
    (pytest-xdist --dist loadfile --no-loadscope-reorder), so the long files start early and the
    run ends on short ones: a long file handed out last keeps one worker busy while the other
    CPU idles (xdist's own order, by test count, put the longest file, of one test, last)."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
