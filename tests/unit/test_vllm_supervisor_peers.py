"""The vllm_supervisor role's peers for a group of N nodes (issue 15): its vars/main.yml through a
real ansible-playbook (four hosts on connection local). The head's agent lists every worker in
the plan's rank order, each worker's the head alone, each at the address its agent published."""

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
    run_ansible_playbook,
)

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
)

HEAD, WORKERS = "gx10-a", ["gx10-b", "gx10-c", "gx10-d"]
ADDRESS = {name: f"172.31.240.{10 + index}" for index, name in enumerate([HEAD, *WORKERS])}

PLAYBOOK = f"""
- name: Render each node's peers as the vllm_supervisor role does
  hosts: gx10
  gather_facts: false
  vars:
    gx10_plan:
      head: {HEAD}
      workers: {json.dumps(WORKERS)}
      hosts: {json.dumps({HEAD: {"role": "head"}, **{w: {"role": "worker"} for w in WORKERS}})}
  tasks:
    - name: Publish where this node's agent listens (as install.yml does)
      ansible.builtin.set_fact:
        __vllm_supervisor_listen:
          address: "{{{{ node_address }}}}"
          port: "{{{{ 8471 | int }}}}"

    - name: Load the role's variables
      ansible.builtin.include_vars:
        file: {ROOT}/roles/vllm_supervisor/vars/main.yml

    - name: Write the peers, through the agent config's own validation
      ansible.builtin.copy:
        content: >-
          {{{{ {{'node': inventory_hostname, 'role': __vllm_supervisor_role,
                'listen_address': node_address, 'peers': __vllm_supervisor_peers,
                'rank': {{'container': 'gx10-vllm', 'model': 'm',
                          'health_urls': ['http://127.0.0.1:8000/health']}},
                'gid': {{'rails': [{{'netdev': 'eth0', 'address': '192.168.100.10'}}]}}}}
              | gx10.cluster.pair_config | to_json }}}}
        dest: "{{{{ out_dir }}}}/{{{{ inventory_hostname }}}}.json"
        mode: "0644"
      delegate_to: localhost
"""


def test_the_head_lists_every_worker_and_each_worker_the_head(tmp_path: Path) -> None:
    hosts: dict[str, Any] = {name: {"node_address": ADDRESS[name]} for name in ADDRESS}
    inventory = {
        "all": {
            "hosts": {"localhost": {}},
            "children": {
                "gx10": {
                    "children": {
                        "head": {"hosts": {HEAD: hosts[HEAD]}},
                        "workers": {"hosts": {w: hosts[w] for w in WORKERS}},
                    },
                    "vars": {"out_dir": str(tmp_path)},
                },
            },
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    done = run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", timeout=180
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    configs = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ADDRESS}
    head = configs[HEAD]
    assert head["schema"] == 2
    assert head["peers"] == [{"name": w, "address": ADDRESS[w], "port": 8471} for w in WORKERS]
    for worker in WORKERS:
        assert configs[worker]["role"] == "worker"
        assert configs[worker]["peers"] == [{"name": HEAD, "address": ADDRESS[HEAD], "port": 8471}]
