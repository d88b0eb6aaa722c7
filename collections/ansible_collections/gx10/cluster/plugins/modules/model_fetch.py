#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.model_fetch: verify a checkpoint directory, fetch what is missing or bad."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Verify a model directory against a manifest; fetch missing or bad files
description:
  - Verifies every manifest file under I(dest) (sizes first, then hashes in parallel, skipping
    files the verification cache vouches for), then fetches each missing or mismatching file from
    I(source) over HTTP into C(<file>.partial), resuming a previous C(.partial) with a Range
    request, verifies it and only then renames it into place. A verified file is never replaced
    by an unverified one; a corrupt file is replaced only by a verified download.
  - Free disk for what is missing (plus I(margin_bytes)) is checked before any byte moves.
  - Files the manifest does not list are reported, never deleted.
  - Without I(source) it only verifies, and fails naming every missing or mismatching file.
  - Check mode verifies and reports what would be fetched.
options:
  files:
    description: The manifest's files, each C(path), C(size) and one of C(sha256), C(git_sha1).
    type: list
    elements: dict
    required: true
  dest:
    description: The checkpoint directory on this node.
    type: path
    required: true
  source:
    description: Where missing files come from, C({type: http, base_url: http://host:port/}).
    type: dict
  reverify:
    description: Ignore the verification cache and hash every file again.
    type: bool
    default: false
  margin_bytes:
    description: Free space to keep on top of what the fetch needs.
    type: int
    default: 0
  jobs:
    description: Hashing threads (0 = the cores this process may use).
    type: int
    default: 0
  timeout:
    description: Seconds an HTTP connection may stall before the fetch fails.
    type: int
    default: 60
  attempts:
    description: Tries per file (an interrupted download resumes where it stopped).
    type: int
    default: 3
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Fetch the checkpoint from the NAS
  gx10.cluster.model_fetch:
    files: "{{ manifest.files }}"
    dest: /srv/models/DeepSeek-V4-Flash-0731
    source: {type: http, base_url: "http://nas:8080/"}
    margin_bytes: 1073741824
"""

RETURN = r"""
ok:
  description: Every manifest file is present and verified (after the fetch).
  returned: always
  type: bool
files_total:
  description: Files in the manifest.
  returned: always
  type: int
files_ok:
  description: Files already verified before any fetch.
  returned: always
  type: int
files_fetched:
  description: Files fetched and installed in this run.
  returned: always
  type: int
fetched:
  description: Paths fetched (or, in check mode, that would be fetched).
  returned: always
  type: list
bytes_from_source:
  description: Bytes read from the source in this run.
  returned: always
  type: int
bytes_hashed:
  description: Bytes read and hashed to verify (cache hits are not read).
  returned: always
  type: int
seconds:
  description: Wall time of the module.
  returned: always
  type: float
found:
  description: What the first verification found missing or mismatching (path, status, message).
  returned: always
  type: list
failures:
  description: Files still missing or mismatching, each with path, status and message.
  returned: always
  type: list
dest_id:
  description: The directory's "device:inode" (changes when the directory is replaced).
  returned: when dest verifies
  type: str
extras:
  description: Files under dest the manifest does not list (left in place).
  returned: always
  type: list
"""

import errno
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    CorruptPartialError,
    Expected,
    IncompletePartialError,
    InstallError,
    ModelFilesError,
    Verification,
    expected_from_dicts,
    install_verified,
    partial_path,
    verify_files,
)

CHUNK = 1024 * 1024


class FetchError(Exception):
    pass


def nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.is_dir() and probe.parent != probe:
        probe = probe.parent
    return probe


def free_bytes(path: Path) -> int:
    st = os.statvfs(nearest_existing(path))
    return st.f_bavail * st.f_frsize


def url_for(base_url: str, relpath: str) -> str:
    base = base_url if base_url.endswith("/") else base_url + "/"
    return base + urllib.parse.quote(relpath)


def download(url: str, partial: Path, size: int, timeout: int) -> int:
    """Append to `partial` from where it ends (Range), up to `size` bytes. Returns bytes read."""
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:  # cannot be resumed onto; start over
        partial.unlink()
        have = 0
    if have == size:
        return 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    read = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            mode = "ab"
            if have and response.status != 206:  # the server ignored the range: from zero
                mode = "wb"
            with open(partial, mode) as out:
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    read += len(chunk)
                out.flush()
                os.fsync(out.fileno())
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise FetchError(f"{url}: {reason}") from None
    return read


def fetch_one(
    entry: Expected, dest: Path, base_url: str, timeout: int, attempts: int
) -> tuple[int, list[str]]:
    """Fetch and install one file. Returns (bytes read from the source, notes)."""
    target = dest / entry.path
    partial = partial_path(target)
    partial.parent.mkdir(parents=True, exist_ok=True)
    read = 0
    notes: list[str] = []
    last = ""
    for _ in range(max(1, attempts)):
        try:
            read += download(url_for(base_url, entry.path), partial, entry.size, timeout)
        except FetchError as exc:
            last = str(exc)
            notes.append(last)
            continue
        try:
            install_verified(partial, target, entry, cache_root=dest)
        except IncompletePartialError as exc:
            last = str(exc)
            notes.append(last)
            continue
        except CorruptPartialError as exc:
            last = str(exc)
            notes.append(last)
            continue
        return read, notes
    raise FetchError(f"{entry.path}: not fetched after {attempts} attempt(s): {last}")


def summary(found: Verification) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    failures = [
        {"path": r.path, "status": r.status, "message": r.describe()} for r in found.failures
    ]
    extras = [{"path": r.path, "size": r.actual_size} for r in found.extras]
    return failures, extras


def check_inputs(module: AnsibleModule) -> tuple[Path, list[Expected]]:
    params = module.params
    dest = Path(params["dest"])
    if not dest.is_absolute():
        module.fail_json(msg=f"dest must be an absolute path, got {params['dest']!r}")
    try:
        expected = expected_from_dicts(params["files"])
    except ModelFilesError as exc:
        module.fail_json(msg=str(exc))
    source = params["source"]
    base_url = str((source or {}).get("base_url") or "")
    if source is not None and (
        source.get("type") != "http" or not base_url.startswith(("http://", "https://"))
    ):
        module.fail_json(
            msg=f"source must be {{type: http, base_url: http://host:port/}}, got {source!r}"
        )
    return dest, expected


def check_disk(
    module: AnsibleModule, dest: Path, todo: list[Expected], result: dict[str, Any]
) -> None:
    """Fail, before any byte moves, unless what is missing plus the margin fits."""
    needed = 0
    for entry in todo:
        partial = partial_path(dest / entry.path)
        have = partial.stat().st_size if partial.is_file() else 0
        # A resumable .partial already holds part of the file.
        needed += entry.size - have if have <= entry.size else entry.size
    margin = module.params["margin_bytes"]
    free = free_bytes(dest)
    result.update(bytes_needed=needed, bytes_free=free, margin_bytes=margin)
    if needed + margin > free:
        module.fail_json(
            msg=(
                f"not enough free disk at {nearest_existing(dest)} for the checkpoint: "
                f"{len(todo)} file(s) need {needed} bytes plus a margin of {margin} bytes = "
                f"{needed + margin} bytes, {free} bytes free; nothing was fetched. Free space "
                "or lower the margin."
            ),
            **result,
        )


def check_writable(
    module: AnsibleModule, dest: Path, todo: list[Expected], result: dict[str, Any]
) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = dest / ".gx10-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        hint = " (read-only filesystem)" if exc.errno == errno.EROFS else ""
        module.fail_json(
            msg=(
                f"cannot write to {dest}{hint}: {exc.strerror or exc}; {len(todo)} file(s) "
                "need fetching. Make the model directory writable (or mount it read-write)."
            ),
            **result,
        )


def dir_id(path: Path) -> str:
    """ "device:inode" of the directory, "" if absent: a replaced directory gets a new one, which a
    container's bind mount of the old one never sees."""
    try:
        st = path.stat()
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


def failures_text(failures: list[dict[str, Any]]) -> str:
    return ", ".join(f"{f['path']} ({f['message']})" for f in failures)


def run(module: AnsibleModule) -> dict[str, Any]:
    started = time.monotonic()
    params = module.params
    dest, expected = check_inputs(module)
    source = params["source"]
    jobs = params["jobs"] or None
    try:
        before = verify_files(dest, expected, reverify=params["reverify"], jobs=jobs)
    except ModelFilesError as exc:
        module.fail_json(msg=str(exc))
    by_path = {e.path: e for e in expected}
    todo = [by_path[r.path] for r in before.failures]
    failures, extras = summary(before)
    result: dict[str, Any] = {
        "changed": False,
        "ok": before.ok,
        "dest": str(dest),
        "files_total": len(expected),
        "files_ok": len(expected) - len(todo),
        "files_fetched": 0,
        "fetched": [e.path for e in todo],
        "bytes_total": sum(e.size for e in expected),
        "bytes_from_source": 0,
        "bytes_hashed": before.hashed_bytes,
        "bytes_cached": before.cached_bytes,
        "found": failures,
        "failures": failures,
        "extras": extras,
        "notes": list(before.notes),
    }
    if not todo:
        result.update(
            fetched=[], dest_id=dir_id(dest), seconds=round(time.monotonic() - started, 3)
        )
        return result
    if source is None:  # verify only: the serve stage's gate
        module.fail_json(
            msg=(
                f"{dest} does not match the manifest: {len(todo)} file(s) missing or "
                f"mismatching: {failures_text(failures)}"
            ),
            **result,
        )
    check_disk(module, dest, todo, result)
    if module.check_mode:
        result.update(changed=True, seconds=round(time.monotonic() - started, 3))
        return result
    check_writable(module, dest, todo, result)
    fetched: list[str] = []
    errors: list[str] = []
    for entry in todo:
        try:
            read, notes = fetch_one(
                entry, dest, source["base_url"], params["timeout"], params["attempts"]
            )
        except (FetchError, InstallError) as exc:
            errors.append(str(exc))
            continue
        result["bytes_from_source"] += read
        result["notes"].extend(notes)
        fetched.append(entry.path)
    after = verify_files(dest, expected, jobs=jobs)
    failures, extras = summary(after)
    result.update(
        changed=bool(fetched),
        ok=after.ok and not errors,
        files_fetched=len(fetched),
        fetched=fetched,
        bytes_hashed=result["bytes_hashed"] + after.hashed_bytes,
        failures=failures,
        extras=extras,
        dest_id=dir_id(dest),
        seconds=round(time.monotonic() - started, 3),
    )
    if errors or not after.ok:
        detail = "; ".join(errors) or failures_text(failures)
        module.fail_json(msg=f"{dest}: fetch failed: {detail}", **result)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "dest": {"type": "path", "required": True},
            "source": {"type": "dict"},
            "reverify": {"type": "bool", "default": False},
            "margin_bytes": {"type": "int", "default": 0},
            "jobs": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 60},
            "attempts": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
