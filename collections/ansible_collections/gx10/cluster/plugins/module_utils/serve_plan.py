# SPDX-License-Identifier: Apache-2.0
"""The serving part of the cluster plan, checked on the controller before any node changes.

For every node: the serving profile with the inventory's overrides (module_utils/serve_profiles),
the same on every rank; the flags that would be rendered, against the image's vLLM parser
(module_utils/vllm_cli); and the unified-memory budget (module_utils/memory_budget) with the
inventory's ``gx10_node_memory_gib``. Each problem names the variable to change. The plan carries
the budget's inputs per node, so preflight judges them against each node's real MemTotal.

The weights share comes from the checkpoint the model stage serves: the manifest's total size
(``gx10_model_manifest``) when the file is there, else the catalog size of the profile's
checkpoint (module_utils/model_catalog).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.gx10.cluster.plugins.module_utils import (
    boot_phases,
    memory_budget,
    serve_profiles,
    vllm_args,
    vllm_cli,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_catalog import CatalogEntry, lookup
from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import ModelError
from ansible_collections.gx10.cluster.plugins.module_utils.serve_profiles import (
    PREFIX,
    PROFILE_VAR,
    ProfileError,
    Resolved,
)

MANIFEST_VAR = "gx10_model_manifest"
EXTRA_ARGS_VAR = "vllm_serve_extra_args"
GPUS_VAR = "vllm_serve_gpus_per_node"
TP_VAR = "vllm_serve_tensor_parallel_size"
# The serve stage's own inputs, checked here so a bad one stops the run before any stage changes
# a node (they were checked in the serve stage, after the network and model stages had run).
# Unset, each is the vllm_serve role's default, which tests/unit/test_serve_plan.py checks.
PHASE_TIMEOUTS_VAR = "vllm_serve_phase_timeouts"
CACHE_ROOT_VAR = "vllm_serve_cache_root"
CACHES_VAR = "vllm_serve_caches"
CACHE_KEEP_VAR = "vllm_serve_cache_keep"
INPUT_VARS = (PHASE_TIMEOUTS_VAR, CACHE_ROOT_VAR, CACHES_VAR, CACHE_KEEP_VAR)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_SUBDIRECTORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Every variable this module reads from a node's hostvars.
NODE_VARS: tuple[str, ...] = (
    PROFILE_VAR,
    *(PREFIX + key for key in serve_profiles.SETTING_KEYS),
    EXTRA_ARGS_VAR,
    serve_profiles.EXTRA_ENV_VAR,
    memory_budget.SHM_VAR,
    GPUS_VAR,
    TP_VAR,
    memory_budget.NODE_MEMORY_VAR,
    memory_budget.RESERVE_VAR,
    MANIFEST_VAR,
    *INPUT_VARS,
)


def input_errors(host: str, host_vars: Mapping[str, Any]) -> list[str]:
    """What is wrong with the serve stage's inputs the inventory sets on `host`: the boot
    phases' timeouts and the compile cache settings (each unset one is the role's default)."""
    errors: list[str] = []
    timeouts = host_vars.get(PHASE_TIMEOUTS_VAR)
    if timeouts is not None:
        problems = boot_phases.phase_errors(timeouts)
        if problems:
            names = ", ".join(boot_phases.PHASE_NAMES)
            errors.append(
                f"{PHASE_TIMEOUTS_VAR} on host {host}: {'; '.join(problems)}: give seconds (an "
                f"integer, at least 1) for phases among {names}, e.g. "
                f"{PHASE_TIMEOUTS_VAR}: {{compile: 3600}}"
            )
    root = host_vars.get(CACHE_ROOT_VAR)
    if root is not None and (
        not isinstance(root, str) or not root.startswith("/") or ":" in root or root == "/"
    ):
        errors.append(
            f"{CACHE_ROOT_VAR} on host {host} is {root!r}: it must be an absolute path other "
            "than / and without ':' (docker's volume separator), e.g. "
            f"{CACHE_ROOT_VAR}: /var/cache/gx10/vllm"
        )
    caches = host_vars.get(CACHES_VAR)
    if caches is not None:
        if not isinstance(caches, Mapping):
            errors.append(
                f"{CACHES_VAR} on host {host} is {caches!r}: it must map variable names to "
                f"subdirectory names, e.g. {CACHES_VAR}: {{TORCHINDUCTOR_CACHE_DIR: inductor}}"
            )
        else:
            bad = [f"key {key!r}" for key in caches if not _ENV_NAME.fullmatch(str(key))] + [
                f"subdirectory {value!r}"
                for value in caches.values()
                if not isinstance(value, str) or not _SUBDIRECTORY.fullmatch(value)
            ]
            if bad:
                errors.append(
                    f"{CACHES_VAR} on host {host} has {', '.join(bad)}: each key must be an "
                    "environment variable's name (A-Z, 0-9, _) and each value a plain "
                    "subdirectory name (letters, digits, _ . -, no /), e.g. "
                    f"{CACHES_VAR}: {{TORCHINDUCTOR_CACHE_DIR: inductor}}"
                )
    keep = host_vars.get(CACHE_KEEP_VAR)
    if keep is not None and (isinstance(keep, bool) or not re.fullmatch(r"[0-9]+", str(keep))):
        errors.append(
            f"{CACHE_KEEP_VAR} on host {host} is {keep!r}: it must be a whole number, 0 or more "
            f"(the older images' caches kept), e.g. {CACHE_KEEP_VAR}: 1"
        )
    return errors


def checkpoint_size(manifest: Any, checkpoint: str) -> tuple[int, str]:
    """The checkpoint's bytes and where the figure comes from: the manifest, else the catalog.

    A manifest file that is there but cannot be read raises ModelError naming the variable, its
    value and the fix: the budget is not judged on a guess, and the model stage would refuse the
    same file anyway.
    """
    note = ""
    if isinstance(manifest, str) and manifest:
        path = Path(manifest)
        if path.is_file():
            from ansible_collections.gx10.cluster.plugins.module_utils.model_manifest import (  # noqa: PLC0415 - PyYAML only when a manifest is there
                load_manifest,
            )

            try:
                loaded = load_manifest(path)
            except (ModelError, OSError) as exc:
                raise ModelError(
                    f"{MANIFEST_VAR} is {str(path)!r}, which is not a valid manifest: "
                    f"{str(exc).splitlines()[0]}; correct the file, or build it again with "
                    "`gx10 model manifest`"
                ) from exc
            else:
                return loaded.total_size, (
                    f"{loaded.total_size / 1e9:.1f} GB checkpoint, {MANIFEST_VAR} {path.name}"
                )
        else:
            note = f"; {MANIFEST_VAR} {path} not built yet"
    entry = lookup(checkpoint)
    return int(
        entry.size_gb * 1e9
    ), f"{entry.size_gb:.1f} GB checkpoint, catalog {entry.name}{note}"


def _resolve(host: str, host_vars: Mapping[str, Any], errors: list[str]) -> Resolved | None:
    name = host_vars.get(PROFILE_VAR)
    overrides = {key: host_vars.get(PREFIX + key) for key in serve_profiles.SETTING_KEYS}
    try:
        return serve_profiles.resolve(
            serve_profiles.DEFAULT_PROFILE if name is None else name, overrides
        )
    except ProfileError as exc:
        errors.extend(f"{error} (host {host})" for error in exc.errors)
        return None


def _env(
    host: str, host_vars: Mapping[str, Any], profile: str, errors: list[str]
) -> dict[str, str]:
    try:
        return serve_profiles.resolve_env(profile, host_vars.get(serve_profiles.EXTRA_ENV_VAR))
    except ProfileError as exc:
        errors.extend(f"{error} (host {host})" for error in exc.errors)
        return {}


def _same_everywhere(
    nodes: Sequence[str],
    resolved: Mapping[str, Resolved],
    envs: Mapping[str, Mapping[str, str]],
    extra: Mapping[str, Any],
    errors: list[str],
) -> None:
    """Every rank runs the same engine arguments and environment (a TP pair must agree)."""
    first = nodes[0]
    why = "every rank of the tensor-parallel pair must run the same engine arguments"
    for host in nodes[1:]:
        if host not in resolved or first not in resolved:
            continue
        a, b = resolved[first], resolved[host]
        if a.profile.name != b.profile.name:
            errors.append(
                f"{PROFILE_VAR} on host {host} is {b.profile.name!r} but on {first} it is "
                f"{a.profile.name!r}: {why}; set it once for all nodes (group_vars/all.yml)"
            )
            continue
        for key in serve_profiles.SETTING_KEYS:
            if a.values.get(key) != b.values.get(key):
                errors.append(
                    f"{PREFIX}{key} on host {host} is {b.values.get(key)!r} but on {first} it "
                    f"is {a.values.get(key)!r}: {why}; set it once for all nodes"
                )
        if envs.get(host) != envs.get(first):
            keys = sorted(
                k
                for k in set(envs.get(host, {})) | set(envs.get(first, {}))
                if envs.get(host, {}).get(k) != envs.get(first, {}).get(k)
            )
            errors.append(
                f"{serve_profiles.EXTRA_ENV_VAR} gives host {host} another environment than "
                f"{first} ({', '.join(keys)}): {why}; set it once for all nodes"
            )
        if extra.get(host) != extra.get(first):
            errors.append(
                f"{EXTRA_ARGS_VAR} on host {host} is {extra.get(host)!r} but on {first} it is "
                f"{extra.get(first)!r}: {why}; set it once for all nodes"
            )


def _tensor_parallel(host: str, host_vars: Mapping[str, Any], nodes: int, errors: list[str]) -> int:
    gpus = host_vars.get(GPUS_VAR)
    gpus = 1 if gpus is None else gpus
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        errors.append(f"{GPUS_VAR} on host {host} must be an integer >= 1, got {gpus!r}")
        return nodes
    tp = host_vars.get(TP_VAR)
    if tp is not None and tp != nodes * gpus:
        errors.append(
            f"{TP_VAR} is {tp!r}, but {nodes} node(s) x {gpus} GPU(s) = {nodes * gpus}: tensor "
            f"parallelism spans every GPU of every node; set it to {nodes * gpus} or leave it "
            f"unset (host {host})"
        )
    return nodes * gpus


def _check_heads(
    checkpoint: str, head_vars: Mapping[str, Any], nodes: int, errors: list[str]
) -> None:
    """The tensor-parallel size must divide the model's attention heads (vLLM splits them evenly
    over the ranks and refuses at start-up otherwise, after every node has been changed)."""
    gpus = head_vars.get(GPUS_VAR)
    gpus = 1 if gpus is None else gpus
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        return  # reported by _tensor_parallel
    try:
        entry: CatalogEntry = lookup(checkpoint)
    except ModelError:
        return  # an unknown checkpoint is the profile's error, reported there
    heads = entry.attention_heads
    tp = nodes * gpus
    if heads is None or heads % tp == 0:
        return
    fits = [n for n in range(2, heads + 1) if heads % (n * gpus) == 0][:4]
    example = ", ".join(str(n) for n in fits) or "none"
    errors.append(
        f"tensor-parallel size {tp} ({nodes} node(s) x {GPUS_VAR} {gpus}) does not divide the "
        f"{heads} attention heads of {entry.name}: vLLM splits the heads evenly over the ranks "
        f"and refuses to start; use a node count that gives a divisor (with {GPUS_VAR} {gpus}: "
        f"{example} nodes), by adding or removing hosts in groups['workers']"
    )


def _cli_errors(resolved: Resolved, extra: Any, model_dir: str, nodes: int) -> list[str]:
    """The head's whole argument list (placeholders for the plan's values) against the parser."""
    settings: dict[str, Any] = {
        "model": model_dir,
        "served_model_name": "served-model",
        "nnodes": nodes,
        "node_rank": 0,
        "master_addr": "192.0.2.1",
        "master_port": 29500,
        "profile": resolved.profile.name,
        "extra_args": extra or [],
        **{key: resolved.values.get(key) for key in resolved.overridden},
    }
    try:
        traced = vllm_args.build_traced(settings)
    except vllm_args.VllmArgsError as exc:
        return [str(exc)]
    return vllm_args.cli_errors(traced, resolved)


def analyse(
    nodes: Sequence[str],
    node_vars: Mapping[str, Mapping[str, Any]],
    errors: list[str],
    *,
    model_dir: str,
) -> dict[str, Any]:
    """Check the serving settings of every node; return the plan's ``serving`` part."""
    if not nodes:
        return {}
    resolved: dict[str, Resolved] = {}
    envs: dict[str, dict[str, str]] = {}
    extra: dict[str, Any] = {}
    for host in nodes:
        host_vars = node_vars.get(host, {})
        errors.extend(input_errors(host, host_vars))
        one = _resolve(host, host_vars, errors)
        if one is None:
            continue
        resolved[host] = one
        envs[host] = _env(host, host_vars, one.profile.name, errors)
        raw_extra = host_vars.get(EXTRA_ARGS_VAR)
        if raw_extra is not None and (
            isinstance(raw_extra, str | bytes) or not isinstance(raw_extra, Sequence)
        ):
            errors.append(
                f"{EXTRA_ARGS_VAR} on host {host} must be a list of strings, got {raw_extra!r}"
            )
            raw_extra = None
        extra[host] = [str(item) for item in raw_extra or []]
    _same_everywhere(nodes, resolved, envs, extra, errors)
    head = nodes[0]
    if head not in resolved:
        return {}
    profile = resolved[head].profile
    try:
        vllm_cli.parser_for(profile.vllm_version)
    except KeyError as exc:
        errors.append(str(exc.args[0]))
    else:
        errors.extend(_cli_errors(resolved[head], extra.get(head), model_dir, len(nodes)))

    _check_heads(profile.checkpoint, node_vars.get(head, {}), len(nodes), errors)
    manifest = node_vars.get(head, {}).get(MANIFEST_VAR)
    memory: dict[str, Any] = {}
    budget: dict[str, Any] = {}
    weights: tuple[int, str] | None = None
    try:
        weights = checkpoint_size(manifest, profile.checkpoint)
    except ModelError as exc:
        errors.append(str(exc))  # and no budget judged on a guessed checkpoint size
    for host in nodes:
        if host in resolved and weights is not None:
            tp = _tensor_parallel(host, node_vars.get(host, {}), len(nodes), errors)
            judged = _budget(
                host, node_vars.get(host, {}), resolved[host], weights=weights, tp=tp, errors=errors
            )
            if judged is not None:
                memory[host], budget[host] = judged
    low_high = profile.spec_acceptance
    return {
        "profile": profile.name,
        "version": profile.version,
        "image": profile.image,
        "vllm_version": profile.vllm_version,
        "spec_acceptance": list(low_high) if low_high else None,
        # The --speculative-config every rank renders (the profile's, or the inventory's
        # vllm_serve_speculative_config; {} is off): what gx10 doctor judges the draft against.
        "speculative_config": resolved[head].values.get("speculative_config") or {},
        "memory": memory,
        "budget": budget,
    }


