"""Every plugin's DOCUMENTATION, EXAMPLES and RETURN is YAML that ansible-doc can read.

ansible-lint only prints "Unable to parse documentation" for a plugin whose docs do not parse (a
`: ` inside a plain list item is enough), and passes; ansible-doc then shows nothing for it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
DOC_NAMES = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def _docs() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in DOC_NAMES
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.append((str(path.relative_to(PLUGINS)), node.targets[0].id, node.value.value))
    return found


DOCS = _docs()


def test_the_plugins_have_docs() -> None:
    assert len({path for path, _, _ in DOCS}) >= 10, DOCS


@pytest.mark.parametrize(("path", "name", "text"), DOCS, ids=[f"{p}:{n}" for p, n, _ in DOCS])
def test_docs_are_yaml(path: str, name: str, text: str) -> None:
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        pytest.fail(f"{path} {name} is not YAML: {error}")
    if name == "DOCUMENTATION":
        assert isinstance(loaded, dict), (path, loaded)
        assert loaded.get("short_description"), path
