"""gx10: provision NVIDIA GB10 nodes into a vLLM service (Python layer over ansible-runner)."""

from __future__ import annotations

from gx10.errors import (
    Gx10Error,
    InventoryNotFoundError,
    PlaybookNotFoundError,
    ProjectNotFoundError,
    RunnerSetupError,
)
from gx10.provision import FailedTask, HostStats, ProvisionResult, provision

__version__ = "0.1.0"

__all__ = [
    "FailedTask",
    "Gx10Error",
    "HostStats",
    "InventoryNotFoundError",
    "PlaybookNotFoundError",
    "ProjectNotFoundError",
    "ProvisionResult",
    "RunnerSetupError",
    "__version__",
    "provision",
]
