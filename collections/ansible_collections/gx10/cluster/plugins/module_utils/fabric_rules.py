# SPDX-License-Identifier: Apache-2.0
"""The fabric judgments: what the fabric role checks and gx10 doctor diagnoses, in one place.

Pure Python (standard library only), no Ansible: the ``gx10.cluster`` fabric filters
(plugins/filter/fabric.py) expose these functions to the fabric role, and ``gx10.doctor.rules``
loads this module for the same thresholds and verdicts.

Inputs are plain data as the role's probes give them:

* a *rail* is one entry of ``gx10_plan.hosts[host].rails``:
  ``{name, netdev, address, cidr, peers: {host: address}}``;
* a netdev *state* is one entry of ``gx10.cluster.netdev_info``'s ``netdevs``:
  ``{present, carrier, mtu, speed_mbps, pcie_width, pcie_speed}``;
* a *measurement* is one client run of a bandwidth run:
  ``{worker, mode (single|both), reverse, rail, netdev, client_ip, server_ip, ok, gbps, error}``.

Every check is ``{name, ok, value, expected, fix}`` as ``gx10.cluster.checks`` takes it. The texts
are the ones the role printed when these judgments were Jinja (tests/unit/fixtures/fabric_rules).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# --- thresholds (the fabric role's defaults; an inventory may set its own) ------------------

PER_RAIL_MIN_GBPS = 80.0
# The known ConnectX-7 stuck state: every status looks normal, RDMA runs at about 13 Gb/s.
DEGRADED_BAND_GBPS = (8.0, 25.0)
MIN_TOTAL_GBPS = 180.0
# Early GX10 BIOS trains the second twin's CX-7 function at Gen5 x2.
MIN_PCIE_WIDTH = 4
MIN_LINK_SPEED_MBPS = 200000
# A ping payload of MTU - 28 (IPv4 and ICMP headers) fills one frame exactly.
IPV4_ICMP_HEADERS = 28

DEGRADED_REMEDY = (
    "This is the known ConnectX-7 stuck state (RDMA at about 13 Gb/s while link, PCIe and "
    "counters look normal). A reboot does not fix it: shut the node down, cut AC power, drain "
    "it, and reconnect power after one minute."
)
LOW_REMEDY = (
    "Check the cable and both ends' link speed (200000 Mb/s), the PCIe link width of the CX-7 "
    "function (x4), MTU 9000 on both ends, and that no other test runs on the same device."
)
PCIE_REMEDY = (
    "early GX10 BIOS trains the second twin at Gen5 x2: update the BIOS, power-cycle the node, "
    "check `lspci -vv` LnkSta"
)
_CARRIER_FIX = (
    "plug the direct cable into the same CX-7 port on both nodes and check `ip -br link` on both "
    "ends"
)
_PING_FIX = (
    "compare the MTU of both ends and anything between them (ip -d link), and check that both "
    "ends use the same CX-7 port"
)
_TOTAL_FIX = (
    "fix any rail reported above first; then check that both twins carry traffic (NCCL_IB_HCA "
    "lists both)"
)

Check = dict[str, Any]
Rail = Mapping[str, Any]


def _text(value: Any) -> str:
    """A value as Jinja's ``~`` writes it (None as None, True as True)."""
    return str(value)


# --- single judgments (shared with gx10 doctor) --------------------------------------------


def ping_payload(mtu: int) -> int:
    """The no-fragment ping payload that fills one frame of ``mtu`` exactly."""
    return int(mtu) - IPV4_ICMP_HEADERS


def pcie_width_ok(width: int, minimum: int = MIN_PCIE_WIDTH) -> bool:
    """Whether a CX-7 function's negotiated PCIe link width is wide enough."""
    return int(width) >= int(minimum)


def link_speed_ok(speed_mbps: int, minimum: int = MIN_LINK_SPEED_MBPS) -> bool:
    return int(speed_mbps) >= int(minimum)


def mtu_ok(mtu: int | None, planned: int) -> bool:
    """Whether a rail end carries the planned MTU (an unknown MTU does not)."""
    return mtu == int(planned)


