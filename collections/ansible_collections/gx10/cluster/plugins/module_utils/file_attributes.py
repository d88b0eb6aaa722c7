# SPDX-License-Identifier: Apache-2.0
"""Owner, group and mode arguments checked before a module changes anything (gx10.cluster's
directories and files modules).

Pure Python (standard library only): the module passes AnsibleModule's own parser of symbolic
modes, so a mode is taken exactly as the module's helpers will take it.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable, Mapping
from typing import Any

SymbolicToOctal = Callable[[os.stat_result, str], int]


def attribute_errors(params: Mapping[str, Any], symbolic_to_octal: SymbolicToOctal) -> list[str]:
    """An unknown ``owner`` or ``group``, or a ``mode`` neither octal nor symbolic (each None
    when not given): found before any change, where the module's own helpers would find them
    after the first change."""
    errors = []
    owner, group, mode = params.get("owner"), params.get("group"), params.get("mode")
    if owner is not None and not str(owner).isdigit():
        try:
            pwd.getpwnam(str(owner))
        except KeyError:
            errors.append(f"owner {owner!r} is not a user on this node")
    if group is not None and not str(group).isdigit():
        try:
            grp.getgrnam(str(group))
        except KeyError:
            errors.append(f"group {group!r} is not a group on this node")
    if mode is not None and not isinstance(mode, int):
        try:
            bits = int(str(mode), 8)
        except ValueError:
            try:
                bits = symbolic_to_octal(os.stat("/"), str(mode))
            except Exception:  # what the module's own helper takes as "not symbolic"
                bits = -1
        if not 0 <= bits <= 0o7777:  # permission bits only, as the module's own helper takes
            errors.append(f"mode {mode!r} is neither octal (such as '0755') nor symbolic")
    return errors


def file_arguments(module: Any, path: str, mode: object) -> dict[str, Any]:
    """An AnsibleModule's own file arguments for one path: the module's ``owner`` and ``group``,
    this ``mode`` (a symlink's target, as ``file`` follows), for set_fs_attributes_if_different."""
    params = module.params
    arguments: dict[str, Any] = module.load_file_common_arguments(
        {"path": path, "owner": params["owner"], "group": params["group"], "mode": mode,
         "follow": True}
    )  # fmt: skip
    return arguments
