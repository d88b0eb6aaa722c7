# SPDX-License-Identifier: Apache-2.0
"""Action plugin gx10.cluster.checks: evaluate named checks, fail once listing every failure."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gx10.cluster.plugins.module_utils.checks import judge


class ActionModule(ActionBase):  # type: ignore[misc]
    """Runs on the controller; nothing is executed on the node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("checks", "node", "title"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        node = str(args.get("node") or task_vars.get("inventory_hostname", "?"))
        title = str(args.get("title") or "checks")
        checks = args.get("checks")
        if not isinstance(checks, list):
            result.update(failed=True, msg="gx10.cluster.checks: `checks` must be a list")
            return result
        try:
            results, failures = judge(node, checks)
        except ValueError as exc:
            result.update(failed=True, msg=f"gx10.cluster.checks: {exc}")
            return result
        result["changed"] = False
        passed = len(results) - len(failures)
        if failures:
            # The message lists every failure; the full table would only bury it.
            result["failed"] = True
            result["failures"] = failures
            result["msg"] = f"{title} failed on {node} ({len(failures)} of {len(results)}):\n" + (
                "\n".join(f" - {line}" for line in failures)
            )
        else:
            result["checks"] = results
            result["msg"] = f"{title} passed on {node} ({passed} of {len(results)})"
        return result
