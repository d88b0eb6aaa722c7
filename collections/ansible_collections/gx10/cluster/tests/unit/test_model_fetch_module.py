# SPDX-License-Identifier: Apache-2.0
"""model_fetch on tmp dirs against a local Range-capable HTTP server (roles/model_sync/files)."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils import model_files
from ansible_collections.gx10.cluster.plugins.modules import model_fetch

SERVER_SCRIPT = Path(__file__).resolve().parents[6] / "roles/model_sync/files/gx10_serve_dir.py"


def _load_server() -> Any:
    spec = importlib.util.spec_from_file_location("gx10_serve_dir", SERVER_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Failed(Exception):
    def __init__(self, msg: str, result: dict[str, Any]) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


@dataclass
class FakeModule:
    params: dict[str, Any]
    check_mode: bool = False
    calls: list[str] = field(default_factory=list)

    def fail_json(self, msg: str, **result: Any) -> None:
        raise Failed(msg, result)


def _files(root: Path) -> list[dict[str, Any]]:
    items = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        if rel.endswith(".safetensors"):
            items.append(
                {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            )
        else:
            sha1 = model_files.git_blob_sha1(data)
            items.append({"path": rel, "size": len(data), "git_sha1": sha1})
    return items


@pytest.fixture
def source(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 3-file checkpoint served on 127.0.0.1 (a random port), stopped after the test."""
    root = tmp_path / "nas"
    root.mkdir()
    (root / "config.json").write_text('{"model_type": "tiny"}')
    for index in (1, 2):
        (root / f"model-0000{index}.safetensors").write_bytes(os.urandom(300_000 + index))
    server = _load_server().serve("127.0.0.1", 0, str(root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _run(
    dest: Path, files: list[dict[str, Any]], base_url: str | None, **kw: Any
) -> dict[str, Any]:
    params = {
        "files": files,
        "dest": str(dest),
        "source": {"type": "http", "base_url": base_url} if base_url else None,
        "reverify": False,
        "margin_bytes": 0,
        "jobs": 2,
        "timeout": 10,
        "attempts": 2,
        **kw,
    }
    check = params.pop("check_mode", False)
    return model_fetch.run(FakeModule(params, check_mode=check))  # type: ignore[arg-type]


def test_fetches_everything_then_nothing(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    files = _files(root)
    dest = tmp_path / "node"
    first = _run(dest, files, url)
    assert first["changed"] is True
    assert first["files_fetched"] == 3
    assert first["bytes_from_source"] == sum(f["size"] for f in files)
    for item in files:
        assert (dest / item["path"]).read_bytes() == (root / item["path"]).read_bytes()
    assert not list(dest.glob("*.partial"))
    again = _run(dest, files, url)
    assert again["changed"] is False
    assert again["bytes_from_source"] == 0
    assert again["bytes_hashed"] == 0  # the cache vouched for every file


def test_one_flipped_byte_refetches_only_that_file(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = source
    files = _files(root)
    dest = tmp_path / "node"
    _run(dest, files, url)
    shard = dest / "model-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    other = (dest / "model-00002.safetensors").stat().st_ino
    result = _run(dest, files, url)
    assert result["fetched"] == ["model-00001.safetensors"]
    assert result["files_ok"] == 2
    assert (dest / "model-00002.safetensors").stat().st_ino == other
    assert shard.read_bytes() == (root / shard.name).read_bytes()


def test_a_partial_download_resumes_with_a_range(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    files = _files(root)
    dest = tmp_path / "node"
    dest.mkdir()
    name = "model-00002.safetensors"
    (dest / f"{name}.partial").write_bytes((root / name).read_bytes()[:100_000])
    result = _run(dest, files, url)
    total = sum(f["size"] for f in files)
    assert result["bytes_from_source"] == total - 100_000
    assert (dest / name).read_bytes() == (root / name).read_bytes()


def test_check_mode_reports_and_writes_nothing(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    dest = tmp_path / "node"
    result = _run(dest, _files(root), url, check_mode=True)
    assert result["changed"] is True
    assert len(result["fetched"]) == 3
    assert not dest.exists()


def test_disk_too_small_fails_before_any_byte(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run(dest, _files(root), url, margin_bytes=1 << 60)
    assert "not enough free disk" in failed.value.msg
    assert "bytes free; nothing was fetched" in failed.value.msg
    assert not dest.exists()


def test_verify_only_names_the_bad_files(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    files = _files(root)
    dest = tmp_path / "node"
    _run(dest, files, url)
    (dest / "config.json").write_text('{"model_type": "tinY"}')
    with pytest.raises(Failed) as failed:
        _run(dest, files, None)
    assert "config.json (git-sha1" in failed.value.msg
    assert "1 file(s) missing or mismatching" in failed.value.msg


def test_extra_files_are_reported_not_deleted(source: tuple[Path, str], tmp_path: Path) -> None:
    root, url = source
    dest = tmp_path / "node"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    result = _run(dest, _files(root), url)
    assert result["extras"] == [{"path": "notes.txt", "size": 4}]
    assert (dest / "notes.txt").read_text() == "mine"


def test_read_only_target_is_a_clear_error(
    source: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = source
    dest = tmp_path / "node"
    dest.mkdir()

    def read_only(self: Path, data: bytes) -> int:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    # Root writes whatever the mode, so the filesystem's answer is simulated.
    monkeypatch.setattr(Path, "write_bytes", read_only)
    with pytest.raises(Failed) as failed:
        _run(dest, _files(root), url)
    assert f"cannot write to {dest} (read-only filesystem)" in failed.value.msg
    assert "3 file(s) need fetching" in failed.value.msg
    assert [p.name for p in dest.iterdir() if not p.name.startswith(".gx10-verify")] == []


def test_a_path_traversal_is_refused(source: tuple[Path, str], tmp_path: Path) -> None:
    _, url = source
    bad = [{"path": "../etc/passwd", "size": 1, "git_sha1": "0" * 40}]
    with pytest.raises(Failed) as failed:
        _run(tmp_path / "node", bad, url)
    assert "'..' component" in failed.value.msg


def test_a_missing_source_file_fails_and_keeps_nothing_unverified(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = source
    files = _files(root)
    files.append({"path": "gone.json", "size": 3, "git_sha1": "0" * 40})
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run(dest, files, url)
    assert "gone.json" in failed.value.msg
    assert "HTTP 404" in failed.value.msg
    assert not (dest / "gone.json").exists()
