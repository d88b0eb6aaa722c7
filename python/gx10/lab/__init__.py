"""The two-node lab: GB10 stand-ins in containers, cabled rail to rail (test equipment)."""

from gx10.lab.config import LabConfig
from gx10.lab.errors import LabError
from gx10.lab.manager import (
    LabStatus,
    NodeStatus,
    RailStatus,
    down,
    ensure_rails,
    heat,
    replace_node,
    status,
    swap_nics,
    throttle,
    up,
)

__all__ = [
    "LabConfig",
    "LabError",
    "LabStatus",
    "NodeStatus",
    "RailStatus",
    "down",
    "ensure_rails",
    "heat",
    "replace_node",
    "status",
    "swap_nics",
    "throttle",
    "up",
]
