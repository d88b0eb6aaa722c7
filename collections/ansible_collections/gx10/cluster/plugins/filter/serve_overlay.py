# SPDX-License-Identifier: Apache-2.0
"""Filters gx10.cluster.overlay_errors and overlay_volumes: the serve stage's runtime fixes.

Documented in overlay_errors.yml and overlay_volumes.yml next to this file; the logic is in
module_utils/serve_overlay.py. Filters run on the controller, where the replacement files are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.serve_overlay import (
    check_overlay,
    volumes,
)


def overlay_errors(overlay: Any, model_dir: str | None = None) -> list[str]:
    """vllm_serve_overlay | gx10.cluster.overlay_errors(model_dir): every problem, [] if none."""
    return check_overlay(overlay, model_dir=str(model_dir) if model_dir else None)[1]


def overlay_volumes(overlay: Any, host_dir: str) -> list[str]:
    """vllm_serve_overlay | gx10.cluster.overlay_volumes(host_dir): HOST:PATH:ro volumes."""
    if not isinstance(host_dir, str) or not host_dir.startswith("/") or ":" in host_dir:
        raise AnsibleFilterError(
            f"gx10.cluster.overlay_volumes: the host directory {host_dir!r} must be an absolute "
            "path without ':'"
        )
    entries, errors = check_overlay(overlay, hash_source=None)
    if errors:
        raise AnsibleFilterError("gx10.cluster.overlay_volumes: " + "; ".join(errors))
    return volumes(entries, host_dir)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"overlay_errors": overlay_errors, "overlay_volumes": overlay_volumes}
