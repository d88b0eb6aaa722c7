"""The vllm-sim image recipe carries the BPE tokenizer: `tokenizers` copied from the venv (Debian
has no package), the corpus and the trainer, GX10_SIM_TOKENIZER set. The layout is checked by
running the trainer from a copy of the image's files with a Python that sees no site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gx10.lab import images


def test_the_recipe_ships_tokenizers_the_corpus_and_the_trainer() -> None:
    spec = images.vllm_sim_spec()
    lib = images.SIM_LIB
    assert f"{lib}/tokenizers/__init__.py" in spec.files
    assert any(d.startswith(f"{lib}/tokenizers/") and d.endswith(".so") for d in spec.files)
    assert not [d for d in spec.files if "__pycache__" in d]
    assert f"{lib}/tokenizer-corpus.txt" in spec.files
    assert f"{lib}/train_tokenizer.py" in spec.files
    assert f"ENV GX10_SIM_TOKENIZER={images.SIM_TOKENIZER}" in spec.changes
    assert "libstdc++6" in spec.packages()  # the tokenizers extension's C++ runtime
    corpus = spec.files[f"{lib}/tokenizer-corpus.txt"].read_text()
    assert len(corpus.splitlines()) >= 200


def test_the_image_layout_trains_and_loads_the_tokenizer(tmp_path: Path) -> None:
    spec = images.vllm_sim_spec()
    for dest, src in spec.files.items():
        target = tmp_path / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    lib = tmp_path / images.SIM_LIB.lstrip("/")
    out = tmp_path / images.SIM_TOKENIZER.lstrip("/")
    # -S: no site-packages, so `tokenizers` can only come from the image's own copy.
    subprocess.run(
        [sys.executable, "-S", str(lib / "train_tokenizer.py"),
         str(lib / "tokenizer-corpus.txt"), str(out)],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    probe = (
        "import sys, tokenizers; "
        f"assert tokenizers.__file__.startswith({str(lib)!r}), tokenizers.__file__; "
        "t = tokenizers.Tokenizer.from_file(sys.argv[1]); print(t.get_vocab_size())"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(out)],
        check=True, timeout=120, capture_output=True, text=True, cwd=lib,
    )  # fmt: skip
    assert int(done.stdout) == 600
