#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.files: several files, each with its content, owner, group and mode, in one
run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: files
short_description: Write several files (content, owner, group, mode) and remove others, in one run
description:
  - What C(ansible.builtin.copy) with C(content) does for each of I(files), in one module
    execution instead of two or more per file (C(copy) and C(template) run C(stat), then C(copy)
    or C(file), on every converge).
  - Templates are rendered on the controller as for any module argument
    (C(lookup('ansible.builtin.template', ...))), and a role's file is read with
    C(lookup('ansible.builtin.file', ..., rstrip=false)).
  - A file whose content differs is written to a temporary file beside it and moved into place
    (atomic), then gets its I(owner), I(group) and I(mode); one whose content is the same only
    gets the attributes that differ. Its directory must exist (C(gx10.cluster.directories)).
  - I(absent) names files to remove where they exist, in the same run.
  - Every file is checked before anything changes. A destination that is not absolute, that
    exists and is not a regular file (a directory, a symlink, a device), or whose directory is
    missing (out of check mode; in it, that directory is taken as one an earlier task would
    have created), fails the task naming it, and nothing is written. So does an unknown I(owner) or
    I(group), or a I(mode) that is neither octal nor symbolic.
  - For files that are not secret, as C(template) writes them (a diff and the task's arguments
    show the content); a secret belongs in a task of its own with C(no_log).
options:
  files:
    description: The files.
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The file's content (text, written as UTF-8).
        type: str
        required: true
      mode:
        description: Mode of the file, as C(copy) takes it (quote an octal mode); else I(mode).
        type: raw
  absent:
    description:
      - Absolute paths of files to remove where they exist (a regular file or a symlink; a
        directory fails the task, naming it, before anything changes).
    type: list
    elements: path
    default: []
  owner:
    description: Owner of every file (a user name or a uid); unchanged if not given.
    type: str
  group:
    description: Group of every file (a group name or a gid); unchanged if not given.
    type: str
  mode:
    description: Mode of a file that gives none; unchanged if neither gives one.
    type: raw
attributes:
  check_mode:
    description: Reports what would be written or changed, and changes nothing.
    support: full
  diff_mode:
    description: >-
      One entry per file that changes: its content before and after (a new file's is empty), or
      its C(owner), C(group) or C(mode) before and after.
    support: full
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Install the guard's tool and its config
  gx10.cluster.files:
    owner: root
    group: root
    mode: "0644"
    files:
      - dest: /usr/local/sbin/gx10-memory-guard
        content: "{{ lookup('ansible.builtin.file', 'gx10-memory-guard', rstrip=false) }}"
        mode: "0755"
      - dest: /etc/gx10/memory-guard.json
        content: "{{ settings | to_nice_json }}\n"
  register: __guard_files

- name: Restart the guard when its config changed
  ansible.builtin.systemd_service:
    name: gx10-memory-pressure.service
    state: restarted
  when: "'/etc/gx10/memory-guard.json' in __guard_files.changed_paths"
"""

RETURN = r"""
changed_paths:
  description: >-
    The files written or whose owner, group or mode changed, then those removed (in check mode,
    that would be), in the order of I(files) and I(absent).
  returned: always
  type: list
  elements: str
written:
  description: The files whose content was (in check mode, would be) written, new ones included.
  returned: always
  type: list
  elements: str
removed:
  description: The files of I(absent) that existed and were (in check mode, would be) removed.
  returned: always
  type: list
  elements: str
"""

import os
import stat
import tempfile
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.file_attributes import (
    attribute_errors,
    file_arguments,
)

DIFF_MAX_BYTES = 128 * 1024


def read_current(path: str) -> bytes | None:
    """The file's bytes, or None when it (or its directory, in check mode) does not exist."""
    try:
        with open(path, "rb") as current:
            return current.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def path_errors(path: str, check_mode: bool = False) -> list[str]:
    """Why a file cannot be written at ``path`` (empty when it can). Reads only. In check mode a
    missing directory is no error: a task before this one would have created it (as copy and
    template take it)."""
    if not os.path.isabs(path):
        return [f"dest must be absolute, got {path!r}"]
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent) and not check_mode:
            return [f"{path} cannot be written: its directory {parent} does not exist"]
        return []
    if not stat.S_ISREG(mode):
        kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))
        what = next((name for test, name in kinds if test(mode)), "something else")
        return [f"{path} exists and is {what}, not a regular file"]
    return []


