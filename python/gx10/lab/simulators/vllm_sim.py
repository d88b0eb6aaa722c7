#!/usr/bin/python3
"""`vllm serve` for a lab node: the multi-node launch and the OpenAI API, without a GPU.

Test equipment. The lab has no GPU, so this stands where the `vllm` entry point of the community
GB10 image lives. It keeps the contract the project depends on, as the real server shows it:

- the `vllm serve` flags we render (unknown flags rejected by the same argparse front end, exit 2);
- the multi-node mp launch: rank 0 listens on --master-addr:--master-port like torch's TCPStore,
  headless workers connect with retries, both sides time out with torch's wording; a heartbeat
  keeps the pair joined afterwards (a worker whose head died keeps running and never rejoins; a
  head whose worker died stays "healthy" until a request needs the collective, then the engine
  dies after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS and the server exits, as observed on GX10 pairs);
- NCCL/Gloo environment sanity read from sysfs (interfaces, RDMA devices, the RoCE v2 GID index);
- model directory checks (config.json, trust_remote_code) with transformers/vLLM wording;
- an OpenAI-compatible API on the head: /health, /v1/models, /v1/chat/completions (SSE, usage,
  reasoning, tool calls), /v1/completions, /tokenize, /metrics, --api-key.

Text is generated deterministically (seeded by the prompt and the request's `seed`); timing comes
from a pluggable PerfModel. Standalone on purpose: it runs under Debian bookworm's python3.11 with
the standard library only.

Environment (sim-only knobs are GX10_SIM_*; the others are read as the real stack reads them):
  GX10_SIM_BOOT_SECONDS        weight loading and warm-up time on every rank (default 2)
  GX10_SIM_RENDEZVOUS_TIMEOUT  seconds both sides wait for each other (default 600, torch's default)
  GX10_SIM_SYSFS_ROOT          sysfs to read net and infiniband devices from (default /sys)
  GX10_SIM_GPUS_PER_NODE       visible GPUs per node (default 1, one GB10)
  GX10_SIM_TIME_SCALE          factor on simulated prefill/decode delays (default 1; 0 = instant).
                               Rates are modelled in simulated seconds: at scale S a wall second
                               is 1/S simulated seconds. /metrics exports the scale
                               (gx10_sim_info{time_scale=...}) so a client can convert; client
                               overheads grow by 1/S in simulated time, so measure rates at 1.
  GX10_SIM_HEARTBEAT_SECONDS   head/worker heartbeat period (default 1)
  GX10_SIM_PERF_MODEL          name of the timing model in PERF_MODELS (default "reference",
                               calibrated to FIELD_NOTES section 5; "simple" is the old one)
  GX10_SIM_STATE_DIR           the nvidia-smi simulator's state directory: its `locked_clocks`
                               ("MIN,MAX" MHz, written by -lgc) caps the SM clock the timing
                               model sees (default /var/lib/gx10-sim/nvidia-smi); every rank
                               writes its node's `load` there (GpuLoad: 0 idle, 0.7-1.0 while
                               sequences run; the head sends it to the workers)
  GX10_SIM_SM_CLOCK_MHZ        SM clock cap when no locked_clocks file exists (default unlocked)
  GX10_SIM_STALL_FILE          stall mode (test equipment, `gx10 lab stall`): while this file
                               exists, HTTP stays up but no engine step runs, so generation
                               produces no token (default /run/gx10-sim/vllm/stall; the head
                               removes a leftover one when it starts, as a restart ends a stall)
  GX10_SIM_PREFIX_CACHE_TOKENS tokens the prefix cache remembers, least recently used out
                               (default 2097152; the cache follows --enable-prefix-caching,
                               on by default as in vLLM V1, in blocks of --block-size, default 16)
  GX10_SIM_SPEC_ACCEPTANCE     draft token acceptance rate for speculative decoding (default 0.85)
  GX10_SIM_SEED                seed mixed into every generation (default 0)
  GX10_SIM_TOKENIZER           tokenizer.json of a BPE tokenizer (default: the regex tokenizer)
  GX10_SIM_VLLM_VERSION        version string to report (default 0.11.1+gx10sim)
  VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS  collective timeout once a peer is gone (default 300)
  VLLM_API_KEY, VLLM_HOST_IP, VLLM_LOGGING_LEVEL, NCCL_*, GLOO_SOCKET_IFNAME

Tokenizer: with GX10_SIM_TOKENIZER (path to a tokenizer.json; the lab image ships a small BPE
trained at build time) the `tokenizers` package tokenizes, as a real model's tokenizer does, for
/tokenize, /detokenize, the usage counts and the prefix cache alike. Without it (the standard
library only) text is cut into pieces by TOKEN_PIECE_RE: up to 4 letters, up to 3 digits, one
other symbol, each optionally with one leading space, or a run of whitespace. Special tokens
(SPECIAL_TOKENS) are one token each either way.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import ipaddress
import itertools
import json
import math
import os
import queue
import random
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_VERSION = "0.11.1+gx10sim"
DEFAULT_MASTER_PORT = 29501
DEFAULT_STALL_FILE = "/run/gx10-sim/vllm/stall"  # stall mode's switch (see GX10_SIM_STALL_FILE)
STALL_POLL_SECONDS = 0.2
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # vLLM's default when no model is named
NCCL_VERSION = "2.27.3"

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
TOKENIZER_MODES = ("auto", "hf", "slow", "mistral", "custom", "deepseek_v32", "deepseek_v4")
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

INVALID_MODEL = (
    "Invalid repository ID or local directory specified: '{model}'.\n"
    "Please verify the following requirements:\n"
    "1. Provide a valid Hugging Face repository ID.\n"
    "2. Specify a local directory that contains a recognized configuration file.\n"
    "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
    "   - For Mistral models: ensure the presence of a 'params.json'.\n"
)
REMOTE_CODE = (
    "Loading {model} requires you to execute the configuration file in that repo on your local "
    "machine. Make sure you have read the code there to avoid malicious use, then set the option "
    "`trust_remote_code=True` to remove this error."
)
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class SimFatal(Exception):
    """An error that ends the process the way the real stack ends: a final `Type: message`."""

    def __init__(self, exc_type: str, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.code = code


# --------------------------------------------------------------------------------------------
# Environment and logging
# --------------------------------------------------------------------------------------------


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env[name])
    except (KeyError, ValueError):
        return default


@dataclass(frozen=True)
class SimEnv:
    """Everything read from the environment, once, at start."""

    boot_seconds: float = 2.0
    rendezvous_timeout: float = 600.0
    sysfs_root: Path = Path("/sys")
    gpus_per_node: int = 1
    time_scale: float = 1.0
    heartbeat_seconds: float = 1.0
    execute_model_timeout: float = 300.0
    perf_model: str = "reference"
    state_dir: Path = Path("/var/lib/gx10-sim/nvidia-smi")
    stall_file: Path = Path(DEFAULT_STALL_FILE)
    sm_clock_mhz: float | None = None
    prefix_cache_tokens: int = 2_097_152
    spec_acceptance: float = 0.85
    seed: int = 0
    version: str = DEFAULT_VERSION
    log_level: str = "INFO"
    api_key: str | None = None
    host_ip: str | None = None
    hostname: str = "localhost"
    raw: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SimEnv:
        return cls(
            boot_seconds=max(_float_env(env, "GX10_SIM_BOOT_SECONDS", 2.0), 0.0),
            rendezvous_timeout=max(_float_env(env, "GX10_SIM_RENDEZVOUS_TIMEOUT", 600.0), 0.0),
            sysfs_root=Path(env.get("GX10_SIM_SYSFS_ROOT") or "/sys"),
            gpus_per_node=max(int(_float_env(env, "GX10_SIM_GPUS_PER_NODE", 1)), 0),
            time_scale=max(_float_env(env, "GX10_SIM_TIME_SCALE", 1.0), 0.0),
            heartbeat_seconds=max(_float_env(env, "GX10_SIM_HEARTBEAT_SECONDS", 1.0), 0.05),
            execute_model_timeout=max(
                _float_env(env, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 300.0), 0.0
            ),
            perf_model=env.get("GX10_SIM_PERF_MODEL") or DEFAULT_PERF_MODEL,
            state_dir=Path(env.get("GX10_SIM_STATE_DIR") or "/var/lib/gx10-sim/nvidia-smi"),
            stall_file=Path(env.get("GX10_SIM_STALL_FILE") or DEFAULT_STALL_FILE),
            sm_clock_mhz=_float_env(env, "GX10_SIM_SM_CLOCK_MHZ", 0.0) or None,
            prefix_cache_tokens=max(
                int(_float_env(env, "GX10_SIM_PREFIX_CACHE_TOKENS", 2_097_152)), 0
            ),
            spec_acceptance=min(max(_float_env(env, "GX10_SIM_SPEC_ACCEPTANCE", 0.85), 0.0), 1.0),
            seed=int(_float_env(env, "GX10_SIM_SEED", 0)),
            version=env.get("GX10_SIM_VLLM_VERSION") or DEFAULT_VERSION,
            log_level=(env.get("VLLM_LOGGING_LEVEL") or "INFO").upper(),
            api_key=env.get("VLLM_API_KEY") or None,
            host_ip=env.get("VLLM_HOST_IP") or None,
            hostname=socket.gethostname(),
            raw=dict(env),
        )


LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


class Log:
    """vLLM's log format: `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message` on stdout."""

    _lock = threading.Lock()

    def __init__(self, prefix: str = "", level: str = "INFO", out: TextIO | None = None) -> None:
        self.prefix = prefix
        self.level = LEVELS.get(level, 20)
        self.out = out if out is not None else sys.stdout

    def child(self, prefix: str) -> Log:
        log = Log(prefix, "INFO", self.out)
        log.level = self.level
        return log

    def raw(self, text: str) -> None:
        with self._lock:
            for line in text.splitlines() or [""]:
                self.out.write(f"{self.prefix}{line}\n")
            self.out.flush()

    def _emit(self, level: str, where: str, message: str) -> None:
        if LEVELS[level] < self.level:
            return
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw("\n".join(f"{level} {stamp} [{where}] {part}" for part in message.split("\n")))

    def debug_at(self, where: str, message: str) -> None:
        self._emit("DEBUG", where, message)

    def info_at(self, where: str, message: str) -> None:
        self._emit("INFO", where, message)

    def warning_at(self, where: str, message: str) -> None:
        self._emit("WARNING", where, message)

    def error_at(self, where: str, message: str) -> None:
        self._emit("ERROR", where, message)

    def uvicorn(self, message: str) -> None:
        """uvicorn's own lines (`INFO:     Application startup complete.`)."""
        self.raw(f"INFO:     {message}")


def torch_stamp() -> str:
    """The glog-style stamp torch's C++ side prints: W1020 12:00:00.123456."""
    now = time.time()
    return time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"


# --------------------------------------------------------------------------------------------
# Command line: the `vllm serve` front end
# --------------------------------------------------------------------------------------------


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


def _add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=human_readable_int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    for name in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling"):
        parser.add_argument(name, action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--speculative-config", type=_json_value, default=None)


def _add_frontend_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", nargs="+", default=None)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--reasoning-parser", choices=REASONING_PARSERS, default=None)
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


def non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    defaults = vars(build_parser().parse_args(["serve"]))
    skip = {"model", "subparser"}
    return {
        key: value
        for key, value in vars(args).items()
        if key not in skip and defaults.get(key) != value
    }


# --------------------------------------------------------------------------------------------
# Model directory and parallel layout
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str
    max_position_embeddings: int
    revision: str | None


