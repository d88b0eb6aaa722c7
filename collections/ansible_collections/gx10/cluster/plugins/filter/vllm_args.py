# SPDX-License-Identifier: Apache-2.0
"""Filters gx10.cluster.vllm_args and gx10.cluster.vllm_profile_env: one rank's `vllm serve`
argument list, and the container environment of its serving profile.

Documented in vllm_args.yml and vllm_profile_env.yml next to this file.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.serve_profiles import (
    ProfileError,
    resolve_env,
)
from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (
    VllmArgsError,
    checked_args,
)


def vllm_args(settings: dict[str, Any]) -> list[str]:
    try:
        return checked_args(settings)
    except VllmArgsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_profile_env(profile: str, extra_env: Any = None) -> dict[str, str]:
    """The profile's environment with vllm_serve_extra_env on top (a null value removes a key)."""
    try:
        return resolve_env(profile, extra_env)
    except ProfileError as exc:
        raise AnsibleFilterError("; ".join(exc.errors)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_args": vllm_args, "vllm_profile_env": vllm_profile_env}
