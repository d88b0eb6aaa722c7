#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.gateway_keys: the API gateway's key map on the head, and its running copy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_keys
short_description: Add, revoke or list the API gateway's keys (hashes only) without a restart
description:
  - Keeps the map file the API gateway (HAProxy, the api_gateway role) reads, one
    C(<sha256 hex> <name> [<max concurrent>]) line per key, with a comment recording when it was
    added. A key is never stored, only its SHA-256; the name is what the access log prints; the
    optional number is the key's own limit on requests in flight at once (0 for none), in place
    of the gateway's default.
  - C(state=present) adds a key, and fails, changing nothing, when the name (or the hash) is
    already there, unless I(replace) is set (the role's C(service) entry, replaced when the
    inventory's key changes). C(state=absent) removes one and fails, changing nothing, when no
    key has that name, unless I(missing_ok). C(state=limit) sets an existing key's own limit
    (I(max_concurrent); omitted, back to the gateway's default) and fails, changing nothing, for
    an unknown name. C(state=query) changes nothing and returns the keys (names, creation times,
    hash prefixes, limits).
  - The file is written atomically (a temporary file in the same directory, then a rename) with
    I(owner), I(group) and I(mode), under a lock on its directory, so two concurrent runs cannot
    lose a key.
  - Then the running gateway's copy is made equal to the file through HAProxy's runtime API on
    I(socket) (C(show map), C(del map), C(add map)), so a key added or revoked counts from the
    next request, without a reload and without touching the engine. Without a running gateway (no
    socket) only the file changes; the gateway reads it when it starts.
options:
  path:
    description: The map file.
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [present, absent, limit, query]
    default: present
  max_concurrent:
    description:
      - The key's own limit on requests in flight at once (C(state=present) or C(state=limit)),
        1 to 4096, or 0 for none. Omitted, the gateway's default counts
        (api_gateway_max_concurrent).
    type: int
  name:
    description:
      - The key's name, pattern C([a-z0-9][a-z0-9._-]{0,62}); C(service) is the role's own.
      - Required unless C(state=query).
    type: str
  sha256:
    description: The key's SHA-256, 64 lower-case hex digits. Required with C(state=present).
    type: str
  replace:
    description: With C(state=present), put the key in place of the name's current one.
    type: bool
    default: false
  missing_ok:
    description: With C(state=absent), an unknown name is not an error.
    type: bool
    default: false
  socket:
    description: HAProxy's admin socket (runtime API, C(level admin)); "" to change the file only.
    type: path
    default: ""
  owner:
    description: The map file's owner.
    type: str
    default: root
  group:
    description: The map file's group (HAProxy's, which reads it).
    type: str
    default: haproxy
  mode:
    description: The map file's mode.
    type: raw
    default: "0640"
attributes:
  check_mode:
    description: Reports what would change, and changes nothing.
    support: full
  diff_mode:
    description: The map file before and after (hashes and names; no key is ever in it).
    support: full
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Add alice's key (its hash; the key itself never leaves the controller)
  gx10.cluster.gateway_keys:
    path: /etc/haproxy/gx10-keys.map
    socket: /run/gx10-gateway/admin.sock
    name: alice
    sha256: "{{ key_sha256 }}"

- name: Revoke it
  gx10.cluster.gateway_keys:
    path: /etc/haproxy/gx10-keys.map
    socket: /run/gx10-gateway/admin.sock
    name: alice
    state: absent
"""

RETURN = r"""
keys:
  description: >-
    The keys after the change, as C({name, created, sha256_prefix, kind, max_concurrent})
    (C(max_concurrent) null where the gateway's default counts).
  returned: always
  type: list
  elements: dict
runtime:
  description: >-
    What the running gateway was told (C(add NAME), C(del NAME)); empty when it already matched
    or when no gateway runs.
  returned: always
  type: list
  elements: str
running:
  description: Whether a running gateway answered on I(socket).
  returned: always
  type: bool
"""

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.gateway_keys import (
    GatewayKeyError,
    KeyEntry,
    NotRunningError,
    RuntimeApi,
    RuntimeApiError,
    add_key,
    max_concurrent_error,
    name_error,
    parse_map,
    remove_key,
    render_map,
    set_limit,
    sha256_error,
    sync_runtime,
)


@contextlib.contextmanager
def locked(directory: str) -> Iterator[None]:
    """An exclusive lock on the map's directory (flock works on a directory's descriptor), so
    two concurrent changes cannot lose a key, and no lock file lies about."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_map(module: AnsibleModule, path: str) -> tuple[str, list[KeyEntry]]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return "", []
    except OSError as exc:
        module.fail_json(msg=f"cannot read the key map {path}: {exc}")
    try:
        return text, parse_map(text)
    except ValueError as exc:
        module.fail_json(
            msg=f"the key map {path} is not in the gateway's format ({exc}); nothing was changed. "
            "Fix or remove that line (the file holds only hashes and names), then run again"
        )
    raise AssertionError("unreachable")  # fail_json exits


def write_map(module: AnsibleModule, path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".gx10-keys.", dir=directory)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    module.atomic_move(temporary, path)


def changed_entries(before: list[KeyEntry], params: dict[str, Any]) -> list[KeyEntry]:
    """The keys after the operation `params` asks for (GatewayKeyError: it must not happen)."""
    state, name = params["state"], params["name"]
    if state == "present":
        entry = KeyEntry(
            name=name,
            sha256=params["sha256"],
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            max_concurrent=params["max_concurrent"],
        )
        return add_key(before, entry, replace=params["replace"])
    if state == "limit":
        return set_limit(before, name, params["max_concurrent"])
    if state == "absent":
        return remove_key(before, name, missing_ok=params["missing_ok"])
    return before


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {
                "type": "str",
                "choices": ["present", "absent", "limit", "query"],
                "default": "present",
            },
            "max_concurrent": {"type": "int"},
            "name": {"type": "str"},
            # Not secret for a generated key, but a hand-chosen one (the inventory's) could be
            # guessed from its hash offline: never in the output.
            "sha256": {"type": "str", "no_log": True},
            "replace": {"type": "bool", "default": False},
            "missing_ok": {"type": "bool", "default": False},
            "socket": {"type": "path", "default": ""},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "haproxy"},
            "mode": {"type": "raw", "default": "0640"},
        },
        required_if=[
            ("state", "present", ("name", "sha256")),
            ("state", "absent", ("name",)),
            ("state", "limit", ("name",)),
        ],
        supports_check_mode=True,
    )
    params = module.params
    path, state, name = params["path"], params["state"], params["name"]
    if state != "query":
        error = name_error(name, allow_reserved=params["replace"] or params["missing_ok"])
        if state == "present" and not error:
            error = sha256_error(params["sha256"])
        if not error and params["max_concurrent"] is not None:
            error = max_concurrent_error(params["max_concurrent"])
        if error:
            module.fail_json(msg=f"{error}; nothing was changed")

    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        if state == "query":
            module.exit_json(changed=False, keys=[], runtime=[], running=False)
        module.fail_json(
            msg=f"{directory} does not exist on this node: is the API gateway installed here? "
            "(gx10_gateway_enabled: true, then the serve stage); nothing was changed"
        )
    with locked(directory):
        before_text, before = read_map(module, path)
        try:
            after = changed_entries(before, params)
        except GatewayKeyError as exc:
            module.fail_json(msg=f"{exc}; nothing was changed", keys=[e.listed() for e in before])
        after_text = render_map(after)
        file_changed = state != "query" and (after != before or not os.path.exists(path))
        result: dict[str, Any] = {
            "keys": [e.listed() for e in after],
            "runtime": [],
            "running": False,
        }
        if module._diff and file_changed:
            result["diff"] = {"before": before_text, "after": after_text, "after_header": path}
        if module.check_mode or state == "query":
            result["running"] = _answers(params["socket"], path)
            module.exit_json(changed=file_changed, **result)
        if file_changed:
            write_map(module, path, after_text)
        attributes = module.load_file_common_arguments(
            {
                "path": path,
                "owner": params["owner"],
                "group": params["group"],
                "mode": params["mode"],
            }
        )
        attributes_changed = module.set_fs_attributes_if_different(attributes, False)
        socket_path = params["socket"]
        if socket_path:
            try:
                result["runtime"] = sync_runtime(RuntimeApi(socket_path), path, after)
                result["running"] = True
            except NotRunningError:
                pass  # the gateway reads the file when it starts
            except RuntimeApiError as exc:
                module.fail_json(
                    msg=f"the key map {path} is written, but the running gateway did not take it: "
                    f"{exc}. Reload it (systemctl reload gx10-gateway) so it reads the file",
                    changed=file_changed,
                    **result,
                )
    module.exit_json(
        changed=file_changed or attributes_changed or bool(result["runtime"]), **result
    )


def _answers(socket_path: str | None, map_file: str) -> bool:
    """Read-only: whether a gateway answers on its runtime API (its map shown, nothing sent)."""
    if not socket_path:
        return False
    try:
        RuntimeApi(socket_path).show_map(map_file)
    except RuntimeApiError:
        return False  # not running (NotRunningError), or not answering
    return True


if __name__ == "__main__":
    main()
