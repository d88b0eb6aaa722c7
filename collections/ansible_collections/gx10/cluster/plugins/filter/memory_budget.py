# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.memory_budget: one node's unified-memory budget for its serving profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.memory_budget import (
    BudgetError,
    Inputs,
    evaluate,
    gib,
)

DOCUMENTATION = r"""
name: memory_budget
short_description: A node's unified-memory budget for the serving profile
description:
  - Evaluates the budget (module_utils/memory_budget.py) of the inputs the validate stage put in
    the cluster plan (C(gx10_plan.serving.memory[host])) on a node of I(node_memory_gib). vLLM's
    share (C(gpu_memory_utilization) x the node's memory) must hold the rank's weights, the KV
    cache at the profile's context and sequences, and the runtime's memory; the node must hold
    vLLM's share, the container's /dev/shm and the OS reserve.
  - Preflight passes the node's real MemTotal; the validate stage used C(gx10_node_memory_gib).
options:
  _input:
    description: The budget's inputs, C(gx10_plan.serving.memory[inventory_hostname]).
    type: dict
    required: true
  node_memory_gib:
    description: The node's memory in GiB.
    type: float
    required: true
  source:
    description: What the memory figure is, for the messages.
    type: str
    default: gx10_node_memory_gib
"""

EXAMPLES = r"""
budget: "{{ gx10_plan.serving.memory[inventory_hostname]
            | gx10.cluster.memory_budget(ansible_facts.memtotal_mb / 1024, 'MemTotal') }}"
"""

RETURN = r"""
_value:
  description: >-
    fits (bool), summary (the numbers in one line), problems (each naming the numbers and the
    variables), fix, and every figure in GiB (weights_gib, kv_gib, overhead_gib, engine_need_gib,
    engine_share_gib, shm_gib, reserve_gib, node_need_gib, node_memory_gib).
  type: dict
"""


def memory_budget(
    inputs: Any, node_memory_gib: Any, source: str = "gx10_node_memory_gib"
) -> dict[str, Any]:
    if not isinstance(inputs, Mapping):
        raise AnsibleFilterError(
            f"gx10.cluster.memory_budget expects the plan's budget inputs (a mapping), got "
            f"{inputs!r}: run the validate stage first (playbooks/validate.yml)"
        )
    try:
        memory = gib(node_memory_gib, source, minimum=0.001)
        return evaluate(Inputs.from_dict(inputs), memory, str(source)).to_dict()
    except BudgetError as exc:
        raise AnsibleFilterError(f"gx10.cluster.memory_budget: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"memory_budget": memory_budget}
