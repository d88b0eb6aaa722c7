"""Each node's /etc/gx10/nccl.env after converge, against what the node itself shows: its rail
addresses (`ip`) and its GID tables (the RDMA sysfs simulator's tree, read with a python3 one-liner
on the node, not with gx10's resolver)."""

from __future__ import annotations

import ipaddress
import json
import shlex

ENV_FILE = "/etc/gx10/nccl.env"
SYSFS = "/run/gx10-sim/sys/class/infiniband"
RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")
# Per RDMA device: its netdev and the index of the RoCE v2 GID that maps an IPv4 address.
GID_TABLE = f"""
import json, os
root = {SYSFS!r}
out = {{}}
for dev in sorted(os.listdir(root)):
    port = os.path.join(root, dev, "ports", "1")
    netdev = os.listdir(os.path.join(root, dev, "device", "net"))[0]
    v4 = {{}}
    for index in os.listdir(os.path.join(port, "gids")):
        gid = open(os.path.join(port, "gids", index)).read().strip()
        try:
            kind = open(os.path.join(port, "gid_attrs", "types", index)).read().strip()
        except OSError:
            continue
        if kind == "RoCE v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            v4[int(index)] = gid
    out[dev] = {{"netdev": netdev, "v4": v4}}
print(json.dumps(out))
"""


def env_of(node) -> dict[str, str]:
    text = node.file(ENV_FILE).content_string
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def rail_ip(node, netdev: str) -> str:
    out = node.check_output(f"ip -4 -o addr show dev {netdev} scope global")
    return out.split()[3].split("/")[0]


def gid_tables(node) -> dict[str, dict]:
    return json.loads(node.check_output(f"python3 -c {shlex.quote(GID_TABLE)}"))


def test_env_file_is_private_to_root(nodes) -> None:
    for node in nodes:
        env = node.file(ENV_FILE)
        assert env.is_file
        assert (env.user, env.group, env.mode) == ("root", "root", 0o640)


def test_hcas_are_both_twins_in_rail_order(nodes) -> None:
    for node in nodes:
        tables = gid_tables(node)
        by_netdev = {info["netdev"]: dev for dev, info in tables.items()}
        assert env_of(node)["NCCL_IB_HCA"] == ",".join(by_netdev[rail] for rail in RAILS)


def test_gid_index_is_this_nodes_roce_v2_ipv4_entry(nodes) -> None:
    for node in nodes:
        tables = gid_tables(node)
        env = env_of(node)
        index = int(env["NCCL_IB_GID_INDEX"])
        for info in tables.values():
            ip = rail_ip(node, info["netdev"])
            packed = ipaddress.IPv6Address(f"::ffff:{ip}").exploded
            expected = [int(i) for i, gid in info["v4"].items() if gid == packed]
            assert expected == [index], (node.backend.host, info, index)


def test_socket_interfaces_and_host_ip_come_from_the_first_rail(nodes) -> None:
    for node in nodes:
        env = env_of(node)
        for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            assert env[key] == RAILS[0]
        assert env["VLLM_HOST_IP"] == rail_ip(node, RAILS[0])


def test_roce_settings(nodes) -> None:
    for node in nodes:
        env = env_of(node)
        assert env["NCCL_IB_DISABLE"] == "0"
        assert env["NCCL_IB_ADDR_FAMILY"] == "AF_INET"
        assert env["NCCL_IB_ROCE_VERSION_NUM"] == "2"
        assert env["NCCL_CROSS_NIC"] == "1"
        assert env["NCCL_IGNORE_CPU_AFFINITY"] == "1"
        assert env["NCCL_DEBUG"] == "WARN"


def test_each_node_has_its_own_address(nodes) -> None:
    addresses = [env_of(node)["VLLM_HOST_IP"] for node in nodes]
    assert len(set(addresses)) == len(nodes)