def load_model(model: str, trust_remote_code: bool, revision: str | None) -> ModelInfo:
    """What vLLM reads from the model directory before anything else."""
    directory = Path(model)
    config_file = directory / "config.json"
    if not (directory.is_dir() and config_file.is_file()):
        raise SimFatal("ValueError", INVALID_MODEL.format(model=model))
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SimFatal(
            "OSError", f"It looks like the config file at '{config_file}' is not a valid JSON file."
        ) from error
    if not isinstance(config, dict):
        raise SimFatal(
            "OSError", f"It looks like the config file at '{config_file}' is not a valid JSON file."
        )
    if config.get("auto_map") and not trust_remote_code:
        raise SimFatal("ValueError", REMOTE_CODE.format(model=model))
    architectures = config.get("architectures") or ["DeepseekV3ForCausalLM"]
    max_pos = config.get("max_position_embeddings")
    return ModelInfo(
        path=model,
        architecture=str(architectures[0]),
        max_position_embeddings=max_pos if isinstance(max_pos, int) and max_pos > 0 else 131072,
        revision=revision,
    )


def check_parallel(args: argparse.Namespace, gpus: int) -> None:
    """ParallelConfig and the mp executor's layout checks; one GPU per rank."""
    tp, pp, nnodes = args.tensor_parallel_size, args.pipeline_parallel_size, args.nnodes
    backend = args.distributed_executor_backend
    if tp < 1 or pp < 1 or nnodes < 1 or args.node_rank < 0:
        raise SimFatal(
            "ValueError",
            "tensor_parallel_size, pipeline_parallel_size and nnodes "
            "must be >= 1 and node_rank >= 0",
        )
    if nnodes > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        raise SimFatal(
            "ValueError",
            "nnodes > 1 can only be set when distributed executor "
            "backend is mp, uni or external_launcher.",
        )
    if args.node_rank >= nnodes:
        raise SimFatal(
            "ValueError", f"node_rank ({args.node_rank}) must be less than nnodes ({nnodes})"
        )
    world = tp * pp
    if nnodes == 1 and world > gpus:
        if backend is None:
            raise SimFatal(
                "ValueError",
                f"World size ({world}) is larger than the number of available GPUs ({gpus}) "
                "in this node. If this is intentional and you are using:\n"
                "- ray, set '--distributed-executor-backend ray'.\n"
                "- multiprocessing, set '--nnodes' appropriately.",
            )
        raise SimFatal(
            "AssertionError",
            f"local_world_size ({world}) must be less than or "
            f"equal to the number of visible devices ({gpus}).",
        )
    local = world // nnodes
    if local > gpus:
        raise SimFatal(
            "AssertionError",
            f"local_world_size ({local}) must be less than or "
            f"equal to the number of visible devices ({gpus}).",
        )
    if world != nnodes * gpus:
        raise SimFatal(
            "ValueError",
            f"tensor_parallel_size ({tp}) x pipeline_parallel_size ({pp}) = {world} ranks does "
            f"not match nnodes ({nnodes}) x GPUs per node ({gpus}) = {nnodes * gpus}",
        )
    if nnodes > 1 and args.headless and args.node_rank == 0:
        raise SimFatal(
            "ValueError", "node rank 0 is the head: it serves the API and cannot run --headless"
        )
    if nnodes > 1 and not args.headless and args.node_rank > 0:
        raise SimFatal(
            "ValueError",
            f"node rank {args.node_rank} of a multi-node mp launch "
            "must run with --headless (only rank 0 serves the API)",
        )


# --------------------------------------------------------------------------------------------
# NCCL and Gloo environment, checked against sysfs the way the libraries fail
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommProblem:
    """One failure as the library reports it: its log lines, then the exception raised."""

    lines: tuple[str, ...]
    exc_type: str
    message: str


