# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.model_chain: each node's upstream and downstream in the model sync chain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.model_chain import (
    ChainError,
    plan_links,
)


def _model_chain(plan: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(plan, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.model_chain: expects gx10_plan, got {plan!r}")
    try:
        return plan_links(plan)
    except (ChainError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gx10.cluster.model_chain: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"model_chain": _model_chain}
