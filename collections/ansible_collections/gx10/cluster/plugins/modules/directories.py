#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.directories: directories with one owner, group and mode, in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: directories
short_description: Make sure several directories exist with one owner, group and mode, in one run
description:
  - What C(ansible.builtin.file) with C(state=directory) does for each of I(paths), in one module
    execution instead of one per path (a loop of C(file) costs a module run per item on every
    converge).
  - A missing directory is created with its missing parents, and I(owner), I(group) and I(mode)
    are set on every directory it creates, as C(file) does. An existing directory gets I(owner),
    I(group) and I(mode) where they differ; its parents are left as they are. A symlink to a
    directory counts as that directory, whose attributes are set (C(file)'s default C(follow)).
  - Every path is checked before anything changes. A path, or one of its parents, that exists and
    is not a directory (a file, a symlink to nothing, a socket, ...) fails the task naming it and
    what it is, and nothing is created. An unknown I(owner) or I(group), or a I(mode) that is
    neither octal nor symbolic, fails the same way.
options:
  paths:
    description: Absolute paths of the directories.
    type: list
    elements: path
    required: true
  owner:
    description: Owner (a user name or a uid) of the directories; unchanged if not given.
    type: str
  group:
    description: Group (a group name or a gid) of the directories; unchanged if not given.
    type: str
  mode:
    description:
      - Mode of the directories, as C(file) takes it; unchanged if not given.
      - Quote an octal mode (C("0755")), or give a symbolic one (C(u=rwx,g=rx,o=rx)).
    type: raw
attributes:
  check_mode:
    description: Reports what would be created or changed, and changes nothing.
    support: full
  diff_mode:
    description: >-
      One entry per directory that changes, as C(file) reports it: C(state) C(absent) before and
      C(directory) after for a created one, C(owner), C(group) or C(mode) before and after for an
      existing one.
    support: full
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Create the image's compile cache directories
  gx10.cluster.directories:
    paths:
      - /var/cache/gx10/vllm/sha256-0123456789abcdef/triton
      - /var/cache/gx10/vllm/sha256-0123456789abcdef/vllm
    owner: root
    group: root
    mode: "0755"
"""

RETURN = r"""
created:
  description: >-
    The directories created (in check mode, that would be), parents first, parents created on
    the way included.
  returned: always
  type: list
  elements: str
changed_paths:
  description: >-
    The directories created, then the existing ones of I(paths) whose owner, group or mode was
    (in check mode, would be) changed.
  returned: always
  type: list
  elements: str
"""

import errno
import os
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils import file_attributes

KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISLNK, "a symlink to nothing"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind(path: str) -> str:
    """What a path that exists and is no directory is, for a message ("a file")."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode) and os.path.exists(path):
        mode = os.stat(path).st_mode  # a symlink to something that is not a directory
        return next((f"a symlink to {name}" for test, name in KINDS if test(mode)), "a symlink")
    return next((name for test, name in KINDS if test(mode)), "not a directory")


def prefixes(path: str) -> list[str]:
    """/a/b/c -> [/a, /a/b, /a/b/c]."""
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[: index + 1]) for index in range(len(parts))]


def missing_directories(paths: list[str]) -> tuple[list[str], list[str]]:
    """The directories to create (parents first, each once) and one error per path that cannot be
    a directory. Reads only."""
    missing: list[str] = []
    errors: list[str] = []
    for path in paths:
        chain = prefixes(path)
        for index, prefix in enumerate(chain):
            if prefix in missing:
                continue  # another path's parent, already found missing
            try:
                is_directory = stat.S_ISDIR(os.stat(prefix).st_mode)
            except FileNotFoundError:
                if os.path.islink(prefix):
                    is_directory = False  # a symlink to nothing
                else:
                    missing.extend(p for p in chain[index:] if p not in missing)
                    break
            except OSError as exc:
                errors.append(f"cannot look at {prefix}: {exc.strerror}")
                break
            if not is_directory:
                what = kind(prefix)
                errors.append(
                    f"{path} exists and is {what}, not a directory"
                    if prefix == path
                    else f"{path} cannot be created: {prefix} is {what}, not a directory"
                )
                break
    return missing, errors


def attribute_errors(params: dict[str, Any]) -> list[str]:
    """An unknown owner or group, or a mode neither octal nor symbolic: found before any change,
    where the module's own helpers would find them after the first directory exists."""
    return file_attributes.attribute_errors(params, AnsibleModule._symbolic_mode_to_octal)


def created_diff(path: str) -> dict[str, Any]:
    return {
        "before": {"path": path, "state": "absent"},
        "after": {"path": path, "state": "directory"},
    }


def run(module: AnsibleModule) -> dict[str, Any]:
    paths: list[str] = []
    for path in module.params["paths"]:
        if not os.path.isabs(path):
            module.fail_json(msg=f"paths must be absolute, got {path!r}; nothing was changed")
        normal = os.path.normpath(path)
        if normal not in paths:
            paths.append(normal)
    missing, errors = missing_directories(paths)
    errors += attribute_errors(module.params)
    if errors:
        module.fail_json(msg="; ".join(errors) + "; nothing was changed", changed=False)

    created: list[str] = []
    diffs: list[dict[str, Any]] = []
    for directory in missing:
        if not module.check_mode:
            try:
                os.mkdir(directory)
            except OSError as exc:
                # Something else may have made it since the check: a directory is as good.
                if not (exc.errno == errno.EEXIST and os.path.isdir(directory)):
                    module.fail_json(
                        msg=f"cannot create {directory}: {exc.strerror}",
                        changed=bool(created),
                        created=created,
                        changed_paths=created,
                    )
            module.set_fs_attributes_if_different(
                file_attributes.file_arguments(module, directory, module.params["mode"]),
                True,
                None,
                expand=False,
            )
        created.append(directory)
        diffs.append(created_diff(directory))

    fixed: list[str] = []
    for path in paths:
        if path in missing:
            continue
        diff: dict[str, Any] = {"before": {"path": path}, "after": {"path": path}}
        if module.set_fs_attributes_if_different(
            file_attributes.file_arguments(module, path, module.params["mode"]),
            False,
            diff,
            expand=False,
        ):
            fixed.append(path)
            diffs.append(diff)

    result: dict[str, Any] = {
        "changed": bool(created or fixed),
        "created": created,
        "changed_paths": created + fixed,
    }
    if module._diff:
        result["diff"] = diffs
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "mode": {"type": "raw"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
