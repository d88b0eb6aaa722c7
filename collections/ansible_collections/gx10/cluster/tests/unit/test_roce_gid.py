# SPDX-License-Identifier: Apache-2.0
"""roce_gid and roce_gid_info over fake sysfs trees laid out like a GB10's.

The trees follow the kernel: every slot of the table has a ``gids/<i>`` file (all-zero when empty);
``gid_attrs/types/<i>`` and ``gid_attrs/ndevs/<i>`` of an empty slot fail with EINVAL, which a fake
tree stands in for with a directory of that name (the open fails with an OSError too) or no file.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gx10.cluster.plugins.module_utils import roce_gid
from ansible_collections.gx10.cluster.plugins.module_utils.roce_gid import (
    ROCE_V1,
    ROCE_V2,
    RoceGidError,
    read_gid_table,
    resolve,
    resolve_node,
)
from ansible_collections.gx10.cluster.plugins.modules import roce_gid_info

RAIL0 = ("enp1s0f0np0", "rocep1s0f0", "02:9a:00:00:0a:00")
RAIL1 = ("enP2p1s0f0np0", "roceP2p1s0f0", "02:9a:00:00:0a:01")
TABLE_SIZE = 16


def _gid(value: str) -> str:
    """An IPv4 address or an IPv6 GID, in the kernel's eight-groups format."""
    if "." in value:
        value = f"::ffff:{value}"
    return ipaddress.IPv6Address(value).exploded


def _link_local(mac: str) -> str:
    octets = [int(p, 16) for p in mac.split(":")]
    eui = [octets[0] ^ 2, *octets[1:3], 0xFF, 0xFE, *octets[3:]]
    return ipaddress.IPv6Address(bytes([0xFE, 0x80, 0, 0, 0, 0, 0, 0, *eui])).exploded


def make_device(
    root: Path,
    rail: tuple[str, str, str],
    ipv4_slots: dict[int, str],
    *,
    port: int = 1,
    map_netdev: bool = True,
) -> Path:
    """A device whose slots 0,1 hold the MAC's link-local GID and ``ipv4_slots`` the rest.

    ``ipv4_slots`` maps the v1 slot of each address; its v2 entry takes the next slot.
    """
    netdev, dev, mac = rail
    base = root / "class" / "infiniband" / dev / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True)
    if map_netdev:
        (root / "class" / "net" / netdev / "device" / "infiniband" / dev).mkdir(parents=True)
    slots = {0: (_link_local(mac), ROCE_V1), 1: (_link_local(mac), ROCE_V2)}
    for index, ipv4 in ipv4_slots.items():
        slots[index] = (_gid(ipv4), ROCE_V1)
        slots[index + 1] = (_gid(ipv4), ROCE_V2)
    for index in range(TABLE_SIZE):
        name = str(index)
        if index in slots:
            gid, gid_type = slots[index]
            (base / "gids" / name).write_text(gid + "\n")
            (base / "gid_attrs" / "types" / name).write_text(gid_type + "\n")
            (base / "gid_attrs" / "ndevs" / name).write_text(netdev + "\n")
        else:
            (base / "gids" / name).write_text(_gid("::") + "\n")
            if index % 2:  # unreadable, as the kernel's EINVAL
                (base / "gid_attrs" / "types" / name).mkdir()
                (base / "gid_attrs" / "ndevs" / name).mkdir()
    return base


def node(root: Path, rail0: dict[int, str], rail1: dict[int, str]) -> Path:
    make_device(root, RAIL0, rail0)
    make_device(root, RAIL1, rail1)
    return root


def rails(a: str = "192.168.100.10", b: str = "192.168.101.10") -> list[dict[str, Any]]:
    return [{"netdev": RAIL0[0], "address": a}, {"netdev": RAIL1[0], "address": b}]


# --------------------------------------------------------------------------------------------
# Reading one table
# --------------------------------------------------------------------------------------------


