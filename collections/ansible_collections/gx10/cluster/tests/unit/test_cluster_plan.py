# SPDX-License-Identifier: Apache-2.0
"""Unit tests for module_utils/cluster_plan.py and the rail_plan filter."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

from ansible_collections.gx10.cluster.plugins.filter.rail_plan import FilterModule, rail_plan
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (
    ALLOW_UNAUTHENTICATED_VAR,
    DEFAULT_MODEL_DIR,
    DEFAULT_RAILS,
    NODE_VARS,
    ClusterPlanError,
    build_plan,
    endpoint,
    format_errors,
    select_node_vars,
    validate_cluster,
)

TWO = {"head": ["gx10-a"], "workers": ["gx10-b"]}
# The head's say-so that the engine may answer without the gateway (a test that is not about it).
TRUSTED = {"gx10_allow_unauthenticated": True}
FOUR = {"head": ["gx10-a"], "workers": ["gx10-b", "gx10-c", "gx10-d"]}


def rails(*subnets: str, **extra: Any) -> list[dict[str, Any]]:
    """Rails rail0, rail1, ... on netdevs eth0, eth1, ... with the given subnets."""
    return [
        {"name": f"rail{i}", "netdev": f"eth{i}", "subnet": subnet, **extra}
        for i, subnet in enumerate(subnets)
    ]


def cluster(
    groups: Mapping[str, list[str]] = TWO, per_host: Mapping[str, Any] | None = None, **common: Any
) -> tuple[Mapping[str, list[str]], dict[str, dict[str, Any]]]:
    """Hostvars for every node: ``common`` cluster-wide variables plus per-host ones."""
    hosts = [*groups.get("head", []), *groups.get("workers", [])]
    hostvars = {host: copy.deepcopy(common) for host in hosts}
    for host, values in (per_host or {}).items():
        hostvars.setdefault(host, {}).update(values)
    for host in groups.get("head", [])[:1]:  # unless a test says otherwise: a trusted network
        hostvars.setdefault(host, {}).setdefault(ALLOW_UNAUTHENTICATED_VAR, True)
    return groups, hostvars


def errors_of(
    groups: Mapping[str, list[str]] = TWO, per_host: Mapping[str, Any] | None = None, **common: Any
) -> list[str]:
    return validate_cluster(*cluster(groups, per_host, **common))


def one_error(
    groups: Mapping[str, list[str]] = TWO, per_host: Mapping[str, Any] | None = None, **common: Any
) -> str:
    errors = errors_of(groups, per_host, **common)
    assert len(errors) == 1, errors
    return errors[0]


def assert_mentions(message: str, *fragments: str) -> None:
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


# --- plans -------------------------------------------------------------------------------------


def test_default_plan_for_two_nodes() -> None:
    plan = build_plan(TWO, {"gx10-a": TRUSTED, "gx10-b": {}})

    # The serving part is tested in test_serve_plan.py.
    assert plan.pop("serving")["profile"] == "dspark-0731"
    assert plan == {
        "head": "gx10-a",
        "workers": ["gx10-b"],
        "nodes": [
            {"name": "gx10-a", "rank": 0, "role": "head", "node_id": 10},
            {"name": "gx10-b", "rank": 1, "role": "worker", "node_id": 11},
        ],
        "topology": "direct",
        "mtu": 9000,
        "rails": [
            {
                "name": "rail0",
                "netdev": "enp1s0f0np0",
                "subnet": "192.168.100.0/24",
                "prefix": 24,
                "addresses": {"gx10-a": "192.168.100.10", "gx10-b": "192.168.100.11"},
                "ping_payload": 8972,
            },
            {
                "name": "rail1",
                "netdev": "enP2p1s0f0np0",
                "subnet": "192.168.101.0/24",
                "prefix": 24,
                "addresses": {"gx10-a": "192.168.101.10", "gx10-b": "192.168.101.11"},
                "ping_payload": 8972,
            },
        ],
        "peers": {
            "gx10-a": {"gx10-b": {"rail0": "192.168.100.11", "rail1": "192.168.101.11"}},
            "gx10-b": {"gx10-a": {"rail0": "192.168.100.10", "rail1": "192.168.101.10"}},
        },
        "hosts": {
            "gx10-a": {
                "rank": 0,
                "role": "head",
                "node_id": 10,
                "rails": [
                    {
                        "name": "rail0",
                        "netdev": "enp1s0f0np0",
                        "address": "192.168.100.10",
                        "cidr": "192.168.100.10/24",
                        "peers": {"gx10-b": "192.168.100.11"},
                        "rdma_dev": None,
                        "ping_payload": 8972,
                    },
                    {
                        "name": "rail1",
                        "netdev": "enP2p1s0f0np0",
                        "address": "192.168.101.10",
                        "cidr": "192.168.101.10/24",
                        "peers": {"gx10-b": "192.168.101.11"},
                        "rdma_dev": None,
                        "ping_payload": 8972,
                    },
                ],
            },
            "gx10-b": {
                "rank": 1,
                "role": "worker",
                "node_id": 11,
                "rails": [
                    {
                        "name": "rail0",
                        "netdev": "enp1s0f0np0",
                        "address": "192.168.100.11",
                        "cidr": "192.168.100.11/24",
                        "peers": {"gx10-a": "192.168.100.10"},
                        "rdma_dev": None,
                        "ping_payload": 8972,
                    },
                    {
                        "name": "rail1",
                        "netdev": "enP2p1s0f0np0",
                        "address": "192.168.101.11",
                        "cidr": "192.168.101.11/24",
                        "peers": {"gx10-a": "192.168.101.10"},
                        "rdma_dev": None,
                        "ping_payload": 8972,
                    },
                ],
            },
        },
        "master_addr": "192.168.100.10",
        "model_dir": "/srv/models/DeepSeek-V4-Flash-0731",
        "supervised": False,
        "gateway": {
            "enabled": False,
            "address": "0.0.0.0",
            "port": 8000,
            "engine_host": "0.0.0.0",
            "engine_port": 8000,
            "tls": False,
            "tls_cert": "",
            "tls_key": "",
            "scheme": "http",
        },
        "endpoint": {
            "scheme": "http",
            "host": "gx10-a",
            "port": 8000,
            "base": "http://gx10-a:8000",
            "url": "http://gx10-a:8000/v1",
        },
    }


def test_the_endpoint_is_the_heads_api_host_and_the_port_clients_use(tmp_path: Path) -> None:
    """One computation for the smoke stage, gx10 doctor and status (the plan's) and gx10 bench
    (cluster_plan.endpoint on an unvalidated inventory): they agree."""
    by_name = {
        "gx10-a": {"ansible_host": "10.0.0.5", **TRUSTED},
        "gx10-b": {"gx10_api_host": "10.0.0.6"},
    }
    plan = build_plan(TWO, by_name)
    assert plan["endpoint"]["url"] == "http://10.0.0.5:8000/v1"  # only the head's vars count
    both = {
        "gx10_api_host": "172.31.240.10",
        "ansible_host": "10.0.0.5",
        "gx10_serve_port": "9000",
        **TRUSTED,
    }
    plan = build_plan(TWO, {"gx10-a": both})
    assert plan["endpoint"]["base"] == "http://172.31.240.10:9000"
    assert plan["endpoint"]["port"] == 9000
    assert endpoint("gx10-a", both) == plan["endpoint"]
    cert, key = tmp_path / "gw.crt", tmp_path / "gw.key"
    for path in (cert, key):
        path.write_text("PEM\n", encoding="utf-8")
    gated = {
        "gx10_gateway_enabled": True,
        "gx10_gateway_tls_cert": str(cert),
        "gx10_gateway_tls_key": str(key),
        "vllm_serve_api_key": "k",
        "gx10_api_host": "spark-1.lan",
    }
    plan = build_plan(TWO, {"gx10-a": gated})
    assert plan["endpoint"]["url"] == "https://spark-1.lan:8000/v1"
    assert plan["gateway"]["engine_port"] == 8001  # the engine behind it: not the endpoint
    assert endpoint("gx10-a", gated) == plan["endpoint"]
    # An inventory that would not validate still gets an answer: plain HTTP, the defaults.
    assert endpoint("gx10-a", {"gx10_gateway_enabled": "yes"})["url"] == "http://gx10-a:8000/v1"


def test_plan_is_json_serialisable_and_plain() -> None:
    plan = build_plan(*cluster(FOUR, gx10_topology="switch"))
    assert json.loads(json.dumps(plan)) == plan


def test_missing_hostvars_and_null_values_take_the_defaults() -> None:
    explicit_nulls = {
        "gx10-a": {**dict.fromkeys(NODE_VARS), **TRUSTED},
        "gx10-b": {"gx10_node_id": None},
    }
    assert build_plan(TWO, explicit_nulls) == build_plan(TWO, {"gx10-a": TRUSTED})


def test_four_nodes_on_a_switch_ranks_ids_and_peers() -> None:
    plan = build_plan(*cluster(FOUR, gx10_topology="switch"))

    assert plan["topology"] == "switch"
    assert plan["workers"] == ["gx10-b", "gx10-c", "gx10-d"]
    assert [(n["name"], n["rank"], n["role"], n["node_id"]) for n in plan["nodes"]] == [
        ("gx10-a", 0, "head", 10),
        ("gx10-b", 1, "worker", 11),
        ("gx10-c", 2, "worker", 12),
        ("gx10-d", 3, "worker", 13),
    ]
    assert plan["rails"][1]["addresses"] == {
        "gx10-a": "192.168.101.10",
        "gx10-b": "192.168.101.11",
        "gx10-c": "192.168.101.12",
        "gx10-d": "192.168.101.13",
    }
    # On a switch every other node is a peer on every rail.
    assert plan["hosts"]["gx10-b"]["rails"][0]["peers"] == {
        "gx10-a": "192.168.100.10",
        "gx10-c": "192.168.100.12",
        "gx10-d": "192.168.100.13",
    }
    assert plan["hosts"]["gx10-d"]["rails"][1]["peers"] == {
        "gx10-a": "192.168.101.10",
        "gx10-b": "192.168.101.11",
        "gx10-c": "192.168.101.12",
    }
    assert plan["peers"]["gx10-c"] == {
        "gx10-a": {"rail0": "192.168.100.10", "rail1": "192.168.101.10"},
        "gx10-b": {"rail0": "192.168.100.11", "rail1": "192.168.101.11"},
        "gx10-d": {"rail0": "192.168.100.13", "rail1": "192.168.101.13"},
    }
    assert plan["master_addr"] == "192.168.100.10"
    assert plan["hosts"]["gx10-d"]["rails"][0]["cidr"] == "192.168.100.13/24"


def test_eight_nodes_on_a_switch() -> None:
    names = [f"n{i}" for i in range(8)]
    groups = {"head": names[:1], "workers": names[1:]}
    plan = build_plan(*cluster(groups, gx10_topology="switch"))

    assert plan["topology"] == "switch"
    assert plan["head"] == "n0"
    assert plan["workers"] == names[1:]
    assert [(n["name"], n["rank"], n["role"]) for n in plan["nodes"]] == [
        (name, rank, "head" if rank == 0 else "worker") for rank, name in enumerate(names)
    ]
    for rail, subnet in ((0, "192.168.100"), (1, "192.168.101")):
        assert plan["rails"][rail]["addresses"] == {
            name: f"{subnet}.{10 + rank}" for rank, name in enumerate(names)
        }
    assert plan["master_addr"] == "192.168.100.10"
    for rank, name in enumerate(names):
        host = plan["hosts"][name]
        assert host["rank"] == rank
        assert host["node_id"] == 10 + rank
        others = [other for other in names if other != name]
        for rail in host["rails"]:
            assert list(rail["peers"]) == others
            assert name not in rail["peers"]
        assert list(plan["peers"][name]) == others
    # 7 peers on each of 2 rails: 14 links per node, 56 ordered node pairs on every rail.
    assert sum(len(r["peers"]) for h in plan["hosts"].values() for r in h["rails"]) == 8 * 7 * 2


def test_workers_keep_inventory_order_not_alphabetical() -> None:
    plan = build_plan(
        *cluster(
            {"head": ["gx10-z"], "workers": ["gx10-c", "gx10-b", "gx10-d"]},
            gx10_topology="switch",
        )
    )

    assert plan["workers"] == ["gx10-c", "gx10-b", "gx10-d"]
    assert plan["hosts"]["gx10-c"]["rank"] == 1
    assert plan["hosts"]["gx10-c"]["node_id"] == 11
    assert plan["hosts"]["gx10-b"]["rails"][0]["address"] == "192.168.100.12"
    assert plan["master_addr"] == "192.168.100.10"


def test_explicit_node_ids_and_addresses() -> None:
    custom = rails("10.0.0.0/16", "10.1.0.0/24")
    custom[1]["addresses"] = {"gx10-b": "10.1.0.200"}
    groups, hostvars = cluster(
        per_host={"gx10-a": {"gx10_node_id": 1}, "gx10-b": {"gx10_node_id": 300}},
        gx10_rails=custom,
        gx10_rail_mtu=1500,
    )
    # /24 rail: node id 300 does not fit, but gx10-b has an explicit address there.
    plan = build_plan(groups, hostvars)

    assert plan["mtu"] == 1500
    assert plan["rails"][0]["addresses"] == {"gx10-a": "10.0.0.1", "gx10-b": "10.0.1.44"}
    assert plan["rails"][1]["addresses"] == {"gx10-a": "10.1.0.1", "gx10-b": "10.1.0.200"}
    assert plan["rails"][0]["prefix"] == 16
    assert plan["hosts"]["gx10-b"]["rails"][1]["cidr"] == "10.1.0.200/24"
    assert plan["hosts"]["gx10-b"]["node_id"] == 300
    assert plan["master_addr"] == "10.0.0.1"


def test_single_rail_and_smallest_subnet() -> None:
    groups, hostvars = cluster(
        per_host={"gx10-a": {"gx10_node_id": 1}, "gx10-b": {"gx10_node_id": 2}},
        gx10_rails=rails("192.168.50.4/30"),
    )
    plan = build_plan(groups, hostvars)

    assert plan["rails"][0]["addresses"] == {"gx10-a": "192.168.50.5", "gx10-b": "192.168.50.6"}
    assert plan["hosts"]["gx10-a"]["rails"][0]["cidr"] == "192.168.50.5/30"


@pytest.mark.parametrize("mtu", [1280, 9216])
def test_mtu_bounds_are_accepted(mtu: int) -> None:
    assert build_plan(*cluster(gx10_rail_mtu=mtu))["mtu"] == mtu


def test_mgmt_interface_on_another_netdev_is_fine() -> None:
    assert errors_of(per_host={"gx10-a": {"gx10_mgmt_interface": "enP7s7"}}) == []


def test_default_rails_are_not_mutated() -> None:
    before = copy.deepcopy(DEFAULT_RAILS)
    build_plan(*cluster(FOUR, gx10_topology="switch"))
    assert before == DEFAULT_RAILS


# --- groups ------------------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [{"workers": ["gx10-b"]}, {"head": [], "workers": ["gx10-b"]}])
def test_head_group_missing_or_empty(groups: dict[str, list[str]]) -> None:
    assert_mentions(one_error(groups), "groups['head']", "missing or empty", "exactly one node")


def test_head_group_with_two_hosts() -> None:
    error = one_error({"head": ["gx10-a", "gx10-c"], "workers": ["gx10-b"]})
    assert_mentions(
        error, "groups['head']", "2 hosts (gx10-a, gx10-c)", "exactly one", "move the others"
    )


@pytest.mark.parametrize("groups", [{"head": ["gx10-a"]}, {"head": ["gx10-a"], "workers": []}])
def test_no_workers(groups: dict[str, list[str]]) -> None:
    assert_mentions(one_error(groups), "groups['workers']", "missing or empty", "add at least one")


def test_host_in_both_groups() -> None:
    error = one_error({"head": ["gx10-a"], "workers": ["gx10-a", "gx10-b"]})
    assert_mentions(
        error, "gx10-a", "both groups['head'] and groups['workers']", "remove it from one"
    )


# --- rails -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [("eth0", "'eth0'"), ([], "[]"), ({"name": "rail0"}, "{'name': 'rail0'}"), (5, "5")],
)
def test_rails_not_a_non_empty_list(value: Any, shown: str) -> None:
    error = one_error(gx10_rails=value)
    assert_mentions(error, "gx10_rails must be a non-empty list", f"got {shown}", "define it like")


def test_rail_not_a_mapping() -> None:
    error = one_error(gx10_rails=[*rails("10.0.0.0/24"), "rail1"])
    assert_mentions(error, "gx10_rails[1]", "must be a mapping", "got 'rail1'", "write it like")


def test_rail_missing_keys() -> None:
    error = one_error(gx10_rails=[{"name": "rail0"}])
    assert_mentions(
        error, "gx10_rails[0] (rail rail0)", "missing keys 'netdev', 'subnet'", "every rail needs"
    )


def test_rail_unknown_key_catches_typos() -> None:
    custom = rails("10.0.0.0/24")
    custom[0]["adresses"] = {"gx10-a": "10.0.0.5"}
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error, "gx10_rails[0] (rail rail0)", "unknown key 'adresses'", "fix the spelling"
    )


def test_rail_name_must_be_a_string() -> None:
    custom = rails("10.0.0.0/24")
    custom[0]["name"] = 7
    assert_mentions(one_error(gx10_rails=custom), "gx10_rails[0].name", "got 7", "name: rail0")


def test_duplicate_rail_names() -> None:
    custom = rails("10.0.0.0/24", "10.0.1.0/24")
    custom[1]["name"] = "rail0"
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error, "gx10_rails[1].name 'rail0'", "also used by gx10_rails[0]", "its own name"
    )


def test_duplicate_rail_netdevs() -> None:
    custom = rails("10.0.0.0/24", "10.0.1.0/24")
    custom[1]["netdev"] = "eth0"
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error, "gx10_rails[1].netdev 'eth0'", "also used by gx10_rails[0] (rail rail0)", "twin"
    )


@pytest.mark.parametrize(
    ("subnet", "fragments"),
    [
        ("192.168.100.0", ["'192.168.100.0'", "CIDR notation", "e.g. 192.168.100.0/24"]),
        ("192.168.300.0/24", ["'192.168.300.0/24'", "not a valid IPv4 subnet", "network/prefix"]),
        ("rail-net", ["'rail-net'", "CIDR notation", "network/prefix"]),
        (24, ["is 24", "CIDR notation", "network/prefix"]),
        ("192.168.100.0/255.255.255.0", ["prefix length, not a netmask", "192.168.100.0/24"]),
        (
            "192.168.100.1/24",
            ["'192.168.100.1/24'", "host bits set", "use the network address 192.168.100.0/24"],
        ),
        ("fd00:100::/64", ["'fd00:100::/64'", "IPv6", "use an IPv4 subnet"]),
        ("192.168.100.0/31", ["'192.168.100.0/31'", "/31 is longer than /30", "/30 or shorter"]),
        ("192.168.100.7/32", ["/32 is longer than /30", "/30 or shorter"]),
    ],
)
def test_invalid_subnet(subnet: Any, fragments: list[str]) -> None:
    custom = rails("10.0.0.0/24", "10.0.1.0/24")
    custom[1]["subnet"] = subnet
    error = one_error(gx10_rails=custom)
    assert_mentions(error, "gx10_rails[1].subnet (rail rail1)", *fragments)


def test_same_subnet_on_two_rails() -> None:
    error = one_error(gx10_rails=rails("192.168.100.0/24", "192.168.100.0/24"))
    assert_mentions(
        error,
        "gx10_rails[1].subnet '192.168.100.0/24' (rail rail1)",
        "is the same subnet as gx10_rails[0].subnet '192.168.100.0/24' (rail rail0)",
        "on one subnet the kernel routes all traffic through one twin",
        "e.g. 192.168.101.0/24 for rail1",
    )


def test_overlapping_subnets_name_both_rails() -> None:
    error = one_error(gx10_rails=rails("192.168.0.0/16", "192.168.101.0/24"))
    assert_mentions(
        error,
        "gx10_rails[1].subnet '192.168.101.0/24' (rail rail1)",
        "overlaps gx10_rails[0].subnet '192.168.0.0/16' (rail rail0)",
        "on one subnet the kernel routes all traffic through one twin",
        "non-overlapping subnet, e.g. 192.169.0.0/24",
    )


def test_overlap_is_reported_even_when_the_other_subnet_has_host_bits() -> None:
    errors = errors_of(gx10_rails=rails("192.168.100.1/24", "192.168.100.128/25"))
    assert len(errors) == 2, errors
    assert_mentions(errors[0], "host bits set")
    assert_mentions(errors[1], "'192.168.100.128/25'", "overlaps", "'192.168.100.1/24'")


# --- node ids and addresses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"), [("11", "'11' (str)"), (1.5, "1.5 (float)"), (True, "True (bool)")]
)
def test_node_id_not_an_int(value: Any, shown: str) -> None:
    error = one_error(per_host={"gx10-b": {"gx10_node_id": value}})
    assert_mentions(
        error,
        "gx10_node_id on host gx10-b",
        "must be an integer",
        f"got {shown}",
        "gx10_node_id: 11",
    )


@pytest.mark.parametrize("value", [0, -3])
def test_node_id_below_one(value: int) -> None:
    error = one_error(per_host={"gx10-b": {"gx10_node_id": value}})
    assert_mentions(
        error, f"gx10_node_id on host gx10-b is {value}", "1 or greater", "gx10_node_id: 11"
    )


def test_duplicate_explicit_node_ids() -> None:
    error = one_error(
        FOUR,
        per_host={"gx10-b": {"gx10_node_id": 20}, "gx10-c": {"gx10_node_id": 20}},
        gx10_topology="switch",
    )
    assert_mentions(
        error, "gx10_node_id 20 is used by both gx10-b and gx10-c", "set a different gx10_node_id"
    )


def test_explicit_node_id_colliding_with_a_default_says_so() -> None:
    error = one_error(FOUR, gx10_topology="switch", per_host={"gx10-c": {"gx10_node_id": 11}})
    assert_mentions(
        error,
        "gx10_node_id 11 is used by both gx10-b (default: head 10, workers 11, 12, ...) and "
        "gx10-c:",
        "set a different gx10_node_id on gx10-c",
    )


def test_derived_address_outside_subnet() -> None:
    error = one_error(
        per_host={"gx10-b": {"gx10_node_id": 300}}, gx10_rails=rails("192.168.100.0/24")
    )
    assert_mentions(
        error,
        "gx10_node_id 300 on host gx10-b gives 192.168.101.44 on gx10_rails[0] (rail rail0)",
        "outside subnet 192.168.100.0/24",
        "between 1 and 254",
        "gx10_rails[0].addresses['gx10-b']",
    )


def test_derived_address_beyond_the_address_space() -> None:
    error = one_error(
        per_host={"gx10-b": {"gx10_node_id": 2**20}}, gx10_rails=rails("255.255.255.0/24")
    )
    assert_mentions(error, "gx10_node_id 1048576 on host gx10-b", "beyond 255.255.255.255")


def test_derived_broadcast_address() -> None:
    errors = errors_of(per_host={"gx10-b": {"gx10_node_id": 255}})
    assert len(errors) == 2, errors  # one per default rail
    assert_mentions(
        errors[1],
        "gx10_node_id 255 on host gx10-b gives 192.168.101.255",
        "the broadcast address of 192.168.101.0/24",
        "between 1 and 254",
    )


@pytest.mark.parametrize(
    ("address", "fragments"),
    [
        ("10.9.0.5", ["is 10.9.0.5", "outside subnet 192.168.100.0/24"]),
        ("192.168.100.0", ["is 192.168.100.0", "the network address of 192.168.100.0/24"]),
        ("192.168.100.255", ["is 192.168.100.255", "the broadcast address"]),
        ("192.168.100.20/24", ["'192.168.100.20/24'", "not an IPv4 address", "without prefix"]),
        ("gx10-b.rail0", ["'gx10-b.rail0'", "not an IPv4 address"]),
    ],
)
def test_bad_explicit_address(address: str, fragments: list[str]) -> None:
    custom = rails("192.168.100.0/24", addresses={"gx10-b": address})
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error,
        "gx10_rails[0].addresses['gx10-b'] (rail rail0)",
        *fragments,
        "192.168.100.1..192.168.100.254",
    )


def test_explicit_address_duplicating_a_derived_one() -> None:
    custom = rails("192.168.100.0/24", addresses={"gx10-b": "192.168.100.10"})
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error,
        "gx10-a (gx10_node_id 10 on host gx10-a) and gx10-b "
        "(gx10_rails[0].addresses['gx10-b']) both get address 192.168.100.10",
        "on gx10_rails[0] (rail rail0)",
        "its own address",
    )


def test_explicit_addresses_duplicated() -> None:
    custom = rails(
        "192.168.100.0/24", addresses={"gx10-a": "192.168.100.50", "gx10-b": "192.168.100.50"}
    )
    assert_mentions(one_error(gx10_rails=custom), "both get address 192.168.100.50")


def test_addresses_not_a_mapping() -> None:
    custom = rails("192.168.100.0/24", addresses=["192.168.100.10"])
    error = one_error(gx10_rails=custom)
    assert_mentions(
        error,
        "gx10_rails[0].addresses (rail rail0)",
        "must be a mapping of host to IPv4 address",
        "['192.168.100.10']",
        "{gx10-a: 192.168.100.10}",
    )


def test_addresses_for_an_unknown_host() -> None:
    custom = rails("192.168.100.0/24", addresses={"gx10-x": "192.168.100.50"})
    error = one_error(gx10_rails=custom)
    assert_mentions(error, "names host 'gx10-x'", "not in groups['head'] or groups['workers']")


# --- MTU, management interface, cluster-wide variables ----------------------------------------


@pytest.mark.parametrize("mtu", [1279, 9217, 9500, 0])
def test_mtu_out_of_range(mtu: int) -> None:
    error = one_error(gx10_rail_mtu=mtu)
    assert_mentions(error, f"gx10_rail_mtu is {mtu}", "allowed 1280..9216", "use 9000")


@pytest.mark.parametrize(("mtu", "shown"), [("9000", "'9000' (str)"), (True, "True (bool)")])
def test_mtu_not_an_int(mtu: Any, shown: str) -> None:
    error = one_error(gx10_rail_mtu=mtu)
    assert_mentions(
        error, "gx10_rail_mtu must be an integer", f"got {shown}", "gx10_rail_mtu: 9000"
    )


def test_rail_on_the_management_interface() -> None:
    error = one_error(per_host={"gx10-b": {"gx10_mgmt_interface": "enP2p1s0f0np0"}})
    assert_mentions(
        error,
        "gx10_mgmt_interface on host gx10-b is 'enP2p1s0f0np0'",
        "gx10_rails[1].netdev (rail rail1)",
        "never reconfigure the interface that carries the management connection",
    )


def test_mgmt_interface_not_a_string() -> None:
    error = one_error(per_host={"gx10-a": {"gx10_mgmt_interface": ["eth0"]}})
    assert_mentions(
        error, "gx10_mgmt_interface on host gx10-a", "got ['eth0']", "leave it undefined"
    )


def test_cluster_wide_variable_differs_between_nodes() -> None:
    error = one_error(per_host={"gx10-b": {"gx10_rail_mtu": 1500}})
    assert_mentions(
        error,
        "gx10_rail_mtu on host gx10-b is 1500 but on gx10-a it is undefined",
        "cluster-wide",
        "group_vars/all.yml",
    )


# --- the checkpoint directory -------------------------------------------------------------------


def test_model_dir_defaults_to_the_checkpoint_directory() -> None:
    assert DEFAULT_MODEL_DIR == "/srv/models/DeepSeek-V4-Flash-0731"
    assert build_plan(*cluster())["model_dir"] == DEFAULT_MODEL_DIR
    assert build_plan(*cluster(gx10_model_dir=None))["model_dir"] == DEFAULT_MODEL_DIR


@pytest.mark.parametrize("path", ["/data/models/tiny", "/m", "/srv/models/a b/c-0731.v2"])
def test_model_dir_custom_value_is_in_the_plan(path: str) -> None:
    assert (
        build_plan(*cluster(FOUR, gx10_topology="switch", gx10_model_dir=path))["model_dir"] == path
    )


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (
            ["/srv/models/x"],
            ["gx10_model_dir must be a directory path (a string)", "got ['/srv/models/x'] (list)"],
        ),
        (42, ["gx10_model_dir must be a directory path", "got 42 (int)"]),
        (True, ["got True (bool)"]),
        ("srv/models/x", ["gx10_model_dir is 'srv/models/x', not an absolute path"]),
        ("", ["gx10_model_dir is '', not an absolute path"]),
        ("~/models", ["gx10_model_dir is '~/models', not an absolute path"]),
        ("/", ["gx10_model_dir is '/', the root directory", "a directory of its own"]),
        ("//", ["gx10_model_dir is '//', the root directory"]),
        ("/srv/..", ["gx10_model_dir is '/srv/..', the root directory"]),
        (
            "/srv/models/x/",
            ["is '/srv/models/x/', not a normalised path", "gx10_model_dir: /srv/models/x,"],
        ),
        ("/srv//models/x", ["not a normalised path", "gx10_model_dir: /srv/models/x,"]),
        ("//srv/models/x", ["not a normalised path", "gx10_model_dir: /srv/models/x,"]),
        ("/srv/./models/x", ["not a normalised path", "gx10_model_dir: /srv/models/x,"]),
        ("/srv/old/../models/x", ["not a normalised path", "gx10_model_dir: /srv/models/x,"]),
        ("/srv/models/a:b", ["is '/srv/models/a:b', which contains ':'", "SOURCE:TARGET:ro"]),
    ],
)
def test_model_dir_rejected_with_the_fix(value: Any, fragments: list[str]) -> None:
    error = one_error(gx10_model_dir=value)
    assert_mentions(error, *fragments)
    if "normalised" not in error:
        assert_mentions(error, f"gx10_model_dir: {DEFAULT_MODEL_DIR}")
    with pytest.raises(ClusterPlanError):
        build_plan(*cluster(gx10_model_dir=value))


def test_model_dir_differs_between_nodes() -> None:
    error = one_error(
        per_host={
            "gx10-a": {"gx10_model_dir": "/srv/models/x"},
            "gx10-b": {"gx10_model_dir": "/data/x"},
        }
    )
    assert_mentions(
        error,
        "gx10_model_dir on host gx10-b is '/data/x' but on gx10-a it is '/srv/models/x'",
        "every rank loads the checkpoint from the same --model path",
        "group_vars/all.yml",
    )


def test_model_dir_set_on_a_worker_only_differs_from_the_default() -> None:
    error = one_error(
        FOUR, gx10_topology="switch", per_host={"gx10-c": {"gx10_model_dir": "/srv/models/x"}}
    )
    assert_mentions(error, "gx10_model_dir on host gx10-c is '/srv/models/x'", "it is undefined")


def test_select_node_vars_reads_the_model_dir() -> None:
    hostvars = {"gx10-a": {"gx10_model_dir": "/m", "other": 1}, "gx10-b": {}}
    assert select_node_vars(TWO, hostvars) == {"gx10-a": {"gx10_model_dir": "/m"}, "gx10-b": {}}


# --- many errors at once -----------------------------------------------------------------------


def test_all_errors_are_collected() -> None:
    custom = rails("192.168.100.1/24", "192.168.100.0/24")
    custom.append({"name": "rail2", "netdev": "eth0", "subnet": "10.0.0.0/24"})
    groups = {"head": ["gx10-a", "gx10-c"], "workers": ["gx10-b"]}
    errors = errors_of(
        groups,
        per_host={
            "gx10-a": {"gx10_mgmt_interface": "eth1"},
            "gx10-b": {"gx10_node_id": "eleven"},
            "gx10-c": {"gx10_node_id": 10},
        },
        gx10_rails=custom,
        gx10_rail_mtu=10000,
    )
    expected = [
        "groups['head'] has 2 hosts",
        "gx10_rail_mtu is 10000",
        "host bits set",
        "gx10_rails[2].netdev 'eth0' is also used by gx10_rails[0]",
        "is the same subnet as gx10_rails[0].subnet '192.168.100.1/24'",
        "gx10_mgmt_interface on host gx10-a is 'eth1'",
        "gx10_node_id on host gx10-b must be an integer, got 'eleven'",
        "gx10_node_id 10 is used by both gx10-a",
    ]
    assert len(errors) == len(expected), errors
    for fragment in expected:
        assert any(fragment in error for error in errors), (fragment, errors)


def test_build_plan_raises_with_every_error() -> None:
    groups, hostvars = cluster({"head": ["gx10-a"]}, gx10_rail_mtu=100)
    with pytest.raises(ClusterPlanError) as raised:
        build_plan(groups, hostvars)

    assert isinstance(raised.value, ValueError)
    assert len(raised.value.errors) == 2
    text = str(raised.value)
    assert text.startswith("Inventory validation failed (2 problems):\n - ")
    assert "groups['workers']" in text
    assert "gx10_rail_mtu is 100" in text


def test_format_errors_singular_and_plural() -> None:
    assert format_errors(["a"]) == "Inventory validation failed (1 problem):\n - a"
    assert format_errors(["a", "b"]) == "Inventory validation failed (2 problems):\n - a\n - b"


# --- plugin glue -------------------------------------------------------------------------------


class StrictVars(Mapping[str, Any]):
    """Like Ansible's HostVarsVars: reading a variable templates it; some would fail."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self.read: list[str] = []

    def __getitem__(self, key: str) -> Any:
        if key not in NODE_VARS:
            raise AssertionError(f"read {key}")
        self.read.append(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values


def test_select_node_vars_reads_only_gx10_variables_of_nodes() -> None:
    node = StrictVars({"gx10_node_id": 21, "broken": "{{ undefined }}"})
    hostvars = {"gx10-a": node, "gx10-b": StrictVars({}), "bastion": StrictVars({"x": 1})}

    selected = select_node_vars(TWO, hostvars)

    assert selected == {"gx10-a": {"gx10_node_id": 21}, "gx10-b": {}}
    assert node.read == ["gx10_node_id"]


def test_rail_plan_filter_matches_build_plan() -> None:
    groups, hostvars = cluster(
        FOUR, gx10_topology="switch", per_host={"gx10-c": {"gx10_node_id": 40}}
    )
    assert FilterModule().filters()["rail_plan"] is rail_plan
    plan = rail_plan(hostvars, groups)
    assert plan == build_plan(groups, hostvars)
    assert plan["hosts"]["gx10-c"]["rails"][0]["address"] == "192.168.100.40"


def test_rail_plan_filter_fails_with_every_error() -> None:
    groups, hostvars = cluster(gx10_rails=rails("192.168.100.0/24", "192.168.100.0/24"))
    with pytest.raises(AnsibleFilterError, match=r"Inventory validation failed \(1 problem\)"):
        rail_plan(hostvars, groups)


def test_rail_plan_filter_rejects_swapped_arguments() -> None:
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        rail_plan(["gx10-a"], TWO)  # type: ignore[arg-type]


@pytest.mark.parametrize("cap", [2000, "2400", "unlocked", "Unlocked", 208, 5000, None])
def test_clock_policy_accepted(cap: Any) -> None:
    assert errors_of(per_host={"gx10-b": {"gpu_clock_sm_mhz": cap}}) == []


@pytest.mark.parametrize(
    ("cap", "shown"),
    [
        ("fast", "'fast'"),
        (0, "0"),
        (207, "207"),
        (9000, "9000"),
        (2000.5, "2000.5"),
        (True, "True"),
    ],
)
def test_clock_policy_rejected_with_the_fix(cap: Any, shown: str) -> None:
    error = one_error(per_host={"gx10-b": {"gpu_clock_sm_mhz": cap}})
    assert error.startswith(f"gpu_clock_sm_mhz on host gx10-b is {shown}:"), error
    assert "between gpu_clock_min_mhz (208) and 5000" in error
    assert "'unlocked'" in error


def test_clock_policy_below_its_own_minimum() -> None:
    error = one_error(per_host={"gx10-a": {"gpu_clock_sm_mhz": 1000, "gpu_clock_min_mhz": 1200}})
    assert "gpu_clock_sm_mhz on host gx10-a is 1000" in error
    assert "gpu_clock_min_mhz (1200)" in error


def test_clock_minimum_must_be_a_clock() -> None:
    error = one_error(per_host={"gx10-a": {"gpu_clock_min_mhz": "low"}})
    assert error.startswith("gpu_clock_min_mhz on host gx10-a is 'low'"), error


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"metrics_exporter_enabled": True, "metrics_exporter_port": 9100},
        {"metrics_exporter_enabled": False, "metrics_exporter_port": "19100"},
        {"metrics_exporter_gpu_interval": 1},
        {"metrics_exporter_gpu_interval": "3600"},
    ],
)
def test_metrics_variables_accepted(values: dict[str, Any]) -> None:
    assert errors_of(per_host={"gx10-b": values}) == []


