"""Diagnose the known faults of a GB10 cluster from evidence gathered on its nodes.

Pure Python: no Ansible. `Evidence` is what one node showed (rails, GID tables, the NCCL env file,
containers, measured bandwidth, clock cap, the pair supervisor's report, the head engine's
speculative-decoding counters); `diagnose` turns a list of them plus the cluster plan (`gx10_plan`,
from `gx10.cluster.validate_cluster`) into `Finding`s, each with the evidence and the fix. The
faults and their remedies are the ones in FIELD_NOTES sections 2 to 4, and the pair supervisor's
(roles/vllm_supervisor/README.md); the draft acceptance of speculative decoding is judged against
the model catalog's figure (section 1).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Literal, cast

from gx10._collection import load as module_utils
from gx10.doctor import engine_metrics
from gx10.doctor.engine_metrics import SpecDecodeCounters
from gx10.doctor.pair import PairReport

Severity = Literal["error", "warning"]
CLUSTER = "cluster"  # Finding.node of a finding about the cluster as a whole
ROCE_V2 = "RoCE v2"

# The codes, one per known fault; the CLI and tests refer to them.
NODE_UNREACHABLE = "NODE_UNREACHABLE"
RAIL_MISSING = "RAIL_MISSING"
RAILS_SAME_SUBNET = "RAILS_SAME_SUBNET"
RAIL_IP_MISSING = "RAIL_IP_MISSING"
RAIL_LINK_LOCAL = "RAIL_LINK_LOCAL"
GID_MISSING = "GID_MISSING"
GID_INDEX_MISMATCH = "GID_INDEX_MISMATCH"
GID_PINNED_LITERAL = "GID_PINNED_LITERAL"
GID_RAILS_DISAGREE = "GID_RAILS_DISAGREE"
GID_MOVED = "GID_MOVED"
SUPERVISION_TRIPPED = "SUPERVISION_TRIPPED"
BANDWIDTH_DEGRADED = "BANDWIDTH_DEGRADED"
BANDWIDTH_LOW = "BANDWIDTH_LOW"
PCIE_WIDTH_LOW = "PCIE_WIDTH_LOW"
MTU_MISMATCH = "MTU_MISMATCH"
CONTAINER_NO_INFINIBAND = "CONTAINER_NO_INFINIBAND"
CONTAINER_NO_MEMLOCK = "CONTAINER_NO_MEMLOCK"
WORKER_GONE = "WORKER_GONE"
HEAD_GONE = "HEAD_GONE"
CLOCK_CAP_LEFT = "CLOCK_CAP_LEFT"
EVIDENCE_INCOMPLETE = "EVIDENCE_INCOMPLETE"
KNOWN_BAD_BUILD = "KNOWN_BAD_BUILD"
SPEC_ACCEPTANCE_LOW = "SPEC_ACCEPTANCE_LOW"

_RERUN_NCCL = (
    "rerun the NCCL stage (`gx10 provision -i INV -p nccl.yml`): it resolves each node's index "
    "from its own GID table and rewrites /etc/gx10/nccl.env; then restart the serving containers "
    "(worker first, then head)"
)
_DISAGREE_FIX = (
    "a clean reboot rebuilds the GID tables (both rails come back at the same index), or set "
    "nccl_env_mode: auto (NCCL_IB_GID_INDEX unset, NCCL picks each device's RoCE v2 IPv4 GID)"
)
_RESTART_ORDER = (
    "stop the serving container on every node, then start it on the workers first and the head "
    "last (`gx10 provision -i INV -t serve`); the head waits for every rank at startup"
)


@dataclass(frozen=True)
class RailEvidence:
    """One rail netdev as a node shows it."""

    netdev: str
    present: bool = True
    carrier: bool | None = None
    mtu: int | None = None
    addresses: tuple[str, ...] = ()  # IPv4/IPv6 addresses as addr/prefix
    link_local: tuple[str, ...] = ()  # the 169.254/16 and fe80::/10 ones among them
    pcie_width: int | None = None  # negotiated PCIe link width of the CX-7 function
    pcie_speed: str | None = None  # e.g. "32.0 GT/s PCIe"
    rdma_dev: str | None = None


@dataclass(frozen=True)
class ContainerEvidence:
    """The serving container on a node."""

    name: str
    rank: int | None
    state: str  # docker's State.Status: running, exited, ...; "missing" when there is none
    has_infiniband_device: bool
    memlock_unlimited: bool
    # What the inventory configures the serve stage to give it (vllm_serve_devices and
    # vllm_serve_memlock); a deliberate opt-out is not a fault.
    expects_infiniband: bool = True
    expects_memlock_unlimited: bool = True
    image: str | None = None  # the image reference it runs (repository@sha256:...)


@dataclass(frozen=True)
class KnownFault:
    """A known-bad build the node matched (the collection's host_faults table)."""

    id: str
    summary: str
    evidence: str
    fix: str
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class BandwidthLink:
    """One measured link of the fabric role's report (``links``): the rail between two nodes,
    measured from ``node`` (the earlier in rank order) to ``peer`` at ``address`` (the peer's
    address on the rail). ``gbps`` None: the tool gave no result; ``min_gbps`` the threshold the
    fabric role judged it by."""

    rail: str
    netdev: str
    node: str
    peer: str
    address: str
    gbps: float | None
    min_gbps: float | None = None

    @property
    def ends(self) -> str:
        """``<rail> <node> -> <peer> <address>``, as the report's ``bad_links`` names it."""
        return f"{self.rail} {self.node} -> {self.peer} {self.address}"


@dataclass(frozen=True)
class Evidence:
    """What one node showed. Optional parts are None (or empty) when not gathered."""

    node: str
    reachable: bool = True
    rails: tuple[RailEvidence, ...] = ()
    # rdma_dev -> populated GID slots as roce_gid's GidEntry.as_dict() gives them
    gid_tables: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    env: Mapping[str, str] | None = None  # /etc/gx10/nccl.env as docker reads it
    gid_mode: str | None = None  # nccl_env_mode: pinned or auto
    containers: tuple[ContainerEvidence, ...] = ()
    bandwidth_gbps: Mapping[str, float] = field(default_factory=dict)  # netdev -> Gb/s
    # The measured links that end at this node (it is their ``peer``, or their ``node`` where the
    # peer gave no evidence), from a report that lists every pair (the fabric role's ``links``).
    bandwidth_links: tuple[BandwidthLink, ...] = ()
    # What the bandwidth is judged by (the inventory's fabric_min_rail_gbps and
    # fabric_degraded_band_gbps); None: fabric_rules' defaults (80, 8-25 Gb/s).
    bandwidth_min_gbps: float | None = None
    bandwidth_degraded_band: tuple[float, float] | None = None
    # The least PCIe link width (the inventory's fabric_min_pcie_width); None: fabric_rules' x4.
    pcie_min_width: int | None = None
    sm_clock_cap_mhz: int | None = None  # locked SM clock now; None: not locked
    sm_clock_policy_mhz: int | None = None  # the cap the policy wants; None: no cap
    # The cap as gx10-gpu-clock recorded it (exact), rather than read off a loaded GPU's clock
    # (quantized to the GPU's clock steps); and who holds the node's benchmark lock, if anyone.
    sm_clock_cap_recorded: bool = False
    clock_session: str | None = None
    # What could not be gathered, and why (a missing env file, docker not answering, ...); for
    # an unreachable node, why it did not answer.
    problems: tuple[str, ...] = ()
    endpoint: str | None = None  # the node's API base URL as the controller reaches it
    kernel_release: str | None = None  # uname -r
    known_faults: tuple[KnownFault, ...] = ()  # the known-bad builds it matched
    # The pair supervisor (roles/vllm_supervisor): whether its agent is installed, and its
    # `gx10-pair status` (None: not installed, or its status could not be read: see problems).
    supervisor_installed: bool = False
    pair: PairReport | None = None
    # The --speculative-config the serve stage renders (vllm_serve_speculative_config, e.g.
    # {method: dspark, num_speculative_tokens: 5}); None or empty: speculative decoding is off.
    speculative: Mapping[str, Any] | None = None
    # The head's speculative-decoding counters as its /metrics gave them to the controller
    # (engine_metrics.scrape), and where; None: not read (the reason is in problems) or the
    # server exports none.
    spec_decode: SpecDecodeCounters | None = None
    metrics_url: str | None = None

    @property
    def supervised(self) -> bool:
        """The node's agent runs: it started the rank, with the GID index it pinned then."""
        return self.pair is not None and self.pair.supervising

    def rail(self, netdev: str) -> RailEvidence | None:
        return next((rail for rail in self.rails if rail.netdev == netdev), None)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    node: str
    summary: str
    evidence: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


Rule = Callable[[Sequence[Evidence], Mapping[str, Any]], Iterable[Finding]]


def diagnose(evidences: Sequence[Evidence], plan: Mapping[str, Any]) -> list[Finding]:
    """Every finding, errors first, then by node and code."""
    findings = [finding for rule in RULES for finding in rule(evidences, plan)]
    order = {"error": 0, "warning": 1}
    return sorted(findings, key=lambda f: (order[f.severity], f.node, f.code))


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(finding.severity == "error" for finding in findings)


# --- helpers ---------------------------------------------------------------------------------


def _fabric() -> ModuleType:
    """The fabric judgments (thresholds, verdicts, remedies): the fabric role's, in the
    collection's module_utils/fabric_rules.py, one source for both."""
    return module_utils("fabric_rules")


def _reachable(evidences: Sequence[Evidence]) -> list[Evidence]:
    return [ev for ev in evidences if ev.reachable]


def _plan_rails(plan: Mapping[str, Any], node: str) -> list[Mapping[str, Any]]:
    host = plan.get("hosts", {}).get(node, {})
    return list(host.get("rails", []))


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_interface(cidr).network
    except ValueError:
        return None


def _v2_index(table: Sequence[Mapping[str, Any]], ipv4: str) -> int | None:
    return next(
        (int(e["index"]) for e in table if e.get("ipv4") == ipv4 and e.get("type") == ROCE_V2),
        None,
    )


def _slot(entry: Mapping[str, Any]) -> str:
    what = entry.get("ipv4") or ("link-local" if entry.get("link_local") else entry.get("gid"))
    return f"{entry.get('index')}:{what}/{'v2' if entry.get('type') == ROCE_V2 else 'v1'}"


def _show_table(dev: str, table: Sequence[Mapping[str, Any]]) -> str:
    slots = ", ".join(_slot(e) for e in table)
    return f"{dev} [{slots or 'empty'}]"


def _resolved(ev: Evidence, plan: Mapping[str, Any]) -> list[tuple[str, str, str, int | None]]:
    """(netdev, rdma_dev, address, RoCE v2 index or None) per planned rail with a known table."""
    found = []
    for planned in _plan_rails(plan, ev.node):
        rail = ev.rail(planned["netdev"])
        if rail is None or rail.rdma_dev is None or rail.rdma_dev not in ev.gid_tables:
            continue
        index = _v2_index(ev.gid_tables[rail.rdma_dev], planned["address"])
        found.append((rail.netdev, rail.rdma_dev, planned["address"], index))
    return found


def _pinned_index(ev: Evidence) -> int | None:
    text = (ev.env or {}).get("NCCL_IB_GID_INDEX")
    return int(text) if text is not None and text.strip().isdigit() else None


def _serving(ev: Evidence) -> bool:
    return ev.reachable and any(c.state == "running" for c in ev.containers)


# --- rules -----------------------------------------------------------------------------------


def rule_unreachable(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in evs:
        if not ev.reachable:
            yield Finding(
                NODE_UNREACHABLE,
                "error",
                ev.node,
                "node did not answer; nothing else could be checked on it",
                "; ".join(ev.problems) or "the evidence play could not reach the node",
                "check that the node is powered and on the management network "
                "(`ansible -m ping NODE`)",
            )


def rule_rail_missing(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        for planned in _plan_rails(plan, ev.node):
            rail = ev.rail(planned["netdev"])
            if rail is None or not rail.present:
                yield Finding(
                    RAIL_MISSING,
                    "error",
                    ev.node,
                    f"rail netdev {planned['netdev']} does not exist",
                    f"no {planned['netdev']} in /sys/class/net",
                    "check the CX-7 driver and cabling (`ip -br link`), or correct the netdev "
                    "names in gx10_rails",
                )


def rule_same_subnet(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        seen: list[tuple[str, str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
        clashes: list[str] = []
        for rail in ev.rails:
            for cidr in rail.addresses:
                net = _network(cidr)
                if net is None or cidr in rail.link_local:
                    continue
                for netdev, other, other_net in seen:
                    if netdev != rail.netdev and net.overlaps(other_net):
                        clashes.append(f"{netdev} {other} and {rail.netdev} {cidr}")
                seen.append((rail.netdev, cidr, net))
        if clashes:
            yield Finding(
                RAILS_SAME_SUBNET,
                "error",
                ev.node,
                "two rails have addresses in the same subnet",
                "; ".join(clashes),
                "give every rail its own subnet (gx10_rails) and rerun the network stage "
                "(`gx10 provision -i INV -t network`): on one subnet the kernel sends all traffic "
                "through one twin, so NCCL fails or runs at half bandwidth",
            )


def rule_rail_ip_missing(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        for planned in _plan_rails(plan, ev.node):
            rail = ev.rail(planned["netdev"])
            if rail is None or not rail.present or planned["cidr"] in rail.addresses:
                continue
            yield Finding(
                RAIL_IP_MISSING,
                "error",
                ev.node,
                f"rail {planned['netdev']} lacks its address {planned['cidr']}",
                f"{planned['netdev']} has {', '.join(rail.addresses) or 'no address'}",
                "rerun the network stage (`gx10 provision -i INV -t network`); if it comes back "
                "without it, read `journalctl -u NetworkManager -u systemd-networkd`",
            )


def rule_link_local(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        for rail in ev.rails:
            if rail.link_local:
                yield Finding(
                    RAIL_LINK_LOCAL,
                    "error",
                    ev.node,
                    f"link-local addresses on rail {rail.netdev}",
                    f"{rail.netdev} has {', '.join(rail.link_local)}",
                    "remove them (netplan `link-local: []`, no avahi-autoipd or NetworkManager "
                    "ipv4ll on the rail; the network stage writes that): they take GID slots, move "
                    "the indices, and NCCL bootstrap has picked them",
                )


def rule_gid(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """GID_MISSING, GID_RAILS_DISAGREE (pinned mode) and GID_INDEX_MISMATCH, per node.

    GID_INDEX_MISMATCH is nccl.env's pin against the table where that pin is for the next start:
    on a node serving with it, the running ranks' index moved (GID_MOVED says so, with its fix),
    and a supervised node's rank pins its own index at every start (nccl.env's is a default).
    """
    for ev in _reachable(evs):
        resolved = _resolved(ev, plan)
        tables = "; ".join(
            _show_table(dev, ev.gid_tables[dev]) for _netdev, dev, _addr, _index in resolved
        )
        missing = [(netdev, dev, addr) for netdev, dev, addr, index in resolved if index is None]
        for netdev, dev, addr in missing:
            yield Finding(
                GID_MISSING,
                "error",
                ev.node,
                f"{dev} ({netdev}) has no RoCE v2 GID for {addr}",
                _show_table(dev, ev.gid_tables[dev]),
                "the kernel adds it when the address is on the netdev and the link is up: fix the "
                "rail address first (RAIL_IP_MISSING), then check `rdma link show`",
            )
        indices = {index for _n, _d, _a, index in resolved if index is not None}
        pinned = ev.gid_mode == "pinned" or _pinned_index(ev) is not None
        if pinned and len(indices) > 1:
            yield Finding(
                GID_RAILS_DISAGREE,
                "error",
                ev.node,
                "the rails' RoCE v2 GID indices differ; one pinned NCCL_IB_GID_INDEX cannot serve "
                "both HCAs",
                tables,
                _DISAGREE_FIX,
            )
        index = _pinned_index(ev)
        wrong = [(n, d, a, i) for n, d, a, i in resolved if i is not None and i != index]
        if index is not None and wrong and not ev.supervised and not _serving(ev):
            yield Finding(
                GID_INDEX_MISMATCH,
                "error",
                ev.node,
                f"nccl.env pins NCCL_IB_GID_INDEX={index}, which is not this node's RoCE v2 IPv4 "
                f"entry ({', '.join(f'{d} has {a} at {i}' for _n, d, a, i in wrong)})",
                tables,
                _RERUN_NCCL,
            )


def rule_pinned_literal(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    # A supervised node's rank runs with the index its agent resolved, not nccl.env's literal.
    nodes = [ev for ev in _reachable(evs) if _pinned_index(ev) is not None and not ev.supervised]
    pins = {_pinned_index(ev) for ev in nodes}
    if len(nodes) < 2 or len(pins) != 1:
        return
    actual = {
        ev.node: sorted({i for _n, _d, _a, i in _resolved(ev, plan) if i is not None})
        for ev in nodes
    }
    if len({tuple(v) for v in actual.values() if v}) > 1:
        yield Finding(
            GID_PINNED_LITERAL,
            "error",
            CLUSTER,
            f"every node pins NCCL_IB_GID_INDEX={pins.pop()} while their GID tables differ: one "
            "literal for all nodes wedges NCCL ('unhandled system error')",
            "; ".join(f"{node} resolves {v}" for node, v in sorted(actual.items())),
            "do not set NCCL_IB_GID_INDEX by hand (nccl_env_extra, docker -e, a recipe's "
            f"default); {_RERUN_NCCL}",
        )


def rule_gid_moved(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """GID_MOVED: a rail's RoCE v2 GID index is not the one the running ranks started with.

    The TP handshake of a rank that starts against a moved index hangs (a peer recipe saw 3 -> 4
    within 30 minutes of serving). Supervised, the started-with index is the one the agent pinned
    at this rank's start (its status), and the agent restarts the pair on its own; otherwise it is
    nccl.env's, and nothing restarts the ranks until the nccl and serve stages run again.
    """
    for ev in _reachable(evs):
        if ev.pair is not None and ev.supervised:
            moved = ev.pair.moved
            if not moved or not (ev.pair.rank_active or _serving(ev)):
                continue
            yield Finding(
                GID_MOVED,
                "warning",
                ev.node,
                "the RoCE v2 GID index moved under the running rank: "
                + ", ".join(f"{g.netdev} {g.pinned} -> {_index_text(g.current)}" for g in moved),
                f"pinned at this rank's start (generation {ev.pair.generation}): "
                + ", ".join(f"{g.netdev} {g.pinned}" for g in ev.pair.gid)
                + "; the node's table now: "
                + ", ".join(f"{g.netdev} {_index_text(g.current)}" for g in ev.pair.gid)
                + f"; agent {ev.pair.state}",
                "nothing to do: the pair supervisor sees the move on its next two checks (every "
                "heartbeat) and restarts "
                + (
                    "the pair, worker first,"
                    if _rank_count(plan) <= 2
                    else f"all {_rank_count(plan)} ranks, the workers first,"
                )
                + " each rank resolving its index again (last restart `gid-changed:...` in "
                "`gx10 status`); if this finding stays, read `journalctl -u gx10-pair` on the node",
            )
            continue
        index = _pinned_index(ev)
        if index is None or not _serving(ev):
            continue  # auto mode (NCCL resolved its own at init), or no rank runs with it
        moved_rails = [
            (netdev, dev, i) for netdev, dev, _a, i in _resolved(ev, plan) if i not in (None, index)
        ]
        if moved_rails:
            yield Finding(
                GID_MOVED,
                "error",
                ev.node,
                f"the RoCE v2 GID index moved under the running rank, started with "
                f"NCCL_IB_GID_INDEX={index} from nccl.env: "
                + ", ".join(f"{netdev} {index} -> {i}" for netdev, _dev, i in moved_rails),
                "; ".join(_show_table(dev, ev.gid_tables[dev]) for _n, dev, _i in moved_rails),
                "not supervised, so nothing restarts the ranks: rerun the NCCL stage (`gx10 "
                "provision -i INV -p nccl.yml`, each node's index from its own table into "
                "/etc/gx10/nccl.env), then the serve stage (`-p serve.yml`), which restarts "
                + (
                    "both ranks, worker first;"
                    if _rank_count(plan) <= 2
                    else f"all {_rank_count(plan)} ranks, the workers first;"
                )
                + " vllm_supervisor_enabled: true does this by itself",
            )


def _index_text(index: int | None) -> str:
    return "none" if index is None else str(index)


def _bandwidth_finding(
    node: str,
    what: str,
    *,
    gbps: float,
    minimum: float,
    band: tuple[float, float],
    evidence: tuple[str, str],
) -> Finding | None:
    """A rail or link (`what`) measured at `gbps` against `minimum`: the finding, if any, with
    `evidence` (for the stuck-state band, for a low figure)."""
    fabric = _fabric()
    classify = cast(Callable[[float, float, tuple[float, float]], str], fabric.classify_bandwidth)
    status = classify(gbps, minimum, band)
    low, high = band
    if status == "degraded_known":
        return Finding(
            BANDWIDTH_DEGRADED,
            "error",
            node,
            f"{what} measured {gbps:.2f} Gb/s, in the {low:g}-{high:g} Gb/s "
            "band of the known ConnectX-7 stuck state",
            evidence[0],
            cast(str, fabric.DEGRADED_REMEDY),
        )
    if status == "low":
        return Finding(
            BANDWIDTH_LOW,
            "error",
            node,
            f"{what} runs at {gbps:.2f} Gb/s, below {minimum:g}",
            evidence[1],
            cast(str, fabric.LOW_REMEDY),
        )
    return None


def _band(ev: Evidence) -> tuple[float, float]:
    return ev.bandwidth_degraded_band or cast(tuple[float, float], _fabric().DEGRADED_BAND_GBPS)


def rule_bandwidth(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        minimum = ev.bandwidth_min_gbps
        if minimum is None:
            minimum = cast(float, _fabric().PER_RAIL_MIN_GBPS)
        for netdev, gbps in sorted(ev.bandwidth_gbps.items()):
            measured = f"{netdev}: {gbps:.2f} Gb/s measured"
            evidence = (f"{measured}, at least {minimum:g} expected", measured)
            finding = _bandwidth_finding(
                ev.node,
                f"rail {netdev}",
                gbps=gbps,
                minimum=minimum,
                band=_band(ev),
                evidence=evidence,
            )
            if finding is not None:
                yield finding


def rule_bandwidth_links(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """Every measured link of a report that lists them (the fabric role's ``links``: every node
    pair and rail on a switch), named by both ends and the rail as the report's ``bad_links``
    names it, on the node the link is attached to (its peer end). A link without a result is
    incomplete evidence (collect puts it in the node's problems), not judged here. Judged with
    the threshold the fabric role judged it by, else the node's."""
    for ev in evs:
        for link in ev.bandwidth_links:
            if link.gbps is None:
                continue
            minimum = link.min_gbps
            if minimum is None:
                minimum = ev.bandwidth_min_gbps
            if minimum is None:
                minimum = cast(float, _fabric().PER_RAIL_MIN_GBPS)
            measured = f"{link.ends}: {link.gbps:.2f} Gb/s < {minimum:g} Gb/s ({link.netdev})"
            finding = _bandwidth_finding(
                ev.node,
                link.ends,
                gbps=link.gbps,
                minimum=minimum,
                band=_band(ev),
                evidence=(measured, measured),
            )
            if finding is not None:
                yield finding


def rule_pcie_width(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    fabric = _fabric()
    wide_enough = cast(Callable[[int, int], bool], fabric.pcie_width_ok)
    for ev in _reachable(evs):
        minimum = ev.pcie_min_width
        if minimum is None:
            minimum = cast(int, fabric.MIN_PCIE_WIDTH)
        for rail in ev.rails:
            if rail.pcie_width is not None and not wide_enough(rail.pcie_width, minimum):
                yield Finding(
                    PCIE_WIDTH_LOW,
                    "error",
                    ev.node,
                    f"the CX-7 function of {rail.netdev} negotiated PCIe x{rail.pcie_width}, "
                    f"below x{minimum}",
                    f"{rail.netdev}: current_link_width {rail.pcie_width}"
                    + (f", current_link_speed {rail.pcie_speed}" if rail.pcie_speed else ""),
                    "early GX10 BIOS trains the second twin at Gen5 x2: update the BIOS, then "
                    "power-cycle the node and check `lspci -vv` LnkSta again",
                )


def rule_mtu(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    want = plan.get("mtu")
    planned = cast(Callable[[int | None, int], bool], _fabric().mtu_ok)
    reachable = _reachable(evs)
    for ev in reachable:
        for rail in ev.rails:
            if rail.mtu is None or not rail.present:
                continue
            peers = [
                f"{other.node} {peer.mtu}"
                for other in reachable
                if other is not ev and (peer := other.rail(rail.netdev)) is not None
            ]
            peer_mtus = {
                peer.mtu
                for other in reachable
                if other is not ev and (peer := other.rail(rail.netdev)) is not None
            }
            # Against the plan when it has an MTU (then only the wrong end is reported), else
            # between the ends of the rail.
            if want is not None:
                wrong = not planned(rail.mtu, int(want))
            else:
                wrong = bool(peer_mtus - {None, rail.mtu})
            if wrong:
                yield Finding(
                    MTU_MISMATCH,
                    "error",
                    ev.node,
                    f"rail {rail.netdev} has MTU {rail.mtu}, the plan says {want}"
                    if want is not None
                    else f"rail {rail.netdev} has MTU {rail.mtu}, its peer differs",
                    f"{ev.node} {rail.mtu}; " + ("; ".join(peers) or "no peer seen"),
                    "rerun the network stage (`gx10 provision -i INV -t network`) so both ends "
                    f"carry MTU {want}; a smaller MTU on one end drops jumbo frames silently",
                )


def rule_containers(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        for c in ev.containers:
            if c.state != "running":
                continue
            if c.expects_infiniband and not c.has_infiniband_device:
                yield Finding(
                    CONTAINER_NO_INFINIBAND,
                    "error",
                    ev.node,
                    f"container {c.name} has no /dev/infiniband",
                    f"{c.name}: HostConfig.Devices lacks /dev/infiniband",
                    "recreate it with `--device /dev/infiniband` (the serve stage does): without "
                    "it NCCL silently falls back to sockets",
                )
            if c.expects_memlock_unlimited and not c.memlock_unlimited:
                yield Finding(
                    CONTAINER_NO_MEMLOCK,
                    "error",
                    ev.node,
                    f"container {c.name} has a memlock limit",
                    f"{c.name}: Ulimits has no memlock=-1",
                    "recreate it with `--ulimit memlock=-1` (the serve stage does): otherwise "
                    "ibv_reg_mr fails with ENOMEM",
                )


def rule_peer_gone(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    by_node = {ev.node: ev for ev in evs}
    head = str(plan.get("head", ""))
    workers = [str(w) for w in plan.get("workers", [])]
    if head not in by_node:
        return
    head_up = _serving(by_node[head])
    running: list[str] = []
    for worker in workers:
        ev = by_node.get(worker)
        if ev is None:
            continue
        worker_up = _serving(ev)
        if head_up and not worker_up:
            yield Finding(
                WORKER_GONE,
                "error",
                worker,
                f"the head {head} serves but worker {worker} has no running container",
                _container_states(ev),
                "the tensor-parallel group is broken and requests hang or fail: " + _RESTART_ORDER,
            )
        if worker_up and not head_up:
            running.append(worker)
    if running:
        # One finding for the head, naming every worker left waiting for it.
        many = len(running) > 1
        yield Finding(
            HEAD_GONE,
            "error",
            head,
            f"worker{'s' if many else ''} {', '.join(running)} run{'' if many else 's'} but the "
            f"head {head} has no running container",
            _container_states(by_node[head]),
            f"the worker{'s wait' if many else ' waits'} for a head that is gone: "
            + _RESTART_ORDER,
        )


def rule_supervision_tripped(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """SUPERVISION_TRIPPED: the head's breaker is open, so every rank stays stopped.

    The breaker is the head's (one for the whole group, however many nodes): its own report, or
    where it gave none, a worker's copy of it.
    """
    reports = [ev.pair for ev in _reachable(evs) if ev.pair is not None]
    head = next((p for p in reports if p.role == "head"), None)
    report = head or next((p for p in reports if p.breaker.state == "open"), None)
    if report is None or report.breaker.state != "open":
        return
    node = report.node if report.role == "head" else (report.peer or str(plan.get("head", "")))
    seen = "" if report.role == "head" else f" (as {report.node} last heard from its head)"
    last = report.last_restart
    agent = (head.agent if head else None) or report.agent or "gx10-pair"
    ranks = _rank_count(plan)
    yield Finding(
        SUPERVISION_TRIPPED,
        "error",
        node,
        "the pair supervisor's breaker is open: "
        + ("both ranks are" if ranks <= 2 else f"all {ranks} ranks are")
        + " stopped and nothing starts them again, across reboots, until it is reset",
        f"breaker: {report.breaker.reason or 'no reason recorded'}{seen}; "
        f"{_count(report.restarts_in_window)} restart(s) in the window"
        + (f"; last: {last.reason}" if last else ""),
        "read why the starts failed (`journalctl -u gx10-pair -u gx10-vllm-rank` on "
        + ("both nodes" if ranks <= 2 else "every node")
        + ", the reason above), fix the config it names, then re-run the serve stage "
        f"(`gx10 provision -i INV -p serve.yml`: it rewrites the config and resets the breaker), "
        f"or, for a fix made on the nodes, run `{agent} reset` on the head",
    )


def _rank_count(plan: Mapping[str, Any]) -> int:
    """How many ranks the plan has (its nodes; else the head and its workers)."""
    nodes = plan.get("nodes")
    if isinstance(nodes, Sequence) and nodes:
        return len(nodes)
    return 1 + len(plan.get("workers") or [])


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def _container_states(ev: Evidence) -> str:
    if not ev.reachable:
        return f"{ev.node} unreachable"
    return ", ".join(f"{c.name} {c.state}" for c in ev.containers) or "no serving container"


# A cap read off a loaded GPU's clock is quantized (GB10: 6.5 MHz steps, truncated) and jitters.
CLOCK_TOLERANCE_MHZ = 13


def rule_clock_cap(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        cap, policy = ev.sm_clock_cap_mhz, ev.sm_clock_policy_mhz
        tolerance = 0 if ev.sm_clock_cap_recorded else CLOCK_TOLERANCE_MHZ
        if cap == policy or (
            cap is not None and policy is not None and abs(cap - policy) <= tolerance
        ):
            continue
        now = f"{cap} MHz" if cap is not None else "no cap"
        wanted = f"{policy} MHz" if policy is not None else "no cap (unlocked)"
        how = "as gx10-gpu-clock recorded it" if ev.sm_clock_cap_recorded else "read under load"
        if ev.clock_session:
            yield Finding(
                CLOCK_CAP_LEFT,
                "warning",
                ev.node,
                f"a benchmark holds the GPU clock at {now} (its sweep point); it restores the "
                "policy when it ends",
                f"session: {ev.clock_session}; policy {wanted}",
                "nothing to do while it runs; if no benchmark is running, stop the session's "
                "process on the node and it restores the cap",
            )
        elif cap is not None:
            yield Finding(
                CLOCK_CAP_LEFT,
                "warning",
                ev.node,
                f"the GPU SM clock is locked at {cap} MHz, left behind by a benchmark or test",
                f"locked {now} ({how}), policy {wanted}",
                "re-apply the policy: `ansible-playbook playbooks/site.yml --tags clock` "
                "(or on the node `gx10-gpu-clock apply`)",
            )
        elif ev.sm_clock_cap_recorded:
            yield Finding(
                CLOCK_CAP_LEFT,
                "warning",
                ev.node,
                f"the GPU runs without the policy's {policy} MHz cap (reset by a test or tool)",
                f"applied: no cap ({how}), policy {wanted}",
                "re-apply the policy: `ansible-playbook playbooks/site.yml --tags clock` "
                "(or on the node `gx10-gpu-clock apply`)",
            )


def rule_evidence_incomplete(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    for ev in _reachable(evs):
        if ev.problems:
            yield Finding(
                EVIDENCE_INCOMPLETE,
                "warning",
                ev.node,
                "some evidence could not be gathered; the checks that need it were skipped",
                "; ".join(ev.problems),
                "fix what the evidence names (a stage not run yet, docker or nvidia-smi missing, "
                "no RDMA device), then run `gx10 doctor` again",
            )


def rule_known_bad_build(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """A node on a build of the known-bad table (the same judgment preflight refuses with)."""
    for ev in _reachable(evs):
        for fault in ev.known_faults:
            yield Finding(
                KNOWN_BAD_BUILD,
                "error",
                ev.node,
                f"known-bad build ({fault.id}): {fault.summary}",
                fault.evidence,
                f"{fault.fix} (reports: {', '.join(fault.sources)})",
            )


_SPEC_FIX = (
    "the draft is not doing its work, so decode is slower than it should be, with no error: "
    "check that the checkpoint's draft (MTP) weights are all there and load (the model stage "
    "verifies every file against the manifest: `gx10 provision -i INV -p model.yml`; the head's "
    "log names the speculative config and the draft it loaded), that "
    "--speculative-config is the profile's (vllm_serve_speculative_config: {spec}), and that the "
    "image is the profile's (vllm_image; an image without this draft method for this checkpoint "
    "drafts badly); then restart the pair (`gx10 provision -i INV -t serve`)"
)


def rule_spec_acceptance(evs: Sequence[Evidence], plan: Mapping[str, Any]) -> Iterable[Finding]:
    """A draft acceptance far below the catalog's figure for the configured draft (silent below
    MIN_DRAFT_TOKENS proposed tokens, when not measured, or without a figure)."""
    for ev in _reachable(evs):
        counters = ev.spec_decode
        expected = engine_metrics.expected_bands(ev.speculative)
        if counters is None or expected is None:
            continue
        verdict = engine_metrics.judge(counters, expected)
        rate = counters.acceptance
        if verdict not in ("warning", "error") or rate is None:
            continue
        k = expected.num_speculative_tokens
        per_step = counters.mean_acceptance_length or 1.0
        positions = ", ".join(f"{p:.2f}" for p in counters.position_rates()) or "not exported"
        served_k = counters.tokens_per_draft
        k_note = (
            f"; the server drafts {served_k:g} tokens per step, the inventory's config {k}"
            if served_k is not None and abs(served_k - k) > 1e-6
            else ""
        )
        config = ", ".join(f"{key} {value}" for key, value in (ev.speculative or {}).items())
        yield Finding(
            SPEC_ACCEPTANCE_LOW,
            verdict,
            ev.node,
            f"speculative decoding accepts {rate:.1%} of its draft tokens, expected "
            f"{expected.low:.0%}-{expected.high:.0%}: a decode step yields {per_step:.2f} tokens "
            f"instead of {1 + k * expected.low:.2f}-{1 + k * expected.high:.2f}",
            f"{engine_metrics.ACCEPTED} {counters.accepted_tokens:.0f} / "
            f"{engine_metrics.DRAFT_TOKENS} {counters.draft_tokens:.0f} = {rate:.3f} over "
            f"{engine_metrics.DRAFTS} {counters.drafts:.0f}{k_note}; accepted per position "
            f"{positions} (from {ev.metrics_url or 'the head'}); {expected.describe()}",
            _SPEC_FIX.format(spec=config or "unset"),
        )


RULES: tuple[Rule, ...] = (
    rule_unreachable,
    rule_rail_missing,
    rule_same_subnet,
    rule_rail_ip_missing,
    rule_link_local,
    rule_gid,
    rule_pinned_literal,
    rule_gid_moved,
    rule_bandwidth,
    rule_bandwidth_links,
    rule_pcie_width,
    rule_mtu,
    rule_containers,
    rule_peer_gone,
    rule_supervision_tripped,
    rule_clock_cap,
    rule_known_bad_build,
    rule_spec_acceptance,
    rule_evidence_incomplete,
)
