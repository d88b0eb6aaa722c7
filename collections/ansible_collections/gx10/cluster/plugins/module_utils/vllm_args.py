# SPDX-License-Identifier: Apache-2.0
"""The `vllm serve` argument list for one rank, as a list: no shell ever sees it.

Two parts: the topology flags (model, tensor parallelism over the nodes, rank, rendezvous, the
head's HTTP address) from the cluster plan and the role's variables, and the tuning flags from
the serving profile (module_utils/serve_profiles.py) with the inventory's overrides. Every
argument is traced to the variable that produced it, so the check against the image's vLLM
parser (module_utils/vllm_cli.py) names the variable to change.

JSON-valued flags (--speculative-config, --reasoning-config, --default-chat-template-kwargs) are
serialised here, so quoting can never mangle them (FIELD_NOTES section 4: JSON arguments must
not pass a shell).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gx10.cluster.plugins.module_utils import serve_profiles, vllm_cli
from ansible_collections.gx10.cluster.plugins.module_utils.serve_profiles import (
    AUTO_TOOL_CHOICE_FLAG,
    SETTINGS,
    ProfileError,
    Resolved,
)

_REQUIRED = ("model", "served_model_name", "nnodes", "node_rank", "master_addr", "master_port")
# Where the topology flags come from, for messages.
_PLAN = "gx10_plan (the inventory's head and workers groups)"
_FIXED = "gx10.cluster.vllm_args (fixed)"

Traced = list[tuple[str, str]]


class VllmArgsError(ValueError):
    """A serving setting is missing or invalid; the message names it and the fix."""


def _int(settings: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    value = settings.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise VllmArgsError(f"vllm_serve_{key} must be an integer >= {minimum}, got {value!r}")
    return value


def resolve(settings: Mapping[str, Any]) -> Resolved:
    """The settings' profile (``profile``) with their overrides (the setting keys, non-null)."""
    overrides = {key: settings[key] for key in serve_profiles.SETTING_KEYS if key in settings}
    try:
        return serve_profiles.resolve(
            settings.get("profile", serve_profiles.DEFAULT_PROFILE), overrides
        )
    except ProfileError as exc:
        raise VllmArgsError("; ".join(exc.errors)) from exc


def tuning_args(resolved: Resolved) -> Traced:
    """The profile's flags with the overrides, each with the variable that produced it."""
    args: Traced = []
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        value = resolved.values.get(setting.key)
        source = resolved.origin(setting.key)
        if value is None:
            continue
        if setting.kind == "bool":
            flag = setting.flag if value else "--no-" + setting.flag[2:]
            args.append((flag, source))
            continue
        if setting.kind == "json":
            if not value:
                continue
            text = json.dumps(value, separators=(",", ":"), sort_keys=True)
            args += [(setting.flag, source), (text, source)]
            continue
        if setting.kind == "str" and value == "":
            continue
        args += [(setting.flag, source), (str(value), source)]
        if setting.key == "tool_call_parser":
            args.append((AUTO_TOOL_CHOICE_FLAG, source))
    return args


def build_traced(settings: Mapping[str, Any]) -> Traced:
    """``serve MODEL --flag value ...`` for the rank, each argument with its source."""
    missing = [k for k in _REQUIRED if settings.get(k) in (None, "")]
    if missing:
        raise VllmArgsError(f"vllm serve settings missing: {', '.join(missing)}")
    nnodes = _int(settings, "nnodes")
    rank = _int(settings, "node_rank", minimum=0)
    gpus = _int(settings, "gpus_per_node") if settings.get("gpus_per_node") is not None else 1
    tp = (
        _int(settings, "tensor_parallel_size")
        if settings.get("tensor_parallel_size") is not None
        else nnodes * gpus
    )
    if tp != nnodes * gpus:
        raise VllmArgsError(
            f"vllm_serve_tensor_parallel_size is {tp}, but {nnodes} node(s) x {gpus} GPU(s) = "
            f"{nnodes * gpus}: tensor parallelism spans every GPU of every node; set it to "
            f"{nnodes * gpus} or leave it unset"
        )
    if rank >= nnodes:
        raise VllmArgsError(f"node rank {rank} is out of range for {nnodes} node(s)")
    resolved = resolve(settings)

    args: Traced = [("serve", _FIXED), (str(settings["model"]), "vllm_serve_model_dir")]
    args += [("--tensor-parallel-size", "vllm_serve_tensor_parallel_size"), (str(tp), _PLAN)]
    args += [("--distributed-executor-backend", _FIXED), ("mp", _FIXED)]
    args += [("--nnodes", _PLAN), (str(nnodes), _PLAN), ("--node-rank", _PLAN), (str(rank), _PLAN)]
    args += [("--master-addr", _PLAN), (str(settings["master_addr"]), "gx10_rails (first rail)")]
    port = str(_int(settings, "master_port"))
    args += [("--master-port", "vllm_serve_master_port"), (port, "vllm_serve_master_port")]
    if rank > 0:
        # Workers serve no HTTP; the head's /health and /v1/models are the readiness signal.
        args.append(("--headless", _PLAN))
    if settings.get("trust_remote_code", True):
        args.append(("--trust-remote-code", _FIXED))
    if settings.get("revision"):
        args += [
            ("--revision", "vllm_serve_revision"),
            (str(settings["revision"]), "vllm_serve_revision"),
        ]
    names = settings["served_model_name"]
    names = [names] if isinstance(names, str) else list(names)
    args.append(("--served-model-name", "vllm_serve_served_model_name"))
    args += [(str(name), "vllm_serve_served_model_name") for name in names]
    args += tuning_args(resolved)
    if rank == 0:
        args += [("--host", _FIXED), (str(settings.get("host") or "0.0.0.0"), _FIXED)]
        http = str(_int(settings, "port") if settings.get("port") else 8000)
        args += [("--port", "vllm_serve_port"), (http, "vllm_serve_port")]
    extra: Sequence[Any] = settings.get("extra_args") or []
    if isinstance(extra, str) or not isinstance(extra, Sequence):
        raise VllmArgsError(f"vllm_serve_extra_args must be a list of strings, got {extra!r}")
    args += [(str(arg), f"vllm_serve_extra_args[{i}]") for i, arg in enumerate(extra)]
    return args


def build_args(settings: Mapping[str, Any]) -> list[str]:
    """`serve MODEL --flag value ...` for the rank described by settings."""
    return [token for token, _ in build_traced(settings)]


def cli_errors(traced: Traced, resolved: Resolved) -> list[str]:
    """What the image's vLLM parser (the profile's vLLM version) refuses, naming variables."""
    parser = vllm_cli.parser_for(resolved.profile.vllm_version)
    return vllm_cli.check_argv([t for t, _ in traced], [s for _, s in traced], parser)


def checked_args(settings: Mapping[str, Any]) -> list[str]:
    """build_args, or a VllmArgsError naming the variables when the image's vLLM would refuse it."""
    traced = build_traced(settings)
    errors = cli_errors(traced, resolve(settings))
    if errors:
        raise VllmArgsError("the image's vLLM would refuse these arguments: " + "; ".join(errors))
    return [token for token, _ in traced]
