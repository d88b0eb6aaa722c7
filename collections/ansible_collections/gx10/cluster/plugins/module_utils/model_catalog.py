# SPDX-License-Identifier: Apache-2.0
"""The checkpoint catalog (FIELD_NOTES.md section 1), the fit check for a plan, and the draft
acceptance a checkpoint's speculative decoding is expected to reach (`gx10 doctor` judges the
served rate against it).

Sizes are the reported checkpoint sizes in GB, in the same unit as the ~121 GB a GB10 node has
usable. Tensor parallelism splits the weights evenly, so a plan of N nodes needs size / N per node.
The fit check is about weights only: KV cache and activations need room on top, which
`reserve_gb_per_node` can set aside (the field notes give no figure, so the default is 0).

Standard library only: the model_plan action runs it on the controller before any node is
touched, and ``gx10.model`` (``gx10 model ...``) exposes the same objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import (
    CatalogError,
    PlanDoesNotFitError,
)

USABLE_GB_PER_NODE = 121.0
"""Usable unified memory of one GB10 node (ASUS Ascent GX10 / DGX Spark), per the field notes."""


@dataclass(frozen=True, slots=True)
class SpecAcceptance:
    """The draft acceptance rate a speculative-decoding configuration reaches on a checkpoint.

    The rate is vLLM's: accepted draft tokens over proposed draft tokens
    (``vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total``, the
    "Avg Draft acceptance rate" of its SpecDecoding log line). It holds for this `method` and
    `num_speculative_tokens` only: later draft positions are accepted less often, so another k
    moves the rate.
    """

    method: str
    num_speculative_tokens: int
    low: float
    high: float
    source: str

    def matches(self, method: str, num_speculative_tokens: int) -> bool:
        return (method, num_speculative_tokens) == (self.method, self.num_speculative_tokens)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    label: str
    """The checkpoint as the field notes name it."""
    size_gb: float
    """Size in GB; for a family of variants, the largest (the one a plan must be able to hold)."""
    decision: str
    repo: str | None = None
    """Hub repository, where the field notes give one."""
    revision: str | None = None
    size_gb_min: float | None = None
    """For a family of variants: the smallest."""
    spec_acceptance: SpecAcceptance | None = None
    """The draft acceptance the served configuration reaches, where the field notes report it."""
    attention_heads: int | None = None
    """The model's attention heads (config.json ``num_attention_heads``): vLLM splits them evenly
    over the tensor-parallel ranks, so the TP size must divide them. None: unknown, unchecked."""

    def fits_one_node(self, usable_gb_per_node: float = USABLE_GB_PER_NODE) -> bool:
        return self.size_gb <= usable_gb_per_node

    @property
    def size_text(self) -> str:
        if self.size_gb_min is None:
            return f"{self.size_gb:.1f} GB"
        return f"{self.size_gb_min:g}-{self.size_gb:g} GB"


# DeepSeek V4 Flash's config.json (huggingface.co/deepseek-ai/DeepSeek-V4-Flash):
# "num_attention_heads": 64, "num_key_value_heads": 1 (MLA), beside "num_hidden_layers": 43 and
# "n_routed_experts": 256, which FIELD_NOTES section 1 gives too. Public recipes run it at TP 2, 4
# and 8. Taken from published copies of that config.json, not yet read from revision 9e165c30's
# own file: check it there (`jq .num_attention_heads config.json` in gx10_model_dir). Only the FP8
# entry carries it: the GGUF variants are other files whose metadata was not read.
DEEPSEEK_V4_FLASH_HEADS = 64

CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="deepseek-v4-flash-fp8",
        label="original FP8 deepseek-ai/DeepSeek-V4-Flash-0731",
        size_gb=166.9,
        decision="chosen",
        repo="deepseek-ai/DeepSeek-V4-Flash-0731",
        revision="9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        # The reference deployment's serving arguments (FIELD_NOTES section 4: method dspark,
        # num_speculative_tokens 5) and its measured rate (section 1: "DSpark, k=5, draft
        # acceptance 83-87%"). Where it should live once the serving profiles are a table of
        # their own: with the profile that sets --speculative-config.
        spec_acceptance=SpecAcceptance(
            method="dspark",
            num_speculative_tokens=5,
            low=0.83,
            high=0.87,
            source="FIELD_NOTES section 1 (the reference deployment, DSpark k=5)",
        ),
        attention_heads=DEEPSEEK_V4_FLASH_HEADS,
    ),
    CatalogEntry(
        name="deepseek-v4-flash-mxfp4-gguf",
        label="MXFP4 GGUF (llama.cpp path)",
        size_gb=156.0,
        decision="candidate for llama.cpp",
    ),
    CatalogEntry(
        name="deepseek-v4-flash-q4_k-abliterated",
        label="Q4_K abliterated",
        size_gb=164.6,
        decision="experiments",
    ),
    CatalogEntry(
        name="deepseek-v4-flash-ud-q2_k_xl",
        label="UD-Q2_K_XL",
        size_gb=90.0,
        decision="1-node vs 2-node A/B baseline",
    ),
    CatalogEntry(
        name="deepseek-v4-flash-ud-q3-q8_k_xl",
        label="UD-Q3..Q8_K_XL",
        size_gb=245.0,
        size_gb_min=178.0,
        decision="too tight even on 2 nodes",
    ),
)


def expected_spec_acceptance(
    method: str, num_speculative_tokens: int
) -> tuple[CatalogEntry, SpecAcceptance] | None:
    """The catalog's figure for a speculative configuration (the first checkpoint that has one
    for this method and k), or None when no checkpoint reports one."""
    for entry in CATALOG:
        figure = entry.spec_acceptance
        if figure is not None and figure.matches(method, num_speculative_tokens):
            return entry, figure
    return None


@dataclass(frozen=True, slots=True)
class FitReport:
    entry: CatalogEntry
    nodes: int
    per_node_gb: float
    usable_gb_per_node: float
    reserve_gb_per_node: float

    @property
    def free_gb_per_node(self) -> float:
        return self.usable_gb_per_node - self.reserve_gb_per_node - self.per_node_gb


def lookup(name_or_repo: str) -> CatalogEntry:
    """A catalog entry by name or Hub repository."""
    for entry in CATALOG:
        if name_or_repo in (entry.name, entry.repo):
            return entry
    names = ", ".join(entry.name for entry in CATALOG)
    raise CatalogError(f"unknown checkpoint {name_or_repo!r}; the catalog has: {names}")


def check_fits(
    entry: CatalogEntry,
    nodes: int,
    usable_gb_per_node: float = USABLE_GB_PER_NODE,
    *,
    reserve_gb_per_node: float = 0.0,
) -> FitReport:
    """Refuse (PlanDoesNotFitError, with the numbers) a plan whose nodes cannot hold the weights."""
    if nodes < 1:
        raise PlanDoesNotFitError(f"a plan needs at least 1 node, got {nodes}")
    room = usable_gb_per_node - reserve_gb_per_node
    per_node = entry.size_gb / nodes
    report = FitReport(entry, nodes, per_node, usable_gb_per_node, reserve_gb_per_node)
    if per_node <= room:
        return report
    node_word = "node" if nodes == 1 else "nodes"
    room_text = f"{usable_gb_per_node:.1f} GB usable per node"
    if reserve_gb_per_node:
        room_text += f" minus {reserve_gb_per_node:.1f} GB reserved = {room:.1f} GB"
    family = "; the largest variant counts" if entry.size_gb_min is not None else ""
    advice = (
        f"it needs at least {math.ceil(entry.size_gb / room)} nodes"
        if room > 0
        else "nothing fits: the reserve takes all the memory"
    )
    raise PlanDoesNotFitError(
        f"{entry.name} ({entry.size_text}{family}) does not fit on {nodes} {node_word}: "
        f"{per_node:.1f} GB of weights per node, {room_text} (short by {per_node - room:.1f} GB); "
        f"{advice}"
    )
