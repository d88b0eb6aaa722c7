# SPDX-License-Identifier: Apache-2.0
"""Real ansible-playbook runs on localhost: a two-node inventory (connection local) and the run.

Shared by the collection's playbook tests and the repository's role tests (tests/unit), which put
`collections/` on sys.path and import it as
``ansible_collections.gx10.cluster.tests.unit.localhost_playbook``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# tests/unit -> tests -> cluster -> gx10 -> ansible_collections -> collections -> repository
REPO_ROOT = Path(__file__).resolve().parents[6]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def two_node_inventory(
    head: Mapping[str, Any], worker: Mapping[str, Any], cluster_vars: Mapping[str, Any]
) -> dict[str, Any]:
    """localhost plus the gx10 group (head gx10-a, worker gx10-b), all on connection local; its
    engine may answer without the gateway (gx10_allow_unauthenticated, unless cluster_vars says
    otherwise): these playbooks run on this machine, and the rule is cluster_plan's own test's."""
    return {
        "all": {
            "hosts": {"localhost": {}},
            "children": {
                "gx10": {
                    "children": {
                        "head": {"hosts": {"gx10-a": dict(head)}},
                        "workers": {"hosts": {"gx10-b": dict(worker)}},
                    },
                    "vars": {"gx10_allow_unauthenticated": True, **cluster_vars},
                },
            },
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            },
        }
    }


def run_ansible_playbook(
    tmp_path: Path, inventory: Path, playbook: Path, *args: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook from the repository root with its ansible.cfg, no colour, never raising."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{ANSIBLE_PLAYBOOK.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(playbook), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_module(tmp_path: Path, module: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """One task of ``module`` with ``args`` on localhost through a real ansible-playbook; its
    registered result. A failed task raises AssertionError with its result."""
    result: dict[str, Any] = run_tasks(tmp_path, [{module: dict(args)}], timeout=120)["r0"]
    assert not result.get("failed"), result
    return result


def run_tasks(
    tmp_path: Path, tasks: list[Mapping[str, Any]], timeout: float = 300
) -> dict[str, Any]:
    """Run ``tasks`` in order on localhost through a real ansible-playbook, each registering
    ``r<i>`` with its failure ignored; every result by name (a failed one has ``failed: true``)."""
    import json  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {}}}}))
    out = tmp_path / "results.json"
    steps: list[dict[str, Any]] = [
        {**task, "register": f"r{i}", "ignore_errors": True} for i, task in enumerate(tasks)
    ]
    names = {f"r{i}": f"{{{{ r{i} }}}}" for i in range(len(tasks))}
    steps.append({"ansible.builtin.copy": {"content": "{{ results | to_json }}", "dest": str(out)},
                  "vars": {"results": names}})  # fmt: skip
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                         "tasks": steps}])
    )  # fmt: skip
    run = run_ansible_playbook(
        tmp_path, inventory, playbook, "-e", f"ansible_python_interpreter={sys.executable}",
        timeout=timeout,
    )  # fmt: skip
    assert out.exists(), run.stdout + run.stderr
    results: dict[str, Any] = json.loads(out.read_text())
    return results
