# SPDX-License-Identifier: Apache-2.0
"""Action plugin for gx10.cluster.model_plan (documented in plugins/modules/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gx10.cluster.plugins.module_utils.model_catalog import (
    CatalogEntry,
    check_fits,
    lookup,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import (
    CatalogError,
    ModelError,
)
from ansible_collections.gx10.cluster.plugins.module_utils.model_manifest import load_manifest
from ansible_collections.gx10.cluster.plugins.module_utils.model_source import (
    SourceError,
    parse_source,
)

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "manifest": {"type": "path", "required": True},
    "nodes": {"type": "int", "required": True},
    "checkpoint": {"type": "str"},
    "usable_gb_per_node": {"type": "float", "default": 121.0},
    "reserve_gb_per_node": {"type": "float", "default": 0.0},
    # Checked here by the same code as on the node; raw, so a wrong shape gets that code's
    # message. It may hold a token: nothing returned here repeats it.
    "source": {"type": "raw"},
}


def plan(args: dict[str, Any]) -> dict[str, Any]:
    """The task's result for validated `args`: the manifest's files and the fit, or failed.

    The strict manifest loader and the catalog are this collection's module_utils, the same
    objects `gx10 model verify` uses (gx10 loads them from here, never the reverse).
    """
    path = Path(args["manifest"])
    try:
        manifest = load_manifest(path)
        name = args.get("checkpoint")
        if name:
            entry = lookup(name)
        else:
            try:
                entry = lookup(manifest.repo)
            except CatalogError:  # not in the catalog (the lab's synthetic one): its own size
                entry = CatalogEntry(
                    name=manifest.repo,
                    label=manifest.repo,
                    size_gb=manifest.total_size / 1e9,
                    decision="from the manifest",
                )
        fit = check_fits(
            entry,
            args["nodes"],
            args.get("usable_gb_per_node", 121.0),
            reserve_gb_per_node=args.get("reserve_gb_per_node", 0.0),
        )
    except ModelError as exc:
        return {"failed": True, "msg": f"model plan refused: {exc}"}
    source = ""
    if args.get("source") is not None:
        try:
            source = parse_source(
                args["source"], revision=manifest.revision, name="gx10_model_source"
            ).describe()
        except SourceError as exc:
            return {"failed": True, "msg": f"model plan refused: {exc}"}
    return {
        "repo": manifest.repo,
        "revision": manifest.revision,
        "files": [f.to_dict() for f in manifest.files],
        "total_bytes": manifest.total_size,
        "checkpoint": entry.name,
        "per_node_gb": round(fit.per_node_gb, 3),
        "source": source,
        "msg": (
            f"{path}: {manifest.repo} at {manifest.revision}, {len(manifest.files)} files, "
            f"{manifest.total_size} bytes; {entry.name} ({entry.size_text}) on {fit.nodes} "
            f"node(s): {fit.per_node_gb:.1f} GB per node of {fit.usable_gb_per_node:.1f} GB"
        ),
    }


class ActionModule(ActionBase):
    """Load and validate the manifest on the controller; refuse a plan the nodes cannot hold."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(
        self, tmp: str | None = None, task_vars: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        result: dict[str, Any] = super().run(tmp, task_vars)
        result["changed"] = False
        result.update(plan(args))
        return result
