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
    I(source) into C(<file>.partial), resuming a previous C(.partial) from its current length (an
    HTTP Range request, or a seek in a source directory). Each buffer is hashed right after it is
    written in full, so a fetched file is verified as it lands and never read back (a resumed
    C(.partial)'s existing bytes are read once). Only when the digest matches the manifest's is
    the file fsynced and renamed into place, and recorded in the verification cache, so the
    verify pass that follows the fetch does not read it. A verified file is never replaced by an
    unverified one; a corrupt file is replaced only by a verified download.
  - Three sources. C(http), any server holding the files by their manifest paths. C(hub), the
    Hugging Face Hub, each file from C({endpoint}/{repo}/resolve/{revision}/{path}) as
    C(hf download) does, following the Hub's redirect to its CDN; the token is sent to the
    endpoint's host only, never to where a redirect leads. C(dir), a local or NAS-mounted
    directory, copied with large reads (rsync semantics, resume, verify, rename).
  - Free disk for what is missing (plus I(margin_bytes)) is checked before any byte moves, and so
    are a hub source's revision (it must be I(revision), the manifest's pin) and a dir source's
    files (present, with the manifest's sizes).
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
    description:
      - Where missing files come from. Without it the module only verifies.
      - "C({type: http, base_url: http://host:port/dir/}),
        C({type: hub, repo: OWNER/NAME, revision: COMMIT, token: SECRET}) or
        C({type: dir, path: /mnt/nas/CHECKPOINT})."
    type: dict
    suboptions:
      type:
        description: The kind of source.
        type: str
        required: true
        choices: [http, hub, dir]
      base_url:
        description: C(http) only. The URL the manifest paths are relative to.
        type: str
      repo:
        description: C(hub) only. The repository, C(OWNER/NAME).
        type: str
      revision:
        description: C(hub) only. The full commit sha; must equal I(revision).
        type: str
      endpoint:
        description: C(hub) only. The Hub's URL (C(https://huggingface.co) when unset).
        type: str
      token:
        description:
          - C(hub) only. A Hugging Face access token, sent as a bearer token in the
            C(Authorization) header (a gated or private repository needs one). Never logged or
            returned.
        type: str
      path:
        description: C(dir) only. The absolute path of the directory on this node.
        type: str
  revision:
    description: The manifest's pinned commit. Required with a C(hub) source, which must name it.
    type: str
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
  relay_wait:
    description:
      - C(http) only. The source is a node upstream in the sync chain, fetching the same files in
        the same order; it serves a file only once it verified it and answers HTTP 404 until
        then. With I(relay_wait) > 0 a 404 means "not yet"; the file is asked for again every
        second, for up to I(relay_wait) seconds without progress (the upstream node's
        C(.partial) of the file growing, as its 404 says in C(X-Gx10-Partial-Bytes)), then the
        fetch fails naming I(relay_from), the file and C(gx10_model_relay_wait). If the
        upstream node was seen fetching (its 404 says C(X-Gx10-Fetching 1); a fetch holds
        C(.gx10-fetching) in its directory under an exclusive flock while it writes files) and
        then says it is not any more, its fetch ended without the file and the wait fails at
        once.
      - 0 (the default) keeps a 404 final, as for any other source.
    type: int
    default: 0
  relay_from:
    description: The upstream node's name, for the messages (with I(relay_wait)).
    type: str
    default: the upstream node
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

- name: Fetch the pinned revision from the Hugging Face Hub (a gated repository needs the token)
  gx10.cluster.model_fetch:
    files: "{{ manifest.files }}"
    dest: /srv/models/DeepSeek-V4-Flash-0731
    revision: "{{ manifest.revision }}"
    source:
      type: hub
      repo: deepseek-ai/DeepSeek-V4-Flash-0731
      revision: "{{ manifest.revision }}"
      token: "{{ hf_token }}"

- name: Copy from a NAS mount on this node
  gx10.cluster.model_fetch:
    files: "{{ manifest.files }}"
    dest: /srv/models/DeepSeek-V4-Flash-0731
    source: {type: dir, path: /mnt/nas/DeepSeek-V4-Flash-0731}
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
relay_waited:
  description: Seconds spent waiting for the upstream node to verify files (I(relay_wait)).
  returned: always
  type: float
fetched:
  description: Paths fetched (or, in check mode, that would be fetched).
  returned: always
  type: list
bytes_from_source:
  description: Bytes read from the source in this run (downloaded, or copied from a dir source).
  returned: always
  type: int
bytes_received:
  description: Bytes from the source written into C(.partial) files in this run, every attempt.
  returned: always
  type: int
bytes_hashed_receiving:
  description:
    - Of I(bytes_received), the bytes hashed in the loop that wrote them, right after each
      buffer was written in full (all of them, unless a write failed midway).
  returned: always
  type: int
bytes_read_back:
  description:
    - Bytes read back from this node's disk to hash them. The existing part of resumed
      C(.partial) files, plus the verify passes' reads (files that were already in place and
      that the cache could not vouch for). Fetched files add nothing.
    - I(bytes_read_back) / I(bytes_total) is a sync's read amplification.
  returned: always
  type: int
