# SPDX-License-Identifier: Apache-2.0
"""Model sources: where gx10.cluster.model_fetch reads the files a node lacks.

Standard library only and no I/O: it runs on the nodes (inside model_fetch, which does the
reading) and on the controller (the model_plan action checks the source before any node changes),
so both refuse the same inputs with the same words.

- ``http``: ``{type: http, base_url: http://HOST:PORT/PATH/}``, each file at ``base_url`` plus its
  manifest path (a NAS or mirror's HTTP server; the head's peer server for the workers).
- ``hub``: ``{type: hub, repo, revision, endpoint, token}``, each file at
  ``{endpoint}/{repo}/resolve/{revision}/{path}``, the URL ``hf download`` requests (the Hub
  redirects large files to its CDN). So a hub source is an http source with a computed base URL
  and, with a token, an ``Authorization: Bearer`` header. ``revision`` must be the manifest's
  pinned commit: the manifest's hashes are that commit's.
- ``dir``: ``{type: dir, path: /mnt/nas/CHECKPOINT}``, a local or NAS-mounted directory holding
  the files by their manifest paths.

The token is a secret: no message, ``repr`` or description here ever contains it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

SourceType = Literal["http", "hub", "dir"]

SOURCE_TYPES: tuple[SourceType, ...] = ("http", "hub", "dir")
DEFAULT_ENDPOINT = "https://huggingface.co"
EXAMPLES = (
    "{type: http, base_url: http://HOST:PORT/PATH/} (a server holding the files by their manifest "
    "paths), {type: hub, repo: OWNER/NAME, revision: <the manifest's 40-hex commit>, token: "
    "<optional, for a gated or private repository>} (the Hugging Face Hub; endpoint: "
    f"{DEFAULT_ENDPOINT} by default), or {{type: dir, path: /mnt/nas/CHECKPOINT}} (a local or "
    "NAS-mounted directory on the head)"
)
REDACTED = "<hidden>"

_KEYS: dict[str, tuple[str, ...]] = {
    "http": ("base_url",),
    "hub": ("repo", "revision", "endpoint", "token"),
    "dir": ("path",),
}
_ALL_KEYS = ("type", *sorted({key for keys in _KEYS.values() for key in keys}))
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_SHA = re.compile(r"[0-9a-f]{40}")
# What an HTTP header value may hold: visible ASCII, no spaces (a CR/LF would inject a header).
_TOKEN = re.compile(r"[\x21-\x7e]+")


class SourceError(ValueError):
    """The source cannot be used; the message names the value (its token hidden) and the fix."""


@dataclass(frozen=True)
class Source:
    """A checked source. For http and hub, files are at ``base_url`` plus their quoted path."""

    type: SourceType
    base_url: str = ""
    repo: str = ""
    revision: str = ""
    endpoint: str = ""
    token: str = field(default="", repr=False)
    path: str = ""

    def url_for(self, relpath: str) -> str:
        return self.base_url + urllib.parse.quote(relpath)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def describe(self) -> str:
        """One line for messages and results, without the token."""
        if self.type == "hub":
            auth = "with a token" if self.token else "without a token"
            return f"the Hub ({self.endpoint}) {self.repo} at {self.revision}, {auth}"
        if self.type == "dir":
            return f"the directory {self.path}"
        return self.base_url

    def http_error(
        self, relpath: str, code: int, reason: str, hub_message: str = "", elsewhere: str = ""
    ) -> tuple[str, bool]:
        """What an HTTP error status for `relpath` means: (message, is it worth retrying). The
        message does not start with `relpath`: the caller puts it in front.

        `hub_message` is the Hub's X-Error-Message header; `elsewhere` the host that answered
        when a redirect led away from the source's (the Hub's CDN), "" otherwise.
        """
        retry = code >= 500 or code in (408, 429)
        if self.type != "hub":
            return f"{self.url_for(relpath)}: HTTP {code} {reason}", retry
        if elsewhere:  # a signed CDN URL can expire: asking the Hub again gets a fresh one
            return (
                f"{elsewhere}, where the Hub redirected the download, answered HTTP "
                f"{code} {reason}",
                True,
            )
        said = f" (the Hub says: {hub_message})" if hub_message else ""
        if code in (401, 403):
            if self.token:
                fix = (
                    f"the token was refused for {self.repo}: use a token of an account that was "
                    "granted access (accept the repository's terms on its Hub page)"
                )
            else:
                fix = (
                    f"{self.repo} is gated or private (or does not exist): set the source's token "
                    "(gx10_model_source.token) to a Hugging Face access token of an account "
                    "that was granted access"
                )
            return f"the Hub answered HTTP {code} {reason}{said}; {fix}", False
        if code == 404:
            return (
                f"not found in {self.repo} at revision {self.revision} (HTTP 404: "
                f"unknown revision or file){said}",
                False,
            )
        return f"the Hub answered HTTP {code} {reason}{said}", retry


def redacted(value: object) -> object:
    """`value` fit for a message: a mapping's token (any key naming one) replaced."""
    if not isinstance(value, Mapping):
        return value
    return {
        key: REDACTED if "token" in str(key).lower() and item else item
        for key, item in value.items()
    }


