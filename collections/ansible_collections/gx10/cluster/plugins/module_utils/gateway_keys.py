# SPDX-License-Identifier: Apache-2.0
"""The API gateway's keys: names, the map file HAProxy reads, and its runtime API.

Standard library only: the ``gateway_keys`` module runs it on the head node, the controller's
``gx10 keys`` command checks names with it before anything runs.

A key is never stored: the map file holds the SHA-256 of each key (hex), the key's name and,
optionally, how many requests it may have in flight at once: one ``<sha256> <name> [<limit>]``
line per key, which HAProxy's ``map()`` converter reads (the key a request presents is hashed
with ``sha2(256),hex,lower`` and looked up; the value is the rest of the line, whose first word,
the name, is what the access log prints, and whose second, when there, is the key's own limit
in place of the gateway's default; 0 is none). The line before each entry is a comment
recording when the key was added (HAProxy ignores lines that start with ``#``). The running
HAProxy loaded the file when it started; ``sync_runtime`` makes its in-memory copy match the
file through the runtime API (its admin socket: ``show map``, ``add map``, ``del map``), so a
key added or revoked (or a limit changed) counts at once, without a reload, and never a
restart of anything.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A key's name: what the access log shows, and what `gx10 keys revoke NAME` names.
NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
_NAME = re.compile(rf"^{NAME_PATTERN}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The inventory's own key (vllm_serve_api_key), which the pipeline's checks use through the
# gateway; the api_gateway role owns its entry, `gx10 keys` refuses to add or revoke it.
SERVICE_NAME = "service"
RESERVED_NAMES = (SERVICE_NAME,)
CREATED_PREFIX = "# created "
HEADER = (
    "# gx10 API gateway keys: the SHA-256 (hex) of each key, then its name (what the access log\n"
    "# shows), then its own limit of requests in flight where it has one (0: none). Written by\n"
    "# `gx10 keys` and the api_gateway role; change it through them only.\n"
)
# A key's own limit on requests in flight at once (`gx10 keys add NAME --max-concurrent N`): 0 is
# none; no limit written means the gateway's default (api_gateway_max_concurrent).
MAX_CONCURRENT_LIMIT = 4096
# How many hex digits of a hash `gx10 keys list` shows: enough to tell keys apart, too few to
# be worth anything.
SHOWN_PREFIX = 12


class GatewayKeyError(ValueError):
    """A key operation that must not happen (bad name, duplicate, unknown); nothing changed."""


class RuntimeApiError(RuntimeError):
    """HAProxy's runtime API refused a command, or the connection broke."""


class NotRunningError(RuntimeApiError):
    """Nothing listens on the admin socket: no gateway runs (its map file is all there is)."""


@dataclass(frozen=True)
class KeyEntry:
    name: str
    sha256: str
    created: str = ""  # ISO 8601, UTC; "" for an entry written by hand without the comment
    # Requests in flight at once: None, the gateway's default; 0, none; N, this key's own.
    max_concurrent: int | None = None

    @property
    def value(self) -> str:
        """The map entry's value, what HAProxy reads: the name, then the key's own limit."""
        return self.name if self.max_concurrent is None else f"{self.name} {self.max_concurrent}"

    def listed(self) -> dict[str, Any]:
        """What `gx10 keys list` shows: never the whole hash."""
        return {
            "name": self.name,
            "created": self.created,
            "sha256_prefix": self.sha256[:SHOWN_PREFIX],
            "kind": "service" if self.name == SERVICE_NAME else "user",
            "max_concurrent": self.max_concurrent,
        }


def name_error(name: object, *, allow_reserved: bool = False) -> str | None:
    """Why `name` cannot name a key, with the fix; None when it can."""
    if not isinstance(name, str) or not _NAME.match(name):
        return (
            f"key name {name!r} is not valid: use 1 to 63 characters, lower-case letters, digits, "
            f"'.', '_' or '-', starting with a letter or digit (pattern {NAME_PATTERN}), "
            "e.g. alice or ci-bot"
        )
    if name in RESERVED_NAMES and not allow_reserved:
        return (
            f"key name {name!r} is reserved: it is the inventory's own key (vllm_serve_api_key), "
            "which the pipeline's checks use; choose another name, or change vllm_serve_api_key "
            "in the inventory and run the serve stage to replace that key"
        )
    return None