def _text(data: bytes | None) -> str | None:
    if data is None:
        return ""
    if len(data) > DIFF_MAX_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def content_diff(path: str, before: bytes | None, after: bytes) -> dict[str, Any]:
    old, new = _text(before), _text(after)
    if old is None or new is None:
        return {"before_header": path, "after_header": path, "before": "", "after": "",
                "prepared": f"{path}: binary or large content differs"}  # fmt: skip
    return {"before_header": path, "after_header": path, "before": old, "after": new}


def write_atomic(module: AnsibleModule, path: str, data: bytes) -> None:
    """Write ``data`` beside ``path`` and move it into place."""
    directory = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(prefix=".gx10-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        module.atomic_move(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def plan(files: list[Mapping[str, Any]], check_mode: bool = False) -> tuple[list[str], list[str]]:
    """The destinations in order (each once) and every error. Reads only."""
    errors: list[str] = []
    seen: list[str] = []
    for entry in files:
        path = os.path.normpath(entry["dest"]) if os.path.isabs(entry["dest"]) else entry["dest"]
        if path in seen:
            errors.append(f"{path} is given twice")
            continue
        seen.append(path)
        errors += path_errors(path, check_mode)
    return seen, errors


def absent_errors(paths: list[str], written: list[str]) -> list[str]:
    """Why a path of ``absent`` cannot be removed (a directory, a relative path, a file also
    written). Reads only."""
    errors = []
    for path in paths:
        if not os.path.isabs(path):
            errors.append(f"absent paths must be absolute, got {path!r}")
        elif os.path.normpath(path) in written:
            errors.append(f"{path} is both written and removed")
        elif os.path.isdir(path) and not os.path.islink(path):
            errors.append(f"{path} is a directory: only files are removed")
    return errors


def remove(module: AnsibleModule, paths: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Remove the files of ``paths`` that exist; the removed ones and their diffs."""
    removed: list[str] = []
    diffs: list[dict[str, Any]] = []
    for path in dict.fromkeys(os.path.normpath(p) for p in paths):
        if not os.path.lexists(path):
            continue
        if not module.check_mode:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue  # gone meanwhile: as good
        removed.append(path)
        diffs.append(
            {"before": {"path": path, "state": "file"}, "after": {"path": path, "state": "absent"}}
        )
    return removed, diffs


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    files: list[Mapping[str, Any]] = params["files"]
    paths, errors = plan(files, module.check_mode)
    errors += absent_errors(params["absent"], paths)
    for entry in files:
        mode = entry.get("mode")
        if mode is not None:
            errors += attribute_errors({"mode": mode}, AnsibleModule._symbolic_mode_to_octal)
    errors += attribute_errors(params, AnsibleModule._symbolic_mode_to_octal)
    if errors:
        module.fail_json(msg="; ".join(dict.fromkeys(errors)) + "; nothing was written")

    written: list[str] = []
    changed_paths: list[str] = []
    diffs: list[dict[str, Any]] = []
    for path, entry in zip(paths, files, strict=True):
        data = entry["content"].encode("utf-8")
        before = read_current(path)
        mode = entry.get("mode") if entry.get("mode") is not None else params["mode"]
        if before != data:
            if not module.check_mode:
                write_atomic(module, path, data)
            written.append(path)
            changed_paths.append(path)
            diffs.append(content_diff(path, before, data))
            if module.check_mode and before is None:
                continue  # nothing to compare attributes with
        diff: dict[str, Any] = {"before": {"path": path}, "after": {"path": path}}
        attributes_changed = module.set_fs_attributes_if_different(
            file_arguments(module, path, mode), False, diff, expand=False
        )
        if attributes_changed and path not in changed_paths:
            changed_paths.append(path)
            diffs.append(diff)

    removed, removed_diffs = remove(module, params["absent"])
    changed_paths += removed
    diffs += removed_diffs
    result: dict[str, Any] = {
        "changed": bool(changed_paths),
        "changed_paths": changed_paths,
        "written": written,
        "removed": removed,
    }
    if module._diff:
        result["diff"] = diffs
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "dest": {"type": "path", "required": True},
                    "content": {"type": "str", "required": True},
                    "mode": {"type": "raw"},
                },
            },
            "absent": {"type": "list", "elements": "path", "default": []},
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "mode": {"type": "raw"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
