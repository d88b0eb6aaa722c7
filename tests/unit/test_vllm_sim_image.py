"""The vllm-sim image recipe: the simulator package with its `vllm` script, and the BPE tokenizer
(`tokenizers` copied from the venv, Debian has no package; the corpus and the trainer;
GX10_SIM_TOKENIZER set). The layout is checked by running the trainer, then `vllm` through the
link setup.sh makes, from a copy of the image's files with a Python that sees no site-packages."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gx10.lab import images
from gx10.lab.simulators import vllm_sim


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


def test_the_recipe_ships_the_simulator_package_and_its_vllm_script() -> None:
    spec = images.vllm_sim_spec()
    lib = images.SIM_LIB
    modules = sorted(images.VLLM_SIM_PACKAGE.glob("*.py"))
    assert len(modules) > 10  # the package, not a stub
    for module in modules:
        assert spec.files[f"{lib}/vllm_sim/{module.name}"] == module
    assert spec.files[f"{lib}/vllm"] == images.VLLM_ENTRY
    assert f"{lib}/vllm_sim.py" not in spec.files
    assert not [d for d in spec.files if "__pycache__" in d]
    setup = spec.setup.read_text() if spec.setup else ""
    assert 'ln -sf "$lib/vllm" /usr/local/bin/vllm' in setup
    assert 'ENTRYPOINT ["vllm"]' in spec.changes


def test_the_package_imports_the_standard_library_and_its_lower_modules_only() -> None:
    """The image runs it on bookworm's python3 alone, in the layers its docstring lists."""
    doc = vllm_sim.__doc__ or ""
    table = doc.split("Modules, each importing only modules listed before it", 1)[1]
    table = table.split("\n\n", 1)[0].splitlines()[1:]
    order = [m.strip() for row in table for m in row.strip().split("  ")[0].split(",") if m.strip()]
    modules = {path.stem: path for path in images.VLLM_SIM_PACKAGE.glob("*.py")}
    assert sorted(order) == sorted(set(modules) - {"__init__", "__main__"})
    rank = {name: i for i, name in enumerate(order)}
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for name in order:
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert node.module is not None
                assert rank[node.module] < rank[name], f"{name} imports {node.module}"
            elif isinstance(node, ast.ImportFrom) and node.module:
                lazy = name == "tokenizer" and node.module == "tokenizers"  # GX10_SIM_TOKENIZER
                assert lazy or node.module.split(".")[0] in allowed, f"{name}: {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in allowed, f"{name}: {alias.name}"


def _tag_with_package(package: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(images, "VLLM_SIM_PACKAGE", package)
    return images.vllm_sim_spec().tag


def test_the_image_tag_follows_every_file_of_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "vllm_sim"
    shutil.copytree(images.VLLM_SIM_PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    base = _tag_with_package(package, monkeypatch)
    assert base == images.vllm_sim_spec().tag  # same files, same tag
    seen = {base}
    for module in sorted(package.glob("*.py")):
        original = module.read_bytes()
        module.write_bytes(original + b"# changed\n")
        seen.add(_tag_with_package(package, monkeypatch))
        module.write_bytes(original)
    assert len(seen) == 1 + len(list(package.glob("*.py")))  # each change, its own tag
    (package / "extra.py").write_text("")
    assert _tag_with_package(package, monkeypatch) not in seen
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "x.pyc").write_bytes(b"\0")  # bytecode is not the recipe
    (package / "extra.py").unlink()
    assert _tag_with_package(package, monkeypatch) == base


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

    # `vllm` as setup.sh links it: Python finds vllm_sim (and `tokenizers`) beside the script.
    vllm = tmp_path / "usr" / "local" / "bin" / "vllm"
    vllm.parent.mkdir(parents=True)
    vllm.symlink_to(lib / "vllm")
    version = subprocess.run(
        [sys.executable, "-S", str(vllm), "--version"],
        check=True, timeout=60, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert version.stdout.strip() == vllm_sim.SimEnv().version
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "GX10_SIM_TOKENIZER": str(out),
        "GX10_SIM_STALL_FILE": str(tmp_path / "stall"),
    }
    # The tokenizer loads (an ImportError here would be a missing `tokenizers`), then the model
    # check fails as vLLM's does: the whole package ran on the standard library and itself.
    serve = subprocess.run(
        [sys.executable, "-S", str(vllm), "serve", str(tmp_path / "no-model"),
         "--host", "127.0.0.1", "--port", "0"],
        check=False, timeout=60, capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert serve.returncode == 1, serve.stderr
    model = tmp_path / "no-model"
    wanted = f"\nValueError: Invalid repository ID or local directory specified: '{model}'.\n"
    assert wanted in serve.stderr, serve.stderr