def parse_source(value: object, *, revision: str | None = None, name: str = "source") -> Source:
    """Check `value` as a source and return it as a Source.

    `revision` is the manifest's pinned commit: a hub source must name the same one (without it,
    a hub source cannot be checked and is refused). `name` is what messages call the value.
    Raises SourceError naming every problem, the value (token hidden) and an example of each type.
    """
    problems, source = _check(value, revision)
    if problems or source is None:
        raise SourceError(
            f"{name} is {redacted(value)!r}: {'; '.join(problems)}. Set it to {EXAMPLES}."
        )
    return source


def _check(value: object, revision: str | None) -> tuple[list[str], Source | None]:
    if not isinstance(value, Mapping):
        return ["not a mapping"], None
    kind = value.get("type")
    if kind not in SOURCE_TYPES:
        return [f"type {kind!r} is not one of {', '.join(SOURCE_TYPES)}"], None
    # A module's sub-options arrive with every key, unset ones as None.
    given = {str(k): v for k, v in value.items() if v is not None}
    unknown = sorted(k for k in given if k not in _ALL_KEYS)
    foreign = sorted(k for k in given if k in _ALL_KEYS and k != "type" and k not in _KEYS[kind])
    problems = []
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)}")
    if foreign:
        problems.append(
            f"key(s) {', '.join(foreign)} do not apply to a {kind} source, which takes "
            f"{', '.join(_KEYS[kind])}"
        )
    if kind == "http":
        base_url = given.get("base_url")
        if not _is_url(base_url):
            problems.append(f"base_url {base_url!r} is not an http:// or https:// URL")
            return problems, None
        assert isinstance(base_url, str)
        base = base_url if base_url.endswith("/") else base_url + "/"
        return problems, Source("http", base_url=base)
    if kind == "dir":
        path = given.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"path {path!r} is not an absolute directory path")
            return problems, None
        return problems, Source("dir", path=path.rstrip("/") or "/")
    return _check_hub(given, revision, problems)


def _check_hub(
    given: Mapping[str, object], pinned: str | None, problems: list[str]
) -> tuple[list[str], Source | None]:
    repo, revision = given.get("repo"), given.get("revision")
    endpoint, token = given.get("endpoint", DEFAULT_ENDPOINT), given.get("token", "")
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        problems.append(f"repo {repo!r} is not a Hub repository id like OWNER/NAME")
    if not isinstance(revision, str) or not _SHA.fullmatch(revision):
        problems.append(
            f"revision {revision!r} is not a full commit sha (40 lowercase hex characters); "
            "a hub source is pinned to the manifest's commit"
        )
    elif pinned is None:
        problems.append("the manifest's pinned revision was not given, so the pin is unchecked")
    elif revision != pinned:
        problems.append(
            f"revision {revision} is not the manifest's pinned revision {pinned}: the manifest "
            f"holds {pinned}'s hashes, so set revision: {pinned} (or build a manifest for "
            f"{revision} with `gx10 model manifest --from-hub`)"
        )
    if not _is_url(endpoint):
        problems.append(f"endpoint {endpoint!r} is not an http:// or https:// URL")
    if not isinstance(token, str) or (token and not _TOKEN.fullmatch(token)):
        # Never the value: it is a secret, even a malformed one.
        problems.append("token is not a string of visible ASCII characters without spaces")
    if problems:
        return problems, None
    assert isinstance(repo, str)
    assert isinstance(revision, str)
    assert isinstance(endpoint, str)
    assert isinstance(token, str)
    endpoint = endpoint.rstrip("/")
    return problems, Source(
        "hub",
        base_url=f"{endpoint}/{repo}/resolve/{revision}/",
        repo=repo,
        revision=revision,
        endpoint=endpoint,
        token=token,
    )


def _is_url(value: object) -> bool:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        return False
    return bool(urllib.parse.urlsplit(value).netloc)
