# SPDX-License-Identifier: Apache-2.0
"""Filters for the memory guard: earlyoom's arguments and the node tool's config, validated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils import memory_guard


def _settings(name: str, settings: Any) -> dict[str, Any]:
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.{name}: expects a mapping, got {settings!r}")
    return dict(settings)


def _earlyoom_args(settings: Any, notify: str = memory_guard.DEFAULT_TOOL) -> str:
    try:
        return memory_guard.earlyoom_args(_settings("earlyoom_args", settings), notify)
    except memory_guard.MemoryGuardError as exc:
        raise AnsibleFilterError("gx10.cluster.earlyoom_args: " + "; ".join(exc.errors)) from exc


def _memory_guard_config(settings: Any, **paths: Any) -> dict[str, Any]:
    try:
        return memory_guard.tool_config(_settings("memory_guard_config", settings), **paths)
    except memory_guard.MemoryGuardError as exc:
        raise AnsibleFilterError(
            "gx10.cluster.memory_guard_config: " + "; ".join(exc.errors)
        ) from exc
    except TypeError as exc:
        raise AnsibleFilterError(f"gx10.cluster.memory_guard_config: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"earlyoom_args": _earlyoom_args, "memory_guard_config": _memory_guard_config}
