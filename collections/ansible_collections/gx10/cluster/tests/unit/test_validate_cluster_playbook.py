# SPDX-License-Identifier: Apache-2.0
"""Run gx10.cluster.validate_cluster and the rail_plan filter through real ansible-playbook."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (
    ANSIBLE_PLAYBOOK,
    REPO_ROOT,
    run_ansible_playbook,
    two_node_inventory,
)

pytestmark = pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists() or not (REPO_ROOT / "ansible.cfg").exists(),
    reason="needs ansible-playbook next to the test interpreter and the repository ansible.cfg",
)

PLAYBOOK = """
- name: Validate the inventory before touching anything
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Validate
      gx10.cluster.validate_cluster:
      register: validation

    - name: Validate data given as arguments instead of the inventory
      gx10.cluster.validate_cluster:
        groups: {head: [n1], workers: [n2]}
        hostvars: {n1: {gx10_node_id: 5, gx10_allow_unauthenticated: true}, n2: {gx10_node_id: 5}}
      register: explicit
      failed_when: false

    - name: The arguments were used, not the inventory
      ansible.builtin.assert:
        that:
          - explicit.errors | length == 1
          - "'gx10_node_id 5 is used by both n1 and n2' in explicit.errors[0]"
          - validation.plan.workers == ['gx10-b']

    - name: Show the plan
      ansible.builtin.debug:
        msg: "MASTER_ADDR={{ validation.plan.master_addr }} RANK_B={{
          validation.plan.hosts['gx10-b'].rank }} CIDR_B={{
          validation.plan.hosts['gx10-b'].rails[1].cidr }}"

- name: Every node computes the same plan with the filter
  hosts: gx10
  gather_facts: false
  tasks:
    - name: Compare with the action plugin's plan
      ansible.builtin.assert:
        that:
          - (hostvars | gx10.cluster.rail_plan(groups)) == hostvars['localhost'].validation.plan
        quiet: true

    - name: Mark the second play
      ansible.builtin.debug:
        msg: "SECOND_PLAY_RAN on {{ inventory_hostname }}"
