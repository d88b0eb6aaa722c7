"""What the lab is: GB10 stand-ins (two on direct rail cables by default, or four on a switch),
a management network, a registry, a NAS stand-in and a Prometheus.

Names and addresses here mirror `inventories/lab` (two nodes) and `inventories/lab4` (four); the
rail netdevs are the real GB10 names (FIELD_NOTES section 2) so roles run unchanged against the
lab.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field

LAB_LABEL = "gx10.lab"
# Every lab rail MAC: locally administered (0x02), then "9a", then the NIC generation.
MAC_PREFIX = "02:9a:"
MAX_GENERATION = 0xFF
_LAB_MAC = re.compile(r"02:9a:([0-9a-f]{2}):00:[0-9a-f]{2}:[0-9a-f]{2}")


def mac_generation(mac: str) -> int:
    """The NIC generation a lab rail MAC encodes (see LabConfig.mac).

    Raises ValueError for an address the lab did not make (foreign or malformed).
    """
    found = _LAB_MAC.fullmatch(mac.strip().lower())
    if found is None:
        raise ValueError(
            f"{mac!r} is not a lab rail MAC ({MAC_PREFIX}<generation>:00:<node>:<rail>, hex)"
        )
    return int(found.group(1), 16)


# The lab sizes `gx10 lab up --nodes N` builds, each with its inventory (docs/LAB.md).
LAB_SIZES = {2: "inventories/lab", 4: "inventories/lab4"}
TOPOLOGIES = ("direct", "switch")
# The engines `gx10 lab up --engine E` serves: the vLLM simulator (the default; every size), or
# vLLM's own CPU build (gx10.lab.engine; two nodes), each with its inventories by size.
ENGINE_INVENTORIES = {
    "sim": LAB_SIZES,
    "vllm-cpu": {2: "inventories/lab-vllm"},
}
ENGINES = tuple(ENGINE_INVENTORIES)
DEFAULT_ENGINE = "sim"


@dataclass(frozen=True, slots=True)
class Rail:
    """One rail: on `direct`, a veth pair joining the same-named netdev on two nodes; on
    `switch`, one veth pair per node from that netdev to a port of the rail's bridge."""

    netdev: str
    index: int


