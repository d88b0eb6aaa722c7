"""The serving profile's citation table in roles/vllm_serve/README.md is the data's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gx10._dev import profile_docs

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_generated_from_the_profiles() -> None:
    assert profile_docs.main(["--check", "--root", str(ROOT)]) == 0
    block = profile_docs.block()
    assert "| `vllm_serve_moe_backend` | `--moe-backend` | `flashinfer_b12x` |" in block
    assert "`VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS` (environment) | `1800`" in block


def test_a_stale_table_is_named_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / profile_docs.README
    readme.parent.mkdir(parents=True)
    shutil.copy(ROOT / profile_docs.README, readme)
    readme.write_text(readme.read_text().replace("`flashinfer_b12x`", "`triton`"))
    assert profile_docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().out
    assert profile_docs.main(["--root", str(tmp_path)]) == 0
    assert readme.read_text() == (ROOT / profile_docs.README).read_text()