def test_typical_gb10_table(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL0, {2: "192.168.100.10"})
    table = read_gid_table(str(tmp_path), "rocep1s0f0")
    assert [(e.index, e.type, e.ipv4, e.link_local) for e in table] == [
        (0, ROCE_V1, None, True),
        (1, ROCE_V2, None, True),
        (2, ROCE_V1, "192.168.100.10", False),
        (3, ROCE_V2, "192.168.100.10", False),
    ]
    assert table[0].gid == "fe80:0000:0000:0000:009a:00ff:fe00:0a00"
    assert table[3].gid == "0000:0000:0000:0000:0000:ffff:c0a8:640a"
    assert {e.ndev for e in table} == {"enp1s0f0np0"}
    assert resolve(str(tmp_path), "rocep1s0f0", "192.168.100.10") == 3


def test_empty_slots_are_skipped_even_with_unreadable_attributes(tmp_path: Path) -> None:
    # A hole at 2,3 (a removed address): zero GIDs, attributes that fail to read.
    make_device(tmp_path, RAIL0, {4: "192.168.100.10"})
    table = read_gid_table(str(tmp_path), "rocep1s0f0")
    assert [e.index for e in table] == [0, 1, 4, 5]
    assert resolve(str(tmp_path), "rocep1s0f0", "192.168.100.10") == 5


def test_a_populated_slot_with_an_unreadable_type_is_kept_without_type(tmp_path: Path) -> None:
    base = make_device(tmp_path, RAIL0, {2: "192.168.100.10"})
    (base / "gid_attrs" / "types" / "3").unlink()
    (base / "gid_attrs" / "types" / "3").mkdir()
    table = read_gid_table(str(tmp_path), "rocep1s0f0")
    assert table[3].type is None
    with pytest.raises(RoceGidError, match=r"only a RoCE v1 entry \(index 2\)"):
        resolve(str(tmp_path), "rocep1s0f0", "192.168.100.10")


def test_link_local_169_254_is_reported(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL0, {2: "169.254.23.7", 4: "192.168.100.10"})
    table = read_gid_table(str(tmp_path), "rocep1s0f0")
    assert [e.index for e in table if e.ipv4_link_local] == [2, 3]
    assert table[2].as_dict()["ipv4_link_local"] is True
    assert resolve(str(tmp_path), "rocep1s0f0", "192.168.100.10") == 5
    text = roce_gid.format_table("rocep1s0f0", table)
    assert "169.254.23.7  <- IPv4 link-local" in text


def test_no_entry_for_the_address_names_device_address_and_table(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL0, {2: "192.168.100.99"})
    with pytest.raises(RoceGidError) as caught:
        resolve(str(tmp_path), "rocep1s0f0", "192.168.100.10")
    message = str(caught.value)
    assert "rocep1s0f0 port 1 has no RoCE v2 GID for 192.168.100.10" in message
    assert "is the address on the rail" in message
    assert "GID table of rocep1s0f0 port 1:" in message
    assert "192.168.100.99" in message  # the table shows what is there instead


def test_missing_device_lists_the_present_ones(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL1, {})
    with pytest.raises(RoceGidError, match=r"rocep1s0f0 not found.*present: roceP2p1s0f0"):
        read_gid_table(str(tmp_path), "rocep1s0f0")
    with pytest.raises(RoceGidError, match="devices present: none"):
        read_gid_table(str(tmp_path / "empty"), "rocep1s0f0")


