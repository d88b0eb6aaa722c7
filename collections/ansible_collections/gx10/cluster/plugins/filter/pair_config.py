# SPDX-License-Identifier: Apache-2.0
"""Filters for the rank unit and the pair supervisor: the rank file, the agent's config, and the
module_utils the runner and the agent import."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils import pair_config

# The module_utils the node's agent imports from its own directory (copied beside it).
AGENT_MODULES = ("pair_config", "roce_gid")


def _built(
    name: str,
    build: Callable[..., dict[str, Any]],
    validate: Callable[[Any], list[str]],
    settings: Any,
) -> dict[str, Any]:
    """``build(**settings)`` checked with ``validate``; a problem fails naming the filter."""
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.{name}: expects a mapping, got {settings!r}")
    try:
        content = build(**dict(settings))
    except TypeError as exc:
        raise AnsibleFilterError(f"gx10.cluster.{name}: {exc}") from exc
    errors = validate(content)
    if errors:
        raise AnsibleFilterError(f"gx10.cluster.{name}: " + "; ".join(errors))
    return content


def _pair_config(settings: Any) -> dict[str, Any]:
    """The agent's config (``/etc/gx10/pair.json``), validated."""
    return _built("pair_config", pair_config.build_config, pair_config.validate_config, settings)


def _rank_spec(settings: Any) -> dict[str, Any]:
    """The rank file (``/etc/gx10/rank.json``) the rank unit runs from, validated."""
    return _built("rank_spec", pair_config.build_rank, pair_config.validate_rank, settings)


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