def max_concurrent_error(value: object) -> str | None:
    """Why `value` cannot be a key's limit on requests in flight, with the fix; None when it can."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_CONCURRENT_LIMIT
    ):
        return (
            f"max_concurrent {value!r} is not valid: give a whole number of requests in flight at "
            f"once, 1 to {MAX_CONCURRENT_LIMIT}, or 0 for no limit (e.g. --max-concurrent 2)"
        )
    return None


def sha256_error(value: object) -> str | None:
    if not isinstance(value, str) or not _SHA256.match(value):
        return "the key's hash must be 64 lower-case hex digits (a SHA-256)"
    return None


def parse_map(text: str) -> list[KeyEntry]:
    """The entries of a map file this module wrote (or one in its format); ValueError if not."""
    entries: list[KeyEntry] = []
    created = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith(CREATED_PREFIX):
                created = line[len(CREATED_PREFIX) :].strip()
            continue
        parts = line.split()
        limit = _limit(parts[2]) if len(parts) == 3 else None
        if (
            len(parts) not in (2, 3)
            or sha256_error(parts[0])
            or name_error(parts[1], allow_reserved=True)
            or (len(parts) == 3 and limit is None)
        ):
            raise ValueError(
                f"line {number} is not '<sha256 hex> <key name> [<max concurrent>]': "
                f"{_shorten(line)!r}"
            )
        entries.append(
            KeyEntry(name=parts[1], sha256=parts[0], created=created, max_concurrent=limit)
        )
        created = ""
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"key name {twice[0]!r} appears more than once")
    hashes = [entry.sha256 for entry in entries]
    if len(set(hashes)) != len(hashes):
        raise ValueError("one key hash appears more than once")
    return entries


def _limit(text: str) -> int | None:
    """A limit as the map file writes it (decimal digits in range), else None."""
    if not text.isdigit():
        return None
    value = int(text)
    return None if max_concurrent_error(value) else value


def render_map(entries: Iterable[KeyEntry]) -> str:
    lines = [HEADER]
    for entry in entries:
        if entry.created:
            lines.append(f"{CREATED_PREFIX}{entry.created}\n")
        lines.append(f"{entry.sha256} {entry.value}\n")
    return "".join(lines)


def add_key(
    entries: Sequence[KeyEntry], entry: KeyEntry, *, replace: bool = False
) -> list[KeyEntry]:
    """`entries` with `entry` added (or, with `replace`, put in place of the same name's).

    Without `replace`, a name already there is an error: a key is never overwritten by accident
    (its holder would be locked out with no word).
    """
    error = name_error(entry.name, allow_reserved=replace) or sha256_error(entry.sha256)
    if not error and entry.max_concurrent is not None:
        error = max_concurrent_error(entry.max_concurrent)
    if error:
        raise GatewayKeyError(error)
    current = next((e for e in entries if e.name == entry.name), None)
    if current is not None and not replace:
        raise GatewayKeyError(
            f"a key named {entry.name!r} already exists (added {current.created or 'earlier'}): "
            f"choose another name, or revoke it first (gx10 keys revoke {entry.name})"
        )
    clash = next((e for e in entries if e.sha256 == entry.sha256 and e.name != entry.name), None)
    if clash is not None:
        raise GatewayKeyError(
            f"this key is already registered as {clash.name!r}: generate a new key"
        )
    if current is not None and (current.sha256, current.max_concurrent) == (
        entry.sha256,
        entry.max_concurrent,
    ):
        return list(entries)  # the same key, name and limit: nothing to do
    kept = [e for e in entries if e.name != entry.name]
    return [*kept, entry]


def set_limit(entries: Sequence[KeyEntry], name: str, max_concurrent: int | None) -> list[KeyEntry]:
    """`entries` with key `name`'s own limit set (None: back to the gateway's default)."""
    error = name_error(name)
    if not error and max_concurrent is not None:
        error = max_concurrent_error(max_concurrent)
    if error:
        raise GatewayKeyError(error)
    if not any(e.name == name for e in entries):
        raise GatewayKeyError(_unknown(name, entries))
    return [
        KeyEntry(e.name, e.sha256, e.created, max_concurrent) if e.name == name else e
        for e in entries
    ]


def remove_key(
    entries: Sequence[KeyEntry], name: str, *, missing_ok: bool = False
) -> list[KeyEntry]:
    """`entries` without the key `name`; an unknown name is an error unless `missing_ok`."""
    if not any(e.name == name for e in entries):
        if missing_ok:
            return list(entries)
        raise GatewayKeyError(_unknown(name, entries))
    return [e for e in entries if e.name != name]


def _unknown(name: str, entries: Sequence[KeyEntry]) -> str:
    known = ", ".join(sorted(e.name for e in entries if e.name not in RESERVED_NAMES))
    return f"no key named {name!r} (keys: {known or 'none'}); `gx10 keys list` shows them"


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the runtime API ---------------------------------------------------------------------------


class RuntimeApi:
    """HAProxy's runtime API on its admin socket: one command per connection (non-interactive)."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path = path
        self.timeout = timeout

    def command(self, line: str) -> str:
        if "\n" in line or "\r" in line:
            raise RuntimeApiError("a runtime API command is one line")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.path)
                except (FileNotFoundError, ConnectionRefusedError) as exc:
                    raise NotRunningError(f"no gateway answers on {self.path}: {exc}") from exc
                sock.sendall(line.encode() + b"\n")
                chunks: list[bytes] = []
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except OSError as exc:
            raise RuntimeApiError(f"cannot talk to HAProxy at {self.path}: {exc}") from exc
        return b"".join(chunks).decode(errors="replace")

    def show_map(self, map_file: str) -> dict[str, list[str]]:
        """The running map: key -> values (HAProxy keeps duplicates when a key is added twice)."""
        answer = self.command(f"show map {map_file}")
        current: dict[str, list[str]] = {}
        for line in answer.splitlines():
            if not line.strip():
                continue
            parts = line.split(None, 2)
            if len(parts) != 3 or not parts[0].startswith("0x"):
                # An entry is `<0xref> <key> <value>`; anything else is the API's error message.
                raise RuntimeApiError(
                    f"HAProxy refused `show map {map_file}`: {_shorten(answer.strip(), 200)}"
                )
            current.setdefault(parts[1], []).append(parts[2])
        return current

    def add(self, map_file: str, key: str, value: str) -> None:
        # The CLI splits its arguments at spaces: a value's own (`alice 2`, a name and its
        # limit) are escaped, else the entry would hold the first word only.
        escaped = value.replace("\\", "\\\\").replace(" ", "\\ ")
        self._quiet(f"add map {map_file} {key} {escaped}")

    def delete(self, map_file: str, key: str) -> None:
        self._quiet(f"del map {map_file} {key}")

    def _quiet(self, line: str) -> None:
        """A command that answers nothing (an empty line) when it succeeds."""
        answer = self.command(line).strip()
        if answer:
            verb = " ".join(line.split()[:2])
            raise RuntimeApiError(f"HAProxy refused `{verb}`: {_shorten(answer, 200)}")


