# SPDX-License-Identifier: Apache-2.0
"""The gx10.cluster fabric filters: parse the bandwidth tools, and the fabric role's judgments.

Documented in the fabric_*.yml files next to this file. The parsing is in
module_utils/fabric_parse.py, the judgments in module_utils/fabric_rules.py (pure Python, shared
with gx10 doctor); these filters only adapt Ansible's data (hostvars, registered results).

The two parse filters never fail on what a tool printed: a run that produced no result (refused
connection, a tool error, empty output) gives ``ok: false`` with the reason in ``error``, so a
check can report it with the rail and both ends named instead of a templating error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils import fabric_pairs, fabric_rules
from ansible_collections.gx10.cluster.plugins.module_utils.fabric_parse import (
    FabricParseError,
    parse_ib_write_bw,
    parse_iperf3_json,
)
from ansible_collections.gx10.cluster.plugins.module_utils.fabric_rules import (
    DEGRADED_BAND_GBPS,
    PER_RAIL_MIN_GBPS,
    bandwidth_verdict,
)


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise AnsibleFilterError(
            f"gx10.cluster.{name} expects the tool's output as a string, got {type(value).__name__}"
        )
    return value


def fabric_iperf3(output: Any) -> dict[str, Any]:
    """stdout | gx10.cluster.fabric_iperf3: {ok, error, gbps, ...} from ``iperf3 -J``."""
    try:
        result = parse_iperf3_json(_text(output, "fabric_iperf3"))
    except FabricParseError as error:
        return {"ok": False, "error": str(error), "gbps": None}
    return {"ok": True, "error": None, **result.as_dict()}


def fabric_ib_write_bw(output: Any) -> dict[str, Any]:
    """stdout | gx10.cluster.fabric_ib_write_bw: {ok, error, gbps, ...} from ``ib_write_bw``."""
    try:
        result = parse_ib_write_bw(_text(output, "fabric_ib_write_bw"))
    except FabricParseError as error:
        return {"ok": False, "error": str(error), "gbps": None}
    return {"ok": True, "error": None, "gbps": result.average_gbps, **result.as_dict()}


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: {what} must be a number, got {value!r}"
        )
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: {what} must be a number, got {value!r}"
        ) from None


def fabric_verdict(
    gbps: Any,
    minimum: Any = PER_RAIL_MIN_GBPS,
    degraded_band: Sequence[Any] = DEGRADED_BAND_GBPS,
    label: str = "rail",
) -> dict[str, Any]:
    """gbps | gx10.cluster.fabric_verdict(minimum, degraded_band, label): status and remedy."""
    if not isinstance(degraded_band, Sequence) or isinstance(degraded_band, str):
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band must be [low, high], got {degraded_band!r}"
        )
    if len(degraded_band) != 2:
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band must be [low, high], got {degraded_band!r}"
        )
    low, high = (_number(v, "degraded_band") for v in degraded_band)
    if low > high:
        raise AnsibleFilterError(
            f"gx10.cluster.fabric_verdict: degraded_band [{low:g}, {high:g}] is upside down"
        )
    return bandwidth_verdict(
        _number(gbps, "the bandwidth"), _number(minimum, "minimum"), str(label), (low, high)
    )


def _hostvar(hostvars: Any, host: str, name: str) -> Any:
    """hostvars[host][name], or None where the host or the variable is not there."""
    try:
        host_vars = hostvars[host]
    except KeyError:
        return None
    if not isinstance(host_vars, Mapping):  # Ansible's marker for an unknown host
        return None
    try:
        return host_vars[name]
    except KeyError:
        return None


def _registered(hostvars: Any, host: str, name: str, key: str, default: Any) -> Any:
    """hostvars[host][name][key] of a registered result (absent or skipped: ``default``)."""
    result = _hostvar(hostvars, host, name)
    if not isinstance(result, Mapping) or result.get(key) is None:
        return default
    return result[key]


def _list(value: Any, what: str, name: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise AnsibleFilterError(f"gx10.cluster.{name}: {what} must be a list, got {value!r}")
    return list(value)


def _mapping(value: Any, what: str, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"gx10.cluster.{name}: {what} must be a mapping, got {value!r}")
    return value


def fabric_gid_rails(rails: Any, rdma_devices: Any = None) -> list[dict[str, Any]]:
    """rails | gx10.cluster.fabric_gid_rails(rdma_devices): the rails for roce_gid_info."""
    return fabric_rules.gid_rails(
        _list(rails, "the rails", "fabric_gid_rails"),
        _mapping(rdma_devices, "rdma_devices", "fabric_gid_rails"),
    )


def fabric_not_checked(rails: Any, netdevs: Any) -> list[str]:
    """rails | gx10.cluster.fabric_not_checked(netdevs): what sysfs cannot support here."""
    name = "fabric_not_checked"
    return fabric_rules.not_checked(
        _list(rails, "the rails", name), _mapping(netdevs, "netdevs", name)
    )


def fabric_link_checks(  # noqa: PLR0917 (Jinja passes filter arguments by position)
    rails: Any,
    host: str,
    hostvars: Any,
    mtu: Any,
    min_link_speed_mbps: Any = fabric_rules.MIN_LINK_SPEED_MBPS,
    min_pcie_width: Any = fabric_rules.MIN_PCIE_WIDTH,
) -> list[dict[str, Any]]:
    """rails | gx10.cluster.fabric_link_checks(host, hostvars, mtu, min_speed, min_width)."""
    name = "fabric_link_checks"
    plan_rails = _list(rails, "the rails", name)
    peers = {peer for rail in plan_rails for peer in rail["peers"]}
    return fabric_rules.link_checks(
        str(host),
        plan_rails,
        _mapping(_registered(hostvars, host, "__fabric_links", "netdevs", {}), "netdevs", name),
        mtu=int(mtu),
        peer_netdevs={
            peer: _registered(hostvars, peer, "__fabric_links", "netdevs", {}) for peer in peers
        },
        ping=_list(_registered(hostvars, host, "__fabric_ping", "results", []), "ping", name),
        route=_list(_registered(hostvars, host, "__fabric_route", "results", []), "route", name),
        min_link_speed_mbps=min_link_speed_mbps,
        min_pcie_width=min_pcie_width,
    )


# --- bandwidth over node pairs (module_utils/fabric_pairs.py) ------------------------------


def _plan(plan: Any, name: str) -> tuple[str, list[str], dict[str, list[Any]]]:
    """The head, the workers and each node's rails of ``gx10_plan``."""
    plan = _mapping(plan, "gx10_plan", name)
    try:
        head = str(plan["head"])
        workers = [str(w) for w in _list(plan["workers"], "workers", name)]
        host_rails = {
            node: _list(plan["hosts"][node]["rails"], "the rails", name)
            for node in [head, *workers]
        }
    except KeyError as missing:
        raise AnsibleFilterError(
            f"gx10.cluster.{name}: gx10_plan has no {missing} (run playbooks/validate.yml)"
        ) from None
    return head, workers, host_rails