def _list_dir(path: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in path.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _nccl_prefix(env: SimEnv) -> str:
    pid = os.getpid()
    return f"{env.hostname}:{pid}:{pid} [0]"


def _nccl_error(env: SimEnv, where: str, warn: str, hints: Sequence[str] = ()) -> CommProblem:
    lines = [f"{_nccl_prefix(env)} {where} NCCL WARN {warn}"]
    lines += [f"{_nccl_prefix(env)} NCCL INFO [gx10-sim] {hint}" for hint in hints]
    return CommProblem(
        tuple(lines),
        "RuntimeError",
        "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    )


def _match_list(spec: str) -> tuple[bool, bool, list[str]]:
    """NCCL's interface/HCA list syntax: [^][=]a,b (exclude, exact match, prefixes)."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    return exclude, exact, [item.strip() for item in spec.split(",") if item.strip()]


def _matches(name: str, item: str, exact: bool) -> bool:
    return name == item if exact else name.startswith(item)


def check_gloo(env: SimEnv) -> CommProblem | None:
    spec = env.raw.get("GLOO_SOCKET_IFNAME")
    if not spec:
        return None
    present = set(_list_dir(env.sysfs_root / "class" / "net"))
    for name in (item.strip() for item in spec.split(",")):
        if name and name not in present:
            return CommProblem(
                (),
                "RuntimeError",
                "[enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:83] "
                f"ifa != nullptr. Unable to find address for: {name}",
            )
    return None


def check_nccl_socket(env: SimEnv) -> CommProblem | None:
    spec = env.raw.get("NCCL_SOCKET_IFNAME")
    if not spec:
        return None
    present = _list_dir(env.sysfs_root / "class" / "net")
    exclude, exact, items = _match_list(spec)
    hits = [name for name in present if any(_matches(name, item, exact) for item in items)]
    usable = [n for n in present if n not in hits and n != "lo"] if exclude else hits
    if usable:
        return None
    return _nccl_error(
        env,
        "misc/socket.cc:484",
        "Bootstrap : no socket interface found",
        [f"NCCL_SOCKET_IFNAME={spec} matches none of {present} in {env.sysfs_root}/class/net"],
    )


def select_hcas(env: SimEnv) -> tuple[list[tuple[str, int]], CommProblem | None]:
    """The (device, port) pairs NCCL would use, or the problem with NCCL_IB_HCA."""
    ib_root = env.sysfs_root / "class" / "infiniband"
    devices = _list_dir(ib_root)
    spec = env.raw.get("NCCL_IB_HCA", "")
    if not spec:
        return [(dev, 1) for dev in devices], None
    exclude, exact, items = _match_list(spec)
    if exclude:
        return [(d, 1) for d in devices if not any(_matches(d, i, exact) for i in items)], None
    selected: list[tuple[str, int]] = []
    for item in items:
        name, _, port_text = item.partition(":")
        port = int(port_text) if port_text.isdigit() else 1
        found = [dev for dev in devices if _matches(dev, name, exact)]
        if not found:
            return [], _nccl_error(
                env,
                "transport/net_ib.cc:707",
                f"NET/IB : No device found matching NCCL_IB_HCA entry '{item}'.",
                [f"RDMA devices in {ib_root}: {devices or 'none'}"],
            )
        selected += [(dev, port) for dev in found if (dev, port) not in selected]
    return selected, None


@dataclass(frozen=True)
class GidEntry:
    index: int
    gid: str
    kind: str | None
    ipv4: str | None


def read_gids(env: SimEnv, dev: str, port: int) -> list[GidEntry]:
    base = env.sysfs_root / "class" / "infiniband" / dev / "ports" / str(port)
    entries: list[GidEntry] = []
    for name in _list_dir(base / "gids"):
        if not name.isdigit():
            continue
        gid = _read(base / "gids" / name) or ""
        kind = _read(base / "gid_attrs" / "types" / name)
        ipv4: str | None = None
        try:
            mapped = ipaddress.IPv6Address(gid).ipv4_mapped
        except ValueError:
            mapped = None
        if mapped is not None:
            ipv4 = str(mapped)
        entries.append(GidEntry(int(name), gid, kind, ipv4))
    return sorted(entries, key=lambda entry: entry.index)


def usable_gid_indexes(entries: Sequence[GidEntry], host_ip: str | None) -> list[int]:
    """RoCE v2 entries of a routable IPv4 address; this node's own address if it is there."""
    usable = [
        e
        for e in entries
        if e.kind == "RoCE v2"
        and e.ipv4 is not None
        and e.ipv4 != "0.0.0.0"
        and not ipaddress.IPv4Address(e.ipv4).is_link_local
    ]
    own = [e.index for e in usable if host_ip is not None and e.ipv4 == host_ip]
    return own or [e.index for e in usable]


def _describe_gid(entry: GidEntry | None, index: int) -> str:
    if entry is None:
        return f"GID index {index} does not exist"
    return f"GID index {index} is {entry.kind or 'unset'} {entry.gid}"


def check_gid(env: SimEnv, hcas: Sequence[tuple[str, int]]) -> CommProblem | None:
    pinned = env.raw.get("NCCL_IB_GID_INDEX", "").strip()
    for dev, port in hcas:
        entries = read_gids(env, dev, port)
        good = usable_gid_indexes(entries, env.host_ip)
        if not pinned:
            if good:
                continue
            return _nccl_error(
                env,
                "transport/net_ib.cc:436",
                f"NET/IB : {dev}:{port} has no RoCE v2 GID for an IPv4 address",
                ["RoCE GIDs come from IP addresses: give this rail an IPv4 address"],
            )
        index = int(pinned) if pinned.lstrip("-").isdigit() else -1
        if index in good:
            continue
        entry = next((e for e in entries if e.index == index), None)
        expected = f"index {good[0]}" if good else "no usable entry"
        if entry is None:
            return _nccl_error(
                env,
                "misc/ibvwrap.cc:122",
                "Call to ibv_query_gid failed with error Invalid argument",
                [
                    f"{dev}:{port} NCCL_IB_GID_INDEX={pinned}: {_describe_gid(None, index)}; "
                    f"the RoCE v2 IPv4 entry of this node is {expected}"
                ],
            )
        return _nccl_error(
            env,
            "misc/ibvwrap.cc:187",
            "Call to ibv_modify_qp failed with error Network is unreachable",
            [
                f"{dev}:{port} NCCL_IB_GID_INDEX={pinned}: {_describe_gid(entry, index)}; "
                f"the RoCE v2 IPv4 entry of this node is {expected}"
            ],
        )
    return None


def check_comm_env(env: SimEnv, multi_rank: bool) -> CommProblem | None:
    """Gloo first (the CPU group), then NCCL bootstrap, then the IB transport."""
    problem = check_gloo(env)
    if problem is not None or not multi_rank:
        return problem
    problem = check_nccl_socket(env)
    if problem is not None:
        return problem
    if env.raw.get("NCCL_IB_DISABLE", "0").strip() == "1":
        return None
    hcas, problem = select_hcas(env)
    if problem is not None:
        return problem
    return check_gid(env, hcas)


# --------------------------------------------------------------------------------------------
# Head <-> worker channel: newline-delimited JSON with heartbeats
# --------------------------------------------------------------------------------------------


class PeerLostError(Exception):
    """The other side closed the connection or stopped answering."""


class Channel:
    """One TCP connection between the head and a worker rank."""

    def __init__(self, sock: socket.socket, reader: Any, heartbeat: float) -> None:
        self.sock = sock
        self.reader = reader
        self.heartbeat = heartbeat
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lost = threading.Event()
        self.last_seen = time.monotonic()
        self._write_lock = threading.Lock()
        self._on_lost: list[Callable[[], None]] = []

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._on_lost.append(callback)

    def _mark_lost(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            for callback in self._on_lost:
                callback()

    def send(self, message: Mapping[str, Any]) -> bool:
        data = (json.dumps(message) + "\n").encode()
        try:
            with self._write_lock:
                self.sock.sendall(data)
        except OSError:
            self._mark_lost()
            return False
        return True

    def start(self) -> None:
        self.sock.settimeout(None)
        threading.Thread(target=self._read_loop, daemon=True, name="channel-read").start()
        threading.Thread(target=self._ping_loop, daemon=True, name="channel-ping").start()

    def _read_loop(self) -> None:
        while not self.lost.is_set():
            try:
                line = self.reader.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                self._mark_lost()
                return
            self.last_seen = time.monotonic()
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("op") != "ping":
                self.inbox.put(message)

    def _ping_loop(self) -> None:
        silence = max(5 * self.heartbeat, 3.0)
        while not self.lost.wait(self.heartbeat):
            if not self.send({"op": "ping"}):
                return
            if time.monotonic() - self.last_seen > silence:
                self._mark_lost()
                return

    def recv(self, timeout: float, stop: threading.Event | None = None) -> dict[str, Any]:
        """The next message; PeerLostError if the peer is gone, TimeoutError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.inbox.get(timeout=0.05)
            except queue.Empty:
                pass
            if self.lost.is_set():
                raise PeerLostError
            if stop is not None and stop.is_set():
                raise InterruptedError
            if time.monotonic() >= deadline:
                raise TimeoutError

    def close(self) -> None:
        self.lost.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _listen_error(port: int, error: OSError) -> SimFatal:
    name = errno.errorcode.get(error.errno or 0, "EUNKNOWN")
    return SimFatal(
        "torch.distributed.DistNetworkError",
        "The server socket has failed to listen on any local network address. "
        f"port: {port}, useIpv6: false, code: -{error.errno}, name: {name}, "
        f"message: {os.strerror(error.errno or 0).lower()}",
    )


class HeadRendezvous:
    """Rank 0's side of the TCPStore rendezvous: listen, admit every node rank, then keep them."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, log: Log) -> None:
        self.addr, self.port = args.master_addr, args.master_port
        self.nnodes, self.env, self.log = args.nnodes, env, log
        self.fingerprint = {
            "nnodes": args.nnodes,
            "world_size": args.tensor_parallel_size * args.pipeline_parallel_size,
        }
        self.peers: dict[int, Channel] = {}
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.server.bind((self.addr, self.port))
            self.server.listen(16)
        except OSError as error:
            self.server.close()
            raise _listen_error(self.port, error) from error
        self.server.settimeout(0.2)

    def wait_for_workers(self, stop: threading.Event) -> None:
        timeout = self.env.rendezvous_timeout
        deadline = time.monotonic() + timeout
        while len(self.peers) < self.nnodes - 1:
            if stop.is_set():
                raise InterruptedError
            if time.monotonic() >= deadline:
                raise self._timeout_error(timeout)
            try:
                conn, peer = self.server.accept()
            except TimeoutError:
                continue
            self._admit(conn, peer)

    def _timeout_error(self, timeout: float) -> SimFatal:
        missing = [r for r in range(1, self.nnodes) if r not in self.peers]
        return SimFatal(
            "torch.distributed.DistStoreError",
            f"Timed out after {int(timeout) + 1} seconds waiting for clients. "
            f"{len(self.peers) + 1}/{self.nnodes} clients joined. Missing node rank(s): "
            f"{', '.join(map(str, missing))} never connected to the master at "
            f"{self.addr}:{self.port} (start the headless workers first)",
        )

    def _admit(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        conn.settimeout(5.0)
        reader = conn.makefile("rb")
        try:
            hello = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            conn.close()
            return
        rank = hello.get("node_rank") if isinstance(hello, dict) else None
        reason = None
        if not isinstance(rank, int) or not 1 <= rank < self.nnodes:
            reason = f"node rank {rank} is outside 1..{self.nnodes - 1}"
        elif rank in self.peers:
            reason = f"node rank {rank} already joined"
        elif any(hello.get(key) != value for key, value in self.fingerprint.items()):
            reason = (
                f"world layout mismatch: head has {self.fingerprint}, worker has "
                f"{ {k: hello.get(k) for k in self.fingerprint} }"
            )
        if reason is not None:
            conn.sendall((json.dumps({"op": "reject", "reason": reason}) + "\n").encode())
            conn.close()
            self.log.warning_at(
                "parallel_state.py:1087", f"Rejected a worker from {peer[0]}: {reason}"
            )
            return
        assert isinstance(rank, int)
        channel = Channel(conn, reader, self.env.heartbeat_seconds)
        channel.send({"op": "welcome", "world_size": self.fingerprint["world_size"]})
        channel.start()
        self.peers[rank] = channel
        self.log.info_at(
            "parallel_state.py:1165",
            f"node rank {rank} joined from {peer[0]}:"
            f"{peer[1]} ({len(self.peers) + 1}/{self.nnodes})",
        )

    def broadcast(self, message: Mapping[str, Any]) -> None:
        for channel in self.peers.values():
            channel.send(message)

    def gather(self, op: str, timeout: float, stop: threading.Event) -> dict[int, dict[str, Any]]:
        """The next `op` message of every rank; PeerLostError names nothing, callers do."""
        replies: dict[int, dict[str, Any]] = {}
        for rank, channel in sorted(self.peers.items()):
            while True:
                message = channel.recv(timeout, stop)
                if message.get("op") == op:
                    replies[rank] = message
                    break
        return replies

    def close(self) -> None:
        self.server.close()
        for channel in self.peers.values():
            channel.close()


def connect_to_head(
    args: argparse.Namespace, env: SimEnv, log: Log, stop: threading.Event
) -> Channel:
    """A headless rank's side: connect with retries until the rendezvous timeout."""
    timeout = env.rendezvous_timeout
    deadline = time.monotonic() + timeout
    next_warning = 0.0
    while True:
        if stop.is_set():
            raise InterruptedError
        try:
            sock = socket.create_connection((args.master_addr, args.master_port), timeout=1.0)
            break
        except OSError as error:
            now = time.monotonic()
            if now >= deadline:
                raise SimFatal(
                    "torch.distributed.DistNetworkError",
                    f"The client socket has timed out after {int(timeout * 1000)}ms while trying "
                    f"to connect to ({args.master_addr}, {args.master_port}).",
                ) from error
            if now >= next_warning:
                code = error.errno or errno.ECONNREFUSED
                log.raw(
                    f"[W{torch_stamp()} socket.cpp:755] [c10d] The client socket has failed "
                    f"to connect to [{args.master_addr}]:{args.master_port} (errno: {code} - "
                    f"{os.strerror(code)})."
                )
                next_warning = now + 10.0
            stop.wait(min(0.25, max(deadline - now, 0.0)))
    sock.settimeout(max(min(deadline - time.monotonic(), 10.0), 1.0))
    reader = sock.makefile("rb")
    hello = {
        "op": "hello",
        "node_rank": args.node_rank,
        "nnodes": args.nnodes,
        "world_size": args.tensor_parallel_size * args.pipeline_parallel_size,
    }
    try:
        sock.sendall((json.dumps(hello) + "\n").encode())
        reply = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError) as error:
        sock.close()
        raise SimFatal(
            "torch.distributed.DistNetworkError",
            f"Connection reset by peer while joining {args.master_addr}:{args.master_port}",
        ) from error
    if not isinstance(reply, dict) or reply.get("op") != "welcome":
        sock.close()
        reason = reply.get("reason") if isinstance(reply, dict) else "no answer"
        raise SimFatal(
            "torch.distributed.DistStoreError",
            f"The master at {args.master_addr}:"
            f"{args.master_port} refused node rank {args.node_rank}: {reason}",
        )
    channel = Channel(sock, reader, env.heartbeat_seconds)
    channel.start()
    return channel


# --------------------------------------------------------------------------------------------
# Tokenizer and chat template
# --------------------------------------------------------------------------------------------

TOKEN_PIECE_RE = re.compile(r" ?[^\W\d_]{1,4}| ?\d{1,3}| ?_| ?[^\w\s]|\s+")
VOCAB_SIZE = 128000
# DeepSeek's special tokens: FULLWIDTH VERTICAL LINE (U+FF5C), LOWER ONE EIGHTH BLOCK (U+2581).
_BAR, _SP = "\uff5c", "\u2581"
BOS = f"<{_BAR}begin{_SP}of{_SP}sentence{_BAR}>"
EOS = f"<{_BAR}end{_SP}of{_SP}sentence{_BAR}>"
USER, ASSISTANT = f"<{_BAR}User{_BAR}>", f"<{_BAR}Assistant{_BAR}>"
THINK, END_THINK = "<think>", "</think>"
TOOL_OUT = f"<{_BAR}tool{_SP}output{_SP}begin{_BAR}>"
END_TOOL_OUT = f"<{_BAR}tool{_SP}output{_SP}end{_BAR}>"
SPECIAL_TOKENS = {
    BOS: 0,
    EOS: 1,
    THINK: 128798,
    END_THINK: 128799,
    TOOL_OUT: 128814,
    END_TOOL_OUT: 128815,
    USER: 128803,
    ASSISTANT: 128804,
}
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(token) for token in SPECIAL_TOKENS) + ")")


class BpeTokenizer:
    """A real BPE tokenizer (Hugging Face `tokenizers`, tokenizer.json) in place of the regex one.

    The chat template's special tokens are added to it when the file lacks them, so they stay one
    token each; their ids are then the tokenizer's own (as with a real model's tokenizer)."""

    def __init__(self, path: str) -> None:
        try:
            # Only with GX10_SIM_TOKENIZER: the simulator otherwise runs on the standard library.
            from tokenizers import Tokenizer  # noqa: PLC0415
        except ImportError as exc:  # pragma: no cover - the image ships it
            raise SimFatal("ImportError", f"GX10_SIM_TOKENIZER={path}: {exc}") from exc
        try:
            self.tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # the library raises its own Exception type
            raise SimFatal("OSError", f"GX10_SIM_TOKENIZER={path}: {exc}") from exc
        self.path = path
        missing = [t for t in SPECIAL_TOKENS if self.tokenizer.token_to_id(t) is None]
        if missing:
            self.tokenizer.add_special_tokens(missing)
        self.special_ids = {t: int(self.tokenizer.token_to_id(t) or 0) for t in SPECIAL_TOKENS}

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """(ids, text pieces); a piece is the slice of `text` its token covers."""
        if not text:
            return [], []
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return list(enc.ids), [text[start:end] for start, end in enc.offsets]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


_BPE: BpeTokenizer | None = None


def use_tokenizer(path: str | None) -> None:
    """Select the tokenizer every endpoint uses: a tokenizer.json, or None for the regex one."""
    global _BPE  # noqa: PLW0603 - one tokenizer for the whole process, chosen at start
    _BPE = BpeTokenizer(path) if path else None


def tokenizer_name() -> str:
    return _BPE.path if _BPE is not None else "gx10-sim-regex"


def encode(text: str) -> tuple[list[int], list[str]]:
    """(ids, pieces) of `text` with the active tokenizer; special tokens stay whole."""
    if _BPE is not None:
        return _BPE.encode(text)
    pieces: list[str] = []
    for part in _SPECIAL_RE.split(text):
        if part in SPECIAL_TOKENS:
            pieces.append(part)
        elif part:
            pieces += TOKEN_PIECE_RE.findall(part)
    return [token_id(piece) for piece in pieces], pieces


def decode(ids: Sequence[int]) -> str:
    if _BPE is not None:
        return _BPE.decode(ids)
    raise ApiError(400, "detokenize needs a tokenizer with a vocabulary (GX10_SIM_TOKENIZER)")


def special_id(token: str) -> int:
    return _BPE.special_ids[token] if _BPE is not None else SPECIAL_TOKENS[token]


def token_pieces(text: str) -> list[str]:
    """The pieces `text` tokenizes into; special tokens stay whole."""
    return encode(text)[1]


def token_id(piece: str) -> int:
    """The regex tokenizer's id of one piece."""
    special = SPECIAL_TOKENS.get(piece)
    if special is not None:
        return special
    return 2 + zlib.crc32(piece.encode("utf-8")) % VOCAB_SIZE


def tokenize(text: str, add_special_tokens: bool = False) -> list[int]:
    ids = encode(text)[0]
    return [special_id(BOS), *ids] if add_special_tokens else ids


def count_tokens(text: str) -> int:
    return len(encode(text)[0])


def message_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None,
    thinking: bool,
    add_generation_prompt: bool = True,
) -> str:
    """A DeepSeek-style template: what the prompt token count is computed from."""
    system = "".join(message_text(m.get("content")) for m in messages if m.get("role") == "system")
    if tools:
        system += "\n\n## Tools\n" + json.dumps(list(tools), ensure_ascii=False)
    out = [BOS, system]
    for message in messages:
        role = message.get("role")
        text = message_text(message.get("content"))
        if role == "user":
            out.append(USER + text)
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            out.append(ASSISTANT + END_THINK + text + json.dumps(calls) * bool(calls) + EOS)
        elif role == "tool":
            out.append(TOOL_OUT + text + END_TOOL_OUT)
    if add_generation_prompt:
        out.append(ASSISTANT + (THINK if thinking else END_THINK))
    return "".join(out)


