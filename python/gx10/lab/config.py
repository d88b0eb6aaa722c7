"""What the lab is: two GB10 stand-ins, their rail cables, a management network, a registry.

Names and addresses here mirror `inventories/lab`; the rail netdevs are the real GB10 names
(FIELD_NOTES section 2) so roles run unchanged against the lab.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

LAB_LABEL = "gx10.lab"


@dataclass(frozen=True, slots=True)
class Rail:
    """One direct cable: a veth pair joining the same-named netdev on two nodes."""

    netdev: str
    index: int


@dataclass(frozen=True, slots=True)
class LabConfig:
    """The lab's shape. Defaults are the product's embedded lab; tests may shrink timeouts."""

    name: str = "gx10"
    nodes: tuple[str, ...] = ("gx10-a", "gx10-b")
    rails: tuple[Rail, ...] = (Rail("enp1s0f0np0", 0), Rail("enP2p1s0f0np0", 1))
    mgmt_network: str = "gx10-lab-mgmt"
    registry_name: str = "gx10-registry"
    registry_port: int = field(
        default_factory=lambda: int(os.environ.get("GX10_LAB_REGISTRY_PORT", "5000"))
    )
    boot_timeout: float = 90.0

    @property
    def registry_address(self) -> str:
        """The registry as the nodes' Docker engines reach it over the management network."""
        return f"{self.registry_name}:5000"

    @property
    def registry_host_address(self) -> str:
        """The registry as this machine reaches it (loopback only)."""
        return f"127.0.0.1:{self.registry_port}"

    def volume(self, node: str) -> str:
        """The volume holding a node's own Docker data-root."""
        return f"{node}-docker"

    def mac(self, node: str, rail: Rail, generation: int = 0) -> str:
        """A stable locally-administered MAC per node, rail and NIC generation.

        The generation changes on a simulated NIC swap, so a swapped node gets new MACs.
        """
        node_index = self.nodes.index(node)
        return f"02:9a:{generation:02x}:00:{node_index + 0x0A:02x}:{rail.index:02x}"
