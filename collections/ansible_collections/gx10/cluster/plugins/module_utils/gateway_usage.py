# SPDX-License-Identifier: Apache-2.0
"""Per-key usage from the API gateway's access log (`gx10 keys usage`).

Standard library only: the ``gateway_usage`` module runs it on the head over the gateway's
journal; the controller's tests feed it log lines.

The gateway (roles/api_gateway, ``log-format`` in its configuration) writes one line per request
when the response ends::

    10.0.0.5:51234 [07/Dec/2026:21:40:00.123] gx10_api gx10_engine/engine 0/0/0/5/5 200 267 ----
    key=alice in=7 out=3 "POST /v1/chat/completions HTTP/1.1"

``key`` is the key's name (``-`` when the request had no known key), ``in`` and ``out`` the
prompt and completion tokens the response reported (``-`` when it reported none: a model list,
a refusal, a chat stream without ``stream_options.include_usage``). A line in any other shape is
counted as unread, never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# The fields `gx10 keys usage` reads, from the log-format's tail: status, bytes, termination
# state, key, tokens in and out, method and path.
LINE = re.compile(
    r"\[(?P<time>[^\]]+)\] \S+ \S+ \S+ (?P<status>\d{3}) (?P<bytes>\d+) \S+ "
    r"key=(?P<key>\S+) in=(?P<tokens_in>\d+|-) out=(?P<tokens_out>\d+|-) "
    r'"(?P<method>\S+) (?P<path>\S+)'
)
NO_KEY = "-"  # what the log shows for a request without a known key (refused with 401)
LIMITED = 429


@dataclass(frozen=True, slots=True)
class Request:
    """One access log line."""

    time: str
    status: int
    bytes: int
    key: str
    tokens_in: int | None
    tokens_out: int | None
    method: str
    path: str


def parse_line(line: str) -> Request | None:
    """The request a gateway access line records; None for any other line."""
    found = LINE.search(line)
    if found is None:
        return None
    return Request(
        time=found["time"],
        status=int(found["status"]),
        bytes=int(found["bytes"]),
        key=found["key"],
        tokens_in=None if found["tokens_in"] == "-" else int(found["tokens_in"]),
        tokens_out=None if found["tokens_out"] == "-" else int(found["tokens_out"]),
        method=found["method"],
        path=found["path"],
    )


@dataclass(slots=True)
class KeyUsage:
    """What one key did: its requests by outcome, the tokens its responses reported."""

    name: str
    requests: int = 0
    ok: int = 0  # 2xx and 3xx
    limited: int = 0  # 429: over its limit of requests in flight
    failed: int = 0  # any other 4xx or 5xx
    tokens_in: int = 0
    tokens_out: int = 0
    counted: int = 0  # responses that reported their tokens
    bytes: int = 0
    first: str = ""
    last: str = ""

    def add(self, request: Request) -> None:
        self.requests += 1
        if request.status == LIMITED:
            self.limited += 1
        elif request.status < 400:
            self.ok += 1
        else:
            self.failed += 1
        if request.tokens_in is not None or request.tokens_out is not None:
            self.counted += 1
        self.tokens_in += request.tokens_in or 0
        self.tokens_out += request.tokens_out or 0
        self.bytes += request.bytes
        self.first = self.first or request.time
        self.last = request.time

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.requests,
            "ok": self.ok,
            "limited": self.limited,
            "failed": self.failed,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "counted": self.counted,
            "bytes": self.bytes,
            "first": self.first,
            "last": self.last,
        }


@dataclass(slots=True)
class Usage:
    """Every key's usage in a stretch of the log, and how many lines were not requests."""

    keys: dict[str, KeyUsage] = field(default_factory=dict)
    lines: int = 0
    unread: int = 0

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.keys.values(), key=lambda k: (k.name == NO_KEY, k.name))
        return {
            "keys": [k.as_dict() for k in ordered],
            "lines": self.lines,
            "unread": self.unread,
        }


def summarize(lines: Iterable[str]) -> Usage:
    """Per-key usage over `lines` (a journal's or a log file's)."""
    usage = Usage()
    for line in lines:
        if not line.strip():
            continue
        usage.lines += 1
        request = parse_line(line)
        if request is None:
            usage.unread += 1  # HAProxy's own messages: started, reloaded, a server down
            continue
        usage.keys.setdefault(request.key, KeyUsage(request.key)).add(request)
    return usage
