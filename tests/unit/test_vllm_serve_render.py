"""The vllm_serve role's variables through real Ansible templating: profile, overrides, env.

A localhost play loads the role's defaults and vars/main.yml the way the role does (role
defaults beneath the inventory, role vars above), with a cluster plan, and prints what the
filters make of them: the argument list and the container environment. Precedence is Ansible's
own: an inventory value beats the profile, an undefined one keeps it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (  # noqa: E402
    build_plan,
)
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
)

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
)

PLAN = {
    "hosts": {"n1": {"rank": 0, "role": "head"}},
    "nodes": [{"name": "n1"}, {"name": "n2"}],
    "master_addr": "192.168.100.10",
    "model_dir": "/srv/models/DeepSeek-V4-Flash-0731",
}
PLAYBOOK = f"""
- name: Render the serve role's settings
  hosts: n1
  gather_facts: false
  roles:
    - role: {ROOT}/roles/vllm_serve
      # Only the role's variables: main.yml's tasks need a node.
      when: false
  tasks:
    - name: Write the argument list and the environment
      ansible.builtin.copy:
        content: "{{{{ {{'args': __vllm_serve_settings | gx10.cluster.vllm_args,
                       'env': __vllm_serve_profile_env}} | to_json }}}}"
        dest: "{{{{ rendered_file }}}}"
        mode: "0600"
"""


def render(
    tmp_path: Path, plan: dict[str, Any] | None = None, **inventory_vars: Any
) -> subprocess.CompletedProcess[str]:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "hosts": {
                "n1": {
                    **host,
                    "gx10_plan": PLAN if plan is None else plan,
                    "rendered_file": str(tmp_path / "rendered.json"),
                    **inventory_vars,
                }
            }
        },
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    return run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", timeout=120
    )


def rendered(tmp_path: Path, result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, Any] = json.loads((tmp_path / "rendered.json").read_text())
    return data


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_profile_renders_and_the_inventory_overrides_it(tmp_path: Path) -> None:
    data = rendered(
        tmp_path,
        render(
            tmp_path,
            vllm_serve_max_num_seqs=12,
            vllm_serve_enable_prefix_caching=False,
            vllm_serve_extra_env={
                "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "600",
                "CUTE_DSL_ARCH": None,
            },
        ),
    )
    args, env = data["args"], data["env"]
    assert flag(args, "--max-num-seqs") == "12"  # the inventory
    assert flag(args, "--max-cudagraph-capture-size") == "72"  # derived from it
    assert flag(args, "--max-model-len") == "1048576"  # the profile
    assert flag(args, "--moe-backend") == "flashinfer_b12x"
    assert "--no-enable-prefix-caching" in args
    assert json.loads(flag(args, "--default-chat-template-kwargs"))["reasoning_effort"] == "low"
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "600"
    assert "CUTE_DSL_ARCH" not in env
    assert env["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"


def test_a_flag_the_images_vllm_refuses_fails_naming_its_variable(tmp_path: Path) -> None:
    result = render(tmp_path, vllm_serve_extra_args=["--enable-reasoning"])
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "vllm_serve_extra_args[0]: --enable-reasoning is no longer a `vllm serve` flag" in output


def test_the_last_of_eight_ranks_on_a_switch_is_a_headless_worker(tmp_path: Path) -> None:
    """The plan of eight nodes on a switch (module_utils/cluster_plan), as the role reads it:
    rank 7 of 8 joins the head's rail address, tensor parallel over all eight."""
    names = ["n0", "w1", "w2", "w3", "w4", "w5", "w6", "n1"]
    groups = {"head": names[:1], "workers": names[1:]}
    plan = build_plan(
        groups,
        {name: {"gx10_topology": "switch", "gx10_allow_unauthenticated": True} for name in names},
    )
    assert plan["hosts"]["n1"]["rank"] == 7
    args = rendered(tmp_path, render(tmp_path, plan))["args"]
    assert flag(args, "--nnodes") == "8"
    assert flag(args, "--node-rank") == "7"
    assert flag(args, "--master-addr") == "192.168.100.10"
    assert flag(args, "--tensor-parallel-size") == "8"
    assert "--headless" in args
