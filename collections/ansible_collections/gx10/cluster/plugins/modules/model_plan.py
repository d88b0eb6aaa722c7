# SPDX-License-Identifier: Apache-2.0
# Documentation only: the work is done on the controller by plugins/action/model_plan.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_plan
short_description: Load the checkpoint manifest on the controller and check the plan fits
version_added: 0.1.0
description:
  - Loads I(manifest) with the collection's strict loader (module_utils model_manifest; schema,
    sizes, hash formats, no path that could escape the model directory, no duplicates) and fails
    naming every problem, before any node is touched.
  - Looks the checkpoint up in the catalog (FIELD_NOTES section 1) by I(checkpoint) or the
    manifest's repository, or uses the manifest's own size for a checkpoint the catalog lacks,
    and refuses a plan whose nodes cannot hold the weights, with the numbers.
  - With I(source), checks it as M(gx10.cluster.model_fetch) will (the same code), its type and
    fields, and that a C(hub) source names the manifest's pinned revision. A bad source stops the
    run here, before any node changes; the message never shows a token.
  - Returns the file list that M(gx10.cluster.model_fetch) takes.
options:
  manifest:
    description: The manifest file on the controller.
    type: path
    required: true
  nodes:
    description: Nodes the weights are split across (tensor parallelism).
    type: int
    required: true
  checkpoint:
    description: Catalog name or Hub repository (default, the manifest's repository).
    type: str
  usable_gb_per_node:
    description: Usable memory per node in GB.
    type: float
    default: 121.0
  reserve_gb_per_node:
    description: Memory to keep free per node (KV cache, activations), in GB.
    type: float
    default: 0.0
  source:
    description:
      - Where the head will read the files (gx10_model_source), as M(gx10.cluster.model_fetch)
        takes it; not checked when unset.
    type: raw
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Load the manifest and check the plan
  gx10.cluster.model_plan:
    manifest: "{{ gx10_model_manifest }}"
    nodes: "{{ gx10_plan.nodes | length }}"
  register: model
"""

RETURN = r"""
files:
  description: The manifest's files (path, size, kind, sha256 or git_sha1).
  returned: success
  type: list
total_bytes:
  description: Checkpoint size in bytes.
  returned: success
  type: int
repo:
  description: The pinned repository.
  returned: success
  type: str
revision:
  description: The pinned commit.
  returned: success
  type: str
source:
  description: The checked source in words (never its token); empty without I(source).
  returned: success
  type: str
"""
