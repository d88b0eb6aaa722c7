"""The role READMEs' variable tables are generated from meta/argument_specs.yml, and checked."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gx10._dev import role_docs

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
argument_specs:
  main:
    short_description: A role
    options: &options
      demo_mode:
        type: str
        choices: [fast, slow]
        default: fast
        description: How I(demo_file) is written; see C(demo) and B(this).
      demo_file: {type: path, required: true, description: "The file | with a pipe."}
      demo_list: {type: list, elements: str, default: [], description: [First part., Second part.]}
      demo_from_inventory: {type: int, description: "Defaults to O(gx10_x)."}
  other:
    options: *options
  small:
    options:
      demo_mode: {type: str}
"""

DEFAULTS = """\
demo_mode: fast
demo_list: []
demo_from_inventory: "{{ gx10_x | default(3) }}"
"""


def make_role(root: Path, readme: str, *, spec: str = SPEC, defaults: str = DEFAULTS) -> Path:
    role = root / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(spec)
    (role / "defaults" / "main.yml").write_text(defaults)
    (role / "README.md").write_text(readme)
    return role


def test_every_role_readme_agrees_with_its_spec() -> None:
    problems = role_docs.run(REPO, check=True)
    assert problems == [], "\n".join(map(str, problems))


def test_the_table_lists_every_option_with_type_default_and_meaning(tmp_path: Path) -> None:
    role = make_role(tmp_path, "# demo\n")
    block = role_docs.table(role)
    rows = {
        line.split("|")[1].strip(): line for line in block.splitlines() if line.startswith("| `")
    }
    assert sorted(rows) == ["`demo_file`", "`demo_from_inventory`", "`demo_list`", "`demo_mode`"]
    assert "| path | (required) | The file \\| with a pipe. |" in rows["`demo_file`"]
    assert "`{{ gx10_x \\| default(3) }}`" in rows["`demo_from_inventory`"]
    assert "| list of str | `[]` | First part. Second part. |" in rows["`demo_list`"]
    assert (
        "How `demo_file` is written; see `demo` and **this**. One of `fast`, `slow`."
        in rows["`demo_mode`"]
    )
    assert "The entry points `other` take the same variables." in block
    assert "Entry point `small`: `demo_mode`." in block


def test_a_hand_table_under_variables_is_replaced_and_prose_kept(tmp_path: Path) -> None:
    readme = textwrap.dedent(
        """\
        # demo

        ## Variables (the main ones)

        Some prose stays.

        | variable | default |
        |---|---|
        | `demo_mode` | `fast` |

        ## Example

        text
        """
    )
    role = make_role(tmp_path, readme)
    assert role_docs.run(tmp_path, check=False) == []
    written = (role / "README.md").read_text()
    assert "| `demo_mode` | `fast` |" not in written
    assert "Some prose stays." in written
    assert written.index(role_docs.BEGIN) < written.index("## Example")
    # Generated once, stable: a second run and a check find nothing to do.
    assert role_docs.run(tmp_path, check=True) == []


def test_check_names_the_stale_role_and_changes_nothing(tmp_path: Path) -> None:
    role = make_role(
        tmp_path, f"# demo\n\n## Variables\n\n{role_docs.BEGIN}\n| old |\n{role_docs.END}\n"
    )
    before = (role / "README.md").read_text()
    problems = role_docs.run(tmp_path, check=True)
    assert [p.role for p in problems] == ["demo"]
    assert "stale (run `make docs`)" in problems[0].message
    assert (role / "README.md").read_text() == before
    assert role_docs.main(["--check", "--root", str(tmp_path)]) == 1


@pytest.mark.parametrize(
    ("defaults", "expected"),
    [
        (
            "demo_mode: slow\n",
            "`demo_mode`: defaults/main.yml says 'slow', meta/argument_specs.yml says 'fast'",
        ),
        ("demo_mode: fast\nundeclared: 1\n", "defaults/main.yml sets `undeclared`"),
    ],
)
def test_defaults_that_disagree_with_the_spec_are_named(
    tmp_path: Path, defaults: str, expected: str
) -> None:
    make_role(tmp_path, "# demo\n", defaults=defaults)
    problems = role_docs.run(tmp_path, check=False)
    assert any(expected in str(problem) for problem in problems), problems


def test_an_unreadable_spec_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_role(tmp_path, "# demo\n", spec="argument_specs: {}\n")
    assert role_docs.main(["--check", "--root", str(tmp_path)]) == 2
    assert "expected argument_specs with a main entry point" in capsys.readouterr().err
