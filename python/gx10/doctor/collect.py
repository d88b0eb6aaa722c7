"""Gather the doctor's evidence: run playbooks/doctor.yml and read each node's result, then read
the head engine's counters from its /metrics on the controller (`read_engine_metrics`).

The playbook ends every node with one task whose result holds a JSON-serialisable
``gx10_doctor_evidence`` dict (see playbooks/doctor.yml); `collect` picks those, and the cluster
plan from the validate play, out of the runner events (``runner_on_ok``, ``event_data.res``)
without scraping text. `parse_evidence` turns one node's dict into an `Evidence`: pure, so it is
unit-tested on realistic dicts, including the missing pieces (unreachable node, no container, no
env file, a failed GID read, no pair supervisor).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gx10.doctor import engine_metrics
from gx10.doctor.pair import PairReport, PairReportError, parse_pair_report
from gx10.doctor.rules import (
    BandwidthLink,
    ContainerEvidence,
    Evidence,
    KnownFault,
    RailEvidence,
)
from gx10.errors import Gx10Error
from gx10.provision import EventHandler, ProvisionResult, provision

PLAYBOOK = "doctor.yml"
BANDWIDTH_PLAYBOOK = "fabric.yml"
BANDWIDTH_TAG = "fabric_bandwidth"
BANDWIDTH_KEY = "gx10_fabric_bandwidth"
EVIDENCE_KEY = "gx10_doctor_evidence"
SCHEMA = 1
_VALIDATE_ACTIONS = ("gx10.cluster.validate_cluster", "validate_cluster")


def collect(
    inventory: str,
    *,
    limit: str | None = None,
    on_event: EventHandler | None = None,
    extravars: Mapping[str, Any] | None = None,
) -> tuple[list[Evidence], dict[str, Any], ProvisionResult]:
    """Run the evidence playbook; return each node's evidence (plan order), the plan, the run.

    A node that gave no evidence although the run reached it (unreachable before the play could
    report, or a failed task) is reported as unreachable with the reason; nodes outside `limit`
    are left out. Raises Gx10Error when there is no plan (the inventory did not validate).
    """
    gathered = _Gatherer(on_event)
    result = provision(
        inventory,
        PLAYBOOK,
        # provision() keeps localhost, where the validate play computes the plan, in any limit.
        limit=limit,
        on_event=gathered,
        extravars=extravars,
    )
    if gathered.plan is None:
        reasons = "; ".join(f"{t.host} {t.task}: {t.message}" for t in result.failed_tasks)
        raise Gx10Error(
            "doctor: no cluster plan, so nothing to check against"
            + (f" ({reasons})" if reasons else "")
            + f"; artifacts in {result.artifact_dir}"
        )
    plan = gathered.plan
    evidences: list[Evidence] = []
    for node in _plan_nodes(plan):
        if node in gathered.evidence:
            evidences.append(parse_evidence(node, gathered.evidence[node]))
        elif node in result.hosts or node in gathered.lost:
            why = gathered.lost.get(node) or [
                f"{t.task}: {t.message}" for t in result.failed_tasks if t.host == node
            ]
            evidences.append(
                Evidence(node=node, reachable=False, problems=tuple(why or ["no evidence"]))
            )
    return evidences, plan, result


@dataclasses.dataclass(frozen=True)
class BandwidthReport:
    """The head's ``gx10_fabric_bandwidth`` report as the doctor judges it.

    ``figures``: ``per_rail``, {worker: {netdev: Gb/s}} of the head's pairs (a rail whose
    measurement failed has no figure). ``links``: every measured pair and rail (the report's
    ``links``, which the fabric role adds on a switch), None for a report without them (cables,
    or a collection from before N nodes): then only ``figures`` is judged. ``skipped``: the
    pairs the bandwidth budget left out, as [node, peer].
    """

    figures: dict[str, dict[str, float]]
    links: tuple[BandwidthLink, ...] | None = None
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def extravars(self) -> dict[str, Any]:
        """What doctor.yml is given: the head's figures, when the links are not judged instead
        (they hold the head's pairs too, named by both ends)."""
        return {"doctor_bandwidth_gbps": self.figures} if self.links is None else {}

    def attach(self, evidences: Sequence[Evidence]) -> list[Evidence]:
        """The evidences with the links (see `attach_bandwidth_links`); unchanged without."""
        if self.links is None:
            return list(evidences)
        return attach_bandwidth_links(evidences, self.links, self.skipped)


def measure_bandwidth_report(
    inventory: str,
    *,
    limit: str | None = None,
    on_event: EventHandler | None = None,
) -> BandwidthReport:
    """Run the fabric role's bandwidth measurement (fabric.yml, tag fabric_bandwidth) and read
    the head's report (`parse_bandwidth_report`). Raises Gx10Error when the run produced none."""
    report: dict[str, Any] = {}

    def keep(event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        res = data.get("res")
        if event.get("event") == "runner_on_ok" and isinstance(res, Mapping):
            found = res.get(BANDWIDTH_KEY)
            if isinstance(found, Mapping):
                report.update(found)
        if on_event is not None:
            on_event(event)

    result = provision(
        inventory,
        BANDWIDTH_PLAYBOOK,
        limit=limit,
        tags=BANDWIDTH_TAG,
        # Asked for explicitly, so measure even where the inventory leaves it out of site.yml.
        extravars={"fabric_bandwidth": True},
        on_event=keep,
    )
    if not report:
        reasons = "; ".join(f"{t.host} {t.task}: {t.message}" for t in result.failed_tasks)
        raise Gx10Error(
            f"doctor: the bandwidth measurement ({BANDWIDTH_PLAYBOOK}, tag {BANDWIDTH_TAG}) "
            "reported nothing"
            + (f" ({reasons})" if reasons else "")
            + f"; artifacts in {result.artifact_dir}"
        )
    return parse_bandwidth_report(report)


def parse_bandwidth_report(report: Mapping[str, Any]) -> BandwidthReport:
    """The fabric role's ``gx10_fabric_bandwidth`` as a `BandwidthReport`. A report without a
    ``links`` list (two nodes on cables, an older collection) gives ``links`` None; a malformed
    link entry is left out."""
    per_rail = report.get("per_rail")
    figures: dict[str, dict[str, float]] = {}
    for worker, rails in per_rail.items() if isinstance(per_rail, Mapping) else []:
        figures[str(worker)] = _bandwidth(rails)
    raw_links = report.get("links")
    if not isinstance(raw_links, Sequence) or isinstance(raw_links, str):
        return BandwidthReport(figures)
    links = tuple(
        BandwidthLink(
            rail=str(link.get("rail") or link["netdev"]),
            netdev=str(link["netdev"]),
            node=str(link["node"]),
            peer=str(link["peer"]),
            address=str(link.get("address") or "?"),
            gbps=_float(link.get("gbps")),
            min_gbps=_float(link.get("min_gbps")),
        )
        for link in _mappings(raw_links)
        if all(link.get(key) not in (None, "") for key in ("netdev", "node", "peer"))
    )
    skipped = tuple(
        (str(pair[0]), str(pair[1]))
        for pair in _sequence(report.get("skipped_pairs"))
        if isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2
    )
    return BandwidthReport(figures, links, skipped)


def attach_bandwidth_links(
    evidences: Sequence[Evidence],
    links: Iterable[BandwidthLink],
    skipped: Iterable[tuple[str, str]] = (),
) -> list[Evidence]:
    """Give each link to its peer end's evidence (the worker end of a head's pair, as the head's
    figures are), or its node end's where the peer gave none; a link with neither end here (out
    of --limit) is left out. A link without a result, and a pair the bandwidth budget skipped,
    is a problem of that node (incomplete evidence), not a figure."""
    by_node = {ev.node: ev for ev in evidences}
    found: dict[str, list[BandwidthLink]] = {}
    problems: dict[str, list[str]] = {}
    for link in links:
        owner = link.peer if link.peer in by_node else link.node
        if owner not in by_node:
            continue
        found.setdefault(owner, []).append(link)
        if link.gbps is None:
            problems.setdefault(owner, []).append(
                f"bandwidth of {link.ends} ({link.netdev}) not measured: the tool gave no result"
            )
    for node, peer in skipped:
        owner = peer if peer in by_node else node
        if owner in by_node:
            problems.setdefault(owner, []).append(
                f"bandwidth between {node} and {peer} not measured: "
                "fabric_bandwidth_budget_seconds skipped the pair"
            )
    return [
        dataclasses.replace(
            ev,
            bandwidth_links=(*ev.bandwidth_links, *found.get(ev.node, [])),
            problems=(*ev.problems, *problems.get(ev.node, [])),
        )
        if ev.node in found or ev.node in problems
        else ev
        for ev in evidences
    ]


class _Gatherer:
    """The on_event callback: keeps the plan, each node's evidence, and why nodes gave none."""

    def __init__(self, forward: EventHandler | None) -> None:
        self._forward = forward
        self.plan: dict[str, Any] | None = None
        self.evidence: dict[str, Mapping[str, Any]] = {}
        self.lost: dict[str, list[str]] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        res = data.get("res")
        host = str(data.get("host", ""))
        if isinstance(res, Mapping):
            kind = event.get("event")
            if kind == "runner_on_ok":
                self._ok(host, str(data.get("task_action", "")), res)
            elif kind in ("runner_on_unreachable", "runner_on_failed"):
                message = str(res.get("msg") or "").strip() or "(no message)"
                self.lost.setdefault(host, []).append(f"{data.get('task', '')}: {message}")
        if self._forward is not None:
            self._forward(event)

    def _ok(self, host: str, action: str, res: Mapping[str, Any]) -> None:
        evidence = res.get(EVIDENCE_KEY)
        if isinstance(evidence, Mapping):
            self.evidence[str(evidence.get("node") or host)] = evidence
        elif evidence is not None:  # debug's text for a template it could not render
            self.lost.setdefault(host, []).append(f"evidence not rendered: {evidence}")
        elif action in _VALIDATE_ACTIONS and isinstance(res.get("plan"), Mapping):
            self.plan = dict(res["plan"])


def read_engine_metrics(
    evidences: Sequence[Evidence],
    plan: Mapping[str, Any],
    *,
    api_key: str | None = None,
    timeout: float = engine_metrics.METRICS_TIMEOUT,
) -> list[Evidence]:
    """The evidences with the head's speculative-decoding counters, read from its /metrics.

    Only a head whose serving container runs is asked (a stopped one is a finding already). What
    could not be read is one of the head's `problems` (the doctor names it as incomplete evidence,
    and the acceptance rule stays silent); so is a server that exports no speculative counters
    although the serve stage configures a draft.
    """
    head = str(plan.get("head") or "")
    out = []
    for ev in evidences:
        if ev.node == head and ev.reachable and ev.endpoint and _serving(ev):
            got = engine_metrics.scrape(ev.endpoint, api_key=api_key, timeout=timeout)
            out.append(_with_engine_metrics(ev, got))
        else:
            out.append(ev)
    return out


def _serving(ev: Evidence) -> bool:
    return any(c.state == "running" for c in ev.containers)


def _with_engine_metrics(ev: Evidence, got: engine_metrics.EngineScrape) -> Evidence:
    if got.problem is not None:
        problem = f"engine metrics not read: {got.problem}"
        return dataclasses.replace(ev, problems=(*ev.problems, problem))
    if got.spec is None and ev.speculative:
        problem = (
            f"engine metrics: {got.url} exports no {engine_metrics.DRAFT_TOKENS} although "
            f"vllm_serve_speculative_config sets {dict(ev.speculative)}; draft acceptance not "
            "measured"
        )
        return dataclasses.replace(ev, problems=(*ev.problems, problem), metrics_url=got.url)
    return dataclasses.replace(ev, spec_decode=got.spec, metrics_url=got.url)


def _plan_nodes(plan: Mapping[str, Any]) -> list[str]:
    nodes = [str(n["name"]) for n in plan.get("nodes", []) if isinstance(n, Mapping)]
    return nodes or sorted(str(name) for name in plan.get("hosts", {}))


# --- parsing ---------------------------------------------------------------------------------


def parse_evidence(node: str, raw: Mapping[str, Any] | None) -> Evidence:
    """One node's ``gx10_doctor_evidence`` dict as an `Evidence`.

    Whatever the node could not show is left empty (None, no rails, no tables) and named in
    ``problems``, so a rule never judges a missing piece as a fault of its own.
    """
    if not raw:
        return Evidence(node=node, reachable=False, problems=("the node reported no evidence",))
    schema = raw.get("schema")
    if schema != SCHEMA:
        raise Gx10Error(
            f"doctor: {node} reported evidence schema {schema!r}, this gx10 reads {SCHEMA}: "
            "playbooks/doctor.yml and the gx10 package are from different versions"
        )
    if not _bool(raw.get("reachable", True)):
        message = str(raw.get("unreachable_msg") or "").strip()
        return Evidence(
            node=node, reachable=False, problems=(message,) if message else ("unreachable",)
        )
    problems: list[str] = []
    gid = _section(raw, "gid")
    rdma_devs, gid_tables = _gid(gid, problems)
    inferred = _clock_cap(_section(raw, "clocks"), _section(raw, "clock_lock"), problems)
    recorded, cap, session = _clock_record(_section(raw, "clock_tool"))
    if not recorded:
        cap = inferred
    known_faults = _known_faults(_section(raw, "kernel"), problems)
    pair_section = _section(raw, "pair")
    pair = _pair(pair_section, problems)
    return Evidence(
        node=node,
        reachable=True,
        rails=_rails(raw, rdma_devs, problems),
        gid_tables=gid_tables,
        env=_env(_section(raw, "env_file"), problems),
        gid_mode=str(raw["gid_mode"]) if raw.get("gid_mode") else None,
        containers=_containers(_section(raw, "container"), problems),
        bandwidth_gbps=_bandwidth(raw.get("bandwidth_gbps")),
        bandwidth_min_gbps=_float(_section(raw, "bandwidth_thresholds").get("min_rail_gbps")),
        bandwidth_degraded_band=_band(
            _section(raw, "bandwidth_thresholds").get("degraded_band_gbps")
        ),
        pcie_min_width=_int(_section(raw, "pcie_thresholds").get("min_width")),
        sm_clock_cap_mhz=cap,
        sm_clock_policy_mhz=_int(raw.get("sm_clock_policy_mhz")),
        sm_clock_cap_recorded=recorded,
        clock_session=session,
        problems=tuple(problems),
        endpoint=str(raw["endpoint"]).strip() if raw.get("endpoint") else None,
        kernel_release=_text(_section(raw, "kernel").get("release")),
        known_faults=known_faults,
        supervisor_installed=_bool(pair_section.get("installed", False)),
        pair=pair,
        speculative=_speculative(raw.get("speculative_config")),
    )


def _pair(section: Mapping[str, Any], problems: list[str]) -> PairReport | None:
    """The agent's `gx10-pair status --json` where it is installed (absent: not supervised)."""
    if not _bool(section.get("installed", False)):
        return None
    agent = _text(section.get("agent"))
    rc = _int(section.get("rc"))
    if rc != 0:
        why = str(section.get("msg") or "").strip() or f"exit code {rc}"
        problems.append(f"pair supervisor status not read ({agent} status --json): {why}")
        return None
    try:
        return parse_pair_report(section.get("stdout"), agent)
    except PairReportError as exc:
        problems.append(f"pair supervisor status not understood ({agent} status --json): {exc}")
        return None


def _speculative(value: object) -> dict[str, Any] | None:
    """vllm_serve_speculative_config as the serve stage renders it; None when unset or empty."""
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) and value else None


def _text(value: object) -> str | None:
    return str(value).strip() or None if value is not None else None


def _known_faults(kernel: Mapping[str, Any], problems: list[str]) -> tuple[KnownFault, ...]:
    """The known-bad builds the node's host_kernel_info matched (and a read failure named)."""
    if kernel and not _bool(kernel.get("ok")):
        problems.append(f"kernel build: {kernel.get('msg') or 'not read'}")
    faults = kernel.get("faults")
    found: list[Any] = faults if isinstance(faults, list) else []
    return tuple(
        KnownFault(
            id=str(fault.get("id")),
            summary=str(fault.get("summary") or ""),
            evidence=str(fault.get("evidence") or ""),
            fix=str(fault.get("fix") or ""),
            sources=tuple(str(source) for source in fault.get("sources") or []),
        )
        for fault in found
        if isinstance(fault, Mapping)
    )


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def _bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def _int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return round(float(str(value).strip()))
        except ValueError:
            return None


def _why(section: Mapping[str, Any]) -> str:
    return str(section.get("msg") or "").strip().splitlines()[0] if section.get("msg") else "?"


def _gid(
    gid: Mapping[str, Any], problems: list[str]
) -> tuple[dict[str, str], dict[str, list[Mapping[str, Any]]]]:
    """(netdev -> rdma_dev, rdma_dev -> GID table) from roce_gid_info's rails.

    roce_gid_info also returns the tables when it fails (a rail without its RoCE v2 GID): those
    count, the rules judge them. A table that is empty was not read (a real port always holds its
    two default link-local GIDs), so it is left out rather than shown as a table without entries.
    """
    rdma_devs: dict[str, str] = {}
    tables: dict[str, list[Mapping[str, Any]]] = {}
    for rail in gid.get("rails") or []:
        if not isinstance(rail, Mapping):
            continue
        netdev, dev, table = rail.get("netdev"), rail.get("rdma_dev"), rail.get("table")
        if isinstance(dev, str) and dev:
            if isinstance(netdev, str):
                rdma_devs[netdev] = dev
            if isinstance(table, list) and table:
                tables[dev] = [e for e in table if isinstance(e, Mapping)]
    rails = [r for r in gid.get("rails") or [] if isinstance(r, Mapping)]
    if not gid.get("ok", False) and len(tables) < max(len(rails), 1):
        problems.append(f"GID tables not read: {_why(gid)}")
    return rdma_devs, tables


def _rails(
    raw: Mapping[str, Any], rdma_devs: Mapping[str, str], problems: list[str]
) -> tuple[RailEvidence, ...]:
    section = _section(raw, "netdev")
    netdevs = section.get("netdevs")
    if not section.get("ok", False) or not isinstance(netdevs, Mapping):
        problems.append(f"rails not read: {_why(section)}")
        return ()
    planned = [str(r["netdev"]) for r in raw.get("rails") or [] if isinstance(r, Mapping)]
    names = list(dict.fromkeys([*planned, *(str(n) for n in netdevs)]))
    rails = []
    for name in names:
        state = netdevs.get(name)
        if not isinstance(state, Mapping):
            continue
        if not state.get("present", False):
            rails.append(RailEvidence(name, present=False, rdma_dev=rdma_devs.get(name)))
            continue
        addresses = tuple(str(a) for a in state.get("addresses") or [])
        carrier = state.get("carrier")
        rails.append(
            RailEvidence(
                netdev=name,
                present=True,
                carrier=None if carrier is None else _bool(carrier),
                mtu=_int(state.get("mtu")),
                addresses=addresses,
                link_local=tuple(a for a in addresses if _link_local(a)),
                pcie_width=_int(state.get("pcie_width")),
                pcie_speed=str(state["pcie_speed"]) if state.get("pcie_speed") else None,
                rdma_dev=rdma_devs.get(name),
            )
        )
    return tuple(rails)


def _link_local(cidr: str) -> bool:
    try:
        return ipaddress.ip_interface(cidr).ip.is_link_local
    except ValueError:
        return False


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as `docker run --env-file` reads them: no quoting, # comments, blanks.

    A bare ``KEY`` (docker passes the caller's value through) has no value here and is skipped.
    """
    env: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if sep and key.strip():
            env[key.strip()] = value
    return env


def _env(section: Mapping[str, Any], problems: list[str]) -> dict[str, str] | None:
    path = section.get("path") or "the NCCL env file"
    if not section.get("ok", False):
        problems.append(f"no NCCL env file {path}: {_why(section)}")
        return None
    try:
        text = base64.b64decode(str(section.get("content_b64") or ""), validate=True)
        return parse_env_file(text.decode("utf-8", errors="replace"))
    except (binascii.Error, ValueError):
        problems.append(f"NCCL env file {path} could not be decoded")
        return None


def _containers(section: Mapping[str, Any], problems: list[str]) -> tuple[ContainerEvidence, ...]:
    name = str(section.get("name") or "gx10-vllm")
    if not section.get("ok", False):
        problems.append(f"container {name} not inspected: {_why(section)}")
        return ()
    if not _bool(section.get("exists", False)):
        return (ContainerEvidence(name, None, "missing", False, False),)
    state = section.get("state")
    labels = section.get("labels")
    status = state.get("Status") if isinstance(state, Mapping) else None
    rank = labels.get("gx10.rank") if isinstance(labels, Mapping) else None
    return (
        ContainerEvidence(
            name=name,
            rank=_int(rank),
            state=str(status or "unknown"),
            has_infiniband_device=_has_infiniband(section.get("devices")),
            memlock_unlimited=_memlock_unlimited(section.get("ulimits")),
            expects_infiniband=_bool(section.get("expects_infiniband", True)),
            expects_memlock_unlimited=_bool(section.get("expects_memlock_unlimited", True)),
            image=str(section.get("image") or "") or None,
        ),
    )


def _has_infiniband(devices: object) -> bool:
    """HostConfig.Devices: [{PathOnHost, PathInContainer, CgroupPermissions}, ...]."""
    for device in _mappings(devices):
        for key in ("PathInContainer", "PathOnHost"):
            path = str(device.get(key) or "").rstrip("/")
            if path == "/dev/infiniband" or path.startswith("/dev/infiniband/"):
                return True
    return False


def _memlock_unlimited(ulimits: object) -> bool:
    """HostConfig.Ulimits: [{Name: memlock, Soft: -1, Hard: -1}] for --ulimit memlock=-1."""
    return any(
        str(u.get("Name")) == "memlock" and _int(u.get("Soft")) == -1 and _int(u.get("Hard")) == -1
        for u in _mappings(ulimits)
    )


def _sequence(value: object) -> Sequence[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return value
    return []


def _mappings(value: object) -> Iterable[Mapping[str, Any]]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [item for item in value if isinstance(item, Mapping)]
    return []


def _bandwidth(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    found = {}
    for netdev, gbps in value.items():
        try:
            found[str(netdev)] = float(gbps)
        except (TypeError, ValueError):
            continue
    return found


def _float(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def _band(value: object) -> tuple[float, float] | None:
    """[low, high] Gb/s, or None when absent or malformed (the defaults apply then)."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        return None
    low, high = _float(value[0]), _float(value[1])
    if low is None or high is None or low > high:
        return None
    return (low, high)


def _clock_record(tool: Mapping[str, Any]) -> tuple[bool, int | None, str | None]:
    """(recorded, cap, session owner) from `gx10-gpu-clock show`, where the tool is installed
    and has applied a cap; (False, None, owner) when it has no record (then the cap is read off
    the GPU)."""
    if _int(tool.get("rc")) != 0:
        return False, None, None
    try:
        shown = json.loads(str(tool.get("stdout") or ""))
    except ValueError:
        return False, None, None
    if not isinstance(shown, Mapping):
        return False, None, None
    session = shown.get("session")
    owner = None
    if isinstance(session, Mapping):
        owner = f"{session.get('owner', 'unknown')} (pid {session.get('pid', '?')})"
    applied = shown.get("applied")
    if applied is None:
        return False, None, owner
    if str(applied).lower() == "unlocked":
        return True, None, owner
    cap = _int(applied)
    return (cap is not None), cap, owner


def _clock_cap(
    clocks: Mapping[str, Any], lock: Mapping[str, Any], problems: list[str]
) -> int | None:
    """The SM clock a lock (-lgc) holds the GPU at, or None when no lock shows.

    nvidia-smi has no query for the locked range; while a lock holds the clock down, the
    applications-clocks event reason is active and the current SM clock is the cap. An idle GPU
    runs below any cap, so a lock does not show then.
    """
    rc = _int(clocks.get("rc"))
    if rc is None:
        return None  # not gathered: the node was skipped, nothing to say
    if rc != 0:
        message = str(clocks.get("msg") or "").strip() or f"exit code {rc}"
        problems.append(f"GPU clock not read (nvidia-smi: {message})")
        return None
    first = (str(clocks.get("stdout") or "").strip().splitlines() or [""])[0]
    current = _int(first.split(",")[0]) if first else None
    reason = (str(lock.get("stdout") or "").strip().splitlines() or [""])[0].strip()
    locked = _int(lock.get("rc")) == 0 and reason.lower() == "active"
    return current if locked else None
