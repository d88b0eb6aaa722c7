# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.rail_plan: the cluster plan from hostvars and groups.

Documented in rail_plan.yml next to this file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (
    ClusterPlanError,
    build_plan,
    select_node_vars,
)


def rail_plan(hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """Return the same plan as gx10.cluster.validate_cluster; fail listing every problem."""
    if not isinstance(hostvars, Mapping) or not isinstance(groups, Mapping):
        raise AnsibleFilterError(
            "gx10.cluster.rail_plan expects hostvars | gx10.cluster.rail_plan(groups), got "
            f"{type(hostvars).__name__} | rail_plan({type(groups).__name__})"
        )
    try:
        return build_plan(groups, select_node_vars(groups, hostvars))
    except ClusterPlanError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    """gx10.cluster filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"rail_plan": rail_plan}
