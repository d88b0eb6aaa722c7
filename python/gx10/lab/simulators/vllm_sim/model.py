"""The model directory and the parallel layout: what vLLM checks before anything else."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SimFatal

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


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str
    max_position_embeddings: int
    revision: str | None
    # config.json as read (the memory model takes the layer and attention sizes from it).
    config: Mapping[str, Any] = field(default_factory=dict)


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
        config=config,
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
