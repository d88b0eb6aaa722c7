# SPDX-License-Identifier: Apache-2.0
"""model_fetch on tmp dirs against a local Range-capable HTTP server (roles/model_sync/files)."""

from __future__ import annotations

import errno
import gzip
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.plugins.module_utils import model_files, model_source
from ansible_collections.gx10.cluster.plugins.module_utils.model_manifest import (
    Manifest,
    ManifestFile,
)
from ansible_collections.gx10.cluster.plugins.modules import model_fetch
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
    two_node_inventory,
)

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


def _checkpoint(root: Path) -> Path:
    """A 3-file checkpoint: one small git file, two "LFS" shards."""
    root.mkdir()
    (root / "config.json").write_text('{"model_type": "tiny"}')
    for index in (1, 2):
        (root / f"model-0000{index}.safetensors").write_bytes(os.urandom(300_000 + index))
    return root


@pytest.fixture
def source(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 3-file checkpoint served on 127.0.0.1 (a random port), stopped after the test."""
    root = _checkpoint(tmp_path / "nas")
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
    source = {"type": "http", "base_url": base_url} if base_url else None
    return _run_from(dest, files, source, **kw)


def _run_from(
    dest: Path, files: list[dict[str, Any]], source: dict[str, Any] | None, **kw: Any
) -> dict[str, Any]:
    params = {
        "files": files,
        "dest": str(dest),
        "source": source,
        "revision": None,
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
    total = sum(f["size"] for f in files)
    assert first["changed"] is True
    assert first["files_fetched"] == 3
    assert first["bytes_from_source"] == total
    assert first["bytes_received"] == first["bytes_hashed_receiving"] == total
    assert first["bytes_read_back"] == 0  # hashed as they landed, never read again
    assert first["bytes_hashed"] == 0  # the verify pass after the fetch: cache hits
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
    assert result["bytes_received"] == result["bytes_hashed_receiving"] == total - 100_000
    assert result["bytes_read_back"] == 100_000  # the prefix, read once to carry the hash on
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


# --- hashed while received: nothing fetched is read back ----------------------------------------


def _forbid_hashing(monkeypatch: pytest.MonkeyPatch, paths: set[str]) -> list[str]:
    """Fail the test if a verify pass hashes one of `paths` (relative); return what was hashed."""
    real = model_files.hash_file
    hashed: list[str] = []

    def hash_file(path: Path, *args: Any, **kwargs: Any) -> model_files.Digest:
        hashed.append(path.name)
        assert path.name not in paths, f"{path} was fetched, then read back to be hashed"
        return real(path, *args, **kwargs)

    monkeypatch.setattr(model_files, "hash_file", hash_file)
    return hashed


def test_fetched_files_are_not_read_back_but_files_already_there_are_verified(
    source: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = source
    files = _files(root)
    sizes = {f["path"]: f["size"] for f in files}
    dest = tmp_path / "node"
    dest.mkdir()
    # One file is already there, but no cache vouches for it: it is verified, as before.
    (dest / "config.json").write_bytes((root / "config.json").read_bytes())
    fetched = {"model-00001.safetensors", "model-00002.safetensors"}
    hashed = _forbid_hashing(monkeypatch, fetched)
    result = _run(dest, files, url)
    assert hashed == ["config.json"]
    assert sorted(result["fetched"]) == sorted(fetched)
    received = sum(sizes[p] for p in fetched)
    assert result["bytes_received"] == result["bytes_hashed_receiving"] == received
    assert result["bytes_read_back"] == result["bytes_hashed"] == sizes["config.json"]
    # reverify still reads every file that was there, the freshly fetched ones included.
    monkeypatch.undo()
    again = _run(dest, files, url, reverify=True)
    assert again["bytes_read_back"] == again["bytes_hashed"] == sum(sizes.values())
    assert again["bytes_received"] == 0


SERVE_IN_A_PROCESS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("serve", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
server = module.serve("127.0.0.1", 0, sys.argv[2])
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _io_counters() -> dict[str, int]:
    with open("/proc/self/io", encoding="ascii") as handle:
        return {key: int(value) for key, value in (line.split(": ") for line in handle)}


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux I/O accounting")
def test_the_kernel_counts_no_read_back_of_the_fetched_bytes(tmp_path: Path) -> None:
    """Measured outside our counters: the kernel's count of bytes this process read() from files
    (rchar; reads from a socket are not in it). The server runs in another process, so the only
    file reads here are the module's: a fetch that re-read its files would read the checkpoint
    again, 2 x 8 MiB."""
    root = tmp_path / "nas"
    root.mkdir()
    for index in (1, 2):
        (root / f"model-0000{index}.safetensors").write_bytes(os.urandom(8 * 1024 * 1024))
    (root / "config.json").write_text('{"model_type": "tiny"}')
    files = _files(root)
    total = sum(f["size"] for f in files)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_IN_A_PROCESS, str(SERVER_SCRIPT), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        _run(tmp_path / "warm", files[:1], f"http://127.0.0.1:{port}/")  # imports, first use
        before = _io_counters()
        result = _run(tmp_path / "node", files, f"http://127.0.0.1:{port}/")
        read = _io_counters()["rchar"] - before["rchar"]
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert result["bytes_received"] == total
    assert result["bytes_read_back"] == 0
    print(f"\nfile bytes read during a fetch of {total} bytes: {read} ({read / total:.4f} x)")
    assert read < total * 0.05, read


def _flipping_handler(
    root: Path, flips: dict[str, int], times: list[int], ranges: list[str | None]
) -> type[BaseHTTPRequestHandler]:
    """Serves `root` with Range, flipping one bit at offset flips[path] for the first times[0]
    answers: a network or a peer that corrupts bytes in transit."""

    class Flipping(_Quiet):
        def do_GET(self) -> None:
            name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            ranges.append(self.headers.get("Range"))
            data = bytearray((root / name).read_bytes())
            if name in flips and times[0] > 0:
                times[0] -= 1
                data[flips[name]] ^= 0x01
            _send_file(self, bytes(data))

    return Flipping


def test_bytes_flipped_in_transit_never_replace_the_copy_in_place(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    name = "model-00001.safetensors"
    dest = tmp_path / "node"
    dest.mkdir()
    for item in files:
        (dest / item["path"]).write_bytes((root / item["path"]).read_bytes())
    old = bytearray((root / name).read_bytes())
    old[5] ^= 0xFF  # the copy in place is bad too; only a verified file may replace it
    (dest / name).write_bytes(bytes(old))
    before = (dest / name).stat().st_ino
    with (
        _serving(_flipping_handler(root, {name: 250_000}, [99], [])) as url,
        pytest.raises(Failed) as failed,
    ):
        _run(dest, files, url + "/")
    msg = failed.value.msg
    assert f"{name}: not fetched after 2 attempt(s)" in msg
    assert "is corrupt: sha256" in msg
    assert (dest / name).stat().st_ino == before
    assert (dest / name).read_bytes() == bytes(old)
    assert not list(dest.glob("*.partial"))
    size = (root / name).stat().st_size
    assert failed.value.result["bytes_received"] == 2 * size  # both attempts, to the last byte
    assert failed.value.result["bytes_read_back"] == sum(f["size"] for f in files)  # verify


def test_a_transient_flip_is_fetched_again_and_installed(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    name = "model-00002.safetensors"
    dest = tmp_path / "node"
    ranges: list[str | None] = []
    with _serving(_flipping_handler(root, {name: 17}, [1], ranges)) as url:
        result = _run(dest, files, url + "/")
    assert (dest / name).read_bytes() == (root / name).read_bytes()
    assert any("is corrupt" in note for note in result["notes"])
    assert result["bytes_received"] == sum(f["size"] for f in files) + (root / name).stat().st_size
    assert result["bytes_read_back"] == 0
    assert ranges == [None] * 4  # the corrupt .partial was removed: the retry starts at 0


def _range_ignoring_handler(root: Path) -> type[BaseHTTPRequestHandler]:
    class Whole(_Quiet):
        def do_GET(self) -> None:
            name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            data = (root / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Whole


def test_a_server_that_ignores_the_range_restarts_the_file_and_its_hash(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    name = "model-00002.safetensors"
    dest = tmp_path / "node"
    dest.mkdir()
    (dest / f"{name}.partial").write_bytes((root / name).read_bytes()[:100_000])
    with _serving(_range_ignoring_handler(root)) as url:
        result = _run(dest, files, url + "/")
    assert (dest / name).read_bytes() == (root / name).read_bytes()
    assert result["bytes_received"] == sum(f["size"] for f in files)
    assert result["bytes_read_back"] == 100_000  # read, then dropped with the prefix


def test_a_corrupt_partial_prefix_is_caught_then_fetched_whole(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = source
    files = _files(root)
    name = "model-00001.safetensors"
    dest = tmp_path / "node"
    dest.mkdir()
    prefix = bytearray((root / name).read_bytes()[:100_000])
    prefix[99] ^= 0x01
    (dest / f"{name}.partial").write_bytes(bytes(prefix))
    result = _run(dest, files, url)
    assert (dest / name).read_bytes() == (root / name).read_bytes()
    assert any(f"{name}.partial is corrupt" in note for note in result["notes"])
    assert result["bytes_read_back"] == 100_000


def test_short_writes_through_the_module(
    source: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = source
    files = _files(root)
    lengths: list[int] = []

    def short(fd: int, data: memoryview) -> int:
        count = os.write(fd, data[: min(len(data), 1000)])
        lengths.append(count)
        return count

    monkeypatch.setattr(model_files, "_write", short)
    dest = tmp_path / "node"
    result = _run(dest, files, url)
    for item in files:
        assert (dest / item["path"]).read_bytes() == (root / item["path"]).read_bytes()
    assert max(lengths) == 1000
    assert sum(lengths) == result["bytes_received"] == sum(f["size"] for f in files)


def test_a_full_disk_mid_file_fails_naming_the_partial(
    source: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = source
    files = _files(root)

    def full(fd: int, data: memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model_files, "_write", full)
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run(dest, files, url)
    assert f"cannot write {dest / 'config.json.partial'}: No space left on device" in (
        failed.value.msg
    )
    assert not (dest / "config.json").exists()


def test_a_resumed_git_file_is_hashed_with_its_whole_size_header(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, url = source
    files = _files(root)
    dest = tmp_path / "node"
    dest.mkdir()
    data = (root / "config.json").read_bytes()
    (dest / "config.json.partial").write_bytes(data[:7])
    result = _run(dest, files, url)
    assert (dest / "config.json").read_bytes() == data
    assert result["bytes_read_back"] == 7
    entry = model_files.load_cache(dest / model_files.CACHE_NAME)["config.json"]
    assert entry.algo == "git-sha1"
    assert entry.digest == model_files.git_blob_sha1(data)


def test_the_peer_server_never_serves_a_partial(source: tuple[Path, str]) -> None:
    """A file being received is not served: its .partial is refused, and its name does not
    exist until it is verified."""
    root, url = source
    (root / "model-00003.safetensors.partial").write_bytes(b"half a shard")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url + "model-00003.safetensors.partial", timeout=10)
    assert refused.value.code == 404
    request = urllib.request.Request(url + "config.json.partial", headers={"Range": "bytes=0-"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=10)
    with urllib.request.urlopen(url + "config.json", timeout=10) as answer:
        assert answer.read() == (root / "config.json").read_bytes()


# --- the Hugging Face Hub: a fake Hub and its CDN on loopback ---------------------------------

REPO = "acme/tiny"
REV = "0123456789abcdef0123456789abcdef01234567"
OTHER_REV = "fedcba9876543210fedcba9876543210fedcba98"
TOKEN = "hf_s3cretTOKENvalue0123456789"


@dataclass
class Seen:
    """One request a fake server answered."""

    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    """`{endpoint}/{repo}/resolve/{rev}/{path}`: small files served, shards redirected (302) to a
    CDN on another port that honours Range. Gated when `token` is set: 401 without a token, 403
    with another one. Unknown repository 401, unknown revision or file 404 (as the Hub answers)."""

    root: Path
    token: str | None = None
    endpoint: str = ""
    cdn: str = ""
    hub_seen: list[Seen] = field(default_factory=list)
    cdn_seen: list[Seen] = field(default_factory=list)
    cdn_denies: bool = False
    renamed: dict[str, str] = field(default_factory=dict)
    """Old repository id -> new: the Hub answers 307 to the new one's URL (a relative Location)."""


def _send_file(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    start = 0
    match = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range") or "")
    if match and int(match.group(1)) < len(data):
        start = int(match.group(1))
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
    else:
        handler.send_response(200)
    handler.send_header("Content-Length", str(len(data) - start))
    handler.end_headers()
    handler.wfile.write(data[start:])


def _send_error(handler: BaseHTTPRequestHandler, code: int, hub_code: str, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    handler.send_response(code)
    handler.send_header("X-Error-Code", hub_code)
    handler.send_header("X-Error-Message", message)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _seen(handler: BaseHTTPRequestHandler) -> Seen:
    return Seen(handler.path, handler.headers.get("Range"), handler.headers.get("Authorization"))


class _Quiet(BaseHTTPRequestHandler):
    timeout = 10  # a stalled client cannot hold a handler thread longer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _hub_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Hub(_Quiet):
        def do_GET(self) -> None:
            hub.hub_seen.append(_seen(self))
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            parts = path.lstrip("/").split("/", 4)
            if len(parts) < 5 or parts[2] != "resolve":
                _send_error(self, 404, "EntryNotFound", "not a resolve URL")
            elif "/".join(parts[:2]) in hub.renamed:
                self.send_response(307)
                new = hub.renamed["/".join(parts[:2])]
                self.send_header("Location", "/" + "/".join([new, *parts[2:]]))
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif "/".join(parts[:2]) != REPO:
                _send_error(self, 401, "RepoNotFound", "Repository not found")
            elif hub.token and self.headers.get("Authorization") is None:
                _send_error(self, 401, "GatedRepo", f"Access to model {REPO} is restricted.")
            elif hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                _send_error(self, 403, "GatedRepo", f"Access to model {REPO} is restricted.")
            elif parts[3] != REV:
                _send_error(self, 404, "RevisionNotFound", f"Invalid rev id: {parts[3]}")
            elif not (hub.root / parts[4]).is_file():
                _send_error(self, 404, "EntryNotFound", f"{parts[4]} does not exist")
            elif parts[4].endswith(".safetensors"):
                digest = hashlib.sha256((hub.root / parts[4]).read_bytes()).hexdigest()
                self.send_response(302)
                self.send_header("Location", f"{hub.cdn}/blobs/{digest}?X-Amz-Signature=sig")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                _send_file(self, (hub.root / parts[4]).read_bytes())

    return Hub


def _cdn_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Cdn(_Quiet):
        def do_GET(self) -> None:
            hub.cdn_seen.append(_seen(self))
            if hub.cdn_denies:  # an expired signature
                _send_error(self, 403, "", "Request has expired")
                return
            digest = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
            found = [p for p in hub.root.glob("*.safetensors") if _sha256(p) == digest]
            if not found:
                _send_error(self, 404, "", "no such blob")
                return
            _send_file(self, found[0].read_bytes())

    return Cdn


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[FakeHub]:
    """A fake Hub and CDN on two loopback ports (two origins), serving a 3-file checkpoint."""
    fake = FakeHub(_checkpoint(tmp_path / "hub"))
    with _serving(_hub_handler(fake)) as endpoint, _serving(_cdn_handler(fake)) as cdn:
        fake.endpoint, fake.cdn = endpoint, cdn
        yield fake


def _hub_source(hub: FakeHub, **kw: Any) -> dict[str, Any]:
    return {"type": "hub", "repo": REPO, "revision": REV, "endpoint": hub.endpoint, **kw}


def test_hub_fetches_by_resolve_url_and_follows_the_cdn_redirect(
    hub: FakeHub, tmp_path: Path
) -> None:
    files = _files(hub.root)
    dest = tmp_path / "node"
    result = _run_from(dest, files, _hub_source(hub), revision=REV)
    assert result["files_fetched"] == 3
    assert result["bytes_from_source"] == sum(f["size"] for f in files)
    for item in files:
        assert (dest / item["path"]).read_bytes() == (hub.root / item["path"]).read_bytes()
    assert sorted(s.path for s in hub.hub_seen) == [
        f"/{REPO}/resolve/{REV}/{name}"
        for name in ("config.json", "model-00001.safetensors", "model-00002.safetensors")
    ]
    # The shards came from the CDN (the redirect was followed), the config from the Hub itself.
    assert len(hub.cdn_seen) == 2
    assert f"{REPO} at {REV}" in result["source"]
    again = _run_from(dest, files, _hub_source(hub), revision=REV)
    assert again["changed"] is False
    assert len(hub.hub_seen) == 3


def test_hub_resumes_a_partial_with_a_range_through_the_redirect(
    hub: FakeHub, tmp_path: Path
) -> None:
    files = _files(hub.root)
    dest = tmp_path / "node"
    dest.mkdir()
    name = "model-00002.safetensors"
    (dest / f"{name}.partial").write_bytes((hub.root / name).read_bytes()[:100_000])
    result = _run_from(dest, files, _hub_source(hub), revision=REV)
    assert result["bytes_from_source"] == sum(f["size"] for f in files) - 100_000
    assert (dest / name).read_bytes() == (hub.root / name).read_bytes()
    ranges = {s.range for s in hub.cdn_seen}
    assert ranges == {None, "bytes=100000-"}  # the Range header survived the redirect


def test_hub_token_is_sent_to_the_hub_only_and_never_returned(hub: FakeHub, tmp_path: Path) -> None:
    hub.token = TOKEN
    files = _files(hub.root)
    dest = tmp_path / "node"
    result = _run_from(dest, files, _hub_source(hub, token=TOKEN), revision=REV)
    assert result["files_fetched"] == 3
    assert {s.authorization for s in hub.hub_seen} == {f"Bearer {TOKEN}"}
    assert hub.cdn_seen
    assert {s.authorization for s in hub.cdn_seen} == {None}  # the CDN got no token
    assert TOKEN not in json.dumps(result)
    assert "with a token" in result["source"]


def test_a_gated_repo_without_a_token_names_the_repo_and_the_token(
    hub: FakeHub, tmp_path: Path
) -> None:
    hub.token = TOKEN
    files = _files(hub.root)
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run_from(dest, files, _hub_source(hub), revision=REV)
    msg = failed.value.msg
    assert "HTTP 401" in msg
    assert f"{REPO} is gated or private" in msg
    assert "gx10_model_source.token" in msg
    assert "2 more file(s) not tried" in msg
    assert len(hub.hub_seen) == 1  # not retried, and not asked again for every other file
    assert failed.value.result["files_fetched"] == 0
    assert [p.name for p in dest.iterdir() if not p.name.startswith(".gx10")] == []


def test_a_refused_token_is_named_but_never_shown(hub: FakeHub, tmp_path: Path) -> None:
    hub.token = TOKEN
    wrong = "hf_WRONGtokenVALUE987654321"
    with pytest.raises(Failed) as failed:
        _run_from(tmp_path / "node", _files(hub.root), _hub_source(hub, token=wrong), revision=REV)
    assert "HTTP 403" in failed.value.msg
    assert f"the token was refused for {REPO}" in failed.value.msg
    shown = failed.value.msg + json.dumps(failed.value.result)
    assert wrong not in shown
    assert TOKEN not in shown


def test_a_revision_other_than_the_manifests_is_refused_before_any_byte(
    hub: FakeHub, tmp_path: Path
) -> None:
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run_from(dest, _files(hub.root), _hub_source(hub, revision=OTHER_REV), revision=REV)
    msg = failed.value.msg
    assert f"revision {OTHER_REV} is not the manifest's pinned revision {REV}" in msg
    assert hub.hub_seen == []
    assert not dest.exists()
    with pytest.raises(Failed) as unpinned:
        _run_from(dest, _files(hub.root), _hub_source(hub))
    assert "the manifest's pinned revision was not given" in unpinned.value.msg
    assert hub.hub_seen == []


def test_an_unknown_revision_names_the_file_and_the_revision(hub: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "node"
    source = _hub_source(hub, revision=OTHER_REV)
    with pytest.raises(Failed) as failed:
        _run_from(dest, _files(hub.root), source, revision=OTHER_REV)
    msg = failed.value.msg
    assert f"config.json: not found in {REPO} at revision {OTHER_REV}" in msg
    assert "unknown revision or file" in msg
    assert f"Invalid rev id: {OTHER_REV}" in msg  # the Hub's own words
    assert len(hub.hub_seen) == 3  # each file asked once: a 404 is not retried
    assert not list(dest.glob("*.safetensors*"))


def test_a_cdn_refusal_is_told_apart_from_the_hubs_and_retried(
    hub: FakeHub, tmp_path: Path
) -> None:
    hub.cdn_denies = True
    files = _files(hub.root)
    with pytest.raises(Failed) as failed:
        _run_from(tmp_path / "node", files, _hub_source(hub), revision=REV)
    cdn_host = urllib.parse.urlsplit(hub.cdn).netloc
    msg = failed.value.msg
    assert f"model-00001.safetensors: not fetched after 2 attempt(s): {cdn_host}, where" in msg
    assert "answered HTTP 403" in msg
    assert "gated" not in msg  # the Hub let us in; its CDN did not
    assert len(hub.cdn_seen) == 4  # two shards, two attempts each, each through the Hub
    assert failed.value.result["files_fetched"] == 1  # config.json, served by the Hub itself


def test_an_unknown_repository_is_a_401_naming_it(hub: FakeHub, tmp_path: Path) -> None:
    source = _hub_source(hub, repo="acme/nope")
    with pytest.raises(Failed) as failed:
        _run_from(tmp_path / "node", _files(hub.root), source, revision=REV)
    assert "acme/nope is gated or private (or does not exist)" in failed.value.msg


# --- following redirects (model_fetch's own hops over ansible.module_utils.urls) --------------


def test_the_token_never_reaches_another_host_and_the_range_survives_the_redirect(
    hub: FakeHub, tmp_path: Path
) -> None:
    """The CDN on another host name (localhost, the Hub on 127.0.0.1): it gets the Range of a
    resumed file, never the token."""
    hub.token = TOKEN
    hub.cdn = hub.cdn.replace("127.0.0.1", "localhost")
    files = _files(hub.root)
    dest = tmp_path / "node"
    dest.mkdir()
    name = "model-00002.safetensors"
    (dest / f"{name}.partial").write_bytes((hub.root / name).read_bytes()[:100_000])
    result = _run_from(dest, files, _hub_source(hub, token=TOKEN), revision=REV)
    assert result["files_fetched"] == 3
    assert (dest / name).read_bytes() == (hub.root / name).read_bytes()
    assert {s.authorization for s in hub.hub_seen} == {f"Bearer {TOKEN}"}
    assert len(hub.cdn_seen) == 2
    assert {s.authorization for s in hub.cdn_seen} == {None}
    assert {s.range for s in hub.cdn_seen} == {None, "bytes=100000-"}


def test_a_redirect_within_the_hub_keeps_the_token_and_the_range(
    hub: FakeHub, tmp_path: Path
) -> None:
    """A renamed repository: the Hub redirects to itself (same origin), so the token comes
    along; then to its CDN, which gets none."""
    hub.token = TOKEN
    hub.renamed = {"acme/old-tiny": REPO}
    files = _files(hub.root)
    dest = tmp_path / "node"
    dest.mkdir()
    name = "model-00002.safetensors"
    (dest / f"{name}.partial").write_bytes((hub.root / name).read_bytes()[:100_000])
    source = _hub_source(hub, repo="acme/old-tiny", token=TOKEN)
    result = _run_from(dest, files, source, revision=REV)
    assert result["files_fetched"] == 3
    assert (dest / name).read_bytes() == (hub.root / name).read_bytes()
    assert len(hub.hub_seen) == 6  # each file: the old URL, then the new one
    assert {s.authorization for s in hub.hub_seen} == {f"Bearer {TOKEN}"}
    assert [s.range for s in hub.hub_seen if s.path.endswith(name)] == ["bytes=100000-"] * 2
    assert {s.authorization for s in hub.cdn_seen} == {None}
    assert {s.range for s in hub.cdn_seen} == {None, "bytes=100000-"}


def test_netrc_credentials_are_never_sent(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ~/.netrc naming the hosts changes nothing: the token alone goes to the Hub."""
    netrc = tmp_path / "netrc"
    netrc.write_text(
        "machine 127.0.0.1 login someone password hunter2\n"
        "machine localhost login someone password hunter2\n"
    )
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    hub.token = TOKEN
    result = _run_from(
        tmp_path / "node", _files(hub.root), _hub_source(hub, token=TOKEN), revision=REV
    )
    assert result["files_fetched"] == 3
    assert {s.authorization for s in hub.hub_seen} == {f"Bearer {TOKEN}"}
    assert {s.authorization for s in hub.cdn_seen} == {None}


def test_a_redirect_loop_fails_naming_it(tmp_path: Path) -> None:
    seen: list[str] = []

    class Loop(_Quiet):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(302)
            self.send_header("Location", f"/hop{len(seen)}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    files = [{"path": "config.json", "size": 2, "git_sha1": model_files.git_blob_sha1(b"{}")}]
    with _serving(Loop) as url, pytest.raises(Failed) as failed:
        _run(tmp_path / "node", files, url + "/")
    msg = failed.value.msg
    assert f"config.json: {url}/config.json: HTTP 302 The HTTP server returned a redirect" in msg
    assert msg.endswith("The last 30x error message was:\nFound")
    assert len(seen) == 11  # ten redirects followed, and not retried


def test_a_stalled_download_times_out_and_resumes_with_a_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stops sending mid-body: the read times out after `timeout` seconds, and the
    next attempt asks for the bytes past the whole buffers written (the one being filled when the
    stall came is lost)."""
    monkeypatch.setattr(model_fetch, "CHUNK", 64 * 1024)
    root = _checkpoint(tmp_path / "nas")
    name = "model-00001.safetensors"
    data = (root / name).read_bytes()
    files = [f for f in _files(root) if f["path"] == name]
    ranges: list[str | None] = []
    release = threading.Event()

    class Stalling(_Quiet):
        def do_GET(self) -> None:
            ranges.append(self.headers.get("Range"))
            if len(ranges) > 1:
                _send_file(self, data)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:100_000])
            self.wfile.flush()
            release.wait(10)  # stalls, the connection open

    try:
        with _serving(Stalling) as url:
            result = _run(tmp_path / "node", files, url + "/", timeout=1)
    finally:
        release.set()
    assert (tmp_path / "node" / name).read_bytes() == data
    assert ranges == [None, "bytes=65536-"]
    assert any("timed out" in note for note in result["notes"])
    assert result["bytes_from_source"] == len(data)  # the lost buffer never counted


def test_a_body_labelled_gzip_is_kept_as_sent(tmp_path: Path) -> None:
    """The manifest hashes the bytes the server holds: a Content-Encoding is not undone."""
    root = tmp_path / "nas"
    root.mkdir()
    blob = gzip.compress(b"tokenizer data " * 1000)
    (root / "tokenizer.json.gz").write_bytes(blob)

    class Gzipped(_Quiet):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)

    with _serving(Gzipped) as url:
        result = _run(tmp_path / "node", _files(root), url + "/")
    assert result["files_fetched"] == 1
    assert (tmp_path / "node" / "tokenizer.json.gz").read_bytes() == blob


# --- a local or NAS-mounted directory ---------------------------------------------------------


def _dir_source(root: Path) -> dict[str, Any]:
    return {"type": "dir", "path": str(root)}


def test_dir_source_copies_everything_then_nothing(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    dest = tmp_path / "node"
    first = _run_from(dest, files, _dir_source(root))
    assert first["files_fetched"] == 3
    assert first["bytes_from_source"] == sum(f["size"] for f in files)
    assert first["bytes_received"] == first["bytes_hashed_receiving"] == first["bytes_from_source"]
    assert first["bytes_read_back"] == 0
    assert first["source"] == f"the directory {root}"
    for item in files:
        assert (dest / item["path"]).read_bytes() == (root / item["path"]).read_bytes()
    assert not list(dest.glob("*.partial"))
    again = _run_from(dest, files, _dir_source(root))
    assert again["changed"] is False
    assert again["bytes_from_source"] == 0


def test_dir_source_resumes_a_partial_from_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    dest = tmp_path / "node"
    dest.mkdir()
    name = "model-00001.safetensors"
    (dest / f"{name}.partial").write_bytes((root / name).read_bytes()[:100_000])
    monkeypatch.setattr(model_fetch, "COPY_CHUNK", 64 * 1024)  # several reads per file
    result = _run_from(dest, files, _dir_source(root))
    total = sum(f["size"] for f in files)
    assert result["bytes_from_source"] == total - 100_000
    assert result["bytes_received"] == result["bytes_hashed_receiving"] == total - 100_000
    assert result["bytes_read_back"] == 100_000
    assert (dest / name).read_bytes() == (root / name).read_bytes()


def test_a_missing_source_directory_is_named(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    gone = tmp_path / "unmounted"
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run_from(dest, _files(root), _dir_source(gone))
    assert f"the source directory {gone} does not exist" in failed.value.msg
    assert "nothing was fetched" in failed.value.msg
    assert not dest.exists()


def test_missing_or_resized_source_files_are_named_before_any_byte(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    (root / "config.json").unlink()
    with (root / "model-00002.safetensors").open("ab") as grown:
        grown.write(b"x")
    dest = tmp_path / "node"
    with pytest.raises(Failed) as failed:
        _run_from(dest, files, _dir_source(root))
    msg = failed.value.msg
    assert f"{root / 'config.json'}: No such file or directory" in msg
    assert f"{root / 'model-00002.safetensors'}: 300003 bytes, the manifest says 300002" in msg
    assert "cannot supply 2 of the 3 file(s)" in msg
    assert not dest.exists()


def test_a_corrupt_source_file_is_caught_and_the_verified_copy_kept(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "nas")
    files = _files(root)
    dest = tmp_path / "node"
    _run_from(dest, files, _dir_source(root))
    for name in ("model-00001.safetensors", "model-00002.safetensors"):  # same size, wrong bytes
        data = bytearray((root / name).read_bytes())
        data[1234] ^= 0xFF
        (root / name).write_bytes(bytes(data))
    kept = dest / "model-00001.safetensors"
    before = (kept.stat().st_ino, kept.read_bytes())
    (dest / "model-00002.safetensors").unlink()
    with pytest.raises(Failed) as failed:
        _run_from(dest, files, _dir_source(root), reverify=True)
    msg = failed.value.msg
    assert "model-00002.safetensors: not fetched after 2 attempt(s)" in msg
    assert f"the source file {root / 'model-00002.safetensors'} does not match" in msg
    assert (kept.stat().st_ino, kept.read_bytes()) == before
    assert not (dest / "model-00002.safetensors").exists()
    assert not list(dest.glob("*.partial"))
    assert failed.value.result["files_ok"] == 2


# --- checking a source (shared by the module and the model_plan action) ------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://nas/", "not a mapping"),
        ({"type": "ftp", "base_url": "ftp://nas/"}, "type 'ftp' is not one of http, hub, dir"),
        ({"type": "http", "base_url": "nas:8080"}, "base_url 'nas:8080' is not an http://"),
        ({"type": "http", "base_url": "http://nas/", "path": "/x"}, "do not apply to a http"),
        ({"type": "dir", "path": "nas/dir"}, "path 'nas/dir' is not an absolute directory"),
        ({"type": "dir", "path": "/mnt/x", "base": "y"}, "unknown key(s) base"),
        ({"type": "hub", "repo": "acme/tiny", "revision": "main"}, "not a full commit sha"),
        ({"type": "hub", "repo": "a b", "revision": REV}, "'a b' is not a Hub repository id"),
        (
            {"type": "hub", "repo": REPO, "revision": REV, "endpoint": "huggingface.co"},
            "endpoint 'huggingface.co' is not an http:// or https:// URL",
        ),
    ],
)
def test_a_bad_source_names_the_value_and_every_type(value: object, expected: str) -> None:
    with pytest.raises(model_source.SourceError) as raised:
        model_source.parse_source(value, revision=REV, name="gx10_model_source")
    msg = str(raised.value)
    assert msg.startswith(f"gx10_model_source is {value!r}: ")
    assert expected in msg
    for example in ("{type: http, base_url:", "{type: hub, repo: OWNER/NAME", "{type: dir, path:"):
        assert example in msg


def test_a_bad_source_never_shows_its_token() -> None:
    value = {"type": "hub", "repo": REPO, "revision": OTHER_REV, "token": "hf_x\nInjected: 1"}
    with pytest.raises(model_source.SourceError) as raised:
        model_source.parse_source(value, revision=REV)
    msg = str(raised.value)
    assert "hf_x" not in msg
    assert "'token': '<hidden>'" in msg
    assert "token is not a string of visible ASCII" in msg
    assert f"revision {OTHER_REV} is not the manifest's pinned revision {REV}" in msg


def test_a_good_source_has_its_urls_and_header() -> None:
    hub = model_source.parse_source(
        {"type": "hub", "repo": REPO, "revision": REV, "token": TOKEN, "endpoint": None},
        revision=REV,
    )
    assert hub.url_for("sub dir/a.json") == (
        f"https://huggingface.co/{REPO}/resolve/{REV}/sub%20dir/a.json"
    )
    assert hub.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(hub) + hub.describe()
    http = model_source.parse_source({"type": "http", "base_url": "http://nas:8080/ckpt"})
    assert http.url_for("a.json") == "http://nas:8080/ckpt/a.json"
    assert http.headers() == {}
    folder = model_source.parse_source({"type": "dir", "path": "/mnt/nas/ckpt/"})
    assert folder.path == "/mnt/nas/ckpt"


def test_a_dir_source_that_grew_after_the_check_shows_as_corrupt(tmp_path: Path) -> None:
    source_file = tmp_path / "grown.bin"
    source_file.write_bytes(b"a" * 1000)
    target = tmp_path / "node" / "grown.bin"
    partial = model_files.partial_path(target)
    partial.parent.mkdir()
    partial.write_bytes(b"a" * 100)
    entry = model_files.Expected("grown.bin", 500, "sha256", hashlib.sha256(b"a" * 500).hexdigest())
    tally = model_fetch.Tally()
    with model_files.Receiver(partial, target, entry) as sink:
        assert sink.open_to_resume() == 100
        model_fetch.copy_from(source_file, sink, tally)
        # From the partial's end, and one byte past the expected size, no more.
        assert tally.from_source == 401
        assert partial.stat().st_size == 501
        with pytest.raises(model_files.CorruptPartialError, match="501 bytes, expected 500"):
            sink.install()
    assert not partial.exists()
    assert not target.exists()


# --- through ansible-playbook: the argument spec, AnsiballZ, and no_log on the token ------------

PLAYBOOK = """
- name: Plan and fetch from a gated Hub with a token
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Load the manifest and check the source
      gx10.cluster.model_plan:
        manifest: "{{ manifest }}"
        nodes: 1
        source: "{{ hub_source }}"
      register: plan

    - name: Fetch
      gx10.cluster.model_fetch:
        files: "{{ plan.files }}"
        dest: "{{ dest }}"
        revision: "{{ plan.revision }}"
        source: "{{ hub_source }}"
        timeout: 10
      register: fetched

    - name: Another revision is refused on the controller
      gx10.cluster.model_plan:
        manifest: "{{ manifest }}"
        nodes: 1
        source: "{{ hub_source | combine({'revision': other_rev}) }}"
      register: refused
      ignore_errors: true

    - name: Show the outcome
      ansible.builtin.debug:
        msg: "FETCHED={{ fetched.files_fetched }} PLAN_SOURCE={{ plan.source }} REFUSED={{
          refused is failed }} REFUSED_MSG={{ refused.msg }}"
"""


@pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
)
def test_ansible_masks_the_token_and_the_plan_refuses_another_revision(
    hub: FakeHub, tmp_path: Path
) -> None:
    hub.token = TOKEN
    entries = [
        ManifestFile(
            f["path"],
            f["size"],
            "lfs" if "sha256" in f else "git",
            next(f[k] for k in ("sha256", "git_sha1") if k in f),
        )
        for f in _files(hub.root)
    ]
    manifest = tmp_path / "manifest.yml"
    # The collection's own model (its tests need no gx10 package); YAML as gx10 saves it.
    manifest.write_text(yaml.safe_dump(Manifest(REPO, REV, tuple(entries)).to_dict()))
    extra = {
        "manifest": str(manifest),
        "dest": str(tmp_path / "node"),
        "hub_source": _hub_source(hub, token=TOKEN),
        "other_rev": OTHER_REV,
    }
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    (tmp_path / "inventory.yml").write_text(json.dumps(two_node_inventory({}, {}, {})))
    (tmp_path / "playbook.yml").write_text(PLAYBOOK)
    run = run_ansible_playbook(
        tmp_path,
        tmp_path / "inventory.yml",
        tmp_path / "playbook.yml",
        "-e",
        f"@{tmp_path / 'vars.json'}",
        "-vvv",
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    flat = " ".join(out.split())  # the yaml callback wraps long lines
    assert "FETCHED=3" in flat
    assert f"PLAN_SOURCE=the Hub ({hub.endpoint}) {REPO} at {REV}, with a token" in flat
    assert "REFUSED=True" in flat
    assert f"revision {OTHER_REV} is not the manifest's pinned revision {REV}" in flat
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in out  # the invocation, masked
    assert TOKEN not in out
    assert {s.authorization for s in hub.hub_seen} == {f"Bearer {TOKEN}"}
    assert (tmp_path / "node" / "config.json").read_bytes() == (
        hub.root / "config.json"
    ).read_bytes()


def test_the_documentation_parses_and_matches_the_argument_spec() -> None:
    doc = yaml.safe_load(model_fetch.DOCUMENTATION)
    yaml.safe_load(model_fetch.EXAMPLES)
    returned = yaml.safe_load(model_fetch.RETURN)
    spec = model_fetch.ARGUMENT_SPEC
    assert set(doc["options"]) == set(spec)
    documented = doc["options"]["source"]["suboptions"]
    assert set(documented) == set(spec["source"]["options"])
    assert documented["type"]["choices"] == spec["source"]["options"]["type"]["choices"]
    assert spec["source"]["options"]["token"]["no_log"] is True
    assert {
        "bytes_from_source",
        "bytes_received",
        "bytes_hashed_receiving",
        "bytes_read_back",
        "source",
    } <= set(returned)
