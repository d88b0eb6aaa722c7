"""The lab node's bytecode cache for modules imported from a zip (test equipment, lab image).

Each case runs Python as a lab node does (a fresh interpreter with the node image's .pth loaded
from a site directory), importing a module from a zip archive as Ansible's AnsiballZ does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from gx10.lab import images

NODE_DIR = images.IMAGE_DIR / "node"
MODULE = """
def answer():
    return 42


def fail():
    raise RuntimeError("from the zip")
"""
# Import the module from the zip, call it, and report where its code says it lives and where a
# traceback points.
PROBE = """
import json, site, sys, traceback
site.addsitedir(sys.argv[1])  # processes the .pth, as the node's python3 does at start
sys.path.insert(0, sys.argv[2])
import zipmod
try:
    zipmod.fail()
except RuntimeError:
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({"answer": zipmod.answer(), "file": zipmod.answer.__code__.co_filename,
                  "traceback": where, "hooked": __import__("zipimport")._compile_source.__name__}))
"""


def _site(tmp_path: Path) -> Path:
    """A site directory holding what the node image installs into Debian's dist-packages."""
    site = tmp_path / "site"
    site.mkdir()
    for name in (images.ZIPIMPORT_CACHE, images.ZIPIMPORT_CACHE_PTH):
        (site / name).write_bytes((NODE_DIR / name).read_bytes())
    return site


def _archive(path: Path, source: str = MODULE) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zipmod.py", source)
    return path


def _run(site: Path, archive: Path, cache: Path) -> dict[str, object]:
    env = {**os.environ, "GX10_LAB_ZIPIMPORT_CACHE": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(site), str(archive)],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


def test_the_second_run_loads_the_cached_code_under_its_own_archive_name(tmp_path: Path) -> None:
    site, cache = _site(tmp_path), tmp_path / "cache"
    first = _run(site, _archive(tmp_path / "one.zip"), cache)
    assert first["hooked"] == "_cached_compile_source"
    (entry,) = _entries(cache)
    # Keyed by the interpreter's bytecode tag and the source's sha256.
    assert entry.parent.name == f"{sys.implementation.cache_tag}-O{sys.flags.optimize}"
    cached = entry.stat().st_mtime_ns
    # Another archive with the same file (every task's zip is a new temporary file).
    second = _run(site, _archive(tmp_path / "two.zip"), cache)
    assert _entries(cache) == [entry]
    assert entry.stat().st_mtime_ns == cached  # read, not written again
    assert second["answer"] == first["answer"] == 42
    assert second["file"] == str(tmp_path / "two.zip" / "zipmod.py")
    assert second["traceback"] == str(tmp_path / "two.zip" / "zipmod.py")


def test_changed_source_is_compiled_anew(tmp_path: Path) -> None:
    site, cache = _site(tmp_path), tmp_path / "cache"
    _run(site, _archive(tmp_path / "one.zip"), cache)
    changed = _run(site, _archive(tmp_path / "two.zip", MODULE.replace("42", "43")), cache)
    assert changed["answer"] == 43
    assert len(_entries(cache)) == 2


def test_a_broken_or_unwritable_cache_falls_back_to_the_compile(tmp_path: Path) -> None:
    site, cache = _site(tmp_path), tmp_path / "cache"
    _run(site, _archive(tmp_path / "one.zip"), cache)
    (entry,) = _entries(cache)
    entry.write_bytes(b"not marshal data")
    assert _run(site, _archive(tmp_path / "two.zip"), cache)["answer"] == 42
    # The broken entry was replaced by a good one.
    assert _run(site, _archive(tmp_path / "three.zip"), cache)["answer"] == 42
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be")
    assert _run(site, _archive(tmp_path / "four.zip"), blocked)["answer"] == 42


def test_the_node_image_installs_the_hook_where_debians_python_reads_it() -> None:
    files = images.node_spec().files
    for name in (images.ZIPIMPORT_CACHE, images.ZIPIMPORT_CACHE_PTH):
        assert files[f"{images.NODE_SITE_PACKAGES}/{name}"] == NODE_DIR / name
    pth = (NODE_DIR / images.ZIPIMPORT_CACHE_PTH).read_text().strip()
    assert pth == f"import {Path(images.ZIPIMPORT_CACHE).stem}"
