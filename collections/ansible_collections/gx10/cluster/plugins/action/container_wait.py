# SPDX-License-Identifier: Apache-2.0
"""Action plugin for gx10.cluster.container_wait: wait in slices, printing the log tail between.

A module cannot print while it runs, and a launch can take twenty minutes. The plugin runs the
module (on the node) for slices of ``progress_interval`` seconds; after each slice that ran out of
time it prints, on the controller, how long it has waited, the boot phase the log shows (with
``phase_timeouts``) and the container's last log lines, then waits again until ``timeout``. A
container that exits or is missing, or a phase past its own limit, ends the wait at once.
"""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        timeout = int(args.get("timeout", 900))
        interval = int(args.get("progress_interval", 30))
        lines = int(args.get("progress_lines", 5))
        host = (task_vars or {}).get("inventory_hostname", "?")
        started = time.monotonic()
        while True:
            remaining = timeout - (time.monotonic() - started)
            last = interval <= 0 or remaining <= interval
            piece = max(1, round(remaining)) if last else interval
            outcome = self._execute_module(
                module_name="gx10.cluster.container_wait",
                module_args={**args, "timeout": piece},
                task_vars=task_vars,
            )
            elapsed = time.monotonic() - started
            if last or not outcome.get("failed") or not outcome.get("timed_out"):
                break
            tail = outcome.get("log_tail") or []
            phase = ""
            if outcome.get("phase"):
                spent = outcome.get("phase_seconds")
                phase = f" (phase {outcome['phase']}" + (
                    f" for {spent:.0f} s)" if isinstance(spent, (int, float)) else ")"
                )
            display.display(
                f"[{host}] {args.get('container')}: not ready after {elapsed:.0f} of {timeout} s"
                f"{phase}; last log lines:\n"
                + "\n".join(f"    {line}" for line in tail[-lines:] or ["    (no output yet)"])
            )
        result.update(outcome)
        result["elapsed"] = round(elapsed, 1)
        if outcome.get("failed") and outcome.get("timed_out"):
            # The module's message names its slice; the operator set the whole timeout.
            reason, _, rest = str(outcome.get("msg", "")).partition(";")
            result["msg"] = (
                reason.replace(f"after {piece} s", f"after {timeout} s", 1) + ";" + rest
                if rest
                else reason
            )
        return result
