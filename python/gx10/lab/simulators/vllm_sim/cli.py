"""The `vllm serve` front end: the flags we render, parsed and checked with vLLM's wording."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any

from .env import DEFAULT_VERSION
from .errors import SimFatal

DEFAULT_MASTER_PORT = 29501
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # vLLM's default when no model is named

TOP_USAGE = "vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."
SERVE_USAGE = "vllm serve [model_tag] [options]"

KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
)
EXECUTOR_BACKENDS = ("external_launcher", "mp", "ray", "uni")
# vLLM's MoEBackend choices plus the GB10 image's b12x backend (Anemll/dspark-vllm-gx10).
MOE_BACKENDS = (
    "auto",
    "triton",
    "deep_gemm",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_b12x",
    "marlin",
    "aiter",
)
TOKENIZER_MODES = ("auto", "deepseek_v32", "deepseek_v4", "hf", "mistral", "slow")
REASONING_PARSERS = (
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v4",
    "glm45",
    "granite",
    "hunyuan_a13b",
    "kimi_k2",
    "mistral",
    "openai_gptoss",
    "qwen3",
    "seed_oss",
    "step3",
)
TOOL_CALL_PARSERS = (
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "deepseek_v4",
    "glm45",
    "granite",
    "hermes",
    "hunyuan_a13b",
    "internlm",
    "jamba",
    "kimi_k2",
    "llama3_json",
    "llama4_json",
    "minimax",
    "mistral",
    "openai",
    "pythonic",
    "qwen3_coder",
    "qwen3_xml",
    "seed_oss",
    "step3",
    "xlam",
)
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


def human_readable_int(value: str) -> int:
    """vLLM's parser for lengths: 1048576, 32k (x1000), 32K (x1024), 1.5m."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)([kmgtKMGT]?)\s*", value)
    if match is None:
        raise ValueError(value)
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise ValueError(value)
        return int(number)
    power = "kmgt".index(suffix.lower()) + 1
    if suffix.isupper():
        if "." in number:
            raise ValueError(value)
        return int(number) * int(1024**power)
    return int(float(number) * float(1000**power))


def _json_value(value: str) -> Any:
    """vLLM's parse_type(json.loads): a ValueError becomes its ArgumentTypeError wording."""
    try:
        return json.loads(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"Value {value} cannot be converted to {json.loads}."
        ) from error


def _add_parallel_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument(
        "--distributed-executor-backend",
        choices=EXECUTOR_BACKENDS,
        default=None,
        metavar=str(sorted(EXECUTOR_BACKENDS)),
    )
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT)
    parser.add_argument("--headless", action="store_true")


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None)
    parser.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--revision", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--tokenizer-mode", choices=TOKENIZER_MODES, default="auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-model-len", type=human_readable_int, default=None)
    # "auto" reads the checkpoint's generation_config.json, "vllm" uses vLLM's own defaults.
    parser.add_argument("--generation-config", default="auto")


def _add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=human_readable_int, default=None)
    parser.add_argument("--long-prefill-token-threshold", type=int, default=0)
    parser.add_argument("--max-cudagraph-capture-size", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False)
    for name in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling"):
        parser.add_argument(name, action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--speculative-config", type=_json_value, default=None)
    parser.add_argument("--moe-backend", choices=MOE_BACKENDS, default="auto")
    parser.add_argument(
        "--enable-flashinfer-autotune", action=argparse.BooleanOptionalAction, default=None
    )


def _add_frontend_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", nargs="+", default=None)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument(
        "--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False
    )
    parser.add_argument("--reasoning-parser", choices=REASONING_PARSERS, default=None)
    parser.add_argument("--reasoning-config", type=_json_value, default=None)
    parser.add_argument("--default-chat-template-kwargs", type=_json_value, default=None)


def build_parser(version: str = DEFAULT_VERSION) -> argparse.ArgumentParser:
    """The `vllm` parser with its `serve` subcommand (the only one simulated)."""
    top = argparse.ArgumentParser(prog="vllm", usage=TOP_USAGE, allow_abbrev=False)
    top.add_argument("-v", "--version", action="version", version=version)
    subs = top.add_subparsers(dest="subparser", required=True)
    serve = subs.add_parser(
        "serve",
        prog="vllm serve",
        usage=SERVE_USAGE,
        allow_abbrev=False,
        help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
    )
    serve.add_argument("model_tag", nargs="?", default=None)
    _add_parallel_args(serve)
    _add_model_args(serve)
    _add_engine_args(serve)
    _add_frontend_args(serve)
    return top


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """FlexibleArgumentParser accepts --max_model_len for --max-model-len."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            key, sep, value = arg.partition("=")
            out.append(key.replace("_", "-") + sep + value)
        else:
            out.append(arg)
    return out


def parse_args(argv: Sequence[str], version: str = DEFAULT_VERSION) -> argparse.Namespace:
    """Parse like vLLM; argparse itself prints usage errors and exits 2."""
    args = build_parser(version).parse_args(normalize_argv(argv))
    args.model = args.model_tag or args.model or DEFAULT_MODEL
    return args


def validate_serve_args(args: argparse.Namespace) -> None:
    """validate_parsed_serve_args and the API server's own checks, with their wording."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise SimFatal("TypeError", "Error: --enable-auto-tool-choice requires --tool-call-parser")
    if args.tool_call_parser and args.tool_call_parser not in TOOL_CALL_PARSERS:
        raise SimFatal(
            "KeyError",
            f"'invalid tool call parser: {args.tool_call_parser} "
            f"(chose from {{ {','.join(TOOL_CALL_PARSERS)} }})'",
        )
    spec = args.speculative_config
    if spec is not None:
        if not isinstance(spec, dict):
            raise SimFatal("ValueError", f"speculative_config must be a JSON object, got {spec!r}")
        tokens = spec.get("num_speculative_tokens")
        if tokens is not None and (not isinstance(tokens, int) or tokens <= 0):
            raise SimFatal("ValueError", f"Expected num_speculative_tokens > 0, got {tokens!r}.")
    kwargs = args.default_chat_template_kwargs
    if kwargs is not None and not isinstance(kwargs, dict):
        raise SimFatal("ValueError", f"default_chat_template_kwargs must be a dict, got {kwargs!r}")
    reasoning = args.reasoning_config
    if reasoning is not None and not isinstance(reasoning, dict):
        raise SimFatal("ValueError", f"reasoning_config must be a JSON object, got {reasoning!r}")
    if args.long_prefill_token_threshold < 0:
        raise SimFatal(
            "ValueError",
            f"long_prefill_token_threshold must be >= 0, got {args.long_prefill_token_threshold}",
        )
    capture = args.max_cudagraph_capture_size
    if capture is not None and capture < 1:
        raise SimFatal("ValueError", f"max_cudagraph_capture_size must be >= 1, got {capture}")


def non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    defaults = vars(build_parser().parse_args(["serve"]))
    skip = {"model", "subparser"}
    return {
        key: value
        for key, value in vars(args).items()
        if key not in skip and defaults.get(key) != value
    }
