# SPDX-License-Identifier: Apache-2.0
"""Filters for the rank unit and the pair supervisor: the rank file, the agent's config, and the
module_utils the runner and the agent import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils import pair_config

# The module_utils the node's agent imports from its own directory (copied beside it).
AGENT_MODULES = ("pair_config", "roce_gid")


def _pair_config(settings: Any) -> dict[str, Any]:
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.pair_config: expects a mapping, got {settings!r}")
    try:
        config = pair_config.build_config(**dict(settings))
    except TypeError as exc:
        raise AnsibleFilterError(f"gx10.cluster.pair_config: {exc}") from exc
    errors = pair_config.validate_config(config)
    if errors:
        raise AnsibleFilterError("gx10.cluster.pair_config: " + "; ".join(errors))
    return config


def _rank_spec(settings: Any) -> dict[str, Any]:
    """The rank file (``/etc/gx10/rank.json``) the rank unit runs from, validated."""
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.rank_spec: expects a mapping, got {settings!r}")
    try:
        spec = pair_config.build_rank(**dict(settings))
    except TypeError as exc:
        raise AnsibleFilterError(f"gx10.cluster.rank_spec: {exc}") from exc
    errors = pair_config.validate_rank(spec)
    if errors:
        raise AnsibleFilterError("gx10.cluster.rank_spec: " + "; ".join(errors))
    return spec


def _module_utils_source(name: Any) -> str:
    """The source text of one of the collection's module_utils the agent imports."""
    if name not in AGENT_MODULES:
        raise AnsibleFilterError(
            f"gx10.cluster.module_utils_source: {name!r} is not one of {', '.join(AGENT_MODULES)}"
        )
    return (Path(pair_config.__file__).parent / f"{name}.py").read_text(encoding="utf-8")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "pair_config": _pair_config,
            "rank_spec": _rank_spec,
            "module_utils_source": _module_utils_source,
        }
