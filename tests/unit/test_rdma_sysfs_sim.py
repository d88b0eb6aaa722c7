"""The lab's RDMA sysfs simulator, fed `ip -j addr show` recorded while addresses came and went.

The recordings are in `fixtures/ip-addr/` (see its README). Each step checks the tree the way the
kernel would have it, and the GID resolver of the collection reads the simulated tree: the
simulator and the resolver agree on the layout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from simulators import assert_standalone_script, simulator_path

from gx10.lab.simulators import rdma_sysfs
from gx10.lab.simulators.rdma_sysfs import ROCE_V1, ROCE_V2, ZERO_GID, Slot, sync

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the collection's resolver, as its conftest does

from ansible_collections.gx10.cluster.plugins.module_utils import roce_gid  # noqa: E402

SIM_PATH = simulator_path("rdma_sysfs")
RECORDINGS = ROOT / "tests" / "fixtures" / "ip-addr"
RAIL0, RAIL1 = "enp1s0f0np0", "enP2p1s0f0np0"
DEV0, DEV1 = "rocep1s0f0", "roceP2p1s0f0"
RAIL0_GID = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # ::ffff:192.168.100.10
LINK_LOCAL_GID = "0000:0000:0000:0000:0000:ffff:a9fe:1707"  # ::ffff:169.254.23.7
RAIL0_DEFAULT_GID = "fe80:0000:0000:0000:009a:00ff:fe00:0a00"  # MAC 02:9a:00:00:0a:00


def recording(name: str) -> str:
    return (RECORDINGS / f"{name}.json").read_text(encoding="utf-8")


def slot_files(root: Path, dev: str, index: int) -> tuple[str, str | None, str | None]:
    """What a reader finds for one slot: the GID, and the type and ndev (None: unreadable)."""
    base = root / "class" / "infiniband" / dev / "ports" / "1"

    def read(path: Path) -> str | None:
        try:
            return path.read_text(encoding="ascii").strip()
        except OSError:
            return None

    gid = read(base / "gids" / str(index))
    assert gid is not None
    return (
        gid,
        read(base / "gid_attrs" / "types" / str(index)),
        read(base / "gid_attrs" / "ndevs" / str(index)),
    )


def populated(root: Path, dev: str) -> dict[int, tuple[str, str | None]]:
    return {e.index: (e.gid, e.type) for e in roce_gid.read_gid_table(str(root), dev)}


def test_address_changes_move_entries_like_the_kernel(tmp_path: Path) -> None:
    sync(str(tmp_path), recording("0-no-ipv4"))
    assert populated(tmp_path, DEV0) == {
        0: (RAIL0_DEFAULT_GID, ROCE_V1),
        1: (RAIL0_DEFAULT_GID, ROCE_V2),
    }
    assert slot_files(tmp_path, DEV0, 2) == (ZERO_GID, None, None)

    sync(str(tmp_path), recording("1-rail-ipv4"))
    assert slot_files(tmp_path, DEV0, 2) == (RAIL0_GID, ROCE_V1, RAIL0)
    assert slot_files(tmp_path, DEV0, 3) == (RAIL0_GID, ROCE_V2, RAIL0)
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 3
    assert roce_gid.resolve(str(tmp_path), DEV1, "192.168.101.10") == 3

    sync(str(tmp_path), recording("2-plus-link-local"))
    assert {i: e for i, e in populated(tmp_path, DEV0).items() if i >= 2} == {
        2: (RAIL0_GID, ROCE_V1),
        3: (RAIL0_GID, ROCE_V2),
        4: (LINK_LOCAL_GID, ROCE_V1),
        5: (LINK_LOCAL_GID, ROCE_V2),
    }

    # Removing the first address empties its slots; the second keeps 4,5.
    sync(str(tmp_path), recording("3-rail0-ipv4-removed"))
    assert slot_files(tmp_path, DEV0, 2) == (ZERO_GID, None, None)
    assert slot_files(tmp_path, DEV0, 3) == (ZERO_GID, None, None)
    assert slot_files(tmp_path, DEV0, 5) == (LINK_LOCAL_GID, ROCE_V2, RAIL0)
    with pytest.raises(roce_gid.RoceGidError, match=r"no RoCE v2 GID for 192\.168\.100\.10"):
        roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10")

    # Added back, it takes the first free slots again, though ip now lists it second.
    sync(str(tmp_path), recording("4-rail0-ipv4-readded"))
    assert sorted(populated(tmp_path, DEV0)) == [0, 1, 2, 3, 4, 5]
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 3
    assert roce_gid.resolve(str(tmp_path), DEV1, "192.168.101.10") == 3


def test_the_shift_fault_moves_one_nodes_entries(tmp_path: Path) -> None:
    node_a, node_b = tmp_path / "a", tmp_path / "b"
    sync(str(node_a), recording("1-rail-ipv4"))
    tables = sync(str(node_b), recording("1-rail-ipv4"), shift=5)
    assert tables[DEV0][5] == Slot(RAIL0_GID, ROCE_V1, RAIL0)
    assert tables[DEV0][6] == Slot(RAIL0_GID, ROCE_V2, RAIL0)
    assert sorted(populated(node_b, DEV1)) == [0, 1, 5, 6]
    assert slot_files(node_b, DEV0, 2) == (ZERO_GID, None, None)
    rails = [
        {"netdev": RAIL0, "address": "192.168.100.10/24"},
        {"netdev": RAIL1, "address": "192.168.101.10/24"},
    ]
    assert roce_gid.resolve_node(str(node_a), rails)["gid_index"] == 3
    assert roce_gid.resolve_node(str(node_b), rails)["gid_index"] == 6


def test_a_shift_on_an_existing_table_relocates_and_a_reset_rebuilds(tmp_path: Path) -> None:
    sync(str(tmp_path), recording("2-plus-link-local"))
    sync(str(tmp_path), recording("2-plus-link-local"), shift=5)
    # 169.254.23.7 had its v1 entry at 4, in front of the shift: both its entries move, and the
    # addresses are added back in the order ip lists them.
    assert {i: e for i, e in populated(tmp_path, DEV0).items() if i >= 2} == {
        5: (RAIL0_GID, ROCE_V1),
        6: (RAIL0_GID, ROCE_V2),
        7: (LINK_LOCAL_GID, ROCE_V1),
        8: (LINK_LOCAL_GID, ROCE_V2),
    }
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 6
    # Back to no shift, the kernel keeps indices: only a rebuild (a reboot) restores 2,3.
    sync(str(tmp_path), recording("2-plus-link-local"))
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 6
    sync(str(tmp_path), recording("2-plus-link-local"), reset=True)
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 3


def test_rails_that_disagree_on_the_simulated_tree(tmp_path: Path) -> None:
    # Only rail0's device shifted (a one-device mapping per sync): the resolver refuses to pin.
    sync(str(tmp_path), recording("1-rail-ipv4"), {RAIL0: DEV0})
    sync(str(tmp_path), recording("1-rail-ipv4"), {RAIL1: DEV1}, shift=4)
    rails = [
        {"netdev": RAIL0, "address": "192.168.100.10"},
        {"netdev": RAIL1, "address": "192.168.101.10"},
    ]
    with pytest.raises(roce_gid.RoceGidError, match=r"rails disagree.*at 3.*at 5"):
        roce_gid.resolve_node(str(tmp_path), rails)


def test_the_tree_mirrors_the_kernels_layout(tmp_path: Path) -> None:
    sync(str(tmp_path), recording("1-rail-ipv4"))
    base = tmp_path / "class" / "infiniband" / DEV0 / "ports" / "1"
    names = sorted(os.listdir(base / "gids"), key=int)
    assert names == [str(i) for i in range(rdma_sysfs.TABLE_SIZE)] == [str(i) for i in range(255)]
    assert sorted(os.listdir(base / "gid_attrs" / "types"), key=int) == ["0", "1", "2", "3"]
    assert (base / "link_layer").read_text() == "Ethernet\n"
    assert (base / "state").read_text() == "4: ACTIVE\n"
    assert (tmp_path / "class" / "net" / RAIL0 / "device" / "infiniband" / DEV0).is_dir()
    assert (tmp_path / "class" / "infiniband" / DEV1 / "device" / "net" / RAIL1).is_dir()
    assert roce_gid.rdma_device_for(str(tmp_path), RAIL1) == DEV1
    # Nothing else lives in the GID directories (no leftover temporary files).
    assert all(name.isdigit() for name in os.listdir(base / "gids"))


def test_a_resync_without_change_rewrites_nothing(tmp_path: Path) -> None:
    sync(str(tmp_path), recording("1-rail-ipv4"))
    gids = tmp_path / "class" / "infiniband" / DEV0 / "ports" / "1" / "gids"
    before = {name: os.stat(gids / name).st_ino for name in os.listdir(gids)}
    assert sync(str(tmp_path), recording("1-rail-ipv4"))[DEV0][3].type == ROCE_V2
    assert {name: os.stat(gids / name).st_ino for name in os.listdir(gids)} == before
    sync(str(tmp_path), recording("2-plus-link-local"))
    after = {name: os.stat(gids / name).st_ino for name in os.listdir(gids)}
    assert sorted(n for n in after if after[n] != before[n]) == ["4", "5"]


def test_a_vanished_netdev_takes_its_device_along(tmp_path: Path) -> None:
    logged: list[str] = []
    sync(str(tmp_path), recording("4-rail0-ipv4-readded"))
    tables = sync(str(tmp_path), recording("5-rail1-gone"), log=logged.append)
    assert list(tables) == [DEV0]
    assert not (tmp_path / "class" / "infiniband" / DEV1).exists()
    assert not (tmp_path / "class" / "net" / RAIL1).exists()
    assert logged == ["roceP2p1s0f0: removed (enP2p1s0f0np0 is gone)"]
    with pytest.raises(roce_gid.RoceGidError, match="netdev enP2p1s0f0np0 does not exist"):
        roce_gid.rdma_device_for(str(tmp_path), RAIL1)


def test_a_down_link_reads_port_down(tmp_path: Path) -> None:
    text = recording("1-rail-ipv4").replace('"operstate":"UP"', '"operstate":"LOWERLAYERDOWN"')
    sync(str(tmp_path), text)
    state = tmp_path / "class" / "infiniband" / DEV0 / "ports" / "1" / "state"
    assert state.read_text() == "1: DOWN\n"
    assert roce_gid.resolve(str(tmp_path), DEV0, "192.168.100.10") == 3  # IPv4 GIDs stay


def test_a_full_table_leaves_the_rest_out(tmp_path: Path) -> None:
    logged: list[str] = []
    tables = sync(str(tmp_path), recording("2-plus-link-local"), table_size=4, log=logged.append)
    assert sorted(tables[DEV0]) == [0, 1, 2, 3]
    assert "enp1s0f0np0: GID table full (4 slots)" in logged[0]


def test_default_gid_is_the_eui64_of_the_mac() -> None:
    assert rdma_sysfs.default_gid("08:c0:eb:f0:28:b2") == "fe80:0000:0000:0000:0ac0:ebff:fef0:28b2"
    assert rdma_sysfs.ipv4_gid("27.105.179.3") == "0000:0000:0000:0000:0000:ffff:1b69:b303"
    with pytest.raises(ValueError, match="not a MAC"):
        rdma_sysfs.default_gid("02:9a")


# --------------------------------------------------------------------------------------------
# Watching, the control files and the script
# --------------------------------------------------------------------------------------------


def test_watch_follows_ip_and_the_control_files(tmp_path: Path) -> None:
    root, control = tmp_path / "sys", tmp_path / "control"
    control.mkdir()
    steps = ["1-rail-ipv4", "1-rail-ipv4", "1-rail-ipv4", "2-plus-link-local", "2-plus-link-local"]
    seen: list[int] = []
    now = [0.0]

    def read_ip() -> str:
        return recording(steps[min(len(seen), len(steps) - 1)])

    def sleep(seconds: float) -> None:
        seen.append(roce_gid.resolve(str(root), DEV0, "192.168.100.10"))
        if len(seen) == 1:
            (control / "shift").write_text("5\n")  # the fault switch, flipped mid-run
        if len(seen) == 3:
            (control / "shift").write_text("0\n")
        now[0] += seconds

    rounds = rdma_sysfs.watch(
        str(root),
        read_ip,
        control_dir=str(control),
        interval=0.5,
        max_seconds=2.0,
        clock=lambda: now[0],
        sleep=sleep,
    )
    # Round 1 unshifted (3), round 2 shifted (6), round 3 still (6), round 4 unshifted again: a
    # changed shift rebuilds the table (3), round 5 adds 169.254 behind it.
    assert rounds == 5
    assert seen == [3, 6, 6, 3]
    assert roce_gid.resolve(str(root), DEV0, "169.254.23.7") == 5

    (control / "reset").touch()
    rdma_sysfs.watch(str(root), read_ip, control_dir=str(control), max_seconds=0)
    assert not (control / "reset").exists()


def test_watch_survives_a_failing_ip(tmp_path: Path) -> None:
    logged: list[str] = []

    def broken() -> str:
        raise subprocess.CalledProcessError(1, ["ip"])

    rounds = rdma_sysfs.watch(
        str(tmp_path), broken, control_dir=str(tmp_path / "none"), max_seconds=0, log=logged.append
    )
    assert rounds == 1
    assert logged[0].startswith("sync failed:")


def test_bad_map_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert rdma_sysfs.main(["--once", "--map", "enp1s0f0np0"]) == 2
    assert "--map wants NETDEV=RDMADEV" in capsys.readouterr().err


def test_the_script_runs_standalone_on_the_standard_library(tmp_path: Path) -> None:
    assert_standalone_script(SIM_PATH)

    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "shift").write_text("5\n")
    args = [sys.executable, "-I", str(SIM_PATH), "--root", str(tmp_path / "sys")]
    args += ["--control-dir", str(tmp_path / "control"), "--map", f"{RAIL0}={DEV0}"]
    result = subprocess.run(
        [*args, "--once", "--ip-json", str(RECORDINGS / "1-rail-ipv4.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"{DEV0} ({RAIL0}): +0 {ROCE_V1} {RAIL0_DEFAULT_GID}, +1 {ROCE_V2} {RAIL0_DEFAULT_GID}, "
        f"+5 {ROCE_V1} {RAIL0_GID}, +6 {ROCE_V2} {RAIL0_GID}"
    ]
    assert roce_gid.resolve(str(tmp_path / "sys"), DEV0, "192.168.100.10") == 6
    assert not (tmp_path / "sys" / "class" / "infiniband" / DEV1).exists()

    fake_ip = tmp_path / "ip"
    fake_ip.write_text(f"#!/bin/sh\ncat {RECORDINGS / '2-plus-link-local.json'}\n")
    fake_ip.chmod(0o755)
    watched = subprocess.run(
        [*args, "--watch", "--ip", str(fake_ip), "--interval", "0.1", "--max-seconds", "0.3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert (watched.returncode, watched.stderr) == (0, "")
    assert roce_gid.resolve(str(tmp_path / "sys"), DEV0, "169.254.23.7") == 8
