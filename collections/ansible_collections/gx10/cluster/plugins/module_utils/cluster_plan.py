# SPDX-License-Identifier: Apache-2.0
"""Validate the cluster inventory and compute the rail plan, on the controller.

Pure Python (standard library only) so it can be unit tested without Ansible and shared by the
``gx10.cluster.validate_cluster`` action plugin and the ``gx10.cluster.rail_plan`` filter.

Inputs are the inventory ``groups`` (only ``head`` and ``workers`` are read) and per-host variables
(``hostvars``; only the variables in ``NODE_VARS`` are read, and only for cluster nodes). A variable
that is absent or ``None`` takes its default, as with an Ansible argument spec.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gx10.cluster.plugins.module_utils import (
    memory_guard,
    pair_config,
    serve_overlay,
    serve_plan,
)
from ansible_collections.gx10.cluster.plugins.module_utils.host_faults import (
    KNOWN_FAULTS,
    unknown_ids,
)

HEAD_GROUP = "head"
WORKERS_GROUP = "workers"

DEFAULT_RAILS: tuple[dict[str, str], ...] = (
    {"name": "rail0", "netdev": "enp1s0f0np0", "subnet": "192.168.100.0/24"},
    {"name": "rail1", "netdev": "enP2p1s0f0np0", "subnet": "192.168.101.0/24"},
)
DEFAULT_MTU = 9000
MTU_MIN = 1280
MTU_MAX = 9216
# Head gets 10, workers 11, 12, ... in inventory order.
FIRST_NODE_ID = 10
# A /31 or /32 leaves no host address besides the network and broadcast ones.
MAX_PREFIX = 30

RAIL_KEYS = ("name", "netdev", "subnet")
OPTIONAL_RAIL_KEYS = ("addresses",)
# Where the checkpoint is on every node: the model stage fetches it there, preflight checks the
# disk there, the serve stage mounts it (the same path inside the container) as vLLM's --model.
MODEL_DIR_VAR = "gx10_model_dir"
DEFAULT_MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"
# Whether the cluster supervises itself on its nodes (the vllm_supervisor role: the head's agent
# and every worker's, for two nodes or N); the plan carries it
# as `supervised`, which the serve stage and stop.yml follow.
SUPERVISED_VAR = "vllm_supervisor_enabled"
DEFAULT_SUPERVISED = False
# How the rails are cabled (docs/TOPOLOGY.md). direct: two nodes, one cable per rail, each rail a
# two-host link. switch: every node's rail k on the switch's subnet k, any number of nodes >= 2.
# The plan carries it as `topology`.
TOPOLOGY_VAR = "gx10_topology"
TOPOLOGIES = ("direct", "switch")
DEFAULT_TOPOLOGY = "direct"
DIRECT_MAX_NODES = 2
# Cluster-wide variables: every node must see the same value (why, per variable).
# The serve stage's runtime fixes (module_utils/serve_overlay.py): checked here, on the controller,
# with the replacement files' hashes, before any node changes.
OVERLAY_VAR = serve_overlay.OVERLAY_VAR
CLUSTER_VARS = (
    "gx10_rails",
    "gx10_rail_mtu",
    MODEL_DIR_VAR,
    SUPERVISED_VAR,
    OVERLAY_VAR,
    TOPOLOGY_VAR,
)
_CLUSTER_WHY = {
    "gx10_rails": "both ends of every link must agree",
    "gx10_rail_mtu": "both ends of every link must agree",
    MODEL_DIR_VAR: (
        "every rank loads the checkpoint from the same --model path and the workers copy the "
        "head's files into it"
    ),
    SUPERVISED_VAR: "the agents of the head and its workers supervise them together",
    OVERLAY_VAR: "every rank of the pair must run the same code",
    TOPOLOGY_VAR: "every node's rails are cabled the same way, to one another or to one switch",
}
# The GPU clock policy (the gpu_clock role's inputs) is checked here too, so a bad value stops the
# run before any node changes.
CLOCK_VARS = ("gpu_clock_sm_mhz", "gpu_clock_min_mhz")
# Known-bad builds a node's inventory has accepted (the preflight role's input), checked here so a
# typo (which would accept nothing) stops the run before any node changes.
FAULTS_IGNORE_VAR = "preflight_known_faults_ignore"
# Per node: rail netdev -> RDMA device, where sysfs does not map it (the plan's rails carry it).
RDMA_DEVICES_VAR = "gx10_rdma_devices"
# The API gateway (the api_gateway role): a reverse proxy on the head that checks per-user keys in
# front of the engine, which then listens on loopback only. Read from the head's variables; the
# plan carries it as `gateway`, which the serve stage, the smoke stage and `gx10 keys` follow.
GATEWAY_VAR = "gx10_gateway_enabled"
GATEWAY_ADDRESS_VAR = "gx10_gateway_address"
SERVE_PORT_VAR = "gx10_serve_port"
ENGINE_PORT_VAR = "gx10_gateway_engine_port"
TLS_CERT_VAR = "gx10_gateway_tls_cert"
TLS_KEY_VAR = "gx10_gateway_tls_key"
# Read only as set or not (select_node_vars never copies its value): the pipeline's own checks
# reach the engine through the gateway with it.
SERVICE_KEY_VAR = "vllm_serve_api_key"
# Where `gx10 keys init -i INVENTORY` writes the service key (0600, in a directory git ignores);
# inventories/gx10 reads it from there with a file lookup.
SERVICE_KEY_FILE = ".secrets/service.key"
SERVICE_KEY_LOOKUP = (
    f"{{{{ lookup('file', inventory_dir ~ '/{SERVICE_KEY_FILE}', errors='ignore') | "
    "default('', true) }}"
)
# Without the gateway the engine answers on every address of the head, and vLLM's own --api-key
# guards /v1/* only (/tokenize, /detokenize, /pooling, /invocations, ... answer anyone: field
# reports in MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark's changelog, 2026-08-21 and 09-08).
# Validation refuses that unless the inventory says the network is private and trusted.
ALLOW_UNAUTHENTICATED_VAR = "gx10_allow_unauthenticated"
VLLM_KEYLESS_ROUTES = ("/tokenize", "/detokenize", "/pooling", "/invocations")
DEFAULT_GATEWAY_ADDRESS = "0.0.0.0"
DEFAULT_SERVE_PORT = 8000
DEFAULT_ENGINE_PORT = 8001
ENGINE_LOOPBACK = "127.0.0.1"
GATEWAY_VARS = (
    GATEWAY_VAR,
    GATEWAY_ADDRESS_VAR,
    SERVE_PORT_VAR,
    ENGINE_PORT_VAR,
    TLS_CERT_VAR,
    TLS_KEY_VAR,
    SERVICE_KEY_VAR,
    ALLOW_UNAUTHENTICATED_VAR,
)
# The smoke stage's tool-call battery (`gx10 smoke --battery`), read from the head: whether it
# runs, and which of its cases (unset or []: all). The names are gx10.battery.CASES (a unit test
# keeps the two lists equal; the collection imports nothing from gx10).
SMOKE_BATTERY_VAR = "gx10_smoke_battery"
SMOKE_BATTERY_CASES_VAR = "gx10_smoke_battery_cases"
# The smoke check's tool_choice (`gx10 smoke --tool-choice`): auto, or required for a model that
# never chooses a call by itself (the lab engine's random weights).
SMOKE_TOOL_CHOICE_VAR = "gx10_smoke_tool_choice"
SMOKE_TOOL_CHOICES = ("auto", "required")
SMOKE_BATTERY_CASES = (
    "parallel",
    "nested",
    "long-argument",
    "stream",
    "tool-choice",
    "reasoning",
    "agent-loop",
    "messages",
)
# The metrics stage (the metrics_exporter role) per node: whether it runs, node exporter's port,
# and how often the GPU telemetry is read; checked here so a typo stops the run before any change.
METRICS_ENABLED_VAR = "metrics_exporter_enabled"
METRICS_PORT_VAR = "metrics_exporter_port"
METRICS_INTERVAL_VAR = "metrics_exporter_gpu_interval"
METRICS_VARS = (METRICS_ENABLED_VAR, METRICS_PORT_VAR, METRICS_INTERVAL_VAR)
# Where the controller reaches a node's API (the smoke stage, gx10 doctor, status and bench):
# the first of these that is set, else the inventory name.
API_HOST_VARS = ("gx10_api_host", "ansible_host")
NODE_VARS = (
    *CLUSTER_VARS,
    *API_HOST_VARS,
    "gx10_node_id",
    "gx10_mgmt_interface",
    RDMA_DEVICES_VAR,
    *CLOCK_VARS,
    FAULTS_IGNORE_VAR,
    *(pair_config.variable(key) for key in pair_config.TIMINGS),
    *memory_guard.variables(),
    *GATEWAY_VARS,
    SMOKE_BATTERY_VAR,
    SMOKE_BATTERY_CASES_VAR,
    SMOKE_TOOL_CHOICE_VAR,
    # The serving profile, its overrides and the memory budget's inputs (module_utils/serve_plan).
    *serve_plan.NODE_VARS,
    *METRICS_VARS,
)
# A no-fragment ping payload of MTU - 28 (IPv4 and ICMP headers) fills one frame exactly.
IPV4_ICMP_HEADERS = 28
DEFAULT_CLOCK_MIN_MHZ = 208
CLOCK_MAX_MHZ = 5000

_SAME_SUBNET_WHY = (
    "on one subnet the kernel routes all traffic through one twin, so NCCL fails or runs at half "
    "bandwidth"
)
_EXAMPLE_RAILS = (
    "[{name: rail0, netdev: enp1s0f0np0, subnet: 192.168.100.0/24}, "
    "{name: rail1, netdev: enP2p1s0f0np0, subnet: 192.168.101.0/24}]"
)

IPv4Network = ipaddress.IPv4Network
IPv4Address = ipaddress.IPv4Address


class ClusterPlanError(ValueError):
    """The inventory is invalid; ``errors`` lists every problem found."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(format_errors(self.errors))