def _measured(measurements: Any, head: str, name: str) -> list[Any]:
    """The measurements, each naming its client (one without is the head's, as measured before
    the runs were over node pairs)."""
    found = _list(measurements, "the measurements", name)
    return [m if "client" in m else {**m, "client": head} for m in found]


def _pairs(schedule: Any, name: str) -> list[list[str]]:
    return [
        [str(node) for node in pair]
        for pair in _list(_mapping(schedule, "the schedule", name).get("pairs"), "pairs", name)
    ]


def fabric_pair_schedule(
    plan: Any,
    budget_seconds: Any = 0,
    seconds: Any = 5,
    tool: str = "ib_write_bw",
    iperf3_reverse: Any = True,
) -> dict[str, Any]:
    """gx10_plan | gx10.cluster.fabric_pair_schedule(budget, seconds, tool, reverse)."""
    name = "fabric_pair_schedule"
    head, workers, host_rails = _plan(plan, name)
    max_rounds = fabric_pairs.rounds_within(
        int(budget_seconds), int(seconds), len(host_rails[head]), str(tool), bool(iperf3_reverse)
    )
    return fabric_pairs.pair_schedule([head, *workers], max_rounds)


def fabric_pair_runs(  # noqa: PLR0917 (Jinja passes filter arguments by position)
    schedule: Any,
    plan: Any,
    hostvars: Any,
    tool: str,
    iperf3_reverse: Any = True,
    port: Any = 18515,
) -> list[dict[str, Any]]:
    """schedule | gx10.cluster.fabric_pair_runs(gx10_plan, hostvars, tool, reverse, port)."""
    name = "fabric_pair_runs"
    _, _, host_rails = _plan(plan, name)
    rounds = _list(_mapping(schedule, "the schedule", name).get("rounds"), "rounds", name)
    return fabric_pairs.pair_runs(
        rounds,
        host_rails,
        tool=str(tool),
        iperf3_reverse=bool(iperf3_reverse),
        port=int(port),
        gid={
            node: _list(_registered(hostvars, node, "__fabric_gid", "rails", []), "rails", name)
            for node in host_rails
        },
    )