def test_missing_port_and_missing_gid_table(tmp_path: Path) -> None:
    base = make_device(tmp_path, RAIL0, {2: "192.168.100.10"})
    with pytest.raises(RoceGidError, match=r"rocep1s0f0 has no port 2 \(ports: 1\)"):
        read_gid_table(str(tmp_path), "rocep1s0f0", port=2)
    for sub in ("gids", "gid_attrs"):
        for path in sorted((base / sub).rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        (base / sub).rmdir()
    with pytest.raises(RoceGidError, match="has no GID table"):
        read_gid_table(str(tmp_path), "rocep1s0f0")


def test_a_malformed_gid_is_an_error_naming_the_file(tmp_path: Path) -> None:
    base = make_device(tmp_path, RAIL0, {2: "192.168.100.10"})
    (base / "gids" / "5").write_text("garbage\n")
    with pytest.raises(RoceGidError, match=r"gids/5 holds 'garbage'"):
        read_gid_table(str(tmp_path), "rocep1s0f0")


# --------------------------------------------------------------------------------------------
# A node's rails
# --------------------------------------------------------------------------------------------


def test_pinned_node_gets_its_own_index(tmp_path: Path) -> None:
    # One node has its rails at 3, the other (stale slots in front) at 5: each gets its own.
    node_a = node(tmp_path / "a", {2: "192.168.100.10"}, {2: "192.168.101.10"})
    node_b = node(tmp_path / "b", {4: "192.168.100.11"}, {4: "192.168.101.11"})
    result_a = resolve_node(str(node_a), rails())
    result_b = resolve_node(str(node_b), rails("192.168.100.11/24", "192.168.101.11/24"))
    assert (result_a["gid_index"], result_b["gid_index"]) == (3, 5)
    assert [r["rdma_dev"] for r in result_a["rails"]] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert [r["gid_index"] for r in result_b["rails"]] == [5, 5]
    assert result_b["rails"][0]["address"] == "192.168.100.11"
    assert len(result_a["rails"][1]["table"]) == 4
    assert result_a["warnings"] == []


def test_rails_that_disagree_fail_with_both_tables_and_the_fix(tmp_path: Path) -> None:
    root = node(tmp_path, {2: "192.168.100.10"}, {4: "192.168.101.10"})
    with pytest.raises(RoceGidError) as caught:
        resolve_node(str(root), rails())
    message = str(caught.value)
    assert message.startswith("rails disagree on the RoCE v2 GID index")
    assert "rocep1s0f0 (enp1s0f0np0, 192.168.100.10) at 3" in message
    assert "roceP2p1s0f0 (enP2p1s0f0np0, 192.168.101.10) at 5" in message
    assert "GID table of rocep1s0f0" in message
    assert "GID table of roceP2p1s0f0" in message
    assert "clean reboot" in message
    assert "mode auto" in message
    assert [r["gid_index"] for r in caught.value.result["rails"]] == [3, 5]


def test_auto_mode_accepts_disagreeing_rails_and_leaves_the_index_unset(tmp_path: Path) -> None:
    root = node(tmp_path, {2: "192.168.100.10"}, {4: "192.168.101.10"})
    result = resolve_node(str(root), rails(), mode="auto")
    assert result["gid_index"] is None
    assert [r["gid_index"] for r in result["rails"]] == [3, 5]


def test_auto_mode_still_needs_a_roce_v2_gid_on_every_rail(tmp_path: Path) -> None:
    root = node(tmp_path, {2: "192.168.100.10"}, {})
    with pytest.raises(RoceGidError, match=r"rail enP2p1s0f0np0: .*no RoCE v2 GID for 192\.168"):
        resolve_node(str(root), rails(), mode="auto")


def test_pollution_warns_and_auto_mode_warns_about_nccls_choice(tmp_path: Path) -> None:
    root = node(tmp_path, {2: "169.254.23.7", 4: "192.168.100.10"}, {2: "192.168.101.10"})
    auto = resolve_node(str(root), rails(), mode="auto")
    assert len(auto["warnings"]) == 2
    assert "IPv4 link-local addresses at 2 (169.254.23.7" in auto["warnings"][0]
    assert "link-local: []" in auto["warnings"][0]
    nccl_choice = auto["warnings"][1]
    assert "may take index 3 (169.254.23.7) before the rail's 192.168.100.10 at 5" in nccl_choice
    with pytest.raises(RoceGidError, match="rails disagree"):
        resolve_node(str(root), rails())


def test_errors_of_every_rail_are_reported_together(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL0, {2: "192.168.100.99"})
    with pytest.raises(RoceGidError) as caught:
        resolve_node(str(tmp_path), rails())
    message = str(caught.value)
    assert "rail enp1s0f0np0: RDMA device rocep1s0f0 port 1 has no RoCE v2 GID" in message
    assert "rail enP2p1s0f0np0: netdev enP2p1s0f0np0 does not exist" in message
    assert caught.value.result["rails"][0]["rdma_dev"] == "rocep1s0f0"


def test_netdev_mapping_and_its_override(tmp_path: Path) -> None:
    make_device(tmp_path, RAIL0, {2: "192.168.100.10"}, map_netdev=False)
    (tmp_path / "class" / "net" / RAIL0[0]).mkdir(parents=True)
    with pytest.raises(RoceGidError, match=r"has no RDMA device .* Set rdma_dev on the rail"):
        roce_gid.rdma_device_for(str(tmp_path), RAIL0[0])
    rail = [{"netdev": RAIL0[0], "address": "192.168.100.10", "rdma_dev": "rocep1s0f0"}]
    assert resolve_node(str(tmp_path), rail)["gid_index"] == 3
    ib = tmp_path / "class" / "net" / RAIL0[0] / "device" / "infiniband"
    (ib / "rocep1s0f0").mkdir(parents=True)
    assert roce_gid.rdma_device_for(str(tmp_path), RAIL0[0]) == "rocep1s0f0"
    (ib / "rocep1s0f1").mkdir()
    with pytest.raises(RoceGidError, match="several RDMA devices"):
        roce_gid.rdma_device_for(str(tmp_path), RAIL0[0])


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ([], "no rails given"),
        ([{"netdev": "enp1s0f0np0"}], "address is missing"),
        ([{"address": "192.168.100.10"}], "netdev is missing"),
        ([{"netdev": "enp1s0f0np0", "address": "fe80::1"}], "is not an IPv4 address"),
    ],
)
def test_bad_rail_input(tmp_path: Path, given: list[dict[str, Any]], match: str) -> None:
    make_device(tmp_path, RAIL0, {2: "192.168.100.10"})
    with pytest.raises(RoceGidError, match=match):
        resolve_node(str(tmp_path), given)


