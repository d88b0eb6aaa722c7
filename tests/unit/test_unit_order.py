"""The unit run's file order (tests/unit/conftest.py): files marked `heavy` first, whole."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIGHT = "tests/unit/test_lab_recipe.py"
HEAVY = "collections/ansible_collections/gx10/cluster/tests/unit/test_fabric_pairs_playbook.py"


def _collected(*paths: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_a_heavy_file_is_handed_out_before_the_others_and_each_file_stays_in_order() -> None:
    ids = _collected(LIGHT, HEAVY)  # the light file first on the command line
    files = [nodeid.partition("::")[0] for nodeid in ids]
    assert files[0] == HEAVY
    assert files == sorted(files, key=lambda file: file != HEAVY)  # each file's tests together
    assert [nodeid for nodeid in ids if nodeid.startswith(LIGHT)] == _collected(LIGHT)


def test_make_unit_keeps_that_order() -> None:
    """pytest-xdist's loadfile hands out files by their number of tests unless told not to."""
    recipe = re.search(r"^unit:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert recipe, "Makefile: no unit target"
    assert "--dist loadfile --no-loadscope-reorder" in recipe.group(1)