def _budget(
    host: str,
    host_vars: Mapping[str, Any],
    one: Resolved,
    *,
    weights: tuple[int, str],
    tp: int,
    errors: list[str],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The node's budget inputs and its budget with gx10_node_memory_gib; problems to errors."""
    try:
        node_gib = memory_budget.gib(
            _default(
                host_vars, memory_budget.NODE_MEMORY_VAR, memory_budget.DEFAULT_NODE_MEMORY_GIB
            ),
            memory_budget.NODE_MEMORY_VAR,
            minimum=1,
        )
        reserve = memory_budget.gib(
            _default(host_vars, memory_budget.RESERVE_VAR, memory_budget.DEFAULT_RESERVE_GIB),
            memory_budget.RESERVE_VAR,
        )
        shm = memory_budget.parse_size(
            _default(host_vars, memory_budget.SHM_VAR, memory_budget.DEFAULT_SHM_SIZE)
        )
    except memory_budget.BudgetError as exc:
        errors.append(f"{exc} (host {host})")
        return None
    values = one.values
    inputs = memory_budget.Inputs(
        profile=f"profile {one.profile.label}",
        weights_bytes=weights[0],
        weights_source=weights[1],
        tensor_parallel=tp,
        kv_bytes_per_token=int(values["kv_bytes_per_token"]),
        max_model_len=int(values["max_model_len"]),
        kv_seqs=min(int(values["kv_context_seqs"]), int(values["max_num_seqs"])),
        runtime_overhead_gib=float(values["runtime_overhead_gib"]),
        gpu_memory_utilization=float(values["gpu_memory_utilization"]),
        shm_bytes=shm,
        reserve_gib=reserve,
        origins={
            "gpu_memory_utilization": one.origin("gpu_memory_utilization"),
            "max_model_len": one.origin("max_model_len"),
            "kv_seqs": one.origin("kv_context_seqs"),
            "kv_bytes_per_token": one.origin("kv_bytes_per_token"),
            "runtime_overhead_gib": one.origin("runtime_overhead_gib"),
        },
    )
    result = memory_budget.evaluate(inputs, node_gib)
    fix = "; ".join(result.fixes)
    errors.extend(f"memory on host {host}: {problem}: {fix}" for problem in result.problems)
    return inputs.to_dict(), result.to_dict()


def _default(host_vars: Mapping[str, Any], name: str, default: Any) -> Any:
    value = host_vars.get(name)
    return default if value is None else value
