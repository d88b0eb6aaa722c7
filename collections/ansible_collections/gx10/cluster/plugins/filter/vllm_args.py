# SPDX-License-Identifier: Apache-2.0
"""Filter gx10.cluster.vllm_args: the `vllm serve` argument list for one rank."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.module_utils.vllm_args import (
    VllmArgsError,
    build_args,
)

DOCUMENTATION = r"""
name: vllm_args
short_description: The vllm serve argument list for one rank
description:
  - Builds C(serve MODEL --flag value ...) as a list from a settings mapping, so the container
    command never passes a shell and JSON-valued flags survive intact. Workers (rank > 0) get
    C(--headless); only the head gets C(--host) and C(--port).
options:
  _input:
    description: Settings (model, served_model_name, nnodes, node_rank, master_addr, master_port,
      profile, and the optional serving flags by their vLLM names with underscores).
    type: dict
    required: true
"""

EXAMPLES = r"""
command: "{{ settings | gx10.cluster.vllm_args }}"
"""

RETURN = r"""
_value:
  description: The argument list.
  type: list
  elements: str
"""


def vllm_args(settings: dict[str, Any]) -> list[str]:
    try:
        return build_args(settings)
    except VllmArgsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_args": vllm_args}