def thinking_enabled(kwargs: Mapping[str, Any] | None, reasoning_effort: Any = None) -> str | None:
    """The thinking mode asked for, or None: `thinking`/`enable_thinking` kwargs or effort."""
    kwargs = kwargs or {}
    for key in ("thinking", "enable_thinking", "thinking_mode"):
        if key in kwargs:
            value = kwargs[key]
            if value in (False, None, "off", "none", "false", "disabled", 0):
                return None
            return "on" if value is True else str(value)
    if reasoning_effort not in (None, "none"):
        return str(reasoning_effort)
    return None


# --------------------------------------------------------------------------------------------
# Timing model and text generation
# --------------------------------------------------------------------------------------------


class PerfModel:
    """How long a request takes: time to first token, then decode speed per session.

    The default is simple and smooth; a calibrated model subclasses this and registers in
    PERF_MODELS (selected with GX10_SIM_PERF_MODEL). `concurrency` is the number of requests
    running at once, `context` the tokens in the sequence so far.

    The engine calls `prefill_seconds` and `decode_rate`, which add what the simple model leaves
    out (prefix-cache hits, the SM clock cap, sessions decoding while a prompt is prefilled);
    their defaults fall back to `ttft` and `decode_tps`, so a model may override either layer.
    With `serial_prefill` the engine prefills one prompt at a time (first come, first served).
    """

    prefill_tps = 1800.0
    decode_tps_single = 55.0
    serial_prefill = False

    def ttft(self, prompt_tokens: int, concurrency: int) -> float:
        return 0.05 + prompt_tokens / self.prefill_tps * (1.0 + 0.1 * max(concurrency - 1, 0))

    def decode_tps(self, context: int, concurrency: int) -> float:
        per_session = self.decode_tps_single / (1.0 + 0.15 * max(concurrency - 1, 0))
        return per_session * (1.0 - 0.15 * min(context / 1_048_576, 1.0))

    def prefill_seconds(
        self,
        prompt_tokens: int,
        cached_tokens: int,
        concurrency: int,
        decoding: int,
        clock_mhz: float | None,
    ) -> float:
        """Seconds from admission to the first token; cached tokens cost nothing here."""
        return self.ttft(max(prompt_tokens - cached_tokens, 1), concurrency)

    def decode_rate(self, context: int, concurrency: int, clock_mhz: float | None) -> float:
        """Tokens per second of one session (speculative steps included)."""
        return self.decode_tps(context, concurrency)


def _interpolate_log2(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise linear in log2(x) through `points` (sorted by x), flat outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    return points[-1][1]


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise linear through `points` (sorted by x), flat outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    return points[-1][1]


class ReferencePerfModel(PerfModel):
    """Calibrated to the reference deployment (FIELD_NOTES section 5), unlocked clocks.

    - Prefill (one prompt at a time): the single-stream table's prefill rates, interpolated in
      log2(prompt); TTFT = uncached prompt tokens / rate, so prefill tok/s = prompt / TTFT
      reproduces the table (1,744 at 256, 1,860-1,980 at 4k-32k, 944 at 512k). Every session
      decoding meanwhile slows it by PREFILL_DECODE_DRAG (chunked prefill shares the steps;
      fitted to the TTFTs of the 2,048 and 8,192 concurrency cases).
    - Decode per session: 56.1 tok/s at 256 tokens of context down to 45.9 at 512k (quadratic in
      log2(context)), times the concurrency table's per-session ratio (49.8 -> 19.2 from 1 to 12
      streams, relative to its own single stream; aggregate x4.6 at 12, "x4.5" in the notes).
      The concurrency table's single stream (49.8) ran 11% below the context sweep's (56.1):
      the model keeps the context sweep's absolute rates and the concurrency table's ratios.
      Beyond 12 running sessions the aggregate stays flat.
    - SM clock: the real clock saturates at REAL_CLOCK_MAX_MHZ; prefill scales with
      min(clock, 2400) / 2400, decode with (clock / 2480) ** 0.23 (caps 2000 -> 2800, +40%,
      gave +5%).
    """

    serial_prefill = True
    REAL_CLOCK_MAX_MHZ = 2480.0
    PREFILL_CLOCK_KNEE_MHZ = 2400.0
    # Caps 2000 -> 2800 (+40%) gave +5% decode; the real clock stops near 2480, so +5% spans
    # 2000 -> 2480 MHz of real clock.
    DECODE_CLOCK_EXPONENT = math.log(1.05) / math.log(REAL_CLOCK_MAX_MHZ / 2000.0)
    PREFILL_DECODE_DRAG = 0.05
    PREFILL = (
        (256, 1744.0),
        (1024, 1306.0),
        (4096, 1933.0),
        (8192, 1946.0),
        (16384, 1980.0),
        (32768, 1860.0),
        (65536, 1749.0),
        (131072, 1553.0),
        (262144, 1233.0),
        (524288, 944.0),
    )
    DECODE_SHORT, DECODE_LONG = 56.1, 45.9
    DECODE_SHORT_CONTEXT, DECODE_LONG_CONTEXT = 256, 524288
    # Per-session decode / single-stream decode, prompt 256, MAX_NUM_SEQS=12. The table's 10-stream
    # point (19.0, below its 12-stream 19.2) is left out so the curve stays monotonic.
    SESSION_SCALE = (
        (1, 1.0),
        (2, 46.9 / 49.8),
        (4, 30.0 / 49.8),
        (6, 25.1 / 49.8),
        (8, 22.6 / 49.8),
        (12, 19.2 / 49.8),
    )

    def clock_factors(self, clock_mhz: float | None) -> tuple[float, float]:
        """(prefill, decode) multipliers for an SM clock cap; None = unlocked."""
        real = self.REAL_CLOCK_MAX_MHZ if clock_mhz is None else min(clock_mhz, 1e9)
        real = max(min(real, self.REAL_CLOCK_MAX_MHZ), 1.0)
        prefill = min(real, self.PREFILL_CLOCK_KNEE_MHZ) / self.PREFILL_CLOCK_KNEE_MHZ
        decode = (real / self.REAL_CLOCK_MAX_MHZ) ** self.DECODE_CLOCK_EXPONENT
        return prefill, decode

    def prefill_rate(self, prompt_tokens: int, clock_mhz: float | None = None) -> float:
        return (
            _interpolate_log2(self.PREFILL, max(prompt_tokens, 1))
            * self.clock_factors(clock_mhz)[0]
        )

    def session_scale(self, concurrency: int) -> float:
        top, top_scale = self.SESSION_SCALE[-1]
        if concurrency > top:
            return top_scale * top / concurrency
        return _interpolate(self.SESSION_SCALE, max(concurrency, 1))

    def single_decode(self, context: int) -> float:
        span = math.log2(self.DECODE_LONG_CONTEXT / self.DECODE_SHORT_CONTEXT)
        where = math.log2(max(context, self.DECODE_SHORT_CONTEXT) / self.DECODE_SHORT_CONTEXT)
        frac = min(where / span, 1.0)
        return self.DECODE_SHORT - (self.DECODE_SHORT - self.DECODE_LONG) * frac * frac

    def ttft(self, prompt_tokens: int, concurrency: int) -> float:
        return prompt_tokens / self.prefill_rate(prompt_tokens)

    def decode_tps(self, context: int, concurrency: int) -> float:
        return self.decode_rate(context, concurrency, None)

    def prefill_seconds(
        self,
        prompt_tokens: int,
        cached_tokens: int,
        concurrency: int,
        decoding: int,
        clock_mhz: float | None,
    ) -> float:
        # The rate is the one of the whole prompt's length (attention over all of it).
        work = max(prompt_tokens - cached_tokens, 1)
        drag = 1.0 + self.PREFILL_DECODE_DRAG * max(decoding, 0)
        return work / self.prefill_rate(prompt_tokens, clock_mhz) * drag

    def decode_rate(self, context: int, concurrency: int, clock_mhz: float | None) -> float:
        decode = self.clock_factors(clock_mhz)[1]
        return self.single_decode(context) * self.session_scale(concurrency) * decode


PERF_MODELS: dict[str, Callable[[], PerfModel]] = {
    "simple": PerfModel,
    "reference": ReferencePerfModel,
}
DEFAULT_PERF_MODEL = "reference"


def predict_case(
    perf: PerfModel,
    prompt_tokens: int,
    concurrency: int,
    output_tokens: int,
    *,
    max_num_seqs: int,
    clock_mhz: float | None = None,
) -> list[tuple[float, float]]:
    """(first token, end) per request, in simulated seconds, for `concurrency` requests sent
    together with unique prompts, each generating exactly `output_tokens` one token per step.

    Mirrors the engine: admission up to max_num_seqs, prefill one prompt at a time when the model
    says so (first come, first served), the first token at the end of prefill, then each token
    timed with the running count when the previous one left. Used to check the bench harness.
    """
    waiting = list(range(concurrency))
    running = 0
    prefill_queue: list[int] = []
    prefilling: list[tuple[float, int]] = []  # (end, request)
    sessions: dict[int, tuple[int, float]] = {}  # request -> (tokens produced, next token at)
    first: dict[int, float] = {}
    out: dict[int, tuple[float, float]] = {}
    now = 0.0
    while len(out) < concurrency:
        while waiting and running < max_num_seqs:
            prefill_queue.append(waiting.pop(0))
            running += 1
        limit = 1 if perf.serial_prefill else len(prefill_queue) + len(prefilling)
        while prefill_queue and len(prefilling) < limit:
            request = prefill_queue.pop(0)
            seconds = perf.prefill_seconds(prompt_tokens, 0, running, len(sessions), clock_mhz)
            prefilling.append((now + seconds, request))
        events = [(end, "prefill", r) for end, r in prefilling]
        events += [(at, "token", r) for r, (_, at) in sessions.items()]
        now, kind, request = min(events)
        if kind == "prefill":
            prefilling.remove((now, request))
            first[request] = now
            produced = 1
        else:
            produced = sessions.pop(request)[0] + 1
        if produced >= output_tokens:
            sessions.pop(request, None)
            out[request] = (first[request], now)
            running -= 1
            continue
        rate = perf.decode_rate(prompt_tokens + produced + 1, running, clock_mhz)
        sessions[request] = (produced, now + 1.0 / max(rate, 1e-6))
    return [out[r] for r in range(concurrency)]


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _split(
    "the model answers with plain words so that clients can read every token as it streams "
    "through the lab network between two nodes while the head keeps time for each request and "
    "reports usage counts that match what was sent in order to measure prefill decode and "
    "latency for every session under load with many users at once on rails of fast links "
    "where memory bandwidth bounds the decode rate and compute bounds the prefill rate so the "
    "numbers stay honest and repeatable from run to run"
)
REASONING_WORDS = _split(
    "let me think about this step by step first consider what the user asks then check the "
    "facts compare the options weigh each one and verify the result before answering clearly "
    "and briefly maybe there is a simpler way so I should double check the edge cases"
)


def word_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Sentences of random words, forever."""
    while True:
        length = rng.randint(6, 16)
        sentence = [rng.choice(words) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        yield " " + " ".join(sentence) + "."


def token_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Token pieces of generated prose, forever; the first piece has no leading space."""
    first = True
    for sentence in word_stream(rng, words):
        for piece in token_pieces(sentence):
            yield piece.lstrip() if first else piece
            first = False


@dataclass
class ToolCall:
    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")


STOPWORDS = frozenset(
    _split(
        "the a an and or of to for in on at by with from this that is are be can you your please "
        "what whats which when where how get set use using into about it its me my our"
    )
)


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def _tool_words(tool: Mapping[str, Any]) -> set[str]:
    function = tool.get("function") or {}
    name = str(function.get("name", ""))
    words = _words(name.replace("_", " ").replace("-", " "))
    description = str(function.get("description", ""))
    return words | {w for w in _words(description) if len(w) >= 4}


def _extract_string(prop: str, schema: Mapping[str, Any], text: str) -> str:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        mentioned = [str(v) for v in enum if str(v).lower() in text.lower()]
        return mentioned[0] if mentioned else str(enum[0])
    quoted = re.findall(r"`([^`]+)`|\"([^\"]+)\"|'([^']{2,})'", text)
    if quoted:
        return str(next(part for part in quoted[0] if part))
    lowered = prop.lower()
    if any(k in lowered for k in ("path", "file", "name")):
        found = re.findall(r"[\w./-]+\.[A-Za-z0-9]{1,5}\b", text)
        if found:
            return str(found[0])
    place = re.findall(r"\b(?:in|for|at|of|to)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", text)
    if place:
        return str(place[-1])
    capitals = re.findall(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z][\w-]*)", text)
    if capitals:
        return str(capitals[-1])
    return text.strip()[:64]