@pytest.mark.parametrize(
    ("name", "value", "fragments"),
    [
        ("metrics_exporter_enabled", "yes", ["is 'yes' (str)", "true or false", "-e key=value"]),
        ("metrics_exporter_port", 0, ["is 0:", "from 1 to 65535", "9100"]),
        ("metrics_exporter_port", 70000, ["is 70000:", "from 1 to 65535"]),
        ("metrics_exporter_port", "http", ["is 'http':", "whole number"]),
        ("metrics_exporter_port", True, ["is True:"]),
        ("metrics_exporter_gpu_interval", 0, ["is 0:", "from 1 to 3600", "5 (seconds)"]),
        ("metrics_exporter_gpu_interval", 2.5, ["is 2.5:", "whole number"]),
    ],
)
def test_metrics_variables_rejected_naming_host_value_and_fix(
    name: str, value: Any, fragments: list[str]
) -> None:
    error = one_error(per_host={"gx10-b": {name: value}})
    assert error.startswith(f"{name} on host gx10-b "), error
    assert_mentions(error, *fragments)


def test_metrics_variables_are_read_from_the_nodes() -> None:
    for name in (
        "metrics_exporter_enabled",
        "metrics_exporter_port",
        "metrics_exporter_gpu_interval",
    ):
        assert name in NODE_VARS