def runtime_changes(
    running: Mapping[str, Sequence[str]], entries: Sequence[KeyEntry]
) -> tuple[list[tuple[str, str]], list[str]]:
    """What makes the running map equal to `entries`: (keys to add with their values, keys to
    delete). A key whose value differs, or which is there twice, is deleted and added again."""
    wanted = {entry.sha256: entry.value for entry in entries}
    deletes = [
        key for key, values in running.items() if key not in wanted or values != [wanted[key]]
    ]
    adds = [(key, name) for key, name in wanted.items() if key not in running or key in deletes]
    return adds, deletes


def sync_runtime(api: RuntimeApi, map_file: str, entries: Sequence[KeyEntry]) -> list[str]:
    """Make the running HAProxy's copy of `map_file` hold exactly `entries`; return what was done
    (names only: `del <name or hash prefix>`, `add <name>`). Deletes first: a revoked key stops
    counting before anything else happens."""
    running = api.show_map(map_file)
    adds, deletes = runtime_changes(running, entries)
    done: list[str] = []
    for key in deletes:
        api.delete(map_file, key)
        shown = running[key][0].split()[0] if running[key] else key[:SHOWN_PREFIX]
        done.append(f"del {shown}")
    for key, value in adds:
        api.add(map_file, key, value)
        done.append(f"add {value.split()[0]}")
    return done