def tool_arguments(parameters: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Arguments for a JSON schema, taken from the user's words where they can be."""
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or props.keys())
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    args: dict[str, Any] = {}
    for name, schema in props.items():
        if not isinstance(schema, dict) or name not in required:
            continue
        kind = schema.get("type", "string")
        if kind == "integer":
            args[name] = int(float(numbers[0])) if numbers else 1
        elif kind == "number":
            args[name] = float(numbers[0]) if numbers else 1.0
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = _extract_string(name, schema, text)
    return args


def pick_tool_call(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], tool_choice: Any
) -> ToolCall | None:
    """The call the model makes: forced, required, or when the user's words match a tool."""
    functions = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if not functions or tool_choice == "none" or not messages:
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    text = message_text(last.get("content"))
    chosen: dict[str, Any] | None = None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        chosen = next((t for t in functions if t["function"].get("name") == wanted), None)
    else:
        asked = _words(text)
        scored = [(len(asked & _tool_words(t)), i) for i, t in enumerate(functions)]
        best, index = max(scored, key=lambda pair: (pair[0], -pair[1]))
        if best > 0:
            chosen = functions[index]
        elif tool_choice == "required":
            chosen = functions[0]
    if chosen is None:
        return None
    function = chosen["function"]
    parameters = function.get("parameters") or {}
    arguments = tool_arguments(parameters if isinstance(parameters, dict) else {}, text)
    return ToolCall(str(function.get("name")), json.dumps(arguments, ensure_ascii=False))


# --------------------------------------------------------------------------------------------
# The engine: admission, timing, counters, and death
# --------------------------------------------------------------------------------------------


class EngineDeadError(Exception):
    pass


TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=dict)
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))


class PrefixCache:
    """vLLM's automatic prefix caching, reduced to what timing needs: block hashes chained from
    the start of the prompt (a block only matches if every block before it matched), least
    recently used blocks evicted first."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()

    def match(self, hashes: Sequence[str]) -> int:
        """How many leading blocks of `hashes` are cached (and mark them recently used)."""
        hits = 0
        with self.lock:
            for digest in hashes:
                if digest not in self.blocks:
                    break
                self.blocks.move_to_end(digest)
                hits += 1
        return hits

    def insert(self, hashes: Sequence[str]) -> None:
        if self.capacity <= 0:
            return
        with self.lock:
            for digest in hashes:
                self.blocks[digest] = None
                self.blocks.move_to_end(digest)
            while len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)


def block_hashes(pieces: Sequence[str], block_size: int) -> tuple[str, ...]:
    """Chained hashes of the prompt's full blocks of `block_size` tokens."""
    out: list[str] = []
    parent = b""
    for start in range(0, len(pieces) - block_size + 1, block_size):
        block = "\x00".join(pieces[start : start + block_size]).encode("utf-8")
        parent = hashlib.blake2b(parent + block, digest_size=16).digest()
        out.append(parent.hex())
    return tuple(out)


class Engine:
    """Shared state of the head's engine: slots, counters, and the peer/engine health."""

    def __init__(
        self,
        env: SimEnv,
        max_num_seqs: int,
        spec_tokens: int,
        log: Log,
        *,
        block_size: int = 16,
        prefix_caching: bool = True,
    ) -> None:
        self.env = env
        self.max_num_seqs = max_num_seqs
        self.spec_tokens = spec_tokens
        self.log = log
        self.perf = PERF_MODELS.get(env.perf_model, PerfModel)()
        self.cond = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.decoding = 0
        self.block_size = max(block_size, 1)
        self.prefix_cache = PrefixCache(
            env.prefix_cache_tokens // self.block_size if prefix_caching else 0
        )
        self.prefill_lock = threading.Lock()
        self.counters = Counters(spec_accepted_per_pos=[0] * spec_tokens)
        self.peer_lost = threading.Event()
        self.dead = threading.Event()
        self._stuck_timer: threading.Timer | None = None
        self._stall_logged = False
        # Told the GPU load (engine_load) whenever the running count changes; see GpuLoad.
        self.load_listener: Callable[[float], None] | None = None

    def admit(self) -> None:
        with self.cond:
            self.waiting += 1
            try:
                while self.running >= self.max_num_seqs and not self.dead.is_set():
                    self.cond.wait(0.1)
            finally:
                self.waiting -= 1
            if self.dead.is_set():
                raise EngineDeadError
            self.running += 1
            self._load_changed()

    def release(self) -> None:
        with self.cond:
            self.running -= 1
            self.cond.notify_all()
            self._load_changed()

    def _load_changed(self) -> None:
        if self.load_listener is not None:
            self.load_listener(engine_load(self.running, self.max_num_seqs))

    def sleep(self, seconds: float) -> None:
        """Model time passing; a step needs every rank, so a lost peer wedges it."""
        if self.peer_lost.is_set():
            self._start_stuck_timer()
            self.dead.wait()
        if self.dead.is_set():
            raise EngineDeadError
        if (
            seconds > 0
            and self.env.time_scale > 0
            and self.dead.wait(seconds * self.env.time_scale)
        ):
            raise EngineDeadError

    def sleep_until(self, deadline: float) -> None:
        """Sleep to a monotonic deadline: steps timed this way do not accumulate oversleep."""
        if self.peer_lost.is_set() or self.dead.is_set():
            self.sleep(0.0)
        remaining = deadline - time.monotonic()
        if remaining > 0 and self.dead.wait(remaining):
            raise EngineDeadError

    def clock_cap(self) -> float | None:
        """The SM clock cap the GPU runs under: nvidia-smi's -lgc state, else the env knob."""
        try:
            text = (self.env.state_dir / "locked_clocks").read_text(encoding="utf-8")
            return float(text.strip().split(",")[-1])
        except (OSError, ValueError):
            return self.env.sm_clock_mhz

    def prefill(self, plan: Plan, clock: float | None) -> int:
        """Time the prompt's prefill (one at a time if the model says so); returns cached tokens."""
        lock = self.prefill_lock if self.perf.serial_prefill else contextlib.nullcontext()
        with lock:
            cached = self.prefix_cache.match(plan.block_hashes) * self.block_size
            cached = min(cached, max(plan.prompt_tokens - 1, 0))
            with self.cond:
                self.counters.prefix_hits += cached
                decoding = self.decoding
            self.sleep(
                self.perf.prefill_seconds(plan.prompt_tokens, cached, self.running, decoding, clock)
            )
            self.prefix_cache.insert(plan.block_hashes)
        return cached

    def _start_stuck_timer(self) -> None:
        with self.cond:
            if self._stuck_timer is None and not self.dead.is_set():
                self._stuck_timer = threading.Timer(self.env.execute_model_timeout, self.die)
                self._stuck_timer.daemon = True
                self._stuck_timer.start()

    def die(self) -> None:
        if self.dead.is_set():
            return
        engine_log = self.log.child(f"(EngineCore_DP0 pid={os.getpid()}) ")
        engine_log.error_at(
            "core.py:710",
            "EngineCore encountered a fatal error.\n"
            "TimeoutError: RPC call to execute_model timed out.",
        )
        self.log.error_at(
            "async_llm.py:480",
            "AsyncLLM output_handler failed.\n"
            f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}",
        )
        self.dead.set()
        with self.cond:
            self.cond.notify_all()

    def stalled(self) -> bool:
        """Stall mode (test equipment): the switch is a file, read at every step."""
        return self.env.stall_file.exists()

    def wait_while_stalled(self) -> None:
        """Hold a step while the stall file exists: HTTP answers, generation makes no token.

        A wedged engine as users of GB10 pairs report it: no error and no progress. The wait
        ends when the file is removed (the request then goes on) or the engine dies.
        """
        if not self.stalled():
            return
        if not self._stall_logged:
            self._stall_logged = True
            self.log.warning_at("core.py:711", "engine stalled (gx10 lab stall): no step runs")
        while self.stalled():
            if self.dead.wait(STALL_POLL_SECONDS):
                raise EngineDeadError
        self._stall_logged = False
        self.log.info_at("core.py:711", "engine stall cleared: steps run again")

    def spec_step(self, rng: random.Random) -> int:
        """Tokens produced by one decode step (1 + accepted drafts); counts the drafts."""
        k = self.spec_tokens
        if k <= 0:
            return 1
        accepted = 0
        while accepted < k and rng.random() < self.env.spec_acceptance:
            accepted += 1
        with self.cond:
            for pos in range(accepted):
                self.counters.spec_accepted_per_pos[pos] += 1
            self.counters.spec_drafts += 1
            self.counters.spec_draft_tokens += k
            self.counters.spec_accepted += accepted
        return 1 + accepted


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass
class Piece:
    kind: str  # "reasoning" | "content" | "tool"
    text: str
    tokens: int


@dataclass
class Plan:
    """A request once validated: prompt size, budget, and what the model will say."""

    prompt_tokens: int
    max_tokens: int
    rng: random.Random
    reasoning_tokens: int
    answer_tokens: int
    tool_call: ToolCall | None
    ignore_eos: bool
    block_hashes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerConfig:
    served_names: tuple[str, ...]
    model: ModelInfo
    max_model_len: int
    api_keys: tuple[str, ...]
    reasoning_parser: str | None
    tool_parser: str | None
    auto_tools: bool
    default_kwargs: Mapping[str, Any]
    seed: int