def test_rdma_devices_and_ping_payload_per_rail() -> None:
    hostvars = {
        "gx10-a": {
            "gx10_rdma_devices": {"enp1s0f0np0": "rocep1s0f0"},
            "gx10_rail_mtu": 1500,
            **TRUSTED,
        },
        "gx10-b": {"gx10_rail_mtu": 1500},
    }
    plan = build_plan(TWO, hostvars)
    head = plan["hosts"]["gx10-a"]["rails"]
    assert [(r["rdma_dev"], r["ping_payload"]) for r in head] == [
        ("rocep1s0f0", 1472),
        (None, 1472),
    ]
    assert [r["rdma_dev"] for r in plan["hosts"]["gx10-b"]["rails"]] == [None, None]
    assert [r["ping_payload"] for r in plan["rails"]] == [1472, 1472]


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (
            {"eth9": "rocep1s0f0"},
            [
                "gx10_rdma_devices on host gx10-b has key 'eth9', which is not a rail netdev",
                "enp1s0f0np0, enP2p1s0f0np0",
                "e.g. {enp1s0f0np0: rocep1s0f0}",
            ],
        ),
        (
            {"enp1s0f0np0": ""},
            ["gx10_rdma_devices[enp1s0f0np0] on host gx10-b must be an RDMA device name"],
        ),
        (
            ["rocep1s0f0"],
            [
                "gx10_rdma_devices on host gx10-b must map rail netdevs to RDMA devices",
                "['rocep1s0f0'] (list)",
            ],
        ),
    ],
)
def test_rdma_devices_must_be_keyed_by_rail_netdevs(value: Any, fragments: list[str]) -> None:
    errors = validate_cluster(TWO, {"gx10-a": TRUSTED, "gx10-b": {"gx10_rdma_devices": value}})
    assert len(errors) == 1, errors
    for fragment in fragments:
        assert fragment in errors[0]