def _parse(tool: str, stdout: Any) -> dict[str, Any]:
    return fabric_iperf3(stdout) if tool == "iperf3" else fabric_ib_write_bw(stdout)


def fabric_pair_merge_measurements(
    measurements: Any, run: Any, done: Any, tool: str
) -> list[dict[str, Any]]:
    """measurements | gx10.cluster.fabric_pair_merge_measurements(run, clients, tool)."""
    name = "fabric_pair_merge_measurements"
    clients = _list(done, "the clients' results", name)
    parsed = [_parse(str(tool), client.get("stdout", "")) for client in clients]
    the_run = _mapping(run, "the run", name)
    new = fabric_pairs.pair_run_measurements(the_run, clients, parsed)
    return fabric_pairs.merge_pair_measurements(
        _list(measurements, "the measurements", name), the_run, new
    )


def fabric_pair_runs_without_result(runs: Any, measurements: Any) -> list[dict[str, Any]]:
    """runs | gx10.cluster.fabric_pair_runs_without_result(measurements): repeated once."""
    name = "fabric_pair_runs_without_result"
    return fabric_pairs.pair_runs_without_result(
        _list(runs, "the runs", name), _list(measurements, "the measurements", name)
    )


def fabric_pair_bandwidth(
    measurements: Any, plan: Any, schedule: Any, min_rail_gbps: Any = PER_RAIL_MIN_GBPS
) -> dict[str, Any]:
    """measurements | gx10.cluster.fabric_pair_bandwidth(gx10_plan, schedule, min_rail_gbps):
    {per_rail, total} of the head's pairs, and {links, bad_links} of every measured pair."""
    name = "fabric_pair_bandwidth"
    head, _, host_rails = _plan(plan, name)
    found = _measured(measurements, head, name)
    pairs = _pairs(schedule, name)
    links = fabric_pairs.pair_links(found, pairs, host_rails, min_rail_gbps=min_rail_gbps)
    return {
        **fabric_pairs.fold_pairs(found, head, pairs, host_rails[head]),
        "links": links,
        "bad_links": fabric_pairs.bad_links(links),
    }


def fabric_pair_bandwidth_checks(  # noqa: PLR0917 (Jinja passes filter arguments by position)
    measurements: Any,
    plan: Any,
    schedule: Any,
    hostvars: Any,
    tool: str,
    min_rail_gbps: Any = PER_RAIL_MIN_GBPS,
    min_total_gbps: Any = fabric_rules.MIN_TOTAL_GBPS,
    degraded_band_gbps: Any = DEGRADED_BAND_GBPS,
) -> list[dict[str, Any]]:
    """measurements | gx10.cluster.fabric_pair_bandwidth_checks(gx10_plan, schedule, hostvars,
    tool, min_rail, min_total, band): every measured pair's bandwidth checks."""
    name = "fabric_pair_bandwidth_checks"
    head, workers, host_rails = _plan(plan, name)
    band = _list(degraded_band_gbps, "degraded_band_gbps", name)
    if len(band) != 2:
        raise AnsibleFilterError(f"gx10.cluster.{name}: degraded_band_gbps must be [low, high]")
    return fabric_pairs.pair_bandwidth_checks(
        head,
        workers,
        _pairs(schedule, name),
        host_rails,
        _measured(measurements, head, name),
        tool=str(tool),
        tool_rc={
            node: _registered(hostvars, node, "__fabric_tool", "rc", None) for node in host_rails
        },
        min_rail_gbps=min_rail_gbps,
        min_total_gbps=min_total_gbps,
        degraded_band_gbps=band,
    )


class FilterModule:
    """gx10.cluster fabric bandwidth filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "fabric_iperf3": fabric_iperf3,
            "fabric_ib_write_bw": fabric_ib_write_bw,
            "fabric_verdict": fabric_verdict,
            "fabric_gid_rails": fabric_gid_rails,
            "fabric_not_checked": fabric_not_checked,
            "fabric_link_checks": fabric_link_checks,
            "fabric_pair_schedule": fabric_pair_schedule,
            "fabric_pair_runs": fabric_pair_runs,
            "fabric_pair_merge_measurements": fabric_pair_merge_measurements,
            "fabric_pair_runs_without_result": fabric_pair_runs_without_result,
            "fabric_pair_bandwidth": fabric_pair_bandwidth,
            "fabric_pair_bandwidth_checks": fabric_pair_bandwidth_checks,
        }