def format_errors(errors: Sequence[str]) -> str:
    """Render errors as the multi-line text shown to the operator."""
    noun = "problem" if len(errors) == 1 else "problems"
    lines = [f"Inventory validation failed ({len(errors)} {noun}):"]
    lines.extend(f" - {error}" for error in errors)
    return "\n".join(lines)


def cluster_nodes(groups: Mapping[str, Any]) -> list[str]:
    """Head host(s) then workers, in inventory order, without duplicates."""
    nodes: list[str] = []
    for host in [*_group(groups, HEAD_GROUP), *_group(groups, WORKERS_GROUP)]:
        if host not in nodes:
            nodes.append(host)
    return nodes


def select_node_vars(
    groups: Mapping[str, Any], hostvars: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Copy only the variables this module reads, for cluster nodes only.

    Ansible's ``hostvars`` templates a variable when it is read; reading only ``NODE_VARS`` keeps an
    unrelated broken variable on some host from failing the validation.
    """
    selected: dict[str, dict[str, Any]] = {}
    for host in cluster_nodes(groups):
        # Ansible's HostVars returns an undefined marker, not a KeyError, for unknown hosts.
        host_vars = hostvars.get(host)
        values: dict[str, Any] = {}
        if isinstance(host_vars, Mapping):
            for name in NODE_VARS:
                if name in host_vars:
                    values[name] = host_vars[name]
        if SERVICE_KEY_VAR in values:  # a secret: only whether it is set leaves here
            values[SERVICE_KEY_VAR] = _is_set(values[SERVICE_KEY_VAR])
        selected[host] = values
    return selected


def validate_cluster(
    groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Return every problem in the inventory (empty list: valid)."""
    return _analyse(groups, hostvars).errors


def build_plan(
    groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Return the cluster plan (JSON-serialisable); raise ClusterPlanError if invalid."""
    analysis = _analyse(groups, hostvars)
    if analysis.errors:
        raise ClusterPlanError(analysis.errors)
    head = analysis.nodes[0]
    workers = analysis.nodes[1:]

    def role(host: str) -> str:
        return "head" if host == head else "worker"

    rails: list[dict[str, Any]] = [
        {
            "name": rail.name,
            "netdev": rail.netdev,
            "subnet": str(rail.network),
            "prefix": rail.network.prefixlen,
            "addresses": {host: str(rail.final[host]) for host in analysis.nodes},
            "ping_payload": analysis.mtu - IPV4_ICMP_HEADERS,
        }
        for rail in analysis.rails
        if rail.network is not None
    ]
    hosts: dict[str, Any] = {}
    peers: dict[str, Any] = {}
    for rank, host in enumerate(analysis.nodes):
        others = [other for other in analysis.nodes if other != host]
        hosts[host] = {
            "rank": rank,
            "role": role(host),
            "node_id": analysis.node_ids[host],
            "rails": [
                {
                    "name": rail["name"],
                    "netdev": rail["netdev"],
                    "address": rail["addresses"][host],
                    "cidr": f"{rail['addresses'][host]}/{rail['prefix']}",
                    "peers": {other: rail["addresses"][other] for other in others},
                    # None: found from sysfs (<netdev>/device/infiniband/).
                    "rdma_dev": analysis.rdma_devices.get(host, {}).get(rail["netdev"]),
                    "ping_payload": rail["ping_payload"],
                }
                for rail in rails
            ],
        }
        peers[host] = {
            other: {rail["name"]: rail["addresses"][other] for rail in rails} for other in others
        }
    return {
        "head": head,
        "workers": workers,
        "nodes": [
            {"name": host, "rank": rank, "role": role(host), "node_id": analysis.node_ids[host]}
            for rank, host in enumerate(analysis.nodes)
        ],
        "topology": analysis.topology,
        "mtu": analysis.mtu,
        "rails": rails,
        "peers": peers,
        "hosts": hosts,
        "master_addr": rails[0]["addresses"][head],
        "model_dir": analysis.model_dir,
        "supervised": analysis.supervised,
        "gateway": dict(analysis.gateway),
        "endpoint": _endpoint(head, hostvars.get(head) or {}, analysis.gateway),
        "serving": analysis.serving,
    }


def endpoint(head: str, head_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The service's API as the controller reaches it (the plan's ``endpoint``), from the head's
    variables alone: its host (``API_HOST_VARS``, else ``head``), the port clients use
    (``gx10_serve_port``: the engine's, or the gateway's in front of it) and https behind a gateway
    with TLS. ``base`` is the server root (/health, /metrics), ``url`` the OpenAI base (/v1). For
    a valid inventory this is what the validate play puts in the plan; callers that read an
    inventory without validating it (gx10 bench) get the same answer."""
    return _endpoint(head, head_vars, _check_gateway(head_vars, []))


def _endpoint(
    head: str, head_vars: Mapping[str, Any], gateway: Mapping[str, Any]
) -> dict[str, Any]:
    host = next(
        (str(head_vars[name]).strip() for name in API_HOST_VARS if _is_set(head_vars.get(name))),
        head,
    )
    base = f"{gateway['scheme']}://{host}:{gateway['port']}"
    return {
        "scheme": gateway["scheme"],
        "host": host,
        "port": gateway["port"],
        "base": base,
        "url": f"{base}/v1",
    }


# --- internals -------------------------------------------------------------------------------


@dataclass
class _Rail:
    index: int
    name: str
    netdev: str
    # Usable for addresses: a valid subnet that no other rail overlaps.
    network: IPv4Network | None
    # What the subnet covers, even with host bits set (for overlap checks), and as written.
    extent: IPv4Network | None = None
    subnet_text: str = ""
    raw_addresses: Any = None
    # host -> address actually assigned, filled in by _check_addresses
    final: dict[str, IPv4Address] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"gx10_rails[{self.index}]"

    @property
    def called(self) -> str:
        return f" (rail {self.name})" if self.name else ""


@dataclass
class _Analysis:
    errors: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    node_ids: dict[str, int] = field(default_factory=dict)
    mtu: int = DEFAULT_MTU
    model_dir: str = DEFAULT_MODEL_DIR
    supervised: bool = DEFAULT_SUPERVISED
    topology: str = DEFAULT_TOPOLOGY
    rails: list[_Rail] = field(default_factory=list)
    # host -> rail netdev -> RDMA device (gx10_rdma_devices)
    rdma_devices: dict[str, dict[str, str]] = field(default_factory=dict)
    gateway: dict[str, Any] = field(default_factory=dict)
    # The serving profile and each node's memory budget (module_utils/serve_plan)
    serving: dict[str, Any] = field(default_factory=dict)


def _analyse(
    groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> _Analysis:
    result = _Analysis()
    errors = result.errors
    result.nodes = _check_groups(groups, errors)
    # The serving budget is per rank of a valid head-and-workers pair: none for a broken shape.
    groups_ok = not errors
    node_vars: dict[str, Mapping[str, Any]] = {}
    for host in result.nodes:
        host_vars = hostvars.get(host)
        node_vars[host] = host_vars if isinstance(host_vars, Mapping) else {}

    cluster = _cluster_values(result.nodes, node_vars, errors)
    # A node count from broken groups means nothing: their own errors come first.
    result.topology = _check_topology(
        cluster[TOPOLOGY_VAR], result.nodes if groups_ok else [], errors
    )
    result.mtu = _check_mtu(cluster["gx10_rail_mtu"], errors)
    result.rails = _check_rails(cluster["gx10_rails"], errors)
    result.model_dir = _check_model_dir(cluster[MODEL_DIR_VAR], errors)
    result.supervised = _check_supervised(cluster[SUPERVISED_VAR], errors)
    _check_overlay(cluster[OVERLAY_VAR], result.model_dir, errors)
    _check_mgmt_interfaces(result.nodes, node_vars, result.rails, errors)
    result.node_ids = _check_node_ids(result.nodes, node_vars, errors)
    for rail in result.rails:
        _check_addresses(rail, result.nodes, result.node_ids, errors)
    for host in result.nodes:
        _check_clock_policy(host, node_vars[host], errors)
        _check_metrics(host, node_vars[host], errors)
        _check_faults_ignore(host, node_vars[host], errors)
        if result.supervised:
            _check_supervisor_timings(host, node_vars[host], errors)
        _check_memory_guard(host, node_vars[host], errors)
        result.rdma_devices[host] = _check_rdma_devices(host, node_vars[host], result.rails, errors)
    head_vars = node_vars[result.nodes[0]] if result.nodes else {}
    # Without a head (its groups' own error) there is no gateway or engine to judge.
    result.gateway = _check_gateway(head_vars, errors if groups_ok else [])
    if result.nodes:
        _check_smoke_battery(result.nodes[0], node_vars[result.nodes[0]], errors)
    if groups_ok:
        result.serving = serve_plan.analyse(
            result.nodes, node_vars, errors, model_dir=result.model_dir
        )
    return result


def _group(groups: Mapping[str, Any], name: str) -> list[str]:
    members = groups.get(name)
    if isinstance(members, str) or not isinstance(members, Iterable):
        return []
    return [str(host) for host in members]


def _check_groups(groups: Mapping[str, Any], errors: list[str]) -> list[str]:
    heads = _group(groups, HEAD_GROUP)
    workers = _group(groups, WORKERS_GROUP)
    if not heads:
        errors.append(
            "groups['head'] is missing or empty: put exactly one node in the 'head' group of the "
            "inventory (the node that serves HTTP, rank 0)."
        )
    elif len(heads) > 1:
        errors.append(
            f"groups['head'] has {len(heads)} hosts ({', '.join(heads)}): it must have exactly "
            f"one; keep {heads[0]} there and move the others to the 'workers' group."
        )
    if not workers:
        errors.append(
            "groups['workers'] is missing or empty: add at least one node to the 'workers' group "
            "(tensor parallelism needs two or more nodes)."
        )
    for host in heads:
        if host in workers:
            errors.append(
                f"host {host} is in both groups['head'] and groups['workers']: a node is either "
                "the head or a worker; remove it from one of the two groups."
            )
    return cluster_nodes(groups)


_MISSING = object()


def _value(host_vars: Mapping[str, Any], name: str) -> Any:
    """The host's value, or _MISSING when undefined or None (then the default applies)."""
    value = host_vars.get(name)
    return _MISSING if value is None else value


def _cluster_values(
    nodes: Sequence[str], node_vars: Mapping[str, Mapping[str, Any]], errors: list[str]
) -> dict[str, Any]:
    """Take each cluster-wide variable from the first node; report nodes that disagree."""
    values: dict[str, Any] = {}
    for name in CLUSTER_VARS:
        reference = _value(node_vars[nodes[0]], name) if nodes else _MISSING
        for host in nodes[1:]:
            value = _value(node_vars[host], name)
            if _plain(value) != _plain(reference):
                errors.append(
                    f"{name} on host {host} is {_show(value)} but on {nodes[0]} it is "
                    f"{_show(reference)}: it is cluster-wide ({_CLUSTER_WHY[name]}); define it "
                    "once for all nodes, e.g. in group_vars/all.yml."
                )
        values[name] = reference
    return values


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_mtu(value: Any, errors: list[str]) -> int:
    if value is _MISSING:
        return DEFAULT_MTU
    if not _is_int(value):
        errors.append(
            f"gx10_rail_mtu must be an integer between {MTU_MIN} and {MTU_MAX}, got {_show(value)} "
            f"({_type_name(value)}): write a plain number, e.g. gx10_rail_mtu: {DEFAULT_MTU}."
        )
        return DEFAULT_MTU
    if not MTU_MIN <= value <= MTU_MAX:
        errors.append(
            f"gx10_rail_mtu is {value}, out of range: allowed {MTU_MIN}..{MTU_MAX}; use "
            f"{DEFAULT_MTU} (jumbo frames, what the rails are verified with)."
        )
        return DEFAULT_MTU
    return int(value)


def _check_model_dir(value: Any, errors: list[str]) -> str:
    """An absolute, normalised POSIX directory other than /, usable as a Docker bind mount."""
    if value is _MISSING:
        return DEFAULT_MODEL_DIR
    example = f"e.g. {MODEL_DIR_VAR}: {DEFAULT_MODEL_DIR}"
    if not isinstance(value, str):
        errors.append(
            f"{MODEL_DIR_VAR} must be a directory path (a string), got {_show(value)} "
            f"({_type_name(value)}): write an absolute path, {example}, or leave it undefined "
            "for that default."
        )
        return DEFAULT_MODEL_DIR
    if not value.startswith("/"):
        errors.append(
            f"{MODEL_DIR_VAR} is {_show(value)}, not an absolute path: a relative one depends on "
            "each task's working directory (and Docker takes it for a volume name); write it "
            f"from /, {example}."
        )
        return DEFAULT_MODEL_DIR
    # normpath keeps a leading '//' (POSIX leaves its meaning to the system): collapse it too.
    normalised = posixpath.normpath("/" + value.lstrip("/"))
    if normalised == "/":
        errors.append(
            f"{MODEL_DIR_VAR} is {_show(value)}, the root directory: the checkpoint needs a "
            "directory of its own (the model stage lists every file under it, the serve stage "
            f"mounts it into the container at the same path); {example}."
        )
        return DEFAULT_MODEL_DIR
    if normalised != value:
        errors.append(
            f"{MODEL_DIR_VAR} is {_show(value)}, not a normalised path (no trailing or doubled "
            f"'/', no '.' or '..' parts): write {MODEL_DIR_VAR}: {normalised}, so every stage "
            "names the same directory the same way."
        )
        return DEFAULT_MODEL_DIR
    if ":" in value:
        errors.append(
            f"{MODEL_DIR_VAR} is {_show(value)}, which contains ':': the serve stage mounts it "
            "as the Docker volume SOURCE:TARGET:ro, which splits at every ':'; rename the "
            f"directory without ':', {example}."
        )
        return DEFAULT_MODEL_DIR
    return str(value)


def _check_rails(value: Any, errors: list[str]) -> list[_Rail]:
    if value is _MISSING:
        value = [dict(rail) for rail in DEFAULT_RAILS]
    if not _is_list(value) or not value:
        errors.append(
            f"gx10_rails must be a non-empty list of rails, got {_show(value)}: define it like "
            f"{_EXAMPLE_RAILS}, or leave it undefined for that default."
        )
        return []
    rails: list[_Rail] = []
    for index, raw in enumerate(value):
        rail = _check_rail(index, raw, errors)
        if rail is not None:
            rails.append(rail)
    _check_unique(rails, "name", errors, "give every rail its own name")
    _check_unique(
        rails,
        "netdev",
        errors,
        "each rail is its own interface (one per CX-7 twin, e.g. enp1s0f0np0 and enP2p1s0f0np0)",
    )
    _check_subnet_overlaps(rails, errors)
    return rails


def _check_rail(index: int, raw: Any, errors: list[str]) -> _Rail | None:
    label = f"gx10_rails[{index}]"
    if not isinstance(raw, Mapping):
        errors.append(
            f"{label} must be a mapping with keys name, netdev and subnet, got {_show(raw)}: "
            "write it like {name: rail0, netdev: enp1s0f0np0, subnet: 192.168.100.0/24}."
        )
        return None
    name = raw.get("name")
    called = f" (rail {name})" if isinstance(name, str) and name else ""
    missing = [key for key in RAIL_KEYS if raw.get(key) is None]
    if missing:
        errors.append(
            f"{label}{called} is missing {_keys(missing)}: every rail needs name, netdev and "
            "subnet, e.g. {name: rail0, netdev: enp1s0f0np0, subnet: 192.168.100.0/24}."
        )
    unknown = [str(key) for key in raw if key not in RAIL_KEYS + OPTIONAL_RAIL_KEYS]
    if unknown:
        errors.append(
            f"{label}{called} has unknown {_keys(unknown)}: allowed keys are "
            f"{', '.join(RAIL_KEYS + OPTIONAL_RAIL_KEYS)}; fix the spelling or remove the key."
        )
    ok = not missing
    for key in ("name", "netdev"):
        item = raw.get(key)
        if item is not None and (not isinstance(item, str) or not item.strip()):
            errors.append(
                f"{label}.{key}{called} must be a non-empty string, got {_show(item)}: e.g. "
                f"{key}: {DEFAULT_RAILS[0][key]}."
            )
            ok = False
    extent, exact = None, False
    if raw.get("subnet") is not None:
        extent, exact = _check_subnet(f"{label}.subnet", called, raw["subnet"], errors)
    if not ok:
        return None
    return _Rail(
        index=index,
        name=str(raw["name"]),
        netdev=str(raw["netdev"]),
        network=extent if exact else None,
        extent=extent,
        subnet_text=str(raw["subnet"]).strip(),
        raw_addresses=raw.get("addresses"),
    )


def _check_subnet(
    label: str, called: str, value: Any, errors: list[str]
) -> tuple[IPv4Network | None, bool]:
    """(the subnet, or None if unusable; whether it is valid as written)."""
    example = "e.g. 192.168.100.0/24"
    if not isinstance(value, str) or "/" not in value:
        errors.append(
            f"{label}{called} is {_show(value)}, not an IPv4 subnet in CIDR notation: write "
            f"network/prefix, {example}."
        )
        return None, False
    text = value.strip()
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        errors.append(
            f"{label}{called} is {_show(value)}, not a valid IPv4 subnet in CIDR notation: write "
            f"network/prefix, {example}."
        )
        return None, False
    if not text.split("/", 1)[1].isdigit():
        errors.append(
            f"{label}{called} is {_show(value)}: write the prefix length, not a netmask: "
            f"{network.with_prefixlen}."
        )
        return None, False
    if not isinstance(network, IPv4Network):
        errors.append(
            f"{label}{called} is {_show(value)}, an IPv6 subnet: rails need IPv4 (RoCE v2 GIDs "
            f"are derived from IPv4 addresses, ::ffff:a.b.c.d); use an IPv4 subnet, {example}."
        )
        return None, False
    if network.prefixlen > MAX_PREFIX:
        errors.append(
            f"{label}{called} is {_show(value)}: prefix /{network.prefixlen} is longer than "
            f"/{MAX_PREFIX} and leaves no room for node addresses; use /{MAX_PREFIX} or shorter, "
            f"{example}."
        )
        return None, False
    if ipaddress.ip_interface(text).ip != network.network_address:
        errors.append(
            f"{label}{called} is {_show(value)}, which has host bits set: use the network "
            f"address {network.with_prefixlen} (node addresses come from gx10_node_id)."
        )
        return network, False
    return network, True


def _check_unique(rails: Sequence[_Rail], key: str, errors: list[str], fix: str) -> None:
    seen: dict[str, _Rail] = {}
    for rail in rails:
        value = str(getattr(rail, key))
        first = seen.setdefault(value, rail)
        if first is not rail:
            errors.append(
                f"{rail.label}.{key} '{value}' is also used by {first.label}{first.called}: {fix}."
            )


def _check_subnet_overlaps(rails: Sequence[_Rail], errors: list[str]) -> None:
    extents = [(rail, rail.extent) for rail in rails if rail.extent is not None]
    taken = [extent for _, extent in extents]
    for position, (rail, extent) in enumerate(extents):
        for earlier, earlier_extent in extents[:position]:
            if not extent.overlaps(earlier_extent):
                continue
            relation = "is the same subnet as" if extent == earlier_extent else "overlaps"
            suggestion = _free_subnet(extent, taken)
            fix = "give each rail its own, non-overlapping subnet" + (
                f", e.g. {suggestion} for {rail.name}" if suggestion else ""
            )
            errors.append(
                f"{rail.label}.subnet '{rail.subnet_text}'{rail.called} {relation} "
                f"{earlier.label}.subnet '{earlier.subnet_text}'{earlier.called}: "
                f"{_SAME_SUBNET_WHY}; {fix}."
            )
            rail.network = None  # no address checks on a subnet that must change anyway
            break


def _free_subnet(network: IPv4Network, taken: Sequence[IPv4Network]) -> IPv4Network | None:
    """The next subnet of the same size that no rail uses (for the error message)."""
    candidate = network
    for _ in range(256):
        upper = int(candidate.broadcast_address) + 1
        if upper > int(IPv4Address("255.255.255.255")):
            return None
        candidate = IPv4Network((upper, candidate.prefixlen))
        if not any(candidate.overlaps(other) for other in taken):
            return candidate
    return None


def _check_rdma_devices(
    host: str, host_vars: Mapping[str, Any], rails: Sequence[_Rail], errors: list[str]
) -> dict[str, str]:
    """gx10_rdma_devices of one node: rail netdev -> RDMA device, keyed by rail netdevs only."""
    value = _value(host_vars, RDMA_DEVICES_VAR)
    if value is _MISSING:
        return {}
    netdevs = [rail.netdev for rail in rails]
    example = f"{{{netdevs[0] if netdevs else 'enp1s0f0np0'}: rocep1s0f0}}"
    if not isinstance(value, Mapping):
        errors.append(
            f"{RDMA_DEVICES_VAR} on host {host} must map rail netdevs to RDMA devices, got "
            f"{_show(value)} ({_type_name(value)}): write it like {example}, or leave it "
            "undefined to find each rail's device in sysfs."
        )
        return {}
    devices: dict[str, str] = {}
    for key, device in value.items():
        if key not in netdevs:
            errors.append(
                f"{RDMA_DEVICES_VAR} on host {host} has key {_show(key)}, which is not a rail "
                f"netdev (the rails are {', '.join(netdevs) or 'none'}): key it by the netdev of "
                f"a rail in gx10_rails, e.g. {example}, or remove the entry."
            )
        elif not isinstance(device, str) or not device.strip():
            errors.append(
                f"{RDMA_DEVICES_VAR}[{key}] on host {host} must be an RDMA device name, got "
                f"{_show(device)}: e.g. {example} (see `rdma link show`)."
            )
        else:
            devices[str(key)] = device.strip()
    return devices


def _check_mgmt_interfaces(
    nodes: Sequence[str],
    node_vars: Mapping[str, Mapping[str, Any]],
    rails: Sequence[_Rail],
    errors: list[str],
) -> None:
    for host in nodes:
        mgmt = _value(node_vars[host], "gx10_mgmt_interface")
        if mgmt is _MISSING:
            continue
        if not isinstance(mgmt, str) or not mgmt.strip():
            errors.append(
                f"gx10_mgmt_interface on host {host} must be the name of a network interface, got "
                f"{_show(mgmt)}: set it to the netdev that carries the management connection "
                "(e.g. enP7s7), or leave it undefined."
            )
            continue
        for rail in rails:
            if rail.netdev == mgmt:
                errors.append(
                    f"gx10_mgmt_interface on host {host} is '{mgmt}', which is also "
                    f"{rail.label}.netdev{rail.called}: never reconfigure the interface that "
                    "carries the management connection; use a different netdev for the rail, or "
                    "correct gx10_mgmt_interface."
                )


def _check_node_ids(
    nodes: Sequence[str], node_vars: Mapping[str, Mapping[str, Any]], errors: list[str]
) -> dict[str, int]:
    node_ids: dict[str, int] = {}
    defaulted: set[str] = set()
    owner: dict[int, str] = {}
    for position, host in enumerate(nodes):
        value = _value(node_vars[host], "gx10_node_id")
        if value is _MISSING:
            value = FIRST_NODE_ID + position
            defaulted.add(host)
        elif not _is_int(value):
            errors.append(
                f"gx10_node_id on host {host} must be an integer, got {_show(value)} "
                f"({_type_name(value)}): set the host number it uses in every rail subnet "
                f"as a plain number, e.g. gx10_node_id: {FIRST_NODE_ID + position}."
            )
            continue
        elif value < 1:
            errors.append(
                f"gx10_node_id on host {host} is {value}: it must be 1 or greater (0 is the "
                f"network address of every rail); e.g. gx10_node_id: {FIRST_NODE_ID + position}."
            )
            continue
        value = int(value)
        if value in owner:
            first = owner[value]
            errors.append(
                f"gx10_node_id {value} is used by both {first}{_origin(first, defaulted)} and "
                f"{host}{_origin(host, defaulted)}: node ids must be unique (each is the node's "
                f"host number on every rail); set a different gx10_node_id on {host}."
            )
            continue
        owner[value] = host
        node_ids[host] = value
    return node_ids


def _check_topology(value: Any, nodes: Sequence[str], errors: list[str]) -> str:
    """gx10_topology: direct (two nodes, a cable per rail) or switch (any number >= 2)."""
    if value is _MISSING:
        value = DEFAULT_TOPOLOGY
    if not isinstance(value, str) or value.strip() not in TOPOLOGIES:
        errors.append(
            f"{TOPOLOGY_VAR} is {_show(value)}: it must be one of {', '.join(TOPOLOGIES)} "
            f"(direct: two nodes with a cable per rail; switch: every node's rail k on the "
            f"switch's subnet k); e.g. {TOPOLOGY_VAR}: switch, or leave it undefined for "
            f"{DEFAULT_TOPOLOGY}"
        )
        return DEFAULT_TOPOLOGY
    topology = value.strip()
    if topology == "direct" and len(nodes) > DIRECT_MAX_NODES:
        errors.append(
            f"{TOPOLOGY_VAR} is direct (the default) but the cluster has {len(nodes)} nodes "
            f"({', '.join(nodes)}): direct cables join two nodes, one cable per rail; cable "
            f"every node's rails to a switch (rail k of every node on the switch's subnet k) "
            f"and set {TOPOLOGY_VAR}: switch in group_vars/all.yml, or keep two nodes"
        )
    return topology


def _check_supervised(value: Any, errors: list[str]) -> bool:
    """vllm_supervisor_enabled: a bool. The supervisor runs a head and any number of workers
    (issue 15; the node count itself is the topology's to check)."""
    if value is _MISSING:
        return DEFAULT_SUPERVISED
    if not isinstance(value, bool):
        errors.append(
            f"{SUPERVISED_VAR} is {_show(value)} ({_type_name(value)}): it must be true or false, "
            f"e.g. {SUPERVISED_VAR}: true"
        )
        return False
    return bool(value)


def _check_gateway(head_vars: Mapping[str, Any], errors: list[str]) -> dict[str, Any]:
    """The head's gateway settings (the plan's `gateway`): checked only when it is enabled,
    except the API port, which the engine takes when it is not."""
    port = _check_port(
        SERVE_PORT_VAR, _value(head_vars, SERVE_PORT_VAR), DEFAULT_SERVE_PORT, errors
    )
    disabled = {
        "enabled": False,
        "address": DEFAULT_GATEWAY_ADDRESS,
        "port": port,
        "engine_host": DEFAULT_GATEWAY_ADDRESS,
        "engine_port": port,
        "tls": False,
        "tls_cert": "",
        "tls_key": "",
        "scheme": "http",
    }
    enabled = _value(head_vars, GATEWAY_VAR)
    if enabled is _MISSING or enabled is False:
        _check_unauthenticated(head_vars, enabled, port, errors)
        return disabled
    if not isinstance(enabled, bool):
        errors.append(
            f"{GATEWAY_VAR} is {_show(enabled)} ({_type_name(enabled)}): it must be true or "
            f"false, e.g. {GATEWAY_VAR}: true"
        )
        return disabled
    address = _check_bind_address(_value(head_vars, GATEWAY_ADDRESS_VAR), errors)
    engine_port = _check_port(
        ENGINE_PORT_VAR, _value(head_vars, ENGINE_PORT_VAR), DEFAULT_ENGINE_PORT, errors
    )
    if engine_port == port:
        errors.append(
            f"{ENGINE_PORT_VAR} is {engine_port}, the same as {SERVE_PORT_VAR}: the gateway "
            f"takes {SERVE_PORT_VAR} (the port clients use) and the engine listens on "
            f"{ENGINE_LOOPBACK}:{ENGINE_PORT_VAR} behind it; give them different ports, e.g. "
            f"{ENGINE_PORT_VAR}: {port + 1 if port < PORT_MAX else port - 1}"
        )
    cert, key = _check_tls_files(head_vars, errors)
    if not _is_set(head_vars.get(SERVICE_KEY_VAR)):
        errors.append(
            f"{GATEWAY_VAR} is true but {SERVICE_KEY_VAR} is not set: with the gateway the engine "
            "listens on loopback, and the pipeline's own checks (the smoke stage, gx10 smoke, "
            "gx10 bench) reach it through the gateway with this key (the access log names it "
            f"'service'); run `gx10 keys init -i INVENTORY`, which writes it to "
            f"INVENTORY/{SERVICE_KEY_FILE} (0600), and read it from there: {SERVICE_KEY_VAR}: "
            f'"{SERVICE_KEY_LOOKUP}" (as inventories/gx10 does), or set it from Ansible Vault'
        )
    return {
        "enabled": True,
        "address": address,
        "port": port,
        "engine_host": ENGINE_LOOPBACK,
        "engine_port": engine_port,
        "tls": bool(cert),
        "tls_cert": cert,
        "tls_key": key,
        "scheme": "https" if cert else "http",
    }


def _check_unauthenticated(
    head_vars: Mapping[str, Any], enabled: Any, port: int, errors: list[str]
) -> None:
    """Without the gateway, the engine answers on every address of the head: refused unless
    the inventory says the network is private and trusted (ALLOW_UNAUTHENTICATED_VAR)."""
    allowed = _value(head_vars, ALLOW_UNAUTHENTICATED_VAR)
    if allowed is True:
        return
    if allowed is not _MISSING and allowed is not False:
        errors.append(
            f"{ALLOW_UNAUTHENTICATED_VAR} is {_show(allowed)} ({_type_name(allowed)}): it must "
            f"be true or false, e.g. {ALLOW_UNAUTHENTICATED_VAR}: false"
        )
        return
    keyed = _is_set(head_vars.get(SERVICE_KEY_VAR))
    exposure = (
        f"with {SERVICE_KEY_VAR}, which vLLM checks on /v1/* only ("
        + ", ".join(VLLM_KEYLESS_ROUTES)
        + " and others answer anyone)"
        if keyed
        else "to anyone, without a key"
    )
    state = "unset" if enabled is _MISSING else "false"
    errors.append(
        f"{GATEWAY_VAR} is {state}: the engine would answer on every address of the head at "
        f"port {port} {exposure}. Put the gateway in front of it: {GATEWAY_VAR}: true, with "
        f"{SERVICE_KEY_VAR} from `gx10 keys init -i INVENTORY` (inventories/gx10 does both); "
        "or, on a private network you trust only, say so: "
        f"{ALLOW_UNAUTHENTICATED_VAR}: true"
    )


PORT_MAX = 65535


def _check_port(name: str, value: Any, default: int, errors: list[str]) -> int:
    """A TCP port: an integer (or a string of digits) in 1..65535."""
    if value is _MISSING:
        return default
    text = str(value).strip() if isinstance(value, str) else None
    number = value if _is_int(value) else int(text) if text and text.isdigit() else None
    if number is None or not 1 <= number <= PORT_MAX:
        errors.append(
            f"{name} is {_show(value)}: it must be a TCP port, an integer between 1 and "
            f"{PORT_MAX}, e.g. {name}: {default}"
        )
        return default
    return int(number)


def _check_bind_address(value: Any, errors: list[str]) -> str:
    """The address the gateway listens on: one IP address of the head, or 0.0.0.0 (all)."""
    if value is _MISSING:
        return DEFAULT_GATEWAY_ADDRESS
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        errors.append(
            f"{GATEWAY_ADDRESS_VAR} is {_show(value)}, not an IP address: give one address of "
            "the head that clients reach (e.g. its management address, 10.0.0.10), or "
            f"{DEFAULT_GATEWAY_ADDRESS} for every address of the head"
        )
        return DEFAULT_GATEWAY_ADDRESS


def _check_tls_files(head_vars: Mapping[str, Any], errors: list[str]) -> tuple[str, str]:
    """(certificate, key) paths on the controller, both or neither; ("", "") without TLS.

    Here: given together, absolute, existing files. Their content (PEM, the key is the
    certificate's, valid now) is gateway_tls.check_pair's, which the validate_cluster action
    plugin runs next, still before any node changes.
    """
    given = {
        name: _value(head_vars, name)
        for name in (TLS_CERT_VAR, TLS_KEY_VAR)
        if _value(head_vars, name) not in (_MISSING, "")
    }
    if not given:
        return "", ""
    example = (
        f'{TLS_CERT_VAR}: "{{{{ inventory_dir }}}}/files/gateway.crt", '
        f'{TLS_KEY_VAR}: "{{{{ inventory_dir }}}}/files/gateway.key"'
    )
    if len(given) == 1:
        name = next(iter(given))
        missing = TLS_KEY_VAR if name == TLS_CERT_VAR else TLS_CERT_VAR
        errors.append(
            f"{name} is set but {missing} is not: TLS needs the certificate and its private "
            f"key, e.g. {example}; or set neither for plain HTTP"
        )
        return "", ""
    paths: list[str] = []
    for name, value in given.items():
        if not isinstance(value, str) or not posixpath.isabs(value):
            errors.append(
                f"{name} is {_show(value)}: give the absolute path of a PEM file on the "
                f"controller, e.g. {example}"
            )
        elif not os.path.isfile(value):
            errors.append(
                f"{name} is {_show(value)}, which is not a file on the controller: give the "
                f"path of the PEM file you supply, e.g. {example}"
            )
        else:
            paths.append(value)
    if len(paths) != 2:
        return "", ""
    return paths[0], paths[1]


def _is_set(value: Any) -> bool:
    """A secret's presence, without ever looking at more than whether it is empty."""
    if value is None or isinstance(value, bool):
        return bool(value)
    return bool(str(value).strip())


def _check_overlay(value: Any, model_dir: str, errors: list[str]) -> None:
    """vllm_serve_overlay: its shape, and each replacement file's sha256 on the controller."""
    overlay = None if value is _MISSING else value
    errors.extend(serve_overlay.check_overlay(overlay, model_dir=model_dir)[1])


def _check_supervisor_timings(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """The vllm_supervisor_<timing> values, checked with the agent's own table (pair_config)."""
    names = {pair_config.variable(key): key for key in pair_config.TIMINGS}
    given = {key: host_vars[name] for name, key in names.items() if host_vars.get(name) is not None}
    errors.extend(f"{error} (host {host})" for error in pair_config.validate_timings(given))


def _check_memory_guard(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """The memory guard's thresholds, regexes and flags, checked with its own table."""
    given = memory_guard.settings_from_vars(host_vars)
    errors.extend(f"{error} (host {host})" for error in memory_guard.validate_settings(given))


def _check_faults_ignore(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """preflight_known_faults_ignore: a list of the known-bad builds table's fault ids."""
    value = _value(host_vars, FAULTS_IGNORE_VAR)
    if value is _MISSING:
        return
    known = ", ".join(fault.id for fault in KNOWN_FAULTS)
    if not _is_list(value) or not all(isinstance(item, str) for item in value):
        errors.append(
            f"{FAULTS_IGNORE_VAR} on host {host} is {_show(value)}: it must be a list of fault "
            f"ids (known: {known}), e.g. {FAULTS_IGNORE_VAR}: [] to accept none"
        )
        return
    for name in unknown_ids(value):
        errors.append(
            f"{FAULTS_IGNORE_VAR} on host {host} names {name!r}, which is no known fault "
            f"(known: {known}): correct the id or remove it"
        )


def _check_smoke_battery(head: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """gx10_smoke_battery: a bool; gx10_smoke_battery_cases: a list of battery case names."""
    known = ", ".join(SMOKE_BATTERY_CASES)
    enabled = _value(host_vars, SMOKE_BATTERY_VAR)
    if enabled is not _MISSING and not isinstance(enabled, bool):
        errors.append(
            f"{SMOKE_BATTERY_VAR} on host {head} is {_show(enabled)} ({_type_name(enabled)}): it "
            f"must be true or false, e.g. {SMOKE_BATTERY_VAR}: true in group_vars/all.yml (on the "
            f"command line -e '{{\"{SMOKE_BATTERY_VAR}\": true}}': -e key=value gives a string)"
        )
    choice = _value(host_vars, SMOKE_TOOL_CHOICE_VAR)
    if choice is not _MISSING and choice is not None and choice not in SMOKE_TOOL_CHOICES:
        errors.append(
            f"{SMOKE_TOOL_CHOICE_VAR} on host {head} is {_show(choice)}: it must be one of "
            f"{', '.join(SMOKE_TOOL_CHOICES)} (auto, the default: the model chooses the call; "
            "required: the server makes one, for a model that never chooses one)"
        )
    cases = _value(host_vars, SMOKE_BATTERY_CASES_VAR)
    if cases is _MISSING:
        return
    if not _is_list(cases) or not all(isinstance(name, str) for name in cases):
        errors.append(
            f"{SMOKE_BATTERY_CASES_VAR} on host {head} is {_show(cases)}: it must be a list of "
            f"battery case names (known: {known}), e.g. {SMOKE_BATTERY_CASES_VAR}: "
            "[parallel, stream]; leave it unset (or []) to run every case"
        )
        return
    for name in cases:
        if name not in SMOKE_BATTERY_CASES:
            errors.append(
                f"{SMOKE_BATTERY_CASES_VAR} on host {head} names {name!r}, which is no battery "
                f"case (known: {known}): correct the name or remove it"
            )


def _check_clock_policy(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """gpu_clock_sm_mhz: an int (or digit string) of MHz, or 'unlocked'; above the minimum."""
    low = _value(host_vars, "gpu_clock_min_mhz")
    if low is _MISSING:
        low = DEFAULT_CLOCK_MIN_MHZ
    elif not (_is_int(low) or (isinstance(low, str) and low.isdigit())) or not (
        100 <= int(low) <= CLOCK_MAX_MHZ
    ):
        errors.append(
            f"gpu_clock_min_mhz on host {host} is {_show(low)}: it must be a clock in MHz between "
            f"100 and {CLOCK_MAX_MHZ}, e.g. gpu_clock_min_mhz: {DEFAULT_CLOCK_MIN_MHZ} (the GB10's "
            "idle SM clock)."
        )
        return
    cap = _value(host_vars, "gpu_clock_sm_mhz")
    if cap is _MISSING or (isinstance(cap, str) and cap.strip().lower() == "unlocked"):
        return
    if (_is_int(cap) or (isinstance(cap, str) and cap.strip().isdigit())) and (
        int(low) <= int(cap) <= CLOCK_MAX_MHZ
    ):
        return
    errors.append(
        f"gpu_clock_sm_mhz on host {host} is {_show(cap)}: set an SM clock cap in MHz between "
        f"gpu_clock_min_mhz ({int(low)}) and {CLOCK_MAX_MHZ}, e.g. gpu_clock_sm_mhz: 2000 (the "
        "reference deployment's efficiency optimum), or 'unlocked' to leave the clock to the "
        "driver."
    )


def _check_metrics(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> None:
    """metrics_exporter_enabled: a bool; metrics_exporter_port: a TCP port;
    metrics_exporter_gpu_interval: 1-3600 seconds."""
    enabled = _value(host_vars, METRICS_ENABLED_VAR)
    if enabled is not _MISSING and not isinstance(enabled, bool):
        errors.append(
            f"{METRICS_ENABLED_VAR} on host {host} is {_show(enabled)} ({_type_name(enabled)}): "
            f"it must be true or false, e.g. {METRICS_ENABLED_VAR}: true in group_vars/all.yml "
            f"(on the command line -e '{{\"{METRICS_ENABLED_VAR}\": true}}': -e key=value gives "
            "a string)"
        )
    for name, low, high, example in (
        (METRICS_PORT_VAR, 1, 65535, "9100 (node exporter's)"),
        (METRICS_INTERVAL_VAR, 1, 3600, "5 (seconds)"),
    ):
        value = _value(host_vars, name)
        if value is _MISSING:
            continue
        number = (
            int(value)
            if _is_int(value) or (isinstance(value, str) and value.strip().isdigit())
            else None
        )
        if number is None or not low <= number <= high:
            errors.append(
                f"{name} on host {host} is {_show(value)}: it must be a whole number from {low} "
                f"to {high}, e.g. {name}: {example}"
            )


def _origin(host: str, defaulted: set[str]) -> str:
    return " (default: head 10, workers 11, 12, ...)" if host in defaulted else ""


def _explicit_addresses(rail: _Rail, nodes: Sequence[str], errors: list[str]) -> dict[str, Any]:
    """The rail's ``addresses`` override as {host: raw value}; reports a bad shape or host."""
    raw = rail.raw_addresses
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        example = rail.network.network_address + FIRST_NODE_ID if rail.network else "..."
        errors.append(
            f"{rail.label}.addresses{rail.called} must be a mapping of host to IPv4 address, got "
            f"{_show(raw)}: e.g. addresses: {{{nodes[0] if nodes else 'gx10-a'}: {example}}}, or "
            "leave it out to derive the addresses from gx10_node_id."
        )
        return {}
    explicit = {str(host): ip for host, ip in raw.items()}
    for host in explicit:
        if host not in nodes:
            errors.append(
                f"{rail.label}.addresses{rail.called} names host '{host}', which is not in "
                "groups['head'] or groups['workers']: fix the host name or remove the entry."
            )
    return explicit


@dataclass
class _Candidate:
    """The address a node would get on a rail, and how to change it."""

    source: str  # the variable the address comes from
    address: IPv4Address | None  # None: beyond 255.255.255.255
    what: str  # start of an error sentence
    fix: str


def _candidate(
    rail: _Rail,
    host: str,
    explicit: Mapping[str, Any],
    node_ids: Mapping[str, int],
    errors: list[str],
) -> _Candidate | None:
    network = rail.network
    if network is None:
        return None
    usable = f"{network.network_address + 1}..{network.broadcast_address - 1}"
    if host in explicit:
        source = f"{rail.label}.addresses['{host}']"
        value = explicit[host]
        address = _parse_address(value)
        if address is None:
            errors.append(
                f"{source}{rail.called} is {_show(value)}, not an IPv4 address: write a plain "
                f"address without prefix, in {usable}."
            )
            return None
        return _Candidate(
            source, address, f"{source}{rail.called} is {address}", f"use an address in {usable}"
        )
    if host not in node_ids:
        return None  # invalid gx10_node_id, already reported
    node_id = node_ids[host]
    source = f"gx10_node_id {node_id} on host {host}"
    try:
        address = network.network_address + node_id
    except ipaddress.AddressValueError:
        address = None
    shown = "an address beyond 255.255.255.255" if address is None else str(address)
    return _Candidate(
        source,
        address,
        f"{source} gives {shown} on {rail.label}{rail.called}",
        f"choose a gx10_node_id between 1 and {network.num_addresses - 2}, use a larger subnet, "
        f"or set {rail.label}.addresses['{host}']",
    )


def _parse_address(value: Any) -> IPv4Address | None:
    if not isinstance(value, str) or "/" in value:
        return None
    try:
        return IPv4Address(value.strip())
    except ValueError:
        return None


def _check_addresses(
    rail: _Rail, nodes: Sequence[str], node_ids: Mapping[str, int], errors: list[str]
) -> None:
    """Fill rail.final with each node's address; report bad or duplicate ones."""
    network = rail.network
    if network is None:
        return
    usable = network.num_addresses - 2
    if usable < len(nodes):
        errors.append(
            f"{rail.label}.subnet '{rail.subnet_text}'{rail.called} has {usable} host "
            f"addresses but the cluster has {len(nodes)} nodes: every node needs its own address "
            f"on every rail; use a larger subnet, e.g. /{_prefix_for(len(nodes), network)} or "
            "/24 (node addresses are the subnet's address + gx10_node_id)."
        )
        return
    explicit = _explicit_addresses(rail, nodes, errors)
    owner: dict[IPv4Address, tuple[str, str]] = {}
    for host in nodes:
        candidate = _candidate(rail, host, explicit, node_ids, errors)
        if candidate is None:
            continue
        address, what, fix = candidate.address, candidate.what, candidate.fix
        if address is None or address not in network:
            errors.append(f"{what}, outside subnet {network}: {fix}.")
        elif address == network.network_address:
            errors.append(f"{what}, the network address of {network}: {fix}.")
        elif address == network.broadcast_address:
            errors.append(f"{what}, the broadcast address of {network}: {fix}.")
        elif address in owner:
            other, other_source = owner[address]
            errors.append(
                f"{other} ({other_source}) and {host} ({candidate.source}) both get address "
                f"{address} on {rail.label}{rail.called}: every node needs its own address on "
                "every rail; change one of them."
            )
        else:
            owner[address] = (host, candidate.source)
            rail.final[host] = address


def _prefix_for(nodes: int, network: IPv4Network) -> int:
    """The longest prefix whose subnet holds ``nodes`` host addresses (at most /MAX_PREFIX)."""
    prefix = min(MAX_PREFIX, network.prefixlen)
    while prefix > 0 and 2 ** (32 - prefix) - 2 < nodes:
        prefix -= 1
    return prefix


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _type_name(value: Any) -> str:
    """The builtin type name: Ansible may hand over subclasses (tagged str, lazy containers)."""
    for kind in (bool, int, float, str, bytes, Mapping, list, tuple):
        if isinstance(value, kind):
            return "dict" if kind is Mapping else kind.__name__
    return type(value).__name__


def _keys(keys: Sequence[str]) -> str:
    word = "key" if len(keys) == 1 else "keys"
    return f"{word} {', '.join(repr(key) for key in keys)}"


def _plain(value: Any) -> Any:
    """Plain dicts/lists/scalars, so values from Ansible's lazy containers compare and print."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if _is_list(value):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def _show(value: Any, limit: int = 160) -> str:
    if value is _MISSING:
        return "undefined"
    text = repr(_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