def test_known_faults_ignore_names_only_known_fault_ids() -> None:
    assert (
        errors_of(per_host={"gx10-a": {"preflight_known_faults_ignore": ["kho-cma-pinning"]}}) == []
    )
    assert errors_of(per_host={"gx10-a": {"preflight_known_faults_ignore": []}}) == []
    error = one_error(per_host={"gx10-a": {"preflight_known_faults_ignore": ["kho_cma"]}})
    assert error == (
        "preflight_known_faults_ignore on host gx10-a names 'kho_cma', which is no known fault "
        "(known: kho-cma-pinning): correct the id or remove it"
    )
    error = one_error(per_host={"gx10-b": {"preflight_known_faults_ignore": "kho-cma-pinning"}})
    assert error.startswith("preflight_known_faults_ignore on host gx10-b is 'kho-cma-pinning':")
    assert_mentions(error, "a list of fault ids", "preflight_known_faults_ignore: []")


def test_supervision_is_off_by_default_and_carried_in_the_plan() -> None:
    plan = build_plan(*cluster())
    assert plan["supervised"] is False
    plan = build_plan(*cluster(vllm_supervisor_enabled=True))
    assert plan["supervised"] is True


def test_supervision_needs_a_bool_and_takes_any_number_of_nodes() -> None:
    error = one_error(vllm_supervisor_enabled="yes")
    assert error.startswith("vllm_supervisor_enabled is 'yes' (str): it must be true or false")
    # A head and three workers on a switch (issue 15): supervised like a pair.
    assert errors_of(FOUR, gx10_topology="switch", vllm_supervisor_enabled=True) == []
    plan = build_plan(*cluster(FOUR, gx10_topology="switch", vllm_supervisor_enabled=True))
    assert plan["supervised"] is True
    assert errors_of(FOUR, gx10_topology="switch") == []  # not supervised: any number of nodes