class Server:
    """The head's API logic, independent of the HTTP plumbing."""

    def __init__(self, config: ServerConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine

    def check_model(self, body: Mapping[str, Any]) -> str:
        name = body.get("model")
        if name is None:
            return self.config.served_names[0]
        if name not in self.config.served_names:
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")
        return str(name)

    def budget(self, prompt_tokens: int, requested: Any) -> int:
        limit = self.config.max_model_len
        if prompt_tokens > limit or (requested is None and prompt_tokens >= limit):
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. "
                f"However, your request has {prompt_tokens} input tokens. Please "
                "reduce the length of the input messages.",
            )
        if requested is None:
            return limit - prompt_tokens
        if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {requested}.")
        if requested + prompt_tokens > limit:
            raise ApiError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: "
                f"{requested}. This model's maximum context length is {limit} tokens "
                f"and your request has {prompt_tokens} input tokens ({requested} > "
                f"{limit} - {prompt_tokens}).",
            )
        return requested

    def _rng(self, text: str, body: Mapping[str, Any]) -> random.Random:
        seed = body.get("seed")
        digest = hashlib.sha256(f"{self.config.seed}:{seed}:{text}".encode()).hexdigest()
        return random.Random(int(digest[:16], 16))

    def plan_chat(self, body: Mapping[str, Any]) -> tuple[Plan, str | None]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(
                400,
                "messages: Field required"
                if messages is None
                else "messages must be a non-empty list",
            )
        tools = body.get("tools") or None
        tool_choice = body.get("tool_choice", "auto" if tools else "none")
        if (
            tools
            and tool_choice == "auto"
            and not (self.config.auto_tools and self.config.tool_parser)
        ):
            raise ApiError(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
            )
        kwargs = dict(self.config.default_kwargs)
        kwargs.update(body.get("chat_template_kwargs") or {})
        mode = thinking_enabled(kwargs, body.get("reasoning_effort"))
        prompt = render_chat(messages, tools, mode is not None)
        pieces = token_pieces(prompt)
        prompt_tokens = len(pieces)
        max_tokens = self.budget(
            prompt_tokens, body.get("max_completion_tokens", body.get("max_tokens"))
        )
        rng = self._rng(prompt, body)
        call = pick_tool_call(messages, tools or [], tool_choice) if tools else None
        reasoning = 0
        if mode is not None:
            reasoning = max_tokens if mode == "max" else rng.randint(600, 4000)
        answer = rng.randint(24, 160)
        plan = Plan(
            prompt_tokens,
            max_tokens,
            rng,
            reasoning,
            answer,
            call,
            bool(body.get("ignore_eos")),
            self._hashes(pieces),
        )
        return plan, mode

    def _hashes(self, pieces: Sequence[str]) -> tuple[str, ...]:
        engine = self.engine
        if engine.prefix_cache.capacity <= 0:
            return ()
        return block_hashes(pieces, engine.block_size)

    def plan_completion(self, body: Mapping[str, Any]) -> Plan:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a string (or a list of one string)")
        pieces = [BOS, *token_pieces(prompt)]
        prompt_tokens = len(pieces)
        max_tokens = self.budget(prompt_tokens, body.get("max_tokens", 16))
        rng = self._rng(prompt, body)
        return Plan(
            prompt_tokens,
            max_tokens,
            rng,
            0,
            rng.randint(24, 160),
            None,
            bool(body.get("ignore_eos")),
            self._hashes(pieces),
        )

    def generate(self, plan: Plan) -> Iterator[list[Piece]]:
        """Steps of output (several tokens per step with speculative decoding), timed.

        The prefill's forward pass yields the first token; every later step takes its tokens
        over the model's decode rate for the running count when the step starts, timed against
        a deadline so that sleeps do not drift.
        """
        engine = self.engine
        clock = engine.clock_cap()
        engine.wait_while_stalled()
        engine.prefill(plan, clock)
        with engine.cond:
            engine.decoding += 1
        try:
            for pieces in self._decode(plan, clock):
                engine.wait_while_stalled()
                yield pieces
        finally:
            with engine.cond:
                engine.decoding -= 1

    def _decode(self, plan: Plan, clock: float | None) -> Iterator[list[Piece]]:
        engine = self.engine
        scale = engine.env.time_scale
        budget = plan.max_tokens
        reasoning = plan.max_tokens if plan.ignore_eos else plan.reasoning_tokens
        answer = plan.max_tokens if plan.ignore_eos else plan.answer_tokens
        thoughts = token_stream(plan.rng, REASONING_WORDS)
        words = token_stream(plan.rng, WORDS)
        produced = 0
        deadline = time.monotonic()
        if plan.tool_call is not None:
            answer = 0
        while produced < budget and (reasoning > 0 or answer > 0):
            step = 1 if produced == 0 else min(engine.spec_step(plan.rng), budget - produced)
            pieces: list[Piece] = []
            for _ in range(step):
                if reasoning > 0:
                    pieces.append(Piece("reasoning", next(thoughts), 1))
                    reasoning -= 1
                elif answer > 0:
                    pieces.append(Piece("content", next(words), 1))
                    answer -= 1
            first = produced == 0
            produced += len(pieces)
            if not first:
                rate = engine.perf.decode_rate(plan.prompt_tokens + produced, engine.running, clock)
                deadline += len(pieces) / max(rate, 1e-6) * scale
                engine.sleep_until(deadline)
            yield pieces
        if plan.tool_call is not None and produced < budget:
            call_tokens = min(count_tokens(plan.tool_call.arguments) + 4, budget - produced)
            rate = engine.perf.decode_rate(plan.prompt_tokens, 1, clock)
            deadline += call_tokens / max(rate, 1e-6) * scale
            engine.sleep_until(deadline)
            yield [Piece("tool", plan.tool_call.arguments, call_tokens)]

    def finished(
        self,
        plan: Plan,
        completion_tokens: int,
        reason: str,
        started: float,
        first_token: float | None,
    ) -> None:
        counters = self.engine.counters
        with self.engine.cond:
            counters.prompt_tokens += plan.prompt_tokens
            counters.prefix_queries += plan.prompt_tokens
            counters.generation_tokens += completion_tokens
            # The engine finishes a tool call like any other stop; "tool_calls" is API-level.
            engine_reason = "stop" if reason == "tool_calls" else reason
            counters.success[engine_reason] = counters.success.get(engine_reason, 0) + 1
            if first_token is not None:
                counters.ttft.observe(first_token - started)
            counters.e2e.observe(time.monotonic() - started)


def finish_reason(plan: Plan, completion_tokens: int, had_tool: bool) -> str:
    if had_tool:
        return "tool_calls"
    return "length" if completion_tokens >= plan.max_tokens else "stop"


def usage(plan: Plan, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "total_tokens": plan.prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def _metric(
    lines: list[str], name: str, kind: str, help_text: str, samples: Sequence[tuple[str, float]]
) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines += [f"{name}{{{labels}}} {float(value)}" for labels, value in samples]


def _histogram(lines: list[str], name: str, help_text: str, labels: str, hist: Histogram) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    counts = hist.counts or [0] * len(hist.buckets)
    for bound, count in zip(hist.buckets, counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(count)}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.count)}')
    lines.append(f"{name}_count{{{labels}}} {float(hist.count)}")
    lines.append(f"{name}_sum{{{labels}}} {hist.total}")


