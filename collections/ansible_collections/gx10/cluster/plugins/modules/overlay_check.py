#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.overlay_check: the overlay's files, hashed inside the image or a rank."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: overlay_check
short_description: Check the files of a runtime-fix overlay inside the vLLM image or a running rank
description:
  - With I(image), hashes the image's own files at each overlay path in a throwaway container
    (C(docker run --rm --pull never --network none --entrypoint sha256sum), the engine never
    starts) and fails unless each is the entry's C(base_sha256) (or absent, for a new file), so
    an image the overlay was not reviewed for refuses the start, naming the image, the path, the
    expected and found hashes and the fix.
  - With I(container), hashes the files the running rank sees (C(docker exec ... sha256sum)) and
    fails unless each is the entry's C(sha256), the replacement.
  - Read-only, never reports a change, and runs the same in check mode; in check mode an image not
    on the node yet (the image stage pulls it) is reported as not checked instead of failing.
options:
  overlay:
    description: >-
      The overlay (C(vllm_serve_overlay)); each entry's path, sha256 and base_sha256 are read.
    type: list
    elements: dict
    required: true
  image:
    description: The image (repository@sha256:...) whose own files are checked against base_sha256.
    type: str
  container:
    description: The running rank whose files are checked against sha256.
    type: str
  node:
    description: The node's name, for the messages.
    type: str
    default: this node
  timeout:
    description: Seconds the docker command may take.
    type: int
    default: 120
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: The image's own files are the reviewed bases
  gx10.cluster.overlay_check:
    overlay: "{{ vllm_serve_overlay }}"
    image: "{{ vllm_serve_image }}"
    node: "{{ inventory_hostname }}"

- name: The rank runs the replacements
  gx10.cluster.overlay_check:
    overlay: "{{ vllm_serve_overlay }}"
    container: gx10-vllm
"""

RETURN = r"""
checked:
  description: Whether the files were hashed (false only in check mode without the image).
  returned: always
  type: bool
files:
  description: >-
    Each overlay path with the hash C(expected) and the hash C(found) (null - no such file).
  returned: when checked
  type: list
  elements: dict
"""

import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.serve_overlay import (
    HashReadError,
    OverlayFile,
    applied_errors,
    base_errors,
    check_overlay,
    parse_sha256sum,
    sha256sum_argv,
)

Run = Callable[[Sequence[str], int], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def image_argv(image: str, paths: Sequence[str]) -> list[str]:
    """A throwaway container of the image that only hashes the files: no network, no GPU (the
    NVIDIA runtime injects none for "void"), never pulled (the image stage pulls)."""
    return [
        "docker", "run", "--rm", "--pull", "never", "--network", "none", "--user", "0:0",
        "--env", "NVIDIA_VISIBLE_DEVICES=void", "--entrypoint", sha256sum_argv(paths)[0],
        image, *sha256sum_argv(paths)[1:],
    ]  # fmt: skip


def container_argv(container: str, paths: Sequence[str]) -> list[str]:
    return ["docker", "exec", "--user", "0:0", container, *sha256sum_argv(paths)]


def check(params: dict[str, Any], check_mode: bool, run: Run = _run) -> dict[str, Any]:
    """The module's result: ``failed`` and ``msg`` when a file is not as expected."""
    entries, problems = check_overlay(params["overlay"], hash_source=None)
    node = params.get("node") or "this node"
    if problems:
        return {"failed": True, "msg": f"{node}: " + "; ".join(problems), "checked": False}
    result: dict[str, Any] = {"changed": False, "checked": False}
    if not entries:
        result.update(checked=True, files=[], msg="no overlay")
        return result
    paths = [entry.path for entry in entries]
    image, container = params.get("image"), params.get("container")
    if image:
        present = run(["docker", "image", "inspect", "--format", "{{.Id}}", image], 60)
        if present.returncode != 0:
            if check_mode:
                result["msg"] = (
                    f"{node}: not checked: the image {image} is not on the node yet (check "
                    "mode; the image stage pulls it)"
                )
                return result
            return {
                **result,
                "failed": True,
                "msg": f"{node}: the image {image} is not on the node, so its files cannot be "
                "checked against the overlay. Fix: run the image stage first (site.yml does, "
                "or --tags image)",
            }
        argv = image_argv(image, paths)
        where = f"the image {image}"
    else:
        argv = container_argv(str(container), paths)
        where = f"the rank {container}"
    proc = run(argv, params.get("timeout") or 120)
    try:
        found = parse_sha256sum(proc.stdout, proc.stderr, paths)
    except HashReadError as exc:
        return {
            **result,
            "failed": True,
            "msg": f"{node}: cannot hash the overlay's files inside {where} ({exc}). Fix: "
            f"the image needs sha256sum (coreutils){'' if image else ' and the rank must run'}",
        }
    result["checked"] = True
    result["files"] = _files(entries, found, bool(image))
    errors = (
        base_errors(entries, found, image=str(image), node=node)
        if image
        else applied_errors(entries, found, container=str(container), node=node)
    )
    if errors:
        result.update(failed=True, msg="\n".join(errors))
    else:
        what = "the reviewed bases" if image else "the replacements"
        result["msg"] = f"{node}: {len(entries)} file(s) of {where} are {what}"
    return result


def _files(entries: Sequence[OverlayFile], found: dict[str, str | None], base: bool) -> list[Any]:
    return [
        {
            "path": entry.path,
            "expected": entry.base_sha256 if base else entry.sha256,
            "found": found.get(entry.path),
        }
        for entry in entries
    ]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "overlay": {"type": "list", "elements": "dict", "required": True},
            "image": {"type": "str"},
            "container": {"type": "str"},
            "node": {"type": "str", "default": "this node"},
            "timeout": {"type": "int", "default": 120},
        },
        required_one_of=[("image", "container")],
        mutually_exclusive=[("image", "container")],
        supports_check_mode=True,
    )
    result = check(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