def test_supervisor_timings_are_checked_with_the_agents_table_when_supervised() -> None:
    bad = {"vllm_supervisor_probe_interval": 5, "vllm_supervisor_probe_timeout": 30}
    assert errors_of(per_host={"gx10-b": bad}) == []  # not supervised: not read
    error = one_error(per_host={"gx10-b": bad}, vllm_supervisor_enabled=True)
    assert_mentions(
        error, "vllm_supervisor_probe_interval is 5", "from 10 to 3600 s", "(host gx10-b)"
    )
    error = one_error(
        per_host={"gx10-a": {"vllm_supervisor_heartbeat_timeout": 6}},
        vllm_supervisor_enabled=True,
    )
    assert_mentions(
        error, "vllm_supervisor_heartbeat_timeout is 6", "at least 3 x", "(host gx10-a)"
    )


# --- the API gateway ----------------------------------------------------------------------------

GATEWAY = {"gx10_gateway_enabled": True, "vllm_serve_api_key": "service-key-value"}


def gateway_of(**head: Any) -> dict[str, Any]:
    plan = build_plan(TWO, {"gx10-a": {**TRUSTED, **head}, "gx10-b": {}})
    gateway: dict[str, Any] = plan["gateway"]
    return gateway


def test_the_gateway_is_off_by_default_and_the_engine_takes_the_api_port() -> None:
    gateway = gateway_of(gx10_serve_port=9000)
    assert gateway["enabled"] is False
    assert (gateway["engine_host"], gateway["engine_port"]) == ("0.0.0.0", 9000)
    assert gateway["scheme"] == "http"


