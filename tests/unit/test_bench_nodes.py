"""gx10.bench.nodes: the cluster read from an inventory with Ansible's own code: nodes in group
order, the command transport of each connection type, the endpoint as smoke.yml computes it,
templated values, and the API key kept out of sight."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gx10.bench.nodes import InventoryError, Node, load_cluster
from gx10.errors import InventoryNotFoundError

ROOT = Path(__file__).resolve().parents[2]


def inventory(tmp_path: Path, text: str, group_vars: str | None = None) -> Path:
    path = tmp_path / "inv" / "hosts.yml"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(text))
    if group_vars is not None:
        (path.parent / "group_vars").mkdir()
        (path.parent / "group_vars" / "all.yml").write_text(textwrap.dedent(group_vars))
    return path


def test_the_lab_inventory() -> None:
    cluster = load_cluster([ROOT / "inventories" / "lab"])
    assert [(n.name, n.group) for n in cluster.nodes] == [("gx10-a", "head"), ("gx10-b", "workers")]
    a, b = cluster.nodes
    assert a.transport == ("docker", "exec", "-i", "gx10-a")
    assert a.tool_argv("show") == [
        "docker",
        "exec",
        "-i",
        "gx10-a",
        "/usr/local/sbin/gx10-gpu-clock",
        "show",
    ]
    assert b.argv(["nvidia-smi", "-L"]) == ["docker", "exec", "-i", "gx10-b", "nvidia-smi", "-L"]
    assert cluster.endpoint == "http://172.31.240.10:8000"  # gx10_api_host of the head
    assert cluster.model == "deepseek-v4-flash"
    # The lab's service key, read where its inventory reads it (`gx10 keys init`'s file).
    key_file = ROOT / "inventories" / "lab" / ".secrets" / "service.key"
    assert cluster.api_key == key_file.read_text(encoding="utf-8").strip()
    assert cluster.api_key.startswith("gx10-")


def test_ssh_nodes_with_become_and_templated_values(tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        """
        all:
          children:
            workers:
              hosts:
                spark-2: {ansible_host: 10.0.0.12}
            head:
              hosts:
                spark-1:
                  ansible_host: "{{ subnet }}.11"
                  gx10_serve_port: "{{ 8000 + 80 }}"
          vars:
            ansible_user: ops
            ansible_port: 2222
            ansible_ssh_private_key_file: ~/.ssh/gx10
            ansible_ssh_common_args: -o ProxyJump=bastion
            ansible_become: "{{ 'yes' }}"
            subnet: 10.0.0
        """,
        group_vars="""
        vllm_serve_served_model_name: ds4
        vllm_serve_api_key: "{{ secret_word }}-key"
        secret_word: sesame
        """,
    )
    cluster = load_cluster([str(path)])
    head, worker = cluster.nodes
    assert (head.name, worker.name) == ("spark-1", "spark-2")  # head first, whatever the order
    assert cluster.endpoint == "http://10.0.0.11:8080"  # no gx10_api_host: ansible_host
    assert cluster.model == "ds4"
    assert cluster.api_key == "sesame-key"
    assert "sesame" not in repr(cluster)
    argv = head.tool_argv("set", "2000", "--session", "t0k")
    assert argv[:3] == ["ssh", "-T", "-o"]
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == str(Path("~/.ssh/gx10").expanduser())
    assert "ProxyJump=bastion" in argv
    assert "ServerAliveInterval=5" in argv  # a lost link ends the session within seconds
    assert argv[-3:] == [
        "ops@10.0.0.11",
        "--",
        "sudo -n /usr/local/sbin/gx10-gpu-clock set 2000 --session t0k",
    ]
    # Telemetry needs no root: no sudo.
    assert head.argv(["nvidia-smi", "-L"])[-1] == "nvidia-smi -L"
    assert head.describe().endswith(", sudo)")


def test_local_and_docker_users_and_become_user(tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        """
        head:
          hosts:
            here:
              ansible_connection: local
              ansible_become: true
              ansible_become_user: gpuadmin
              gpu_clock_tool: /opt/gx10/bin/gx10-gpu-clock --verbose
              gx10_nvidia_smi: /opt/nvidia/nvidia-smi
        workers:
          hosts:
            box:
              ansible_connection: docker
              ansible_host: box-container
              ansible_user: root
        """,
    )
    here, box = load_cluster([path], need_api_key=False).nodes
    assert here.tool_argv("show") == [
        "sudo",
        "-n",
        "-u",
        "gpuadmin",
        "/opt/gx10/bin/gx10-gpu-clock",
        "--verbose",
        "show",
    ]
    assert here.nvidia_smi == "/opt/nvidia/nvidia-smi"
    assert box.tool_argv("show") == [
        "docker",
        "exec",
        "-i",
        "-u",
        "root",
        "box-container",
        "/usr/local/sbin/gx10-gpu-clock",
        "show",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "head:\n  hosts:\n    n1: {ansible_connection: winrm}\n",
            "n1: ansible_connection 'winrm' is not one gx10 bench can use",
        ),
        (
            "workers:\n  hosts:\n    n2: {}\n",
            "has no host in group 'head'",
        ),
        (
            "head:\n  hosts:\n    n1: {ansible_become: true, ansible_become_method: su}\n",
            "n1: ansible_become_method 'su'",
        ),
        (
            "head:\n  hosts:\n    n1: {vllm_serve_api_key: '{{ vault_key }}'}\n",
            "n1: cannot template vllm_serve_api_key",
        ),
    ],
)
def test_inventories_it_cannot_use(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InventoryError) as error:
        load_cluster([inventory(tmp_path, text)])
    assert message in str(error.value)


def test_a_key_given_otherwise_is_not_read(tmp_path: Path) -> None:
    path = inventory(tmp_path, "head:\n  hosts:\n    n1: {vllm_serve_api_key: '{{ vault_key }}'}\n")
    cluster = load_cluster([path], need_api_key=False)
    assert cluster.api_key == ""
    assert cluster.endpoint == "http://n1:8000"


def test_a_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(InventoryNotFoundError, match="no-such-inventory"):
        load_cluster([tmp_path / "no-such-inventory"])


def test_argv_for_each_transport() -> None:
    local = Node("n", "head")
    assert local.argv(["a", "b c"]) == ["a", "b c"]
    ssh = Node("n", "head", transport=("ssh", "h", "--"), remote_shell=True, become=("sudo", "-n"))
    assert ssh.argv(["a", "b c"], privileged=True) == ["ssh", "h", "--", "sudo -n a 'b c'"]


def test_extra_head_variables_with_role_defaults_beneath(tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        """
        all:
          children:
            head:
              hosts:
                spark-1: {gx10_serve_port: 9000}
        """,
        group_vars="vllm_serve_shm_size: 16g\n",
    )
    names = ("vllm_serve_profile", "vllm_serve_shm_size", "vllm_serve_port")
    cluster = load_cluster([path], extra=names, role_defaults=("vllm_serve",))
    assert cluster.settings["vllm_serve_profile"] == "dspark-0731"  # the role's default
    assert cluster.settings["vllm_serve_shm_size"] == "16g"  # the inventory wins
    assert int(cluster.settings["vllm_serve_port"]) == 9000  # a default templated with host vars
    # Without the role's defaults only what the inventory sets is there.
    bare = load_cluster([path], extra=names)
    assert dict(bare.settings) == {"vllm_serve_shm_size": "16g"}


def test_the_endpoint_is_https_behind_a_gateway_with_tls(tmp_path: Path) -> None:
    plain_path = inventory(
        tmp_path / "plain",
        """
        all:
          children:
            head:
              hosts:
                spark-1: {gx10_gateway_enabled: true, gx10_serve_port: 8443}
        """,
    )
    assert load_cluster([plain_path]).endpoint == "http://spark-1:8443"
    # The plan's rule (cluster_plan.endpoint): TLS is a certificate and its key, both files on
    # the controller; one without the other is plain HTTP here (and refused by validation).
    for name in ("gateway.crt", "gateway.key"):
        (tmp_path / name).write_text("PEM\n", encoding="utf-8")

    def head_with(name: str, *lines: str) -> Path:
        host = "\n".join(f"          {line}" for line in lines)
        text = f"all:\n  children:\n    head:\n      hosts:\n        spark-1:\n{host}\n"
        return inventory(tmp_path / name, text)

    cert = f"gx10_gateway_tls_cert: {tmp_path}/gateway.crt"
    key = f"gx10_gateway_tls_key: {tmp_path}/gateway.key"
    tls_path = head_with("tls", 'gx10_gateway_enabled: "{{ true }}"', cert, key)
    assert load_cluster([tls_path]).endpoint == "https://spark-1:8000"
    half_path = head_with("half", "gx10_gateway_enabled: true", cert)
    assert load_cluster([half_path]).endpoint == "http://spark-1:8000"
    off_path = inventory(
        tmp_path / "off",
        """
        all:
          children:
            head:
              hosts:
                spark-1: {gx10_gateway_enabled: false, gx10_gateway_tls_cert: /etc/gx10/gw.crt}
        """,
    )
    assert load_cluster([off_path]).endpoint == "http://spark-1:8000"
