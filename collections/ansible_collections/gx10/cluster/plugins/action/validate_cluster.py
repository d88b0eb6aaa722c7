# SPDX-License-Identifier: Apache-2.0
"""Action plugin for gx10.cluster.validate_cluster (documented in plugins/modules/)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (
    build_plan,
    format_errors,
    select_node_vars,
    validate_cluster,
)
from ansible_collections.gx10.cluster.plugins.module_utils.gateway_tls import check_pair


class ActionModule(ActionBase):
    """Validate the whole inventory on the controller and return the cluster plan."""

    TRANSFERS_FILES = False
    # Pure controller-side computation: never opens a connection to the host it runs for.
    _requires_connection = False
    _supports_check_mode = True

    def run(
        self, tmp: str | None = None, task_vars: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        _, args = self.validate_argument_spec(
            argument_spec={
                "groups": {"type": "dict"},
                "hostvars": {"type": "dict"},
            }
        )
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        groups = args["groups"] if args["groups"] is not None else task_vars.get("groups", {})
        hostvars = (
            args["hostvars"] if args["hostvars"] is not None else task_vars.get("hostvars", {})
        )
        # Read only the gx10_* variables of head and worker nodes: templating every variable of
        # every host would fail the validation on an unrelated broken variable.
        node_vars = select_node_vars(groups, hostvars)
        errors = validate_cluster(groups, node_vars)
        result["changed"] = False
        if errors:
            result.update(failed=True, msg=format_errors(errors), errors=errors)
            return result
        plan = build_plan(groups, node_vars)
        gateway = plan["gateway"]
        if gateway["tls"]:
            # The files' content, still on the controller and before any node changes.
            errors = check_pair(gateway["tls_cert"], gateway["tls_key"])
            if errors:
                result.update(failed=True, msg=format_errors(errors), errors=errors)
                return result
        result.update(
            plan=plan,
            msg=(
                f"Inventory OK: head {plan['head']}, workers {', '.join(plan['workers'])}; "
                f"{len(plan['rails'])} rail(s), MTU {plan['mtu']}, master_addr "
                f"{plan['master_addr']}."
            ),
        )
        return result