def test_an_engine_open_to_every_address_is_refused_unless_the_network_is_trusted() -> None:
    """Secure by default (issue 26): without the gateway the engine answers on every address of
    the head; the inventory must say the network is trusted, or put the gateway in front."""
    unset = validate_cluster(TWO, {"gx10-a": {}, "gx10-b": {}})
    assert len(unset) == 1, unset
    assert_mentions(
        unset[0],
        "gx10_gateway_enabled is unset",
        "every address of the head at port 8000 to anyone, without a key",
        "gx10_gateway_enabled: true",
        "gx10 keys init -i INVENTORY",
        "gx10_allow_unauthenticated: true",
    )
    off = {"gx10_gateway_enabled": False, "vllm_serve_api_key": "k", "gx10_serve_port": 9000}
    keyed = validate_cluster(TWO, {"gx10-a": off, "gx10-b": {}})
    assert len(keyed) == 1, keyed
    assert_mentions(
        keyed[0],
        "gx10_gateway_enabled is false",
        "at port 9000 with vllm_serve_api_key, which vLLM checks on /v1/* only",
        "/tokenize, /detokenize, /pooling, /invocations and others answer anyone",
    )
    assert "'k'" not in keyed[0]  # the key's value is never shown
    # Said so, or not the head's word: a worker's does not count.
    assert validate_cluster(TWO, {"gx10-a": TRUSTED, "gx10-b": {}}) == []
    worker_says = validate_cluster(TWO, {"gx10-a": {}, "gx10-b": TRUSTED})
    assert len(worker_says) == 1, worker_says
    # Behind the gateway nothing needs saying (its own key is required instead).
    assert validate_cluster(TWO, {"gx10-a": GATEWAY, "gx10-b": {}}) == []


