"""The nodes' side of a bench run with an inventory: each node's lock and clock session, the
cap per case, cool-down and abort limits watched while a case runs, and nvidia-smi telemetry
summarized per case (OUT/telemetry.csv). Whatever ends the run, `finish` restores the caps and
records the restore in results.json.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from gx10.bench.clocks import ClockController, SweepAborted, Thresholds, default_owner
from gx10.bench.matrix import Case, RunConfig
from gx10.bench.metrics import case_telemetry
from gx10.bench.nodes import Cluster
from gx10.bench.results import TELEMETRY_FILE, RunOutcome, now, write_results
from gx10.bench.telemetry import TelemetryHub
from gx10.errors import Gx10Error

WATCH_INTERVAL_S = 0.5  # how often a running case checks the temperatures


class NodeGuard:
    """The nodes' side of a run with an inventory: clock sessions, caps, telemetry, limits."""

    def __init__(
        self,
        cluster: Cluster,
        config: RunConfig,
        out: Path,
        console: Console,
        *,
        owner: str | None = None,
        telemetry_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.cluster = cluster
        self.out = out
        self.console = console
        interval = config.telemetry_interval_ms
        self.thresholds = Thresholds(
            cool_down_c=config.cool_down_c,
            abort_c=config.abort_c,
            cool_down_timeout_s=config.cool_down_timeout_s,
            session_max_s=config.session_max_s,
            poll_s=min(1.0, interval / 1000),
            stale_s=max(15.0, 10 * interval / 1000),
        )
        self.hub = TelemetryHub(cluster.nodes, interval_ms=interval, **(telemetry_options or {}))
        self.clocks = ClockController(
            cluster.nodes,
            self.hub,
            self.thresholds,
            owner or default_owner(out),
            log=self._log,
        )
        self.aborted: str | None = None
        self.pending: BaseException | None = None  # raised in the watcher, for the case
        self.document: dict[str, Any] | None = None
        self.entry: dict[str, Any] | None = None  # this invocation's `commands` entry

    def _log(self, message: str) -> None:
        self.console.print(f"[cyan]clock:[/] {escape(message)}")

    def describe(self) -> dict[str, Any]:
        return {
            "inventory": list(self.cluster.sources),
            "nodes": [
                {"name": n.name, "group": n.group, "via": n.describe()} for n in self.cluster.nodes
            ],
            "safety": {
                "cool_down_c": self.thresholds.cool_down_c,
                "abort_c": self.thresholds.abort_c,
                "cool_down_timeout_s": self.thresholds.cool_down_timeout_s,
                "session_max_s": self.thresholds.session_max_s,
                "telemetry_interval_ms": self.hub.interval_ms,
            },
        }

    def start(self) -> None:
        """Take every node's lock (refused if held), then start the telemetry."""
        self.clocks.open()
        since = self.hub.clock()
        self.hub.start()
        wait = max(15.0, 5 * self.hub.interval_ms / 1000)
        missing = self.hub.wait_for(since, wait)
        if missing:
            said = "; ".join(self.hub.nodes[name].describe() for name in missing)
            raise Gx10Error(
                f"no nvidia-smi telemetry within {wait:g} s from {', '.join(missing)} ({said}): "
                "the clock sweep's temperature limits cannot be watched without it"
            )

    async def before_case(self, case: Case) -> None:
        """Set the case's cap, cool down, check the limits (SweepAborted when it cannot run)."""
        self.clocks.set_cap(case.clock_cap)
        for pause in self.clocks.cool_down_steps():
            await asyncio.sleep(pause)
        hazard = self.clocks.hazard()
        if hazard:
            raise SweepAborted(hazard)

    async def watch(self, case: Case, task: asyncio.Future[Any]) -> None:
        """Cancel the running case if a node crosses the abort limit (or a session is lost)."""
        try:
            while not task.done():
                await asyncio.sleep(WATCH_INTERVAL_S)
                hazard = self.clocks.hazard()
                if hazard:
                    self.aborted = f"during {case.id}: {hazard}"
                    task.cancel()
                    return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SIGTERM landing here: hand it over to the case
            self.pending = exc
            task.cancel()

    async def case_telemetry(
        self, start: float, end: float, record: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The case's telemetry figures (waiting, bounded, for the reading that covers its end)."""
        deadline = self.hub.clock() + 2.5 * self.hub.interval_ms / 1000
        while self.hub.missing_after(end) and self.hub.clock() < deadline:
            await asyncio.sleep(0.05)
        per_node = {}
        approximate = []
        for name in self.hub.nodes:
            samples = self.hub.window(name, start, end)
            if not samples:
                after = self.hub.first_after(name, end)
                samples = [after] if after is not None else []
                approximate.append(name)
            per_node[name] = samples
        decode = (record.get("decode_tps") or {}).get("p50")
        figures = case_telemetry(per_node, record.get("aggregate_tps"), decode, approximate)
        figures["gaps"] = [
            gap.to_dict()
            for gap in self.hub.gaps()
            if gap.start_mono <= end and (gap.end_mono is None or gap.end_mono >= start)
        ]
        self.hub.append_csv(self.out / TELEMETRY_FILE)
        return figures

    def finish(self, outcome: RunOutcome | None) -> None:
        """Restore the caps and end the sessions, stop the telemetry, record both."""
        restore: dict[str, dict[str, Any]] = {}
        try:
            restore = self.clocks.close()
        finally:
            self.hub.stop()
            if self.document is not None and self.entry is not None:
                self.hub.append_csv(self.out / TELEMETRY_FILE)
                self.entry["clock"] = {
                    "owner": self.clocks.owner,
                    "sessions": {
                        name: {"original": s.original, "policy": s.policy}
                        for name, s in self.clocks.sessions.items()
                    },
                    "caps_set": [cap for node, cap in self.clocks.sets if node == self._head],
                    "aborted": self.aborted,
                    "restore": restore,
                    "telemetry_gaps": [gap.to_dict() for gap in self.hub.gaps()],
                }
                self.entry["ended"] = now()
                write_results(self.out, self.document)
        if outcome is not None:
            outcome.restore = restore
            outcome.aborted = self.aborted

    @property
    def _head(self) -> str:
        return self.cluster.nodes[0].name
