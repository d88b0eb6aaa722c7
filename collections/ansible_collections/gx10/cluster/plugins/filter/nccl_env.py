# SPDX-License-Identifier: Apache-2.0
"""Filters gx10.cluster.nccl_env, nccl_env_file and nccl_env_parse: a node's NCCL environment.

Documented in nccl_env.yml, nccl_env_file.yml and nccl_env_parse.yml next to this file; the logic
is in module_utils/nccl_env.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.nccl_env import (
    DEFAULT_DEBUG,
    NcclEnvError,
    parse_env_file,
    render_env_file,
)
from ansible_collections.gx10.cluster.plugins.module_utils.nccl_env import (
    nccl_env as build_nccl_env,
)


def nccl_env(
    plan: Mapping[str, Any],
    host: str,
    rdma_devices: Sequence[Any],
    gid_index: int | None,
    *,
    extra: Mapping[str, Any] | None = None,
    overrides: Iterable[str] | None = None,
    debug: str = DEFAULT_DEBUG,
) -> dict[str, str]:
    """gx10_plan | gx10.cluster.nccl_env(host, rdma_devices, gid_index, extra=, overrides=)."""
    try:
        return build_nccl_env(
            plan,
            str(host),
            rdma_devices,
            None if gid_index is None else _index(gid_index),
            extra=extra or {},
            overrides=[str(key) for key in overrides or ()],
            debug=str(debug),
        )
    except NcclEnvError as error:
        raise AnsibleFilterError(f"gx10.cluster.nccl_env: {error}") from error


def nccl_env_file(mapping: Mapping[str, Any], header: str | None = None) -> str:
    """mapping | gx10.cluster.nccl_env_file(header=...): the file's text."""
    if not isinstance(mapping, Mapping):
        raise AnsibleFilterError(
            f"gx10.cluster.nccl_env_file expects a mapping, got {type(mapping).__name__}"
        )
    try:
        return render_env_file(mapping, header)
    except NcclEnvError as error:
        raise AnsibleFilterError(f"gx10.cluster.nccl_env_file: {error}") from error


def nccl_env_parse(text: str) -> dict[str, str]:
    """text | gx10.cluster.nccl_env_parse: the mapping docker --env-file would read."""
    try:
        return parse_env_file(str(text))
    except NcclEnvError as error:
        raise AnsibleFilterError(f"gx10.cluster.nccl_env_parse: {error}") from error


def _index(value: Any) -> int:
    # Templating can hand over "3" for 3; a bool or a non-number stays an error.
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value  # type: ignore[no-any-return]


class FilterModule:
    """gx10.cluster NCCL environment filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "nccl_env": nccl_env,
            "nccl_env_file": nccl_env_file,
            "nccl_env_parse": nccl_env_parse,
        }