@pytest.mark.parametrize("value", ["yes", 1, "true", [True]])
def test_allow_unauthenticated_must_be_a_boolean(value: Any) -> None:
    errors = validate_cluster(TWO, {"gx10-a": {"gx10_allow_unauthenticated": value}})
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"gx10_allow_unauthenticated is {value!r}"), errors
    assert_mentions(errors[0], "must be true or false", "gx10_allow_unauthenticated: false")


def test_a_gateway_without_its_key_names_the_file_gx10_keys_init_writes() -> None:
    errors = validate_cluster(TWO, {"gx10-a": {"gx10_gateway_enabled": True}, "gx10-b": {}})
    assert len(errors) == 1, errors
    assert_mentions(
        errors[0],
        "vllm_serve_api_key is not set",
        "gx10 keys init -i INVENTORY",
        "INVENTORY/.secrets/service.key (0600)",
        "lookup('file', inventory_dir ~ '/.secrets/service.key'",
    )


def test_with_the_gateway_the_engine_moves_to_loopback_behind_it() -> None:
    gateway = gateway_of(**GATEWAY, gx10_gateway_address="10.0.0.10", gx10_serve_port="8443")
    assert gateway == {
        "enabled": True,
        "address": "10.0.0.10",
        "port": 8443,
        "engine_host": "127.0.0.1",
        "engine_port": 8001,
        "tls": False,
        "tls_cert": "",
        "tls_key": "",
        "scheme": "http",
    }


def test_tls_files_make_the_scheme_https(tmp_path: Any) -> None:
    cert, key = tmp_path / "gw.crt", tmp_path / "gw.key"
    cert.write_text("pem")
    key.write_text("pem")
    gateway = gateway_of(**GATEWAY, gx10_gateway_tls_cert=str(cert), gx10_gateway_tls_key=str(key))
    assert (gateway["tls"], gateway["scheme"]) == (True, "https")
    assert (gateway["tls_cert"], gateway["tls_key"]) == (str(cert), str(key))


def head_error(**head: Any) -> str:
    return one_error(per_host={"gx10-a": head})


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        ({"gx10_gateway_enabled": "yes"}, ["gx10_gateway_enabled is 'yes' (str)", "true or false"]),
        (
            {**GATEWAY, "gx10_gateway_address": "head.example"},
            ["gx10_gateway_address is 'head.example', not an IP address", "0.0.0.0"],
        ),
        ({"gx10_serve_port": 70000}, ["gx10_serve_port is 70000", "between 1 and 65535"]),
        ({"gx10_serve_port": True}, ["gx10_serve_port is True", "e.g. gx10_serve_port: 8000"]),
        (
            {**GATEWAY, "gx10_gateway_engine_port": "http"},
            ["gx10_gateway_engine_port is 'http'", "gx10_gateway_engine_port: 8001"],
        ),
        (
            {**GATEWAY, "gx10_gateway_engine_port": 8000},
            ["gx10_gateway_engine_port is 8000, the same as gx10_serve_port", "8001"],
        ),
        (
            {"gx10_gateway_enabled": True},
            ["vllm_serve_api_key is not set", "the smoke stage", "'service'"],
        ),
        (
            {**GATEWAY, "gx10_gateway_tls_cert": "/etc/ssl/gw.crt"},
            ["gx10_gateway_tls_cert is set but gx10_gateway_tls_key is not", "set neither"],
        ),
        (
            {**GATEWAY, "gx10_gateway_tls_key": "/etc/ssl/gw.key"},
            ["gx10_gateway_tls_key is set but gx10_gateway_tls_cert is not"],
        ),
    ],
)
def test_gateway_settings_rejected_with_the_fix(
    variables: dict[str, Any], fragments: list[str]
) -> None:
    assert_mentions(head_error(**variables), *fragments)


def test_tls_paths_must_be_absolute_existing_files(tmp_path: Any) -> None:
    key = tmp_path / "gw.key"
    key.write_text("pem")
    errors = errors_of(
        per_host={
            "gx10-a": {
                **GATEWAY,
                "gx10_gateway_tls_cert": "files/gw.crt",
                "gx10_gateway_tls_key": str(tmp_path / "missing.key"),
            }
        }
    )
    assert len(errors) == 2, errors
    assert_mentions(errors[0], "gx10_gateway_tls_cert is 'files/gw.crt'", "absolute path")
    assert_mentions(errors[1], "missing.key", "not a file on the controller")


def test_gateway_settings_are_not_read_while_it_is_off() -> None:
    assert errors_of(per_host={"gx10-a": {"gx10_gateway_address": "nonsense"}}) == []


def test_the_gateway_is_the_heads_a_workers_value_is_not_read() -> None:
    assert errors_of(per_host={"gx10-b": {"gx10_gateway_enabled": "nonsense"}}) == []
    assert gateway_of()["enabled"] is False


def test_the_service_key_never_leaves_select_node_vars() -> None:
    hostvars = {"gx10-a": {"vllm_serve_api_key": "s3cret", "gx10_gateway_enabled": True}}
    selected = select_node_vars(TWO, hostvars)
    assert selected["gx10-a"]["vllm_serve_api_key"] is True
    assert "s3cret" not in json.dumps(selected)
    assert "s3cret" not in json.dumps(build_plan(TWO, selected))


def test_the_smoke_battery_switches_are_read_from_the_head() -> None:
    assert "gx10_smoke_battery" in NODE_VARS
    assert "gx10_smoke_battery_cases" in NODE_VARS
    assert errors_of(gx10_smoke_battery=True, gx10_smoke_battery_cases=["parallel", "stream"]) == []
    assert errors_of(gx10_smoke_battery=False, gx10_smoke_battery_cases=[]) == []
    assert errors_of(gx10_smoke_battery=None) == []  # null: the default (off)
    # Only the head's values are read (the smoke stage reads the head's).
    assert errors_of(per_host={"gx10-b": {"gx10_smoke_battery": "yes"}}) == []


def test_the_smoke_battery_switch_must_be_a_bool() -> None:
    error = one_error(gx10_smoke_battery="true")
    assert error.startswith("gx10_smoke_battery on host gx10-a is 'true' (str): it must be true")
    assert_mentions(
        error,
        "gx10_smoke_battery: true in group_vars/all.yml",
        """-e '{"gx10_smoke_battery": true}'""",
        "-e key=value gives a string",
    )
    assert_mentions(one_error(gx10_smoke_battery=1), "is 1 (int)")


def test_the_smoke_tool_choice_is_auto_or_required() -> None:
    assert "gx10_smoke_tool_choice" in NODE_VARS
    assert errors_of(gx10_smoke_tool_choice="auto") == []
    assert errors_of(gx10_smoke_tool_choice="required") == []
    assert errors_of(gx10_smoke_tool_choice=None) == []  # null: the default (auto)
    error = one_error(gx10_smoke_tool_choice="none")
    assert error.startswith(
        "gx10_smoke_tool_choice on host gx10-a is 'none': it must be one of auto, required"
    )
    assert_mentions(error, "for a model that never chooses one")


def test_the_smoke_battery_cases_must_be_known_names() -> None:
    error = one_error(gx10_smoke_battery_cases=["parallel", "streaming"])
    assert error.startswith(
        "gx10_smoke_battery_cases on host gx10-a names 'streaming', which is no battery case "
        "(known: parallel, nested, long-argument, stream, tool-choice, reasoning, agent-loop, "
        "messages): correct the name or remove it"
    )
    error = one_error(gx10_smoke_battery_cases="parallel,stream")
    assert error.startswith("gx10_smoke_battery_cases on host gx10-a is 'parallel,stream': it ")
    assert_mentions(error, "a list of battery case names", "[parallel, stream]", "unset (or [])")
    assert len(errors_of(gx10_smoke_battery="on", gx10_smoke_battery_cases=["x", "y"])) == 3


