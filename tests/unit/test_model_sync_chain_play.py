# SPDX-License-Identifier: Apache-2.0
"""The chain's expressions in playbooks/stages/model.yml and roles/model_sync, rendered by a real
ansible-playbook on four local hosts: which nodes serve, where each worker fetches from, and
which workers wait for a 404 (only those whose predecessor is a worker, still fetching)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    REPO_ROOT,
    run_ansible_playbook,
)

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists() or not (REPO_ROOT / "ansible.cfg").exists(),
    reason="needs ansible-playbook next to the test interpreter and the repository ansible.cfg",
)

NAMES = ["gx10-a", "gx10-b", "gx10-c", "gx10-d"]
ADDRESSES = {name: f"192.168.100.{10 + i}" for i, name in enumerate(NAMES)}


def _plan(count: int) -> dict[str, Any]:
    names = NAMES[:count]
    return {
        "head": names[0],
        "workers": names[1:],
        "nodes": [{"name": n, "rank": r} for r, n in enumerate(names)],
        "rails": [{"name": "rail0", "addresses": {n: ADDRESSES[n] for n in names}}],
        "model_dir": "/srv/models/x",
    }


def _expressions() -> tuple[str, dict[str, str]]:
    """The play's list of serving nodes, and fetch.yml's source, relay_wait and relay_from."""
    stage = yaml.safe_load((ROOT / "playbooks/stages/model.yml").read_text())
    play = next(p for p in stage if p["name"].startswith("Copy the verified files down the chain"))
    servers = play["tasks"][0]["vars"]["__model_sync_servers"]
    fetch = yaml.safe_load((ROOT / "roles/model_sync/tasks/fetch.yml").read_text())
    block = next(t for t in fetch if t.get("name") == "Fetch this node's copy")["block"]
    args = block[0]["gx10.cluster.model_fetch"]
    return servers, {key: args[key] for key in ("source", "relay_wait", "relay_from")}


def _render(tmp_path: Path, count: int, limit: str | None = None) -> dict[str, dict[str, Any]]:
    servers, fetch_args = _expressions()
    names = NAMES[:count]
    inventory = {
        "all": {
            "children": {
                "head": {"hosts": {names[0]: {}}},
                "workers": {"hosts": {n: {} for n in names[1:]}},
            },
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "gx10_plan": _plan(count),
                "gx10_model_source": {"type": "http", "base_url": "http://nas:8080/"},
            },
        }
    }
    out = tmp_path / "out"
    out.mkdir()
    role = ROOT / "roles/model_sync"
    shown = {"servers": servers, **fetch_args}
    playbook = [
        {
            "name": "Render",
            "hosts": "workers",
            "gather_facts": False,
            "vars_files": [str(role / "defaults/main.yml"), str(role / "vars/main.yml")],
            "tasks": [
                {
                    "name": "Write",
                    "ansible.builtin.copy": {
                        "content": "{{ shown | to_json }}",
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0644",
                    },
                    "vars": {
                        "shown": {
                            k: v.replace("omit", "'OMIT'") if k == "relay_from" else v
                            for k, v in shown.items()
                        }
                    },
                    "delegate_to": "localhost",
                }
            ],
        }
    ]
    (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    args = ("--limit", limit) if limit else ()
    done = run_ansible_playbook(
        tmp_path, tmp_path / "inventory.yml", tmp_path / "play.yml", *args, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_four_nodes_fetch_down_the_chain_and_only_behind_a_worker_wait(tmp_path: Path) -> None:
    shown = _render(tmp_path, 4)
    assert set(shown) == {"gx10-b", "gx10-c", "gx10-d"}
    assert shown["gx10-b"]["servers"] == ["gx10-a", "gx10-b", "gx10-c"]  # head first, rank order
    for node, before in (("gx10-b", "gx10-a"), ("gx10-c", "gx10-b"), ("gx10-d", "gx10-c")):
        assert shown[node]["source"] == {
            "type": "http",
            "base_url": f"http://{ADDRESSES[before]}:8090/",
        }
        assert shown[node]["relay_from"] == before
    # The head finished its fetch before: its 404 is final. A worker's means "not yet".
    assert int(shown["gx10-b"]["relay_wait"]) == 0
    assert int(shown["gx10-c"]["relay_wait"]) == 600
    assert int(shown["gx10-d"]["relay_wait"]) == 600


def test_two_nodes_are_the_worker_fetching_from_the_head_as_before(tmp_path: Path) -> None:
    shown = _render(tmp_path, 2)
    assert shown["gx10-b"]["servers"] == ["gx10-a"]
    assert shown["gx10-b"]["source"]["base_url"] == f"http://{ADDRESSES['gx10-a']}:8090/"
    assert int(shown["gx10-b"]["relay_wait"]) == 0


def test_a_limit_serves_from_the_node_before_the_workers_in_play(tmp_path: Path) -> None:
    shown = _render(tmp_path, 4, limit="gx10-c")
    assert set(shown) == {"gx10-c"}
    assert shown["gx10-c"]["servers"] == ["gx10-b"]  # not in the limit, still serves