"""


def inventory(node_vars: dict[str, dict[str, Any]], **cluster_vars: Any) -> dict[str, Any]:
    return two_node_inventory(
        node_vars.get("gx10-a", {}), node_vars.get("gx10-b", {}), cluster_vars
    )


def run_playbook(
    tmp_path: Path, inventory_data: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory_data), encoding="utf-8")
    (tmp_path / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    return run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "site.yml", timeout=120
    )


def test_good_inventory_validates_and_filter_agrees(tmp_path: Path) -> None:
    data = inventory(
        {
            # A template is resolved per host before validation (Ansible 2.19 native types).
            "gx10-b": {"gx10_node_id": "{{ 20 + 1 }}", "gx10_mgmt_interface": "enP7s7"},
            # Only gx10_* variables are read: an unrelated broken variable must not matter.
            "gx10-a": {"unrelated_broken": "{{ this_is_not_defined }}"},
        },
        gx10_rail_mtu=9000,
    )
    result = run_playbook(tmp_path, data)
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    assert "MASTER_ADDR=192.168.100.10 RANK_B=1 CIDR_B=192.168.101.21/24" in output
    assert "SECOND_PLAY_RAN on gx10-b" in output


def test_bad_inventory_fails_with_every_problem_before_any_change(tmp_path: Path) -> None:
    data = inventory(
        {"gx10-a": {"gx10_mgmt_interface": "enp1s0f0np0"}, "gx10-b": {"gx10_node_id": "eleven"}},
        gx10_rails=[
            {"name": "rail0", "netdev": "enp1s0f0np0", "subnet": "192.168.100.0/24"},
            {"name": "rail1", "netdev": "enP2p1s0f0np0", "subnet": "192.168.100.0/24"},
        ],
    )
    result = run_playbook(tmp_path, data)
    output = result.stdout + result.stderr

    assert result.returncode == 2, output
    assert "Inventory validation failed (3 problems):" in output
    assert "gx10_node_id on host gx10-b must be an integer, got 'eleven' (str)" in output
    assert "on one subnet the kernel routes all traffic through one twin" in output
    assert "never reconfigure the interface that carries the management connection" in output
    assert "SECOND_PLAY_RAN" not in output


@pytest.mark.skipif(
    shutil.which("ansible-doc", path=str(ANSIBLE_PLAYBOOK.parent)) is None,
    reason="needs ansible-doc",
)
def test_ansible_doc_renders_module_and_filter_docs() -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    doc = str(ANSIBLE_PLAYBOOK.with_name("ansible-doc"))
    for args, expected in (
        (["gx10.cluster.validate_cluster"], "master_addr"),
        (["gx10.cluster.gateway_keys"], "runtime API"),
        (["-t", "filter", "gx10.cluster.rail_plan"], "POSITIONAL: groups"),
    ):
        result = subprocess.run(
            [doc, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert "ERROR" not in result.stderr, result.stderr
        assert expected in result.stdout


def test_a_tls_key_of_another_certificate_is_refused_by_the_action(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    signer, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gx10-a")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(signer.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(signer, hashes.SHA256())
    )
    (tmp_path / "gw.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "gw.key").write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    data = inventory(
        {
            "gx10-a": {
                "gx10_gateway_enabled": True,
                "vllm_serve_api_key": "a-service-key",
                "gx10_gateway_tls_cert": str(tmp_path / "gw.crt"),
                "gx10_gateway_tls_key": str(tmp_path / "gw.key"),
            }
        }
    )
    result = run_playbook(tmp_path, data)
    output = result.stdout + result.stderr

    assert result.returncode == 2, output
    assert "Inventory validation failed (1 problem):" in output
    assert "is not the private key of the certificate" in output
    assert "a-service-key" not in output


def test_a_serving_profile_that_does_not_fit_is_refused_from_extra_vars(tmp_path: Path) -> None:
    """Extra vars reach the validation through hostvars (as `gx10 provision --extravars` does);
    a string from the command line is coerced, and the numbers are in the message."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory({})), encoding="utf-8")
    (tmp_path / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    result = run_ansible_playbook(
        tmp_path,
        tmp_path / "hosts.yml",
        tmp_path / "site.yml",
        "-e",
        "vllm_serve_kv_context_seqs=3",
        timeout=120,
    )
    output = result.stdout + result.stderr

    assert result.returncode == 2, output
    assert "Inventory validation failed (2 problems):" in output
    assert "memory on host gx10-a: profile dspark-0731 v1 does not fit" in output
    assert "need 116.8 GiB per rank: weights 77.7" in output
    assert "vllm_serve_kv_context_seqs (inventory)" in output
    assert "SECOND_PLAY_RAN" not in output


TOPOLOGY_PLAYBOOK = """
- name: Validate an inventory of several nodes
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Validate
      gx10.cluster.validate_cluster:
      register: validation

    - name: Show the plan
      ansible.builtin.debug:
        msg: "TOPOLOGY={{ validation.plan.topology }} RANKS={{
          validation.plan.nodes | map(attribute='rank') | join(',') }} PEERS_D={{
          validation.plan.hosts['gx10-d'].rails[0].peers | dictsort | map('join', '=')
          | join(',') }}"
"""


def several_nodes(count: int, **cluster_vars: Any) -> dict[str, Any]:
    data = two_node_inventory({}, {}, cluster_vars)
    workers = data["all"]["children"]["gx10"]["children"]["workers"]["hosts"]
    for name in "cdefgh"[: count - 2]:
        workers[f"gx10-{name}"] = {}
    return data


@pytest.mark.parametrize(
    ("count", "cluster_vars", "rc", "expected"),
    [
        (
            4,
            {"gx10_topology": "switch"},
            0,
            "TOPOLOGY=switch RANKS=0,1,2,3 PEERS_D=gx10-a=192.168.100.10,"
            "gx10-b=192.168.100.11,gx10-c=192.168.100.12",
        ),
        (
            4,
            {},
            2,
            "gx10_topology is direct (the default) but the cluster has 4 nodes (gx10-a, gx10-b, "
            "gx10-c, gx10-d)",
        ),
        (
            6,
            {"gx10_topology": "switch"},
            2,
            "tensor-parallel size 6 (6 node(s) x vllm_serve_gpus_per_node 1) does not divide the "
            "64 attention heads",
        ),
    ],
)
def test_the_topology_through_the_action(
    tmp_path: Path, count: int, cluster_vars: dict[str, Any], rc: int, expected: str
) -> None:
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump(several_nodes(count, **cluster_vars)), encoding="utf-8"
    )
    (tmp_path / "site.yml").write_text(TOPOLOGY_PLAYBOOK, encoding="utf-8")
    result = run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "site.yml", timeout=120
    )
    output = result.stdout + result.stderr
    assert result.returncode == rc, output
    assert expected in " ".join(output.split()), output