# --- topology (gx10_topology) ------------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "cluster_plan"
REPO = Path(__file__).resolve().parents[6]


def nodes(count: int) -> dict[str, list[str]]:
    names = [f"gx10-{i}" for i in range(count)]
    return {"head": names[:1], "workers": names[1:]}


def test_topology_defaults_to_direct_and_is_carried_in_the_plan() -> None:
    assert build_plan(*cluster())["topology"] == "direct"
    assert build_plan(*cluster(gx10_topology="direct"))["topology"] == "direct"
    assert build_plan(*cluster(gx10_topology="switch"))["topology"] == "switch"


def test_two_node_direct_plan_is_the_same_as_with_no_topology() -> None:
    plan = build_plan(*cluster(gx10_topology="direct"))
    assert plan == build_plan(*cluster())
    # A switch changes nothing for two nodes but the topology itself.
    switched = build_plan(*cluster(gx10_topology="switch"))
    assert switched.pop("topology") == "switch"
    assert plan.pop("topology") == "direct"
    assert switched == plan


def test_lab_plan_is_byte_for_byte_what_integ2_built() -> None:
    """The lab inventory read with Ansible's own loader, as the validate stage reads it: the plan
    (without `serving`, tested in test_serve_plan.py, and the newer `topology` and `endpoint`) is
    the text the integ2 code printed before topologies existed (fixtures/cluster_plan/README.md)."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(REPO / "inventories" / "lab")])
    variables = VariableManager(loader=loader, inventory=inventory)
    groups = {g: [h.name for h in inventory.groups[g].get_hosts()] for g in ("head", "workers")}
    hostvars: dict[str, dict[str, Any]] = {}
    for host in inventory.get_hosts():
        values = variables.get_vars(host=host)
        templar = Templar(loader=loader, variables=values)
        hostvars[host.name] = {k: templar.template(values[k]) for k in NODE_VARS if k in values}
    plan = build_plan(groups, hostvars)
    plan.pop("serving")
    assert plan.pop("topology") == "direct"
    assert plan.pop("endpoint")["url"] == "http://172.31.240.10:8000/v1"  # the head's API host
    expected = (FIXTURES / "lab-plan-integ2.json").read_text()
    assert json.dumps(plan, indent=1) + "\n" == expected


@pytest.mark.parametrize("value", ["ring", "Switch", "", 2, True, ["switch"]])
def test_unknown_topology_is_refused_with_the_choices(value: Any) -> None:
    error = one_error(gx10_topology=value)
    assert_mentions(
        error,
        f"gx10_topology is {value!r}",
        "one of direct, switch",
        "gx10_topology: switch",
    )


@pytest.mark.parametrize("count", [3, 4, 8])
def test_more_than_two_nodes_on_direct_is_refused(count: int) -> None:
    errors = errors_of(nodes(count))
    topology = [error for error in errors if error.startswith("gx10_topology")]
    assert len(topology) == 1, errors
    assert_mentions(
        topology[0],
        f"gx10_topology is direct (the default) but the cluster has {count} nodes",
        "gx10-0, gx10-1, gx10-2",
        "cable every node's rails to a switch",
        "gx10_topology: switch",
    )
    assert errors_of(nodes(count), gx10_topology="direct")[0] == topology[0]


def test_topology_is_cluster_wide() -> None:
    error = one_error(per_host={"gx10-b": {"gx10_topology": "switch"}})
    assert_mentions(
        error,
        "gx10_topology on host gx10-b is 'switch' but on gx10-a it is undefined",
        "cabled the same way",
        "group_vars/all.yml",
    )


@pytest.mark.parametrize("count", [2, 4, 8])
def test_switch_accepts_head_divisible_sizes(count: int) -> None:
    assert errors_of(nodes(count), gx10_topology="switch") == []


@pytest.mark.parametrize("count", [3, 5, 6, 7])
def test_tensor_parallel_size_must_divide_the_attention_heads(count: int) -> None:
    error = one_error(nodes(count), gx10_topology="switch")
    assert_mentions(
        error,
        f"tensor-parallel size {count} ({count} node(s) x vllm_serve_gpus_per_node 1) does not "
        "divide the 64 attention heads of deepseek-v4-flash-fp8",
        "2, 4, 8, 16 nodes",
        "groups['workers']",
    )


def test_gpus_per_node_count_in_the_tensor_parallel_size() -> None:
    # 2 nodes x 3 GPUs = 6 does not divide 64; 2 x 2 = 4 does.
    error = one_error(vllm_serve_gpus_per_node=3)
    assert_mentions(error, "tensor-parallel size 6 (2 node(s) x vllm_serve_gpus_per_node 3)")
    assert not any("attention heads" in e for e in errors_of(nodes(2), vllm_serve_gpus_per_node=2))


def test_rail_subnet_too_small_for_the_nodes_says_so_once() -> None:
    errors = errors_of(
        nodes(4),
        per_host={f"gx10-{i}": {"gx10_node_id": i + 1} for i in range(4)},
        gx10_topology="switch",
        gx10_rails=rails("192.168.50.4/30", "192.168.60.0/24"),
    )
    assert len(errors) == 1, errors
    assert_mentions(
        errors[0],
        "gx10_rails[0].subnet '192.168.50.4/30' (rail rail0) has 2 host addresses but the "
        "cluster has 4 nodes",
        "use a larger subnet, e.g. /29 or /24",
    )


def test_eight_nodes_fit_a_28_only_with_small_node_ids() -> None:
    # /28: 14 host addresses; the default ids 10..17 run past .14 and are named one by one.
    errors = errors_of(
        nodes(8), gx10_topology="switch", gx10_rails=rails("10.0.0.0/28", "10.0.1.0/24")
    )
    assert [e.split(" gives ")[0] for e in errors] == [
        "gx10_node_id 15 on host gx10-5",  # the broadcast address
        "gx10_node_id 16 on host gx10-6",
        "gx10_node_id 17 on host gx10-7",
    ]
    assert "the broadcast address of 10.0.0.0/28" in errors[0]
    assert all("outside subnet 10.0.0.0/28" in e for e in errors[1:])
    ids = {f"gx10-{i}": {"gx10_node_id": i + 1} for i in range(8)}
    assert (
        errors_of(
            nodes(8),
            per_host=ids,
            gx10_topology="switch",
            gx10_rails=rails("10.0.0.0/28", "10.0.1.0/24"),
        )
        == []
    )


def test_duplicate_addresses_on_a_switch_are_refused() -> None:
    custom = rails("192.168.100.0/24", "192.168.101.0/24")
    custom[1]["addresses"] = {"gx10-3": "192.168.101.11"}
    error = one_error(nodes(4), gx10_topology="switch", gx10_rails=custom)
    assert_mentions(error, "gx10-1 (gx10_node_id 11 on host gx10-1) and gx10-3", "both get address")


def test_supervision_of_more_than_two_nodes_on_a_switch_is_accepted() -> None:
    for count in (2, 4, 8):
        assert errors_of(nodes(count), gx10_topology="switch", vllm_supervisor_enabled=True) == []


def test_all_topology_problems_are_reported_at_once() -> None:
    errors = errors_of(nodes(3), gx10_rails=rails("10.0.0.0/30"), vllm_supervisor_enabled=True)
    for fragment in (
        "gx10_topology is direct (the default) but the cluster has 3 nodes",
        "has 2 host addresses but the cluster has 3 nodes",
        "tensor-parallel size 3",
    ):
        assert sum(fragment in error for error in errors) == 1, (fragment, errors)