bytes_total:
  description: Size of every manifest file together (the checkpoint).
  returned: always
  type: int
source:
  description: The source in words (never the token); empty without one.
  returned: always
  type: str
bytes_hashed:
  description:
    - Bytes the verify passes (before and after the fetch) read and hashed; cache hits, and
      files hashed as they were received, are not read.
  returned: always
  type: int
bytes_cached:
  description: Bytes the verification cache vouched for in the first verify pass.
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
import fcntl
import http.client
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import (
    CorruptPartialError,
    IncompletePartialError,
    InstallError,
    ModelError,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    CACHE_NAME,
    FETCHING_NAME,
    Expected,
    Receiver,
    Verification,
    expected_from_dicts,
    partial_path,
    verify_files,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_source import (
    SOURCE_TYPES,
    Source,
    SourceError,
    parse_source,
)

CHUNK = 1024 * 1024
# A NAS read: few large requests keep a network filesystem streaming.
COPY_CHUNK = 16 * 1024 * 1024


class FetchError(Exception):
    def __init__(self, msg: str, *, retry: bool = True, abort: bool = False) -> None:
        super().__init__(msg)
        self.retry = retry
        """Another attempt could succeed (a dropped connection, a 5xx)."""
        self.abort = abort
        """No other file can succeed either (the Hub refused the credentials)."""


class HTTPStatusError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        hub_message: str,
        elsewhere: str,
        *,
        partial_bytes: int | None = None,
        fetching: bool | None = None,
    ) -> None:
        super().__init__(f"HTTP {code} {reason}")
        self.code = code
        self.reason = reason
        self.hub_message = hub_message
        self.elsewhere = elsewhere
        self.partial_bytes = partial_bytes
        """A peer server's X-Gx10-Partial-Bytes: how much of the file it holds unverified."""
        self.fetching = fetching
        """A peer server's X-Gx10-Fetching: its node is fetching now (None: not said)."""


# gx10_serve_dir.py's headers on a 404: how much of the file it holds unverified, and whether
# its node is fetching now.
PARTIAL_HEADER = "X-Gx10-Partial-Bytes"
FETCHING_HEADER = "X-Gx10-Fetching"
RELAY_POLL_SECONDS = 1.0


