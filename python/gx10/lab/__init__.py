"""The lab: GB10 stand-ins in containers, two cabled rail to rail or four on a switch (test
equipment)."""

from gx10.lab.config import LabConfig
from gx10.lab.errors import LabError
from gx10.lab.images import ensure_images
from gx10.lab.manager import (
    LabStatus,
    NodeStatus,
    PowerResult,
    RailStatus,
    current,
    down,
    ensure_rails,
    heat,
    kill_rank,
    power_cut,
    reboot,
    replace_node,
    stall,
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
    "PowerResult",
    "RailStatus",
    "current",
    "down",
    "ensure_images",
    "ensure_rails",
    "heat",
    "kill_rank",
    "power_cut",
    "reboot",
    "replace_node",
    "stall",
    "status",
    "swap_nics",
    "throttle",
    "up",
]
