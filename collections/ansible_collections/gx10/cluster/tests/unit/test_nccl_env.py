# SPDX-License-Identifier: Apache-2.0
"""nccl_env: the NCCL environment from a real cluster plan, and the env file docker reads."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter import nccl_env as nccl_filter
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import build_plan
from ansible_collections.gx10.cluster.plugins.module_utils.nccl_env import (
    DERIVED_KEYS,
    NcclEnvError,
    nccl_env,
    parse_env_file,
    render_env_file,
)

GROUPS = {"head": ["gx10-a"], "workers": ["gx10-b"]}
DEVICES = ["rocep1s0f0", "roceP2p1s0f0"]


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    # The default rails (enp1s0f0np0 on 192.168.100.0/24, enP2p1s0f0np0 on 192.168.101.0/24).
    return build_plan(GROUPS, {"gx10-a": {"gx10_allow_unauthenticated": True}, "gx10-b": {}})


def test_pinned_mode_for_the_worker(plan: dict[str, Any]) -> None:
    env = nccl_env(plan, "gx10-b", DEVICES, 5)
    assert list(env.items()) == [
        ("NCCL_IB_HCA", "rocep1s0f0,roceP2p1s0f0"),
        ("NCCL_IB_GID_INDEX", "5"),
        ("NCCL_IB_DISABLE", "0"),
        ("NCCL_SOCKET_IFNAME", "enp1s0f0np0"),
        ("GLOO_SOCKET_IFNAME", "enp1s0f0np0"),
        ("TP_SOCKET_IFNAME", "enp1s0f0np0"),
        ("VLLM_HOST_IP", "192.168.100.11"),
        ("NCCL_IB_ADDR_FAMILY", "AF_INET"),
        ("NCCL_IB_ROCE_VERSION_NUM", "2"),
        ("NCCL_CROSS_NIC", "1"),
        ("NCCL_IGNORE_CPU_AFFINITY", "1"),
        ("NCCL_DEBUG", "WARN"),
    ]


def test_each_node_gets_its_own_address_and_index(plan: dict[str, Any]) -> None:
    head = nccl_env(plan, "gx10-a", DEVICES, 3)
    worker = nccl_env(plan, "gx10-b", DEVICES, 5)
    assert (head["VLLM_HOST_IP"], head["NCCL_IB_GID_INDEX"]) == ("192.168.100.10", "3")
    assert (worker["VLLM_HOST_IP"], worker["NCCL_IB_GID_INDEX"]) == ("192.168.100.11", "5")


def test_auto_mode_leaves_the_gid_index_out(plan: dict[str, Any]) -> None:
    env = nccl_env(plan, "gx10-a", DEVICES, None)
    assert "NCCL_IB_GID_INDEX" not in env
    assert list(env)[:2] == ["NCCL_IB_HCA", "NCCL_IB_DISABLE"]


def test_devices_from_roce_gid_info_rails_are_checked_against_the_plan(
    plan: dict[str, Any],
) -> None:
    rails = [
        {"netdev": "enp1s0f0np0", "rdma_dev": "rocep1s0f0", "gid_index": 3},
        {"netdev": "enP2p1s0f0np0", "rdma_dev": "roceP2p1s0f0", "gid_index": 3},
    ]
    assert nccl_env(plan, "gx10-a", rails, 3)["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
    with pytest.raises(NcclEnvError, match="not in rail order: got enP2p1s0f0np0"):
        nccl_env(plan, "gx10-a", rails[::-1], 3)


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["rocep1s0f0"], "2 rails in the plan .* but 1 RDMA devices"),
        (["rocep1s0f0", "rocep1s0f0"], "same RDMA device"),
        (["rocep1s0f0", None], "rail enP2p1s0f0np0 must be a device name"),
        ("rocep1s0f0,roceP2p1s0f0", "must be a list"),
    ],
)
def test_bad_devices(plan: dict[str, Any], devices: Any, message: str) -> None:
    with pytest.raises(NcclEnvError, match=message):
        nccl_env(plan, "gx10-a", devices, 3)


def test_unknown_host_and_bad_index(plan: dict[str, Any]) -> None:
    with pytest.raises(NcclEnvError, match=r"host 'gx10-c' is not in the cluster plan"):
        nccl_env(plan, "gx10-c", DEVICES, 3)
    for bad in (-1, True, "3"):
        with pytest.raises(NcclEnvError, match="non-negative integer"):
            nccl_env(plan, "gx10-a", DEVICES, bad)  # type: ignore[arg-type]


def test_extras_come_after_the_derived_keys(plan: dict[str, Any]) -> None:
    env = nccl_env(
        plan, "gx10-a", DEVICES, 3, extra={"NCCL_IB_TIMEOUT": 22, "UCX_NET_DEVICES": "x"}
    )
    assert list(env)[-2:] == ["NCCL_IB_TIMEOUT", "UCX_NET_DEVICES"]
    assert env["NCCL_IB_TIMEOUT"] == "22"


def test_an_extra_may_not_silently_override_a_derived_key(plan: dict[str, Any]) -> None:
    with pytest.raises(NcclEnvError, match="extra key NCCL_SOCKET_IFNAME would override") as info:
        nccl_env(plan, "gx10-a", DEVICES, 3, extra={"NCCL_SOCKET_IFNAME": "eth0"})
    assert "nccl_env_overrides" in str(info.value)
    env = nccl_env(
        plan,
        "gx10-a",
        DEVICES,
        3,
        extra={"NCCL_SOCKET_IFNAME": "eth0"},
        overrides=["NCCL_SOCKET_IFNAME"],
    )
    # Replaced in place: the order of the file stays the same.
    assert list(env).index("NCCL_SOCKET_IFNAME") == 3
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"


def test_a_literal_gid_index_extra_is_refused_even_in_auto_mode(plan: dict[str, Any]) -> None:
    with pytest.raises(NcclEnvError, match="resolved per node"):
        nccl_env(plan, "gx10-a", DEVICES, None, extra={"NCCL_IB_GID_INDEX": 3})


def test_overrides_must_name_derived_keys(plan: dict[str, Any]) -> None:
    with pytest.raises(NcclEnvError, match="names NCCL_IB_TIMEOUT, which is not a derived key"):
        nccl_env(plan, "gx10-a", DEVICES, 3, overrides=["NCCL_IB_TIMEOUT"])
    assert set(DERIVED_KEYS) >= set(nccl_env(plan, "gx10-a", DEVICES, 3))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"NCCL_X": True}, "is a boolean"),
        ({"NCCL_X": [1]}, "string or a number"),
        ({"1BAD": "x"}, "not a valid environment variable name"),
        ({"NCCL_X": "a\nB=1"}, "newline"),
        ({"NCCL_X": '"quoted"'}, "keeps quotes"),
        ({"NCCL_X": " lead"}, "whitespace"),
    ],
)
def test_bad_extras(plan: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    with pytest.raises(NcclEnvError, match=message):
        nccl_env(plan, "gx10-a", DEVICES, 3, extra=extra)


def test_debug_level(plan: dict[str, Any]) -> None:
    assert nccl_env(plan, "gx10-a", DEVICES, 3, debug="INFO")["NCCL_DEBUG"] == "INFO"
    with pytest.raises(NcclEnvError, match="NCCL_DEBUG must be one of"):
        nccl_env(plan, "gx10-a", DEVICES, 3, debug="LOUD")


# --- the file ----------------------------------------------------------------------------------


def test_render_writes_raw_values_and_parses_back(plan: dict[str, Any]) -> None:
    env = nccl_env(plan, "gx10-a", DEVICES, 3, extra={"NCCL_IB_HCA_EXTRA": "=mlx5_0:1,b c"})
    text = render_env_file(env, header="Managed by Ansible\nsecond line")
    lines = text.splitlines()
    assert lines[:3] == [
        "# Managed by Ansible",
        "# second line",
        "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0",
    ]
    # A value with '=' and an inner space is written raw: docker takes all after the first '='.
    assert lines[-1] == "NCCL_IB_HCA_EXTRA==mlx5_0:1,b c"
    assert text.endswith("\n")
    parsed = parse_env_file(text)
    assert parsed == env
    assert list(parsed) == list(env)


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "'x'", 'x"', "x ", "\tx"])
def test_render_refuses_values_that_break_the_file(value: str) -> None:
    with pytest.raises(NcclEnvError, match="NCCL_X="):
        render_env_file({"NCCL_X": value})


def test_render_refuses_bad_keys() -> None:
    with pytest.raises(NcclEnvError, match="not a valid environment variable name"):
        render_env_file({"NCCL X": "1"})


def test_parse_follows_docker() -> None:
    text = '\ufeff# comment\n\n   LEADING=kept as is \nQ="x"\nE=\n'
    assert parse_env_file(text) == {"LEADING": "kept as is ", "Q": '"x"', "E": ""}
    with pytest.raises(NcclEnvError, match="line 1: 'FROM_HOST' has no '='"):
        parse_env_file("FROM_HOST\n")


# --- the filters ---------------------------------------------------------------------------------


def test_filters_wrap_errors_and_accept_a_templated_index(plan: dict[str, Any]) -> None:
    filters = nccl_filter.FilterModule().filters()
    env = filters["nccl_env"](plan, "gx10-b", DEVICES, "5", overrides=None)
    assert env["NCCL_IB_GID_INDEX"] == "5"
    with pytest.raises(AnsibleFilterError, match=r"^gx10.cluster.nccl_env: extra key"):
        filters["nccl_env"](plan, "gx10-b", DEVICES, 5, extra={"VLLM_HOST_IP": "10.0.0.1"})
    text = filters["nccl_env_file"](env)
    assert filters["nccl_env_parse"](text) == env
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        filters["nccl_env_file"](["NCCL_X=1"])
    with pytest.raises(AnsibleFilterError, match="nccl_env_parse: line 1"):
        filters["nccl_env_parse"]("NOPE\n")