@dataclass
class Relay:
    """Waiting for a file the upstream node of the chain has not verified yet (HTTP 404).

    The bound is on time without progress: the clock restarts whenever the upstream node's
    `.partial` of the file has grown (its 404 says how long it is), so a slow but moving
    upstream fetch is waited for, a stalled one fails after `wait` seconds. An upstream fetch
    that was seen running and has ended without the file (its 404 says it is not fetching any
    more: it failed) fails the wait at once."""

    wait: float
    upstream: str
    url: str
    clock: Any = time.monotonic
    sleep: Any = time.sleep
    poll: float = RELAY_POLL_SECONDS
    waited: float = 0.0
    """Seconds slept in all, over every file."""
    _path: str = ""
    _since: float = 0.0
    _partial: int | None = None
    _seen_fetching: bool = False

    def not_yet(self, path: str, partial_bytes: int | None, fetching: bool | None = None) -> None:
        """The upstream node answered 404 for `path`: sleep and return to ask again, or raise
        FetchError (no retry) once `wait` seconds passed without progress, or at once if the
        upstream fetch was seen running and has ended."""
        if fetching:
            self._seen_fetching = True
        elif fetching is False and self._seen_fetching:
            raise FetchError(
                f"{self.upstream} ({self.url}) ended its fetch without it (its own fetch failed: "
                f"see {self.upstream}'s error)",
                retry=False,
                abort=True,
            )
        now = self.clock()
        if path != self._path:
            self._path, self._since, self._partial = path, now, partial_bytes
        elif partial_bytes is not None and partial_bytes != self._partial:
            self._since, self._partial = now, partial_bytes
        idle = now - self._since
        if idle >= self.wait:
            held = (
                f"it holds {self._partial} bytes of it unverified"
                if self._partial is not None
                else "it has not started it"
            )
            raise FetchError(
                f"{self.upstream} ({self.url}) has not verified it after {self.wait:g} s without "
                f"progress ({held}): look at {self.upstream}'s own fetch (it failed, or stalled), "
                "or raise gx10_model_relay_wait (model_sync_relay_wait) if it is just slow",
                retry=False,
                # Files come down the chain in manifest order: the next ones will not come either.
                abort=True,
            )
        pause = min(self.poll, self.wait - idle)
        self.sleep(pause)
        self.waited += pause

    def progress(self) -> None:
        """A download got through: the next 404 starts a new wait."""
        self._path = ""


def nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.is_dir() and probe.parent != probe:
        probe = probe.parent
    return probe


def free_bytes(path: Path) -> int:
    st = os.statvfs(nearest_existing(path))
    return st.f_bavail * st.f_frsize


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends large files to its CDN) keeping the Range header, but send
    the Authorization header only to the origin it was meant for, as huggingface_hub does: the
    CDN gets a signed URL, never the token.

    Why urllib's handler and not ansible.module_utils.urls (weighed for issue 29; ansible-core
    2.19): its redirect handler copies every header to wherever a redirect leads (the token
    would reach the CDN), its `unredirected_headers` drops a header on every hop (a renamed
    repository redirects within the Hub, where the token must go), and Request.open takes no
    handler of ours; following redirects by hand around it would be more code than this
    subclass of the standard library's own handler."""

    def redirect_request(  # noqa: PLR0917 (urllib's signature)
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_Redirects)


@dataclass
class Tally:
    """Byte counts of one module run, kept across attempts and failures."""

    from_source: int = 0
    """Read from the source (an HTTP body, or a source directory's file)."""
    received: int = 0
    """Written into `.partial` files."""
    hashed_receiving: int = 0
    """Hashed in the loop that wrote them, as they were written (never read back)."""
    read_back: int = 0
    """Read back from `.partial` files on disk to hash them: the prefix of a resumed fetch."""

    def add(self, receiver: Receiver) -> None:
        self.received += receiver.received
        self.hashed_receiving += receiver.hashed_receiving
        self.read_back += receiver.read_back