def classify_bandwidth(
    gbps: float,
    per_rail_min: float = PER_RAIL_MIN_GBPS,
    degraded_band: tuple[float, float] = DEGRADED_BAND_GBPS,
) -> str:
    """``ok`` (at least ``per_rail_min``), ``degraded_known`` (below it, inside the stuck-state
    band) or ``low`` (below it, anywhere else)."""
    if gbps >= per_rail_min:
        return "ok"
    low, high = degraded_band
    if low <= gbps <= high:
        return "degraded_known"
    return "low"


def bandwidth_remedy(status: str) -> str | None:
    return {"ok": None, "degraded_known": DEGRADED_REMEDY, "low": LOW_REMEDY}[status]


def bandwidth_verdict(
    gbps: float,
    per_rail_min: float = PER_RAIL_MIN_GBPS,
    label: str = "rail",
    degraded_band: tuple[float, float] = DEGRADED_BAND_GBPS,
) -> dict[str, Any]:
    """classify_bandwidth with the message and the remedy an operator reads."""
    status = classify_bandwidth(gbps, per_rail_min, degraded_band)
    remedy = bandwidth_remedy(status)
    if status == "ok":
        message = f"{label}: {gbps:.2f} Gb/s (at least {per_rail_min:g})"
    else:
        band = f"{degraded_band[0]:g}-{degraded_band[1]:g}"
        where = "in" if status == "degraded_known" else "outside"
        message = (
            f"{label}: {gbps:.2f} Gb/s, below {per_rail_min:g} and {where} the {band} Gb/s band "
            f"of the known stuck state. {remedy}"
        )
    return {
        "status": status,
        "gbps": gbps,
        "minimum": per_rail_min,
        "message": message,
        "remedy": remedy,
    }


# --- the rails as the tools take them -------------------------------------------------------


