# SPDX-License-Identifier: Apache-2.0
"""The unified-memory budget of one node: does the serving profile fit, and by how much.

A GB10 node has one pool of memory for the CPU and the GPU (128 GB of LPDDR5X, of which the OS
and CUDA see about 121.6 GiB: FIELD_NOTES section 1, Anemll/dspark-vllm-gx10 README.md
"approximately 121 GiB of usable unified memory", MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47
"121.69 GiB").
Two conditions, both checked:

1. vLLM's share, ``gpu_memory_utilization`` x the node's memory, holds this rank's weights
   (checkpoint size / tensor parallel size), the KV cache the profile needs (``max_model_len``
   tokens for ``min(kv_context_seqs, max_num_seqs)`` full-length sequences, at the model's KV
   bytes per token: vLLM refuses to start unless one max-length request fits) and the runtime's
   own memory (activations, CUDA graphs, NCCL and torch workspaces);
2. the node holds vLLM's share, the container's ``/dev/shm`` (``vllm_serve_shm_size``, counted
   whole: tmpfs pages are memory) and a reserve for the OS (``gx10_node_reserve_gib``; the
   maintained 0731 recipe's gate wants 8 GiB MemAvailable on both hosts). An overcommitted
   head does not fail cleanly: it hard-resets.

The validate stage evaluates it with the inventory's ``gx10_node_memory_gib``; preflight again
with each node's real MemTotal. Standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1 << 30
NODE_MEMORY_VAR = "gx10_node_memory_gib"
RESERVE_VAR = "gx10_node_reserve_gib"
SHM_VAR = "vllm_serve_shm_size"
# What the OS and CUDA see on a GB10 node (121.63-121.69 GiB reported): the sources above.
DEFAULT_NODE_MEMORY_GIB = 121.6
# MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark docs/DEEPSEEK_V4_FLASH_0731.md: the full-context
# gate requires at least 8 GiB MemAvailable on both hosts.
DEFAULT_RESERVE_GIB = 8.0
DEFAULT_SHM_SIZE = "8g"

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([bkmgt]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BudgetError(ValueError):
    """A budget input is not a number or size; the message names the variable."""


def parse_size(text: Any, name: str = SHM_VAR) -> int:
    """A Docker size (``8g``, ``512m``, ``64gb``, bytes) in bytes; binary units, as Docker's."""
    match = _SIZE.match(str(text)) if isinstance(text, str | int) else None
    if match is None or isinstance(text, bool):
        raise BudgetError(f"{name} is {text!r}, not a size: write it like 8g or 512m")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def gib(value: Any, name: str, *, minimum: float = 0.0) -> float:
    """A GiB figure from the inventory, or a BudgetError naming the variable."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float) or number < minimum:
        raise BudgetError(f"{name} is {value!r}: it must be a number of GiB, at least {minimum:g}")
    return float(number)


@dataclass(frozen=True, slots=True)
class Inputs:
    """Everything the budget needs except the node's memory (JSON-serialisable, see to_dict)."""

    profile: str
    weights_bytes: int
    weights_source: str
    tensor_parallel: int
    kv_bytes_per_token: int
    max_model_len: int
    kv_seqs: int
    runtime_overhead_gib: float
    gpu_memory_utilization: float
    shm_bytes: int
    reserve_gib: float
    # Where each number comes from, for the messages (variable names and their origin).
    origins: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["origins"] = dict(self.origins)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inputs:
        try:
            return cls(
                profile=str(data["profile"]),
                weights_bytes=int(data["weights_bytes"]),
                weights_source=str(data["weights_source"]),
                tensor_parallel=int(data["tensor_parallel"]),
                kv_bytes_per_token=int(data["kv_bytes_per_token"]),
                max_model_len=int(data["max_model_len"]),
                kv_seqs=int(data["kv_seqs"]),
                runtime_overhead_gib=float(data["runtime_overhead_gib"]),
                gpu_memory_utilization=float(data["gpu_memory_utilization"]),
                shm_bytes=int(data["shm_bytes"]),
                reserve_gib=float(data["reserve_gib"]),
                origins={str(k): str(v) for k, v in dict(data.get("origins") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(
                f"the memory budget's inputs are incomplete ({exc}): run the validate stage "
                "(playbooks/validate.yml) first, it computes them into gx10_plan"
            ) from exc

    def origin(self, key: str, default: str) -> str:
        return self.origins.get(key, default)


@dataclass(frozen=True, slots=True)
class Budget:
    """One node's budget in GiB, and every problem found (empty: it fits)."""

    inputs: Inputs
    node_memory_gib: float
    node_memory_source: str
    weights_gib: float
    kv_gib: float
    overhead_gib: float
    engine_need_gib: float
    engine_share_gib: float
    shm_gib: float
    reserve_gib: float
    node_need_gib: float
    problems: tuple[str, ...]
    fixes: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        i = self.inputs
        return (
            f"{i.profile}: vLLM needs {self.engine_need_gib:.1f} GiB per rank (weights "
            f"{self.weights_gib:.1f} + KV {self.kv_gib:.1f} + runtime {self.overhead_gib:.1f}) of "
            f"its {self.engine_share_gib:.1f} GiB ({i.gpu_memory_utilization:g} x "
            f"{self.node_memory_gib:.1f}); the node needs {self.node_need_gib:.1f} GiB (vLLM "
            f"{self.engine_share_gib:.1f} + shm {self.shm_gib:.1f} + reserve "
            f"{self.reserve_gib:.1f}) of {self.node_memory_gib:.1f} GiB"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "summary": self.summary,
            "problems": list(self.problems),
            "fix": "; ".join(self.fixes),
            "node_memory_gib": round(self.node_memory_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "kv_gib": round(self.kv_gib, 2),
            "overhead_gib": round(self.overhead_gib, 2),
            "engine_need_gib": round(self.engine_need_gib, 2),
            "engine_share_gib": round(self.engine_share_gib, 2),
            "shm_gib": round(self.shm_gib, 2),
            "reserve_gib": round(self.reserve_gib, 2),
            "node_need_gib": round(self.node_need_gib, 2),
        }


def evaluate(
    inputs: Inputs, node_memory_gib: float, node_memory_source: str = NODE_MEMORY_VAR
) -> Budget:
    """The budget of ``inputs`` on a node of ``node_memory_gib``: the numbers and every problem."""
    i = inputs
    weights = i.weights_bytes / max(i.tensor_parallel, 1) / GIB
    kv = i.kv_bytes_per_token * i.max_model_len * i.kv_seqs / GIB
    overhead = i.runtime_overhead_gib
    engine_need = weights + kv + overhead
    util = i.gpu_memory_utilization
    share = util * node_memory_gib
    shm = i.shm_bytes / GIB
    reserve = i.reserve_gib
    node_need = share + shm + reserve
    # Each number's variable with its origin ("vllm_serve_x (inventory)"), and the bare name.
    util_var = i.origin("gpu_memory_utilization", "vllm_serve_gpu_memory_utilization")
    len_var = i.origin("max_model_len", "vllm_serve_max_model_len")
    seqs_var = i.origin("kv_seqs", "vllm_serve_kv_context_seqs")
    bytes_var = i.origin("kv_bytes_per_token", "vllm_serve_kv_bytes_per_token")
    overhead_var = i.origin("runtime_overhead_gib", "vllm_serve_runtime_overhead_gib")
    shm_var = i.origin("shm_bytes", SHM_VAR)
    reserve_var = i.origin("reserve_gib", RESERVE_VAR)
    util_name, len_name, seqs_name = (v.split(" ")[0] for v in (util_var, len_var, seqs_var))
    shm_name, reserve_name = (v.split(" ")[0] for v in (shm_var, reserve_var))
    problems: list[str] = []
    fixes: list[str] = []
    # The largest utilisation the node allows, the smallest the engine needs.
    max_util = max((node_memory_gib - shm - reserve) / node_memory_gib, 0.0)
    min_util = engine_need / node_memory_gib
    if engine_need > share:
        problems.append(
            f"{i.profile} does not fit in vLLM's share of memory: need {engine_need:.1f} GiB per "
            f"rank: weights {weights:.1f} ({i.weights_source} / tensor parallel "
            f"{i.tensor_parallel}) + KV {kv:.1f} ({i.max_model_len} tokens, {len_var}, x "
            f"{i.kv_seqs} full-length sequence(s), {seqs_var}, x {i.kv_bytes_per_token} B, "
            f"{bytes_var}) + runtime {overhead:.1f} ({overhead_var}) > available {share:.1f} GiB "
            f"({util_var} {util:g} x {node_memory_gib:.1f} GiB, {node_memory_source})"
        )
        if min_util <= max_util:
            fixes.append(f"raise {util_name} to at least {math.ceil(min_util * 1000) / 1000:.3f}")
    if node_need > node_memory_gib:
        problems.append(
            f"the node cannot hold it: need {node_need:.1f} GiB: vLLM {share:.1f} ({util_var} "
            f"{util:g} x {node_memory_gib:.1f}) + shm {shm:.1f} ({shm_var}) + reserve "
            f"{reserve:.1f} ({reserve_var}) > {node_memory_gib:.1f} GiB ({node_memory_source})"
        )
        fixes.append(
            f"lower {util_name} to at most {math.floor(max_util * 1000) / 1000:.3f}, or "
            f"{shm_name}, or {reserve_name}"
        )
    if problems and min_util > max_util:
        # The context the KV cache can hold at the largest share the node allows.
        room = min(util, max_util) * node_memory_gib - weights - overhead
        per_token = i.kv_bytes_per_token * i.kv_seqs
        longest = int(room * GIB // per_token) if room > 0 else 0
        if longest > 0:
            fixes.append(
                f"lower {len_name} to at most {longest}"
                + (f" or {seqs_name}" if i.kv_seqs > 1 else "")
            )
        else:
            fixes = [
                f"nothing fits on this node: weights and runtime alone need "
                f"{weights + overhead:.1f} GiB of the at most {max_util * node_memory_gib:.1f} GiB "
                f"the node leaves vLLM; serve a smaller checkpoint or on more nodes, or lower "
                f"{shm_name} or {reserve_name}"
            ]
    return Budget(
        inputs=i,
        node_memory_gib=node_memory_gib,
        node_memory_source=node_memory_source,
        weights_gib=weights,
        kv_gib=kv,
        overhead_gib=overhead,
        engine_need_gib=engine_need,
        engine_share_gib=share,
        shm_gib=shm,
        reserve_gib=reserve,
        node_need_gib=node_need,
        problems=tuple(problems),
        fixes=tuple(fixes),
    )