def download(
    url: str,
    sink: Receiver,
    timeout: int,
    tally: Tally,
    headers: dict[str, str] | None = None,
) -> None:
    """Bring `sink` up to its size from `url`, asking for the bytes past what it holds (Range).

    At most one byte past the size is taken, so a longer answer shows as corrupt without reading
    it all. Raises HTTPStatusError for an HTTP error status, FetchError for anything else (the
    connection), InstallError if the `.partial` cannot take the bytes."""
    have = sink.offset
    if have == sink.size:
        return
    sent = dict(headers or {})
    if have:
        sent["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=sent)
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            if have and response.status != 206:  # the server ignored the range: from zero
                sink.restart()
            left = sink.size - sink.offset + 1
            while left > 0:
                count = response.readinto(view[: min(CHUNK, left)])
                if not count:
                    break
                tally.from_source += count
                sink.write(view[:count])
                left -= count
    except urllib.error.HTTPError as exc:
        answered = exc.geturl() or url
        elsewhere = "" if _origin(answered) == _origin(url) else _origin(answered)[1]
        hub_message = " ".join(str(exc.headers.get("X-Error-Message") or "").split())[:300]
        held = str(exc.headers.get(PARTIAL_HEADER) or "")
        partial_bytes = int(held) if held.isdigit() else None
        said = exc.headers.get(FETCHING_HEADER)
        fetching = None if said not in ("0", "1") else said == "1"
        raise HTTPStatusError(
            exc.code,
            str(exc.reason),
            hub_message,
            elsewhere,
            partial_bytes=partial_bytes,
            fetching=fetching,
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        # HTTPException: a connection that broke mid-answer (a bad status line, a short read).
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise FetchError(f"{url}: {reason!s}") from None


def copy_from(source_file: Path, sink: Receiver, tally: Tally) -> None:
    """Bring `sink` up to its size from `source_file`, read from the offset `sink` holds.

    One byte past the size is read, so a longer source shows as corrupt. Raises FetchError if the
    source cannot be read, InstallError if the `.partial` cannot take the bytes."""
    have = sink.offset
    if have == sink.size:
        return
    left = sink.size - have + 1
    buffer = bytearray(min(COPY_CHUNK, left))
    view = memoryview(buffer)
    try:
        with open(source_file, "rb") as src:
            src.seek(have)
            while left > 0:
                count = src.readinto(view[: min(len(buffer), left)])
                if not count:
                    break
                tally.from_source += count
                sink.write(view[:count])
                left -= count
    except OSError as exc:
        raise FetchError(f"{source_file}: {exc.strerror or exc}") from None


def pull(
    source: Source,
    entry: Expected,
    sink: Receiver,
    timeout: int,
    tally: Tally,
    *,
    relay: Relay | None = None,
) -> None:
    """Bring `sink` up to `entry.size` bytes from the source. With `relay`, a 404 is a file the
    upstream node has not verified yet: asked again until `relay` gives up.

    Raises FetchError with a message that does not name `entry.path` (fetch_one does)."""
    if source.type == "dir":
        copy_from(Path(source.path) / entry.path, sink, tally)
        return
    while True:
        try:
            download(source.url_for(entry.path), sink, timeout, tally, source.headers())
        except HTTPStatusError as exc:
            if relay is not None and exc.code == 404:
                relay.not_yet(entry.path, exc.partial_bytes, exc.fetching)
                continue
            msg, retry = source.http_error(
                entry.path, exc.code, exc.reason, exc.hub_message, exc.elsewhere
            )
            raise FetchError(msg, retry=retry, abort=exc.code in (401, 403)) from None
        if relay is not None:
            relay.progress()
        return


def fetch_one(
    entry: Expected,
    dest: Path,
    source: Source,
    *,
    timeout: int,
    attempts: int,
    tally: Tally,
    relay: Relay | None = None,
) -> list[str]:
    """Fetch and install one file, hashing it as it is received. Returns notes (the attempts
    that failed before one succeeded); `tally` counts the bytes of every attempt.

    Each attempt resumes the `.partial` (its bytes are read back once to carry the hash on),
    appends what the source sends, and installs the file only if the digest of the bytes written
    matches the manifest's. Raises FetchError, or InstallError (the `.partial` cannot be
    written, or the file cannot be renamed into place)."""
    target = dest / entry.path
    partial = partial_path(target)
    partial.parent.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    last = ""
    tries = max(1, attempts)
    for _ in range(tries):
        receiver = Receiver(partial, target, entry, cache_file=dest / CACHE_NAME)
        try:
            with receiver:
                receiver.open_to_resume()
                pull(source, entry, receiver, timeout, tally, relay=relay)
                receiver.install()
        except FetchError as exc:
            if not exc.retry:
                raise FetchError(f"{entry.path}: {exc}", retry=False, abort=exc.abort) from None
            last = str(exc)
            notes.append(last)
            continue
        except IncompletePartialError as exc:
            last = str(exc)
            notes.append(last)
            continue
        except CorruptPartialError as exc:
            last = str(exc)
            if source.type == "dir":
                last += f" (the source file {Path(source.path) / entry.path} does not match)"
            notes.append(last)
            continue
        finally:
            tally.add(receiver)
        return notes
    raise FetchError(f"{entry.path}: not fetched after {tries} attempt(s): {last}")


def summary(found: Verification) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    failures = [
        {"path": r.path, "status": r.status, "message": r.describe()} for r in found.failures
    ]
    extras = [{"path": r.path, "size": r.actual_size} for r in found.extras]
    return failures, extras


def check_inputs(module: AnsibleModule) -> tuple[Path, list[Expected], Source | None]:
    """Refuse bad arguments before anything is read or written (a hub source's revision too)."""
    params = module.params
    dest = Path(params["dest"])
    if not dest.is_absolute():
        module.fail_json(msg=f"dest must be an absolute path, got {params['dest']!r}")
    try:
        expected = expected_from_dicts(params["files"])
    except ModelError as exc:
        module.fail_json(msg=str(exc))
    source = None
    if params["source"] is not None:
        try:
            source = parse_source(params["source"], revision=params.get("revision"))
        except SourceError as exc:
            module.fail_json(msg=str(exc))
    return dest, expected, source


def check_dir_source(
    module: AnsibleModule, source: Source, todo: list[Expected], result: dict[str, Any]
) -> None:
    """Fail, before any byte moves, unless the source directory holds every file this node
    lacks at its manifest size (a stat each: an unmounted NAS or a stale copy shows here)."""
    root = Path(source.path)
    if not root.is_dir():
        module.fail_json(
            msg=(
                f"the source directory {root} does not exist or is not a directory (is the NAS "
                f"mounted on this node?); {len(todo)} file(s) need fetching, nothing was fetched"
            ),
            **result,
        )
    problems = []
    for entry in todo:
        path = root / entry.path
        try:
            st = path.stat()
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        if not path.is_file():
            problems.append(f"{path}: not a regular file")
        elif st.st_size != entry.size:
            problems.append(f"{path}: {st.st_size} bytes, the manifest says {entry.size}")
    if problems:
        module.fail_json(
            msg=(
                f"the source directory {root} cannot supply {len(problems)} of the {len(todo)} "
                f"file(s) this node lacks: {'; '.join(problems)}; nothing was fetched"
            ),
            **result,
        )


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


def relay_for(params: dict[str, Any], source: Source) -> Relay | None:
    """The wait for an upstream node of the chain, if `relay_wait` asks for one."""
    if not params.get("relay_wait") or source.type != "http":
        return None
    return Relay(
        wait=float(params["relay_wait"]),
        upstream=params.get("relay_from") or "the upstream node",
        url=source.base_url,
        poll=RELAY_POLL_SECONDS,
    )


class FetchingLock:
    """An exclusive flock on `dest`/.gx10-fetching while this module may fetch into `dest`: the
    peer server tells a node downstream in the sync chain that this node is still fetching (a
    file it has not verified yet may come) or has ended (it will not)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def take(self, dest: Path) -> None:
        """Take it if `dest` exists (never creates it) and no other fetch holds it."""
        if self.fd is not None or not dest.is_absolute() or not dest.is_dir():
            return
        try:
            fd = os.open(dest / FETCHING_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run(module: AnsibleModule) -> dict[str, Any]:
    """fetch(), which takes the directory's fetching lock once it starts writing files, and
    releases it at its end, failed or not. (Not earlier: a fetch that fails its checks leaves
    the directory untouched. A node downstream waits, bounded, for an upstream node that has not
    taken it yet.)"""
    lock = FetchingLock()
    try:
        return fetch(module, lock)
    finally:
        lock.release()


def fetch(module: AnsibleModule, lock: FetchingLock) -> dict[str, Any]:
    started = time.monotonic()
    params = module.params
    dest, expected, source = check_inputs(module)
    jobs = params["jobs"] or None
    try:
        before = verify_files(dest, expected, reverify=params["reverify"], jobs=jobs)
    except ModelError as exc:
        module.fail_json(msg=str(exc))
    by_path = {e.path: e for e in expected}
    todo = [by_path[r.path] for r in before.failures]
    failures, extras = summary(before)
    result: dict[str, Any] = {
        "changed": False,
        "ok": before.ok,
        "dest": str(dest),
        "source": source.describe() if source else "",
        "files_total": len(expected),
        "files_ok": len(expected) - len(todo),
        "files_fetched": 0,
        "fetched": [e.path for e in todo],
        "bytes_total": sum(e.size for e in expected),
        "bytes_from_source": 0,
        "bytes_received": 0,
        "bytes_hashed_receiving": 0,
        "bytes_read_back": before.hashed_bytes,
        "bytes_hashed": before.hashed_bytes,
        "bytes_cached": before.cached_bytes,
        "found": failures,
        "failures": failures,
        "extras": extras,
        "notes": list(before.notes),
        "relay_waited": 0.0,
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
    assert source is not None  # fail_json does not return
    if source.type == "dir":
        check_dir_source(module, source, todo, result)
    check_disk(module, dest, todo, result)
    if module.check_mode:
        result.update(changed=True, seconds=round(time.monotonic() - started, 3))
        return result
    check_writable(module, dest, todo, result)
    lock.take(dest)
    fetched: list[str] = []
    errors: list[str] = []
    tally = Tally()
    relay = relay_for(params, source)
    for index, entry in enumerate(todo):
        try:
            notes = fetch_one(
                entry,
                dest,
                source,
                timeout=params["timeout"],
                attempts=params["attempts"],
                tally=tally,
                relay=relay,
            )
        except FetchError as exc:
            errors.append(str(exc))
            if exc.abort:
                skipped = len(todo) - index - 1
                if skipped:
                    errors.append(f"{skipped} more file(s) not tried")
                break
            continue
        except InstallError as exc:
            errors.append(str(exc))
            continue
        result["notes"].extend(notes)
        fetched.append(entry.path)
    # Each fetched file is in the verification cache with the stamp it got when it was renamed
    # into place: this pass reads none of them again, only what it cannot vouch for.
    after = verify_files(dest, expected, jobs=jobs)
    failures, extras = summary(after)
    result.update(
        changed=bool(fetched),
        ok=after.ok and not errors,
        files_fetched=len(fetched),
        fetched=fetched,
        bytes_from_source=tally.from_source,
        bytes_received=tally.received,
        bytes_hashed_receiving=tally.hashed_receiving,
        bytes_read_back=before.hashed_bytes + tally.read_back + after.hashed_bytes,
        bytes_hashed=result["bytes_hashed"] + after.hashed_bytes,
        failures=failures,
        extras=extras,
        dest_id=dir_id(dest),
        seconds=round(time.monotonic() - started, 3),
        relay_waited=round(relay.waited, 3) if relay else 0.0,
    )
    if errors or not after.ok:
        detail = "; ".join(errors) or failures_text(failures)
        module.fail_json(msg=f"{dest}: fetch failed from {source.describe()}: {detail}", **result)
    return result


ARGUMENT_SPEC: dict[str, Any] = {
    "files": {"type": "list", "elements": "dict", "required": True},
    "dest": {"type": "path", "required": True},
    "source": {
        "type": "dict",
        "options": {
            "type": {"type": "str", "required": True, "choices": list(SOURCE_TYPES)},
            "base_url": {"type": "str"},
            "repo": {"type": "str"},
            "revision": {"type": "str"},
            "endpoint": {"type": "str"},
            # A secret: Ansible masks it in the invocation and in every returned string.
            "token": {"type": "str", "no_log": True},
            "path": {"type": "str"},
        },
    },
    "revision": {"type": "str"},
    "reverify": {"type": "bool", "default": False},
    "margin_bytes": {"type": "int", "default": 0},
    "jobs": {"type": "int", "default": 0},
    "timeout": {"type": "int", "default": 60},
    "attempts": {"type": "int", "default": 3},
    "relay_wait": {"type": "int", "default": 0},
    "relay_from": {"type": "str", "default": "the upstream node"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