def gid_rails(
    rails: Sequence[Rail], rdma_devices: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The rails as roce_gid_info takes them: netdev, address, and rdma_dev where one is named:
    by ``rdma_devices`` (a role's override), else by the plan's rail (gx10_rdma_devices)."""
    overrides = rdma_devices or {}
    out: list[dict[str, Any]] = []
    for rail in rails:
        entry: dict[str, Any] = {"netdev": rail["netdev"], "address": rail["address"]}
        device = overrides.get(rail["netdev"], rail.get("rdma_dev"))
        if device is not None:
            entry["rdma_dev"] = device
        out.append(entry)
    return out


def _gid_of(gid: Sequence[Mapping[str, Any]], netdev: str) -> Mapping[str, Any]:
    return next((entry for entry in gid if entry.get("netdev") == netdev), {})


# --- measurements ---------------------------------------------------------------------------


def _of_run(measurement: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """Whether ``measurement`` is of a head -> worker ``run`` (one naming its ``worker``, as the
    runs were before they were over node pairs; fabric_pairs reads those too)."""
    netdevs = [pair["netdev"] for pair in run["pairs"]]
    return bool(
        measurement["worker"] == run["worker"]
        and measurement["mode"] == run["mode"]
        and measurement["reverse"] == run["reverse"]
        and measurement["netdev"] in netdevs
    )


def client_pair(client: Mapping[str, Any]) -> Mapping[str, Any]:
    """A client result's pair: ``pair`` (gx10.cluster.fabric_bandwidth_run), or ``item.item``
    for an async_status result of a loop, the shape the role had before it (and its recorded
    fixtures, fixtures/fabric_rules/recorded.json, have)."""
    pair: Mapping[str, Any] = client["pair"] if "pair" in client else client["item"]["item"]
    return pair


def run_measurements(
    run: Mapping[str, Any], done: Sequence[Mapping[str, Any]], parsed: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One measurement per client of ``run``: ``done`` are the clients' results, as
    gx10.cluster.fabric_bandwidth_run returns them (``pair``: their pair), ``parsed`` what the
    tool's parse filter made of each stdout."""
    found: list[dict[str, Any]] = []
    for client, result in zip(done, parsed, strict=True):
        pair = client_pair(client)
        finished = client.get("finished", False)
        why = result.get("error") or ""
        stderr = str(client.get("stderr") or "").strip()
        if not result.get("ok") and stderr:
            why = f"{why} ({stderr})"
        if not finished:
            why = "the client did not finish: " + _text(client.get("msg", "timeout"))
        found.append(
            {
                "worker": run["worker"],
                "mode": run["mode"],
                "reverse": run["reverse"],
                "rail": pair["rail"],
                "netdev": pair["netdev"],
                "client_ip": pair["client_ip"],
                "server_ip": pair["server_ip"],
                "ok": result.get("ok") and finished,
                "gbps": result.get("gbps"),
                "error": why,
            }
        )
    return found


def fold_bandwidth(
    measurements: Sequence[Mapping[str, Any]], workers: Sequence[str], rails: Sequence[Rail]
) -> dict[str, dict[str, Any]]:
    """``{per_rail: {worker: {netdev: Gb/s}}, total: {worker: Gb/s}}``: a rail's figure is its
    slower direction, the total the slower direction's sum of all rails at once; a rail or total
    with a failed run has no figure."""
    per_rail: dict[str, Any] = {}
    total: dict[str, Any] = {}
    for worker in workers:
        mine = [m for m in measurements if m["worker"] == worker]
        figures: dict[str, float] = {}
        for rail in rails:
            runs = [m for m in mine if m["mode"] == "single" and m["netdev"] == rail["netdev"]]
            if runs and all(m["ok"] for m in runs):
                figures[rail["netdev"]] = round(min(m["gbps"] for m in runs), 3)
        per_rail[worker] = figures
        both = [m for m in mine if m["mode"] == "both"]
        if both and all(m["ok"] for m in both):
            directions = list(dict.fromkeys(m["reverse"] for m in both))
            sums = [sum(m["gbps"] for m in both if m["reverse"] == d) for d in directions]
            total[worker] = round(min(sums), 3)
    return {"per_rail": per_rail, "total": total}


# --- the checks -----------------------------------------------------------------------------


def _ends(host: str, rail: Rail) -> str:
    peers = ", ".join(f"{peer} {address}" for peer, address in rail["peers"].items())
    return f"{rail['name']} {host} {rail['netdev']} {rail['address']} <-> {peers}"


def not_checked(rails: Sequence[Rail], netdevs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What sysfs cannot support here (veth, a virtual function, a down link), per rail."""
    lines: list[str] = []
    for rail in rails:
        state = netdevs.get(rail["netdev"]) or {}
        if not state:
            continue
        where = f"{rail['name']} {rail['netdev']}"
        if state.get("present") and state.get("speed_mbps") is None:
            lines.append(
                f"{where}: no link speed in sysfs (veth or a down link): speed not checked"
            )
        if state.get("present") and state.get("pcie_width") is None:
            lines.append(
                f"{where}: no PCIe link in sysfs (veth, virtual function): PCIe width not checked"
            )
    return lines


def _mtu_shown(state: Mapping[str, Any] | None) -> str:
    if state is None or "mtu" not in state:
        return "unknown"
    return _text(state["mtu"])


def link_checks(
    host: str,
    rails: Sequence[Rail],
    netdevs: Mapping[str, Mapping[str, Any]],
    *,
    mtu: int,
    peer_netdevs: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    ping: Sequence[Mapping[str, Any]] = (),
    route: Sequence[Mapping[str, Any]] = (),
    min_link_speed_mbps: Any = MIN_LINK_SPEED_MBPS,
    min_pcie_width: Any = MIN_PCIE_WIDTH,
) -> list[Check]:
    """This node's rails: carrier, link speed, PCIe width, MTU on both ends, the no-fragment
    ping and the route to every peer. ``peer_netdevs`` is each peer's netdev_info ``netdevs``
    (absent: not probed); ``ping`` the ``gx10.cluster.rail_ping`` results (``netdev``, ``peer``,
    ``ok``, ``message``) and ``route`` the looped command results (``item`` is ``[rail, peer]``)."""
    peer_netdevs = peer_netdevs or {}
    planned = int(mtu)
    checks: list[Check] = []
    for rail in rails:
        netdev = rail["netdev"]
        payload = int(rail.get("ping_payload") or ping_payload(planned))
        state: Mapping[str, Any] = netdevs.get(netdev) or {"present": False}
        present = state.get("present")
        ends = _ends(host, rail)
        checks.append(
            {
                "name": f"{ends}: netdev present and carrier",
                "ok": bool(present) and state.get("carrier") is True,
                "value": f"carrier {_text(state.get('carrier'))}" if present else "no such netdev",
                "expected": "carrier",
                "fix": _CARRIER_FIX,
            }
        )
        if present and state.get("speed_mbps") is not None:
            checks.append(
                {
                    "name": f"{ends}: link speed",
                    "ok": link_speed_ok(state["speed_mbps"], min_link_speed_mbps),
                    "value": f"{_text(state['speed_mbps'])} Mb/s",
                    "expected": (
                        f"at least {_text(min_link_speed_mbps)} Mb/s (fabric_min_link_speed_mbps)"
                    ),
                    "fix": (
                        f"check the cable (a 200G QSFP112 DAC) and `ethtool {netdev}` on both ends"
                    ),
                }
            )
        if present and state.get("pcie_width") is not None:
            checks.append(
                {
                    "name": f"{ends}: PCIe link width of the CX-7 function",
                    "ok": pcie_width_ok(state["pcie_width"], min_pcie_width),
                    "value": f"x{_text(state['pcie_width'])} {state.get('pcie_speed') or ''}",
                    "expected": f"at least x{_text(min_pcie_width)}",
                    "fix": PCIE_REMEDY,
                }
            )
        wrong: list[str] = []
        if not mtu_ok(state.get("mtu"), planned):
            wrong.append(f"{host} {netdev} MTU {_mtu_shown(state)}")
        for peer in rail["peers"]:
            peer_state = (peer_netdevs.get(peer) or {}).get(netdev)
            peer_mtu = (peer_state or {}).get("mtu")
            if not mtu_ok(peer_mtu, planned):
                shown = _text(peer_mtu) if peer_mtu is not None else "unknown"
                wrong.append(f"{peer} {netdev} MTU {shown}")
        checks.append(
            {
                "name": f"{ends}: MTU on both ends",
                "ok": not wrong,
                "value": ", ".join(wrong),
                "expected": f"MTU {planned} (the plan) on both ends",
                "fix": (
                    "rerun the network stage (`gx10 provision -i INV -t network`) and compare "
                    f"`ip -d link show {netdev}` on both nodes"
                ),
            }
        )
        for result in ping:
            if result["netdev"] != netdev:
                continue
            peer = result["peer"]
            checks.append(
                {
                    "name": (
                        f"{ends}: no-fragment {payload}-byte ping {host} -> {peer} "
                        f"{rail['peers'][peer]}"
                    ),
                    "ok": result.get("ok") is True,
                    "value": str(result.get("message") or "") or "no answer",
                    "expected": f"answers to ping -M do -s {payload} -I {netdev}",
                    "fix": _PING_FIX,
                }
            )
        for result in route:
            if result["item"][0]["netdev"] != netdev:
                continue
            peer = result["item"][1]
            routes: Any = (
                json.loads(result.get("stdout") or "[]") if result.get("rc", 1) == 0 else []
            )
            first = routes[0] if routes else {}
            dev = first.get("dev", "none")
            stderr = str(result.get("stderr") or "").strip()
            checks.append(
                {
                    "name": f"{ends}: route to {peer} {rail['peers'][peer]}",
                    "ok": dev == netdev,
                    "value": f"leaves through {_text(dev)}" + (f" ({stderr})" if stderr else ""),
                    "expected": f"leaves through {netdev}",
                    "fix": (
                        "give each rail its own subnet (`ip -br addr`, `ip route`) and remove any "
                        f"route that sends {rail['peers'][peer]} elsewhere"
                    ),
                }
            )
    return checks


def _band(band: Sequence[Any]) -> tuple[float, float]:
    low, high = (float(value) for value in band)
    return low, high


def _errors(runs: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(_text(m.get("error")) for m in runs if not m["ok"]) or "not measured"


def bandwidth_checks(
    head: str,
    workers: Sequence[str],
    rails: Sequence[Rail],
    measurements: Sequence[Mapping[str, Any]],
    *,
    tool: str,
    tool_rc: Mapping[str, Any],
    min_rail_gbps: Any = PER_RAIL_MIN_GBPS,
    min_total_gbps: Any = MIN_TOTAL_GBPS,
    degraded_band_gbps: Sequence[Any] = DEGRADED_BAND_GBPS,
) -> list[Check]:
    """The head's bandwidth checks: the tool on every node (``tool_rc``: node -> the exit code of
    ``command -v``, None when not probed), then per worker each rail and all rails at once."""
    band = _band(degraded_band_gbps)
    band_text = "-".join(_text(value) for value in band)
    checks: list[Check] = []
    for node in [head, *workers]:
        rc = tool_rc.get(node)
        if (1 if rc is None else rc) != 0:
            package = "perftest (ib_write_bw)" if tool == "ib_write_bw" else "iperf3"
            checks.append(
                {
                    "name": f"bandwidth tool on {node}",
                    "ok": False,
                    "value": f"{tool} not found",
                    "expected": f"{tool} on every node",
                    "fix": f"install {package} on the nodes",
                }
            )
    if checks:
        return checks
    folded = fold_bandwidth(measurements, workers, rails)
    for worker in workers:
        for rail in rails:
            ends = (
                f"{rail['name']} {head} {rail['netdev']} {rail['address']} <-> {worker} "
                f"{rail['peers'][worker]}"
            )
            runs = [
                m
                for m in measurements
                if m["worker"] == worker and m["mode"] == "single" and m["netdev"] == rail["netdev"]
            ]
            gbps = folded["per_rail"].get(worker, {}).get(rail["netdev"])
            name = f"{ends}: bandwidth ({tool})"
            if gbps is None:
                checks.append(
                    {
                        "name": name,
                        "ok": False,
                        "value": f"no result: {_errors(runs)}",
                        "expected": f"at least {_text(min_rail_gbps)} Gb/s",
                        "fix": "run the tool by hand on both ends and read its error",
                    }
                )
                continue
            verdict = bandwidth_verdict(float(gbps), float(min_rail_gbps), ends, band)
            value = f"{round(gbps, 2)} Gb/s"
            if len(runs) > 1:
                directions = " / ".join(str(round(m["gbps"], 2)) for m in runs)
                value += f" (slower of {directions})"
            if verdict["status"] == "degraded_known":
                value += (
                    ": the known degraded state (ConnectX-7 stuck, inside the "
                    f"{band_text} Gb/s band)"
                )
            elif verdict["status"] == "low":
                value += f", outside the {band_text} Gb/s band of the known degraded state"
            checks.append(
                {
                    "name": name,
                    "ok": verdict["status"] == "ok",
                    "value": value,
                    "expected": f"at least {_text(min_rail_gbps)} Gb/s (fabric_min_rail_gbps)",
                    "fix": verdict["remedy"],
                }
            )
        if len(rails) > 1:
            total = folded["total"].get(worker)
            both = [m for m in measurements if m["worker"] == worker and m["mode"] == "both"]
            names = " + ".join(rail["name"] for rail in rails)
            checks.append(
                {
                    "name": f"all rails at once {head} <-> {worker} ({names}, {tool})",
                    "ok": total is not None and float(total) >= float(min_total_gbps),
                    "value": (
                        f"{round(total, 2)} Gb/s"
                        if total is not None
                        else f"no result: {_errors(both)}"
                    ),
                    "expected": f"at least {_text(min_total_gbps)} Gb/s (fabric_min_total_gbps)",
                    "fix": _TOTAL_FIX,
                }
            )
    return checks
