# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.boot_phase_errors: what is wrong with a rank's per-phase boot timeouts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gx10.cluster.plugins.module_utils.boot_phases import (
    PhaseError,
    check_timeouts,
)

DOCUMENTATION = r"""
name: boot_phase_errors
short_description: The problems of a per-phase boot timeout mapping, empty when it is good
description:
  - Checks a mapping of boot phase to seconds (C(vllm_serve_phase_timeouts)) the way the
    C(gx10.cluster.container_wait) module will use it; each key a phase of vLLM's boot (start,
    weights, compile, graph_capture, api), each value an integer number of seconds of at least 1.
    The serve stage checks it before it stops or starts anything.
options:
  _input:
    description: The mapping to check.
    type: raw
    required: true
"""

EXAMPLES = r"""
errors: "{{ vllm_serve_phase_timeouts | gx10.cluster.boot_phase_errors }}"
"""

RETURN = r"""
_value:
  description: One message per problem (an unknown phase, a value that is not seconds).
  type: list
  elements: str
"""


def boot_phase_errors(timeouts: Any) -> list[str]:
    if not isinstance(timeouts, Mapping):
        return [f"{timeouts!r} is not a mapping of phase to seconds"]
    errors = []
    for name, value in timeouts.items():
        try:
            check_timeouts({name: value})
        except PhaseError as exc:
            errors.append(str(exc).removeprefix("phase_timeouts").lstrip(": ."))
    return errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"boot_phase_errors": boot_phase_errors}