def render_metrics(engine: Engine, model_name: str) -> str:
    labels = f'engine="0",model_name="{model_name}"'
    c = engine.counters
    lines: list[str] = []
    with engine.cond:
        _metric(
            lines,
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [(labels, engine.running)],
        )
        _metric(
            lines,
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [(labels, engine.waiting)],
        )
        usage_perc = min(engine.running / max(engine.max_num_seqs, 1), 1.0) * 0.1
        _metric(
            lines,
            "gx10_sim_info",
            "gauge",
            "The simulator's settings (not a vLLM metric): rates are in simulated seconds.",
            [
                (
                    f'max_num_seqs="{engine.max_num_seqs}",block_size="{engine.block_size}",'
                    f'time_scale="{engine.env.time_scale}",perf_model="{engine.env.perf_model}"',
                    1,
                )
            ],
        )
        _metric(
            lines,
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [(labels, usage_perc)],
        )
        _metric(
            lines,
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(labels, c.prefix_queries)],
        )
        _metric(
            lines,
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(labels, c.prefix_hits)],
        )
        _metric(
            lines,
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [(labels, c.prompt_tokens)],
        )
        _metric(
            lines,
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [(labels, c.generation_tokens)],
        )
        _metric(
            lines,
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                (f'{labels},finished_reason="{r}"', c.success.get(r, 0))
                for r in ("stop", "length", "abort")
            ],
        )
        if engine.spec_tokens > 0:
            _metric(
                lines,
                "vllm:spec_decode_num_drafts_total",
                "counter",
                "Number of spec decoding drafts.",
                [(labels, c.spec_drafts)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                [(labels, c.spec_draft_tokens)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                [(labels, c.spec_accepted)],
            )
            _metric(
                lines,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "counter",
                "Accepted tokens per draft position.",
                [(f'{labels},position="{i}"', n) for i, n in enumerate(c.spec_accepted_per_pos)],
            )
        _histogram(
            lines,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            c.ttft,
        )
        _histogram(
            lines,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            c.e2e,
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------

GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
ROUTES = {
    "/health": ("GET",),
    "/v1/models": ("GET",),
    "/metrics": ("GET",),
    "/tokenize": ("POST",),
    "/detokenize": ("POST",),
    "/v1/chat/completions": ("POST",),
    "/v1/completions": ("POST",),
}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: Server, log: Log) -> None:
        super().__init__(address, ApiHandler, bind_and_activate=False)
        self.api = api
        self.log = log

    def server_bind(self) -> None:
        """Bind without HTTPServer's getfqdn() lookup (it can stall without DNS)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # uvicorn (asyncio) sets TCP_NODELAY; with Nagle on, each streamed event after the first
    # would wait for the client's delayed ACK (about 40 ms on Linux) and distort every timing.
    disable_nagle_algorithm = True
    server_version = "uvicorn"
    server: ApiServer

    def version_string(self) -> str:
        return self.server_version

    # -- plumbing ------------------------------------------------------------------------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        self.server.log.uvicorn(
            f"{self.client_address[0]}:{self.client_address[1]} - "
            f'"{self.requestline}" {code} {phrase}'
        )

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except ValueError as error:
            raise ApiError(400, f"JSON decode error: {error}") from error
        if not isinstance(body, dict):
            raise ApiError(
                400, "Input should be a valid dictionary or object to extract fields from"
            )
        return body

    def _authorized(self) -> bool:
        keys = self.server.api.config.api_keys
        if not keys or not self.path.startswith(GUARDED_PREFIXES):
            return True
        scheme, _, token = (self.headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token in keys

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized():
            self._send_json(401, {"error": "Unauthorized"})
            return
        allowed = ROUTES.get(path)
        if allowed is None:
            self._send_json(404, {"detail": "Not Found"})
            return
        if method not in allowed:
            self._send_json(405, {"detail": "Method Not Allowed"})
            return
        handler = getattr(self, "route_" + path.strip("/").replace("/", "_"))
        try:
            handler()
        except ApiError as error:
            self._send_json(error.status, error.body())
        except EngineDeadError:
            self._send_json(500, ApiError(500, ENGINE_DEAD_MESSAGE, "InternalServerError").body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- routes --------------------------------------------------------------------------

    def route_health(self) -> None:
        if self.server.api.engine.dead.is_set():
            self._send_text(503, "", "application/json")
        else:
            self._send_text(200, "", "application/json")

    def route_metrics(self) -> None:
        api = self.server.api
        text = render_metrics(api.engine, api.config.served_names[0])
        self._send_text(200, text, "text/plain; version=0.0.4; charset=utf-8")

    def route_v1_models(self) -> None:
        config = self.server.api.config
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": config.model.path,
                "parent": None,
                "max_model_len": config.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in config.served_names
        ]
        self._send_json(200, {"object": "list", "data": data})

    def route_tokenize(self) -> None:
        body = self._read_json()
        api = self.server.api
        api.check_model(body)
        if "messages" in body:
            kwargs = dict(api.config.default_kwargs)
            kwargs.update(body.get("chat_template_kwargs") or {})
            text = render_chat(
                body["messages"],
                body.get("tools"),
                thinking_enabled(kwargs) is not None,
                bool(body.get("add_generation_prompt", True)),
            )
            special = False
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise ApiError(400, "prompt: Field required")
            text, special = prompt, bool(body.get("add_special_tokens", True))
        ids, pieces = encode(text)
        if special:
            ids, pieces = [special_id(BOS), *ids], [BOS, *pieces]
        self._send_json(
            200,
            {
                "count": len(ids),
                "max_model_len": api.config.max_model_len,
                "tokens": ids,
                "token_strs": pieces if body.get("return_token_strs") else None,
            },
        )

    def route_detokenize(self) -> None:
        body = self._read_json()
        self.server.api.check_model(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ApiError(400, "tokens: Input should be a valid list of integers")
        self._send_json(200, {"prompt": decode(tokens)})

    def route_v1_chat_completions(self) -> None:
        body = self._read_json()
        api = self.server.api
        model = api.check_model(body)
        plan, mode = api.plan_chat(body)
        separate = mode is not None and api.config.reasoning_parser is not None
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        request = _Request(
            self,
            model,
            plan,
            kind="chat",
            separate_reasoning=separate,
            include_usage=bool(options.get("include_usage")),
        )
        request.run(stream)

    def route_v1_completions(self) -> None:
        body = self._read_json()
        api = self.server.api
        model = api.check_model(body)
        plan = api.plan_completion(body)
        options = body.get("stream_options") or {}
        request = _Request(
            self,
            model,
            plan,
            kind="text",
            separate_reasoning=False,
            include_usage=bool(options.get("include_usage")),
        )
        request.run(bool(body.get("stream")))

    # -- streaming -----------------------------------------------------------------------

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def send_event(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Request:
    """One generation request, answered whole or as server-sent events."""

    def __init__(
        self,
        handler: ApiHandler,
        model: str,
        plan: Plan,
        *,
        kind: str,
        separate_reasoning: bool,
        include_usage: bool,
    ) -> None:
        self.handler, self.model, self.plan, self.kind = handler, model, plan, kind
        self.separate = separate_reasoning
        self.include_usage = include_usage
        self.api = handler.server.api
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.completion_tokens = 0
        self.had_tool = False
        self.opened_think = False

    def run(self, stream: bool) -> None:
        engine = self.api.engine
        started = time.monotonic()
        first: float | None = None
        engine.admit()
        reason = "abort"
        try:
            steps = self.api.generate(self.plan)
            first = self._stream(steps) if stream else self._whole(steps)
            reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        finally:
            engine.release()
            self.api.finished(self.plan, self.completion_tokens, reason, started, first)

    def _text(self, piece: Piece) -> str:
        """Without a reasoning parser the reasoning stays in the content, as the model wrote it.

        The chat template already opened <think> in the prompt, so the output is the reasoning,
        then </think> where the answer starts (nothing closes a reasoning cut by max_tokens).
        """
        if piece.kind == "reasoning" and not self.separate:
            self.opened_think = True
        elif piece.kind == "content" and self.opened_think:
            self.opened_think = False
            return END_THINK + piece.text
        return piece.text

    def _whole(self, steps: Iterator[list[Piece]]) -> float | None:
        first: float | None = None
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        for pieces in steps:
            first = first or time.monotonic()
            for piece in pieces:
                self.completion_tokens += piece.tokens
                if piece.kind == "tool":
                    self.had_tool = True
                    call = self.plan.tool_call
                    assert call is not None
                    calls.append(
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    )
                elif piece.kind == "reasoning" and self.separate:
                    reasoning.append(piece.text)
                else:
                    content.append(self._text(piece))
        reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        self.handler._send_json(200, self._body(reasoning, content, calls, reason))
        return first

    def _body(
        self, reasoning: list[str], content: list[str], calls: list[dict[str, Any]], reason: str
    ) -> dict[str, Any]:
        if self.kind == "text":
            choice: dict[str, Any] = {
                "index": 0,
                "text": "".join(content),
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        else:
            text = "".join(content)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text if text or not calls else None,
                "tool_calls": calls,
            }
            if self.separate:
                message["reasoning_content"] = "".join(reasoning) or None
                message["reasoning"] = message["reasoning_content"]
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage(self.plan, self.completion_tokens),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    def _chunk(
        self,
        delta: dict[str, Any] | None,
        text: str | None,
        reason: str | None,
    ) -> str:
        if self.kind == "text":
            choice: dict[str, Any] = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "text_completion"
        else:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": reason}
            if reason is not None:
                choice["stop_reason"] = None
            obj = "chat.completion.chunk"
        return json.dumps(
            {
                "id": self.id,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
            }
        )

    def _deltas(self, pieces: list[Piece]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        call = self.plan.tool_call
        for piece in pieces:
            if piece.kind == "tool" and call is not None:
                self.had_tool = True
                deltas.append(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
                cut = max(len(call.arguments) // 3, 1)
                for start in range(0, len(call.arguments), cut):
                    deltas.append(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "function": {"arguments": call.arguments[start : start + cut]},
                                }
                            ]
                        }
                    )
            elif piece.kind == "reasoning" and self.separate:
                deltas.append({"reasoning_content": piece.text, "reasoning": piece.text})
            else:
                deltas.append({"content": self._text(piece)})
        return _merge_deltas(deltas)

    def _stream(self, steps: Iterator[list[Piece]]) -> float | None:
        handler = self.handler
        first: float | None = None
        handler.start_stream()
        if self.kind == "chat":
            handler.send_event(self._chunk({"role": "assistant", "content": ""}, None, None))
        try:
            for pieces in steps:
                first = first or time.monotonic()
                self.completion_tokens += sum(p.tokens for p in pieces)
                for delta in self._deltas(pieces):
                    handler.send_event(self._chunk(delta, delta.get("content"), None))
        except EngineDeadError:
            handler.send_event(
                json.dumps(ApiError(500, ENGINE_DEAD_MESSAGE, "InternalServerError").body())
            )
            handler.send_event("[DONE]")
            handler.end_stream()
            raise
        reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        handler.send_event(self._chunk({}, None, reason))
        if self.include_usage:
            handler.send_event(
                json.dumps(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk"
                        if self.kind == "chat"
                        else "text_completion",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": usage(self.plan, self.completion_tokens),
                    }
                )
            )
        handler.send_event("[DONE]")
        handler.end_stream()
        return first


def _merge_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pieces of one engine step that go to the same field leave in one chunk."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        last = merged[-1] if merged else None
        if (
            last is not None
            and "tool_calls" not in delta
            and "tool_calls" not in last
            and last.keys() == delta.keys()
        ):
            for key in delta:
                last[key] = last[key] + delta[key]
        else:
            merged.append(dict(delta))
    return merged


# --------------------------------------------------------------------------------------------
# GPU load for the nvidia-smi simulator (its `load` state file)
# --------------------------------------------------------------------------------------------

LOAD_FILE = "load"
LOAD_BUSY_FLOOR = 0.7  # the GPU load as soon as one sequence runs
LOAD_MIN_INTERVAL_S = 0.25  # at most four writes a second


def engine_load(running: int, max_num_seqs: int) -> float:
    """The GPU load the engine puts on its node: 0 idle, 0.7 + 0.3 x running/max_num_seqs."""
    if running <= 0:
        return 0.0
    share = min(running / max(max_num_seqs, 1), 1.0)
    return round(LOAD_BUSY_FLOOR + (1.0 - LOAD_BUSY_FLOOR) * share, 3)


class GpuLoad:
    """Publishes a rank's GPU load: this node's `load` file, then every sink (the workers).

    Both GPUs work in tensor parallel, so the head sends its load to the workers and each rank
    writes its own node's file. A value is published when it changes, at most once per
    `min_interval` (the latest value wins, published when the interval has passed), by a
    background thread so the engine never waits on a file. Writes are atomic (temporary file,
    then rename); a failing one (no state directory, read-only) is logged once, then ignored.
    """

    def __init__(
        self,
        state_dir: Path,
        log: Log,
        min_interval: float = LOAD_MIN_INTERVAL_S,
        sinks: Sequence[Callable[[float], None]] = (),
    ) -> None:
        self.path = state_dir / LOAD_FILE
        self.log = log
        self.min_interval = min_interval
        self.sinks = list(sinks)
        self._cond = threading.Condition()
        self._pending: float | None = None
        self._published: float | None = None
        self._last = -math.inf
        self._closed = False
        self._warned = False
        self._thread: threading.Thread | None = None

    def set(self, load: float) -> None:
        """Ask for `load` to be published (soon, if one was published less than an interval ago)."""
        with self._cond:
            if self._closed:
                return
            self._pending = load
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-load")
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                value = self._pending
                if value is None or value == self._published:
                    self._cond.wait()
                    continue
                wait = self._last + self.min_interval - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._pending = None
                self._published = value
                self._last = time.monotonic()
            self._publish(value)

    def _publish(self, value: float) -> None:
        self.write(value)
        for sink in self.sinks:
            sink(value)

    def write(self, value: float) -> None:
        """Replace this node's load file with `value`; a failure is logged once."""
        tmp = self.path.with_name(f".{LOAD_FILE}.{os.getpid()}")
        try:
            tmp.write_text(f"{value:.3f}\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if not self._warned:
                self._warned = True
                self.log.warning_at(
                    "gx10_sim.py:1",
                    f"[gx10-sim] cannot write the GPU load to {self.path} ({error}); "
                    "nvidia-smi on this node will not see this engine's load",
                )

    def close(self) -> None:
        """Stop publishing; publish 0 if anything was (the engine is gone, the GPU idles)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:  # never started: nothing of ours to take back
            return
        thread.join(timeout=5.0)
        self._published = 0.0
        self._publish(0.0)


# --------------------------------------------------------------------------------------------
# Processes: the head (rank 0, serves HTTP) and the headless workers
# --------------------------------------------------------------------------------------------


class Stop:
    """SIGTERM/SIGINT: ask the main loop to end cleanly."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = signum
        self.event.set()


def comm_init(env: SimEnv, log: Log, multi_rank: bool) -> CommProblem | None:
    problem = check_comm_env(env, multi_rank)
    if problem is not None:
        for line in problem.lines:
            log.raw(line)
    elif multi_rank:
        log.info_at("pynccl.py:70", f"vLLM is using nccl=={NCCL_VERSION}")
    return problem


def remote_comm_error(env: SimEnv, peer: str) -> SimFatal:
    prefix = _nccl_prefix(env)
    return SimFatal(
        "RuntimeError",
        f"NCCL error: remote process exited or there was a network "
        f"error\n{prefix} misc/socket.cc:540 NCCL WARN Net : Connection closed by "
        f"remote peer {peer}",
    )


def boot_wait(env: SimEnv, stop: threading.Event, log: Log, model: ModelInfo) -> None:
    log.info_at("default_loader.py:267", f"Loading weights from {model.path}")
    started = time.monotonic()
    if stop.wait(env.boot_seconds):
        raise InterruptedError
    log.info_at(
        "default_loader.py:299", f"Loading weights took {time.monotonic() - started:.2f} seconds"
    )


def clear_stall(env: SimEnv, log: Log) -> None:
    """A stall is the engine's state: a (re)started head begins without one."""
    with contextlib.suppress(FileNotFoundError):
        env.stall_file.unlink()
        log.info_at("core.py:711", f"removed a leftover stall file {env.stall_file}")


class Head:
    """Rank 0: rendezvous, NCCL init, weights, then the API server until told to stop."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, stop: Stop) -> None:
        self.args, self.env, self.stop = args, env, stop
        pid = os.getpid()
        self.log = Log(f"(APIServer pid={pid}) ", env.log_level)
        self.engine_log = self.log.child(f"(EngineCore_DP0 pid={pid}) ")
        self.rendezvous: HeadRendezvous | None = None
        self.httpd: ApiServer | None = None
        self.gpu_load: GpuLoad | None = None

    def run(self) -> int:
        args, env, log = self.args, self.env, self.log
        log.info_at("api_server.py:1885", f"vLLM API server version {env.version}")
        log.info_at("utils.py:253", f"non-default args: {non_default_args(args)}")
        host = args.host or "0.0.0.0"
        clear_stall(env, log)
        httpd = self._bind_http(host)
        try:
            return self._boot_and_serve(httpd, host)
        finally:
            httpd.server_close()
            if self.gpu_load is not None:
                self.gpu_load.close()  # before the channels close: the workers get the 0 too
            if self.rendezvous is not None:
                self.rendezvous.close()

    def _bind_http(self, host: str) -> ApiServer:
        placeholder = Server(
            ServerConfig((), ModelInfo("", "", 0, None), 0, (), None, None, False, {}, 0),
            Engine(self.env, 1, 0, self.log),
        )
        httpd = ApiServer((host, self.args.port), placeholder, self.log)
        try:
            httpd.server_bind()
        except OSError as error:
            httpd.server_close()
            raise SimFatal(
                "OSError", f"[Errno {error.errno}] {os.strerror(error.errno or 0)}"
            ) from error
        return httpd

    def _boot_and_serve(self, httpd: ApiServer, host: str) -> int:
        args, env, log = self.args, self.env, self.log
        model = load_model(args.model, args.trust_remote_code, args.revision)
        log.info_at("model.py:547", f"Resolved architecture: {model.architecture}")
        max_len = args.max_model_len or model.max_position_embeddings
        log.info_at("model.py:1510", f"Using max model len {max_len}")
        if args.revision:
            log.info_at("model.py:560", f"Model revision: {args.revision}")
        check_parallel(args, env.gpus_per_node)
        world = args.tensor_parallel_size * args.pipeline_parallel_size
        self._join_workers(world)
        boot_wait(env, self.stop.event, self.engine_log, model)
        if self.rendezvous is not None:
            self._gather("loaded")
            self.rendezvous.broadcast({"op": "ready"})
        api = self._make_api(model, max_len)
        httpd.api = api
        httpd.server_activate()
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="http"
        ).start()
        self.httpd = httpd
        port = httpd.server_address[1]
        log.info_at("api_server.py:1971", f"Starting vLLM API server 0 on http://{host}:{port}")
        log.info_at("launcher.py:36", "Available routes are:")
        for route, methods in ROUTES.items():
            log.info_at("launcher.py:44", f"Route: {route}, Methods: {', '.join(methods)}")
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        log.uvicorn("Application startup complete.")
        return self._serve(api.engine)

    def _join_workers(self, world: int) -> None:
        args, env = self.args, self.env
        log = self.engine_log
        if args.nnodes > 1:
            log.info_at(
                "parallel_state.py:1100",
                f"world_size={world} rank=0 local_rank=0 "
                f"distributed_init_method=tcp://{args.master_addr}:{args.master_port} "
                "backend=nccl",
            )
            self.rendezvous = HeadRendezvous(args, env, log)
            self.rendezvous.wait_for_workers(self.stop.event)
            self.rendezvous.broadcast({"op": "init_comm"})
        log.info_at(
            "parallel_state.py:1165",
            f"rank 0 in world size {world} is assigned as DP "
            "rank 0, PP rank 0, TP rank 0, EP rank 0",
        )
        problem = comm_init(env, log, world > 1)
        if self.rendezvous is None:
            if problem is not None:
                raise SimFatal(problem.exc_type, problem.message)
            return
        if problem is not None:
            self.rendezvous.broadcast({"op": "abort"})
            raise SimFatal(problem.exc_type, problem.message)
        replies = self._gather("comm")
        failed = [rank for rank, reply in replies.items() if not reply.get("ok")]
        if failed:
            self.rendezvous.broadcast({"op": "abort"})
            raise remote_comm_error(env, f"node rank {failed[0]}")
        self.rendezvous.broadcast({"op": "comm_ok"})

    def _gather(self, op: str) -> dict[int, dict[str, Any]]:
        assert self.rendezvous is not None
        timeout = max(self.env.rendezvous_timeout, self.env.boot_seconds + 30.0)
        try:
            return self.rendezvous.gather(op, timeout, self.stop.event)
        except PeerLostError as error:
            raise remote_comm_error(self.env, "a headless worker") from error
        except TimeoutError as error:
            raise SimFatal(
                "torch.distributed.DistStoreError",
                f"Timed out waiting for the workers' {op!r} after {int(timeout)} seconds",
            ) from error

    def _make_api(self, model: ModelInfo, max_len: int) -> Server:
        args, env = self.args, self.env
        spec = args.speculative_config or {}
        spec_tokens = int(spec.get("num_speculative_tokens") or 0) if spec else 0
        engine = Engine(
            env,
            args.max_num_seqs or 256,
            spec_tokens,
            self.log,
            block_size=args.block_size or 16,
            prefix_caching=args.enable_prefix_caching is not False,
        )
        if self.rendezvous is not None:
            for channel in self.rendezvous.peers.values():
                channel.on_lost(self._peer_lost(engine))
        self.gpu_load = GpuLoad(env.state_dir, self.log)
        if self.rendezvous is not None:
            peers = self.rendezvous
            self.gpu_load.sinks.append(lambda load: peers.broadcast({"op": "load", "load": load}))
        engine.load_listener = self.gpu_load.set
        self.gpu_load.set(0.0)  # a fresh engine idles (a killed one may have left its load)
        keys = tuple(args.api_key or ([env.api_key] if env.api_key else []))
        config = ServerConfig(
            served_names=tuple(args.served_model_name or [args.model]),
            model=model,
            max_model_len=max_len,
            api_keys=keys,
            reasoning_parser=args.reasoning_parser,
            tool_parser=args.tool_call_parser,
            auto_tools=args.enable_auto_tool_choice,
            default_kwargs=dict(args.default_chat_template_kwargs or {}),
            seed=env.seed if args.seed is None else args.seed,
        )
        return Server(config, engine)

    def _peer_lost(self, engine: Engine) -> Callable[[], None]:
        def lost() -> None:
            # Real vLLM logs nothing here: the head stays "healthy" until a step needs the peer.
            self.log.debug_at("multiproc_executor.py:160", "a headless worker stopped answering")
            engine.peer_lost.set()

        return lost

    def _serve(self, engine: Engine) -> int:
        while not self.stop.event.wait(0.1):
            if engine.dead.is_set():
                time.sleep(0.5)  # let in-flight requests get their 500
                self._shutdown()
                return EXIT_ERROR
        self._shutdown()
        return EXIT_OK

    def _shutdown(self) -> None:
        log = self.log
        log.uvicorn("Shutting down")
        if self.httpd is not None:
            self.httpd.shutdown()
        if self.gpu_load is not None:
            self.gpu_load.close()
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        log.uvicorn(f"Finished server process [{os.getpid()}]")


class Worker:
    """A headless rank: join the head, init NCCL, load weights, then answer heartbeats."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, stop: Stop) -> None:
        self.args, self.env, self.stop = args, env, stop
        self.log = Log("", env.log_level)
        rank = args.node_rank
        self.rank_log = self.log.child(f"(Worker_TP{rank} pid={os.getpid()}) ")
        self.gpu_load = GpuLoad(env.state_dir, self.rank_log)

    def run(self) -> int:
        args, env, log = self.args, self.env, self.log
        model = load_model(args.model, args.trust_remote_code, args.revision)
        if args.revision:
            log.info_at("model.py:560", f"Model revision: {args.revision}")
        check_parallel(args, env.gpus_per_node)
        log.info_at(
            "serve.py:190",
            f"Launching vLLM (v{env.version}) headless multiproc executor, "
            f"with head node address {args.master_addr}:{args.master_port} for "
            "torch.distributed process group.",
        )
        channel = connect_to_head(args, env, self.rank_log, self.stop.event)
        try:
            self._init(channel, model)
            self.gpu_load.set(0.0)
            return self._idle(channel)
        finally:
            self.gpu_load.close()
            channel.close()

    def _expect(self, channel: Channel, ops: Sequence[str], timeout: float) -> str:
        try:
            while True:
                op = str(channel.recv(timeout, self.stop.event).get("op"))
                if op in ops:
                    return op
        except PeerLostError as error:
            raise remote_comm_error(self.env, f"{self.args.master_addr} (node rank 0)") from error
        except TimeoutError as error:
            raise SimFatal(
                "torch.distributed.DistStoreError",
                f"Timed out after {int(timeout)} seconds waiting for the head ({'/'.join(ops)})",
            ) from error

    def _init(self, channel: Channel, model: ModelInfo) -> None:
        args, env, log = self.args, self.env, self.rank_log
        world = args.tensor_parallel_size * args.pipeline_parallel_size
        wait = max(env.rendezvous_timeout, env.boot_seconds + 30.0)
        if self._expect(channel, ("init_comm", "abort"), wait) == "abort":
            raise remote_comm_error(env, f"{args.master_addr} (node rank 0)")
        log.info_at(
            "parallel_state.py:1165",
            f"rank {args.node_rank} in world size {world} is "
            f"assigned as DP rank 0, PP rank 0, TP rank {args.node_rank}, EP rank "
            f"{args.node_rank}",
        )
        problem = comm_init(env, log, True)
        channel.send({"op": "comm", "ok": problem is None})
        if problem is not None:
            raise SimFatal(problem.exc_type, problem.message)
        if self._expect(channel, ("comm_ok", "abort"), wait) == "abort":
            raise remote_comm_error(env, f"{args.master_addr} (node rank 0)")
        boot_wait(env, self.stop.event, log, model)
        channel.send({"op": "loaded"})
        self._expect(channel, ("ready",), wait)
        log.info_at("multiproc_executor.py:522", "Worker ready; waiting for work from the head.")

    def _idle(self, channel: Channel) -> int:
        """Serve until SIGTERM. A lost head is logged, again and again, and never rejoined."""
        repeat = max(10 * self.env.heartbeat_seconds, 1.0)
        next_log = 0.0
        while not self.stop.event.wait(0.1):
            self._take_load(channel)
            if channel.lost.is_set() and time.monotonic() >= next_log:
                self._log_lost_head(channel)
                next_log = time.monotonic() + repeat
        self.log.info_at("serve.py:250", "Shutting down.")
        return EXIT_OK

    def _take_load(self, channel: Channel) -> None:
        """Write the GPU load the head sent (in tensor parallel this GPU works as the head's)."""
        while True:
            try:
                message = channel.inbox.get_nowait()
            except queue.Empty:
                return
            load = message.get("load")
            if message.get("op") == "load" and isinstance(load, int | float):
                self.gpu_load.set(min(max(float(load), 0.0), 1.0))

    def _log_lost_head(self, channel: Channel) -> None:
        try:
            local = channel.sock.getsockname()
        except OSError:
            local = ("0.0.0.0", 0)
        args = self.args
        self.rank_log.raw(
            f"[rank{args.node_rank}]:[W{torch_stamp()} TCPStore.cpp:125] [c10d] recvValue "
            f"failed on SocketImpl(fd=-1, addr=[{local[0]}]:{local[1]}, remote=[{args.master_addr}"
            f"]:{args.master_port}): Failed to recv, got 0 bytes. Connection was likely closed. "
            "Did the remote server shutdown or crash?"
        )


def report_fatal(error: SimFatal) -> int:
    sys.stdout.flush()
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 8, in <module>\n'
        "    sys.exit(main())\n"
        f"{error.exc_type}: {error.message}\n"
    )
    sys.stderr.flush()
    return error.code


def main(argv: Sequence[str] | None = None) -> int:
    env = SimEnv.from_env(os.environ)
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env.version)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    stop = Stop()
    stop.install()
    try:
        validate_serve_args(args)
        use_tokenizer(os.environ.get("GX10_SIM_TOKENIZER") or None)
        process: Head | Worker = Worker(args, env, stop) if args.headless else Head(args, env, stop)
        return process.run()
    except SimFatal as error:
        return report_fatal(error)
    except InterruptedError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