@dataclass(frozen=True, slots=True)
class LabConfig:
    """The lab's shape. Defaults are the product's embedded lab; tests may shrink timeouts."""

    name: str = "gx10"
    nodes: tuple[str, ...] = ("gx10-a", "gx10-b")
    rails: tuple[Rail, ...] = (Rail("enp1s0f0np0", 0), Rail("enP2p1s0f0np0", 1))
    # direct: two nodes, a cable per rail. switch: every node's rail k on bridge k of the switch
    # stand-in (a container of its own, so `down` takes the bridges with it), as
    # `gx10_topology: switch` cables real nodes (docs/TOPOLOGY.md).
    topology: str = "direct"
    switch_name: str = "gx10-switch"
    # The switch's ports carry jumbo frames with room to spare, as a 200 GbE switch set to 9216.
    switch_mtu: int = 9216
    mgmt_network: str = "gx10-lab-mgmt"
    # Fixed management addresses, as a real site's management network has: the inventory names
    # them (gx10_api_host) so the controller reaches the head's API. Move the subnet with
    # GX10_LAB_MGMT_SUBNET if it clashes with a network of this machine (and edit the inventory).
    mgmt_subnet: str = field(
        default_factory=lambda: os.environ.get("GX10_LAB_MGMT_SUBNET", "172.31.240.0/24")
    )
    registry_name: str = "gx10-registry"
    registry_port: int = field(
        default_factory=lambda: int(os.environ.get("GX10_LAB_REGISTRY_PORT", "5000"))
    )
    boot_timeout: float = 90.0
    # A node's /dev/shm, as a Linux host's: a tmpfs of half its memory (the lab plans a node as
    # 24 GiB: inventories/lab gx10_node_memory_gib). A rank runs with --ipc host and uses it
    # (vLLM's CPU engine wants 160 MiB for its message queues; Docker's default is 64 MiB).
    node_shm_bytes: int = 12 << 30
    # The NAS stand-in: serves the synthetic checkpoint read-only over HTTP on the management
    # network (the nodes reach the checkpoint as http://gx10-nas:8080/checkpoint/, the
    # inventory's gx10_model_source; the real engine's tiny model under tiny-model/).
    nas_name: str = "gx10-nas"
    nas_port: int = 8080
    # The lab's Prometheus: scrapes the nodes and the head over the management network with the
    # config `gx10 metrics config` writes from `metrics_inventory` (under the project home); its
    # HTTP API is published on this machine's loopback (GX10_LAB_PROMETHEUS_PORT, default 9090).
    prometheus_name: str = "gx10-prometheus"
    prometheus_port: int = field(
        default_factory=lambda: int(os.environ.get("GX10_LAB_PROMETHEUS_PORT", "9090"))
    )
    metrics_inventory: str = "inventories/lab"
    # What serves on the nodes (ENGINES): which vLLM image the lab registry publishes for the
    # inventory, and what the NAS stand-in serves besides the synthetic checkpoint.
    engine: str = DEFAULT_ENGINE

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"lab engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"lab topology {self.topology!r} is not one of {', '.join(TOPOLOGIES)}"
            )
        if len(self.nodes) < 2 or (self.topology == "direct" and len(self.nodes) != 2):
            raise ValueError(
                f"a {self.topology} lab of {len(self.nodes)} nodes cannot be cabled: direct cables "
                "join two nodes, a switch two or more"
            )

    @classmethod
    def sized(cls, count: int, engine: str = DEFAULT_ENGINE) -> LabConfig:
        """The lab of `count` nodes (gx10-a, gx10-b, ...): two on cables, more on a switch,
        serving `engine`."""
        if engine not in ENGINE_INVENTORIES:
            raise ValueError(f"lab engine {engine!r} is not one of {', '.join(ENGINES)}")
        sizes = ENGINE_INVENTORIES[engine]
        if count not in sizes:
            counts = " or ".join(str(n) for n in sizes)
            raise ValueError(
                f"the lab with engine {engine} has {counts} nodes (an inventory each), not {count}"
            )
        if count == 2:
            return cls(engine=engine, metrics_inventory=sizes[count])
        return cls(
            nodes=tuple(f"gx10-{chr(ord('a') + i)}" for i in range(count)),
            topology="switch",
            metrics_inventory=sizes[count],
            engine=engine,
        )

    def bridge(self, rail: Rail) -> str:
        """The switch's bridge for a rail (its subnet), inside the switch stand-in."""
        return f"rail{rail.index}"

    def port(self, node: str, rail: Rail) -> str:
        """The switch port (the far end of the node's veth) for a node's rail: gx10-c-r1."""
        return f"{node}-r{rail.index}"

    @property
    def nas_volume(self) -> str:
        """The volume holding the synthetic checkpoint (filled once, mounted read-only)."""
        return f"{self.name}-nas-data"

    @property
    def registry_address(self) -> str:
        """The registry as the nodes' Docker engines reach it over the management network."""
        return f"{self.registry_name}:5000"

    @property
    def registry_host_address(self) -> str:
        """The registry as this machine reaches it (loopback only)."""
        return f"127.0.0.1:{self.registry_port}"

    @property
    def prometheus_url(self) -> str:
        """The lab's Prometheus as this machine reaches it (loopback only)."""
        return f"http://127.0.0.1:{self.prometheus_port}"

    def mgmt_address(self, node: str) -> str:
        """The node's fixed management address: .10 for the first node, .11 for the next."""
        base = ipaddress.ip_network(self.mgmt_subnet)
        return str(base.network_address + 10 + self.nodes.index(node))

    def volume(self, node: str) -> str:
        """The volume holding a node's own Docker data-root."""
        return f"{node}-docker"

    def mac(self, node: str, rail: Rail, generation: int = 0) -> str:
        """A stable locally-administered MAC per node, rail and NIC generation.

        The generation changes on a simulated NIC swap, so a swapped node gets new MACs.
        """
        if not 0 <= generation <= MAX_GENERATION:
            raise ValueError(f"NIC generation {generation} is outside 0..{MAX_GENERATION}")
        node_index = self.nodes.index(node)
        return f"{MAC_PREFIX}{generation:02x}:00:{node_index + 0x0A:02x}:{rail.index:02x}"