def test_unknown_mode(tmp_path: Path) -> None:
    with pytest.raises(RoceGidError, match="mode must be one of pinned, auto"):
        resolve_node(str(tmp_path), rails(), mode="literal")


# --------------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------------


def _run_module(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        roce_gid_info.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_module_returns_the_node_index_and_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once the controller side of Ansible is imported (other tests do), module warnings go to
    # the display instead of the result: record what the module asks to warn about.
    warned: list[str] = []
    monkeypatch.setattr(roce_gid_info.AnsibleModule, "warn", lambda _self, msg: warned.append(msg))
    root = node(tmp_path, {2: "192.168.100.10", 4: "169.254.1.2"}, {2: "192.168.101.10"})
    result = _run_module(
        {"rails": rails(), "sysfs_root": str(root), "_ansible_check_mode": True}, capsys
    )
    assert result["changed"] is False
    assert result["gid_index"] == 3
    assert result["mode"] == "pinned"
    assert [r["rdma_dev"] for r in result["rails"]] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert result["rails"][0]["table"][4]["ipv4"] == "169.254.1.2"
    assert len(warned) == 1
    assert "IPv4 link-local addresses at 4 (169.254.1.2" in warned[0]


def test_module_fails_with_the_message_and_the_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = node(tmp_path, {2: "192.168.100.10"}, {4: "192.168.101.10"})
    result = _run_module({"rails": rails(), "sysfs_root": str(root)}, capsys)
    assert result["failed"] is True
    assert "rails disagree" in result["msg"]
    assert [r["gid_index"] for r in result["rails"]] == [3, 5]
    auto = _run_module({"rails": rails(), "sysfs_root": str(root), "mode": "auto"}, capsys)
    assert (auto.get("failed"), auto["gid_index"]) == (None, None)
