"""The lab's RDMA sysfs simulator, fed `ip -j addr show` recorded while addresses came and went.

The recordings are in `fixtures/ip-addr/` (see its README). Each step checks the tree the way the
kernel would have it, and the GID resolver of the collection reads the simulated tree: the
simulator and the resolver agree on the layout.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def addr_line(netdev: str, address: str, *, deleted: bool = False, index: int = 4) -> str:
    """An address line of `ip -o monitor link address` (iproute2 6.1), as recorded."""
    scope = "link" if address.startswith("169.254.") else "global"
    line = f"{index}: {netdev}    inet {address} scope {scope} {netdev}\\"
    line += "       valid_lft forever preferred_lft forever"
    return f"Deleted {line}" if deleted else line


def link_line(netdev: str, state: str, mac: str, *, deleted: bool = False, index: int = 4) -> str:
    flags = "BROADCAST,MULTICAST,UP,LOWER_UP" if state == "UP" else "BROADCAST,MULTICAST"
    line = f"{index}: {netdev}@if5: <{flags}> mtu 1500 qdisc noqueue state {state} group default "
    line += f"\\    link/ether {mac} brd ff:ff:ff:ff:ff:ff link-netnsid 0"
    return f"Deleted {line}" if deleted else line


RAIL0_MAC = "02:9a:00:00:0a:00"
RAIL0_ADDR = "192.168.100.10/24"
LINK_LOCAL_ADDR = "169.254.23.7/16"


class FakeEvents:
    """An event source fed from batches of lines; None in the batches: the monitor dies there.

    Every read takes its whole timeout on the injected clock ``now``.
    """

    def __init__(
        self,
        batches: list[list[str] | None],
        now: list[float],
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        self.batches = batches
        self.now = now
        self.on_read = on_read
        self.starts = self.stops = self.reads = 0

    def start(self) -> None:
        self.starts += 1

    def read(self, timeout: float) -> list[str] | None:
        self.now[0] += timeout
        if self.on_read:
            self.on_read(self.reads)
        self.reads += 1
        return self.batches.pop(0) if self.batches else []

    def stop(self) -> None:
        self.stops += 1


def test_monitor_lines_parse_like_the_kernel_sent_them() -> None:
    event = rdma_sysfs.parse_event
    assert event(addr_line(RAIL0, RAIL0_ADDR)) == rdma_sysfs.Event(RAIL0, False, "192.168.100.10")
    secondary = "3: v0    inet 10.9.0.1/24 scope global secondary v0\\       valid_lft forever"
    assert event(f"Deleted {secondary}") == rdma_sysfs.Event("v0", True, "10.9.0.1")
    assert event(f"[ADDR]{secondary}") == rdma_sysfs.Event("v0", False, "10.9.0.1")
    assert event(link_line(RAIL0, "LOWERLAYERDOWN", RAIL0_MAC)) == rdma_sysfs.Event(
        RAIL0, False, operstate="LOWERLAYERDOWN", mac=RAIL0_MAC
    )
    gone = "Deleted 3: v0@NONE: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN group default"
    assert event(gone) == rdma_sysfs.Event("v0", True, operstate="DOWN")
    ipv6 = (
        "Deleted 3: v0    inet6 fe80::4c7:d9ff:fe9a:205f/64 scope link \\       valid_lft forever"
    )
    for ignored in (ipv6, "", "Timestamp: Thu Dec  3 14:00:00 2026 12 usec", "garbage"):
        assert event(ignored) is None


def test_watch_applies_events_in_order_like_the_kernel(tmp_path: Path) -> None:
    """Delete, add, re-add in one batch: the re-added address moves behind the new one."""
    root, now = tmp_path / "sys", [0.0]
    batches: list[list[str] | None] = [
        [
            addr_line(RAIL0, RAIL0_ADDR, deleted=True),
            addr_line(RAIL0, LINK_LOCAL_ADDR),
            addr_line(RAIL0, RAIL0_ADDR),
        ],
        [link_line(RAIL0, "LOWERLAYERDOWN", RAIL0_MAC), "3: eth9    inet 10.0.0.1/8 scope global"],
        [link_line(RAIL1, "DOWN", "02:9a:00:00:0a:01", deleted=True)],
    ]
    seen: list[dict[int, tuple[str, str | None]]] = []
    events = FakeEvents(batches, now, on_read=lambda _n: seen.append(populated(root, DEV0)))
    rounds = rdma_sysfs.watch(
        str(root),
        lambda: recording("1-rail-ipv4"),
        events=events,
        control_dir=str(tmp_path / "none"),
        max_seconds=2.0,
        clock=lambda: now[0],
    )
    assert rounds == 4
    assert (events.starts, events.stops) == (1, 1)
    assert seen[0][3] == (RAIL0_GID, ROCE_V2)  # the snapshot, before any event
    assert {i: e for i, e in populated(root, DEV0).items() if i >= 2} == {
        2: (LINK_LOCAL_GID, ROCE_V1),
        3: (LINK_LOCAL_GID, ROCE_V2),
        4: (RAIL0_GID, ROCE_V1),
        5: (RAIL0_GID, ROCE_V2),
    }
    assert roce_gid.resolve(str(root), DEV0, "192.168.100.10") == 5
    state = root / "class" / "infiniband" / DEV0 / "ports" / "1" / "state"
    assert state.read_text() == "1: DOWN\n"
    assert not (root / "class" / "infiniband" / DEV1).exists()


def test_watch_follows_the_control_files(tmp_path: Path) -> None:
    root, control, now = tmp_path / "sys", tmp_path / "control", [0.0]
    control.mkdir()
    seen: list[int] = []

    def on_read(reads: int) -> None:
        seen.append(roce_gid.resolve(str(root), DEV0, "192.168.100.10"))
        if reads == 0:
            (control / "shift").write_text("5\n")  # the fault switch, flipped mid-run
        if reads == 2:
            (control / "shift").write_text("0\n")

    events = FakeEvents([[], [], [], [addr_line(RAIL0, LINK_LOCAL_ADDR)]], now, on_read)
    rounds = rdma_sysfs.watch(
        str(root),
        lambda: recording("1-rail-ipv4"),
        events=events,
        control_dir=str(control),
        interval=0.5,
        max_seconds=2.0,
        clock=lambda: now[0],
    )
    # Round 1 unshifted (3), round 2 shifted (6), round 3 still (6), round 4 unshifted again: a
    # changed shift rebuilds the table (3), and its event adds 169.254 behind it.
    assert rounds == 4
    assert seen == [3, 6, 6, 3]
    assert roce_gid.resolve(str(root), DEV0, "169.254.23.7") == 5

    (control / "reset").touch()
    rdma_sysfs.watch(
        str(root),
        lambda: recording("1-rail-ipv4"),
        events=FakeEvents([], now),
        control_dir=str(control),
        max_seconds=0,
    )
    assert not (control / "reset").exists()


def test_a_dying_monitor_is_restarted_a_bounded_number_of_times(tmp_path: Path) -> None:
    """Each restart resyncs from a fresh snapshot and moves nothing; then the watch gives up."""
    root, now = tmp_path / "sys", [0.0]
    logged: list[str] = []
    snapshots = ["1-rail-ipv4", "2-plus-link-local", "2-plus-link-local"]
    batches: list[list[str] | None] = [
        [addr_line(RAIL0, RAIL0_ADDR, deleted=True), addr_line(RAIL0, LINK_LOCAL_ADDR)],
        [addr_line(RAIL0, RAIL0_ADDR)],
        None,
        [],
        None,
    ]
    events = FakeEvents(batches, now)
    with pytest.raises(rdma_sysfs.MonitorDied, match="died 2 times"):
        rdma_sysfs.watch(
            str(root),
            lambda: recording(snapshots.pop(0)),
            events=events,
            control_dir=str(tmp_path / "none"),
            restarts=1,
            max_seconds=60,
            clock=lambda: now[0],
            log=logged.append,
        )
    assert (events.starts, events.stops) == (2, 1)
    assert snapshots == ["2-plus-link-local"]  # one resync after the restart
    assert "the event monitor died; restarting it (1 of 1)" in logged
    # ip lists 192.168.100.10 first, but the resync kept the order the events made.
    assert roce_gid.resolve(str(root), DEV0, "169.254.23.7") == 3
    assert roce_gid.resolve(str(root), DEV0, "192.168.100.10") == 5


def test_watch_survives_a_failing_ip(tmp_path: Path) -> None:
    logged: list[str] = []

    def broken() -> str:
        raise subprocess.CalledProcessError(1, ["ip"])

    rounds = rdma_sysfs.watch(
        str(tmp_path),
        broken,
        events=FakeEvents([[addr_line(RAIL0, RAIL0_ADDR)]], [0.0]),
        control_dir=str(tmp_path / "none"),
        max_seconds=0,
        log=logged.append,
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

    # The real `ip -o monitor` (host events for other netdevs are ignored), the snapshot recorded.
    if shutil.which("ip") is None:
        pytest.skip("no ip command")
    args += ["--ip-json", str(RECORDINGS / "2-plus-link-local.json")]
    watched = subprocess.run(
        [*args, "--watch", "--interval", "0.1", "--max-seconds", "0.3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (watched.returncode, watched.stderr) == (0, "")
    assert roce_gid.resolve(str(tmp_path / "sys"), DEV0, "169.254.23.7") == 8


def test_the_script_gives_up_on_a_monitor_that_keeps_dying(tmp_path: Path) -> None:
    quitter = shutil.which("true")
    assert quitter is not None
    result = subprocess.run(
        [
            *(sys.executable, "-I", str(SIM_PATH), "--watch", "--root", str(tmp_path / "sys")),
            *("--control-dir", str(tmp_path / "none"), "--ip", quitter, "--restarts", "1"),
            *("--ip-json", str(RECORDINGS / "1-rail-ipv4.json"), "--max-seconds", "60"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 1
    assert "the event monitor died; restarting it (1 of 1)" in result.stdout
    assert result.stderr == "rdma_sysfs: the event monitor died 2 times; giving up\n"
    assert roce_gid.resolve(str(tmp_path / "sys"), DEV0, "192.168.100.10") == 3


# --------------------------------------------------------------------------------------------
# Against a real kernel: a network namespace of the test's own
# --------------------------------------------------------------------------------------------

WAIT_S = 120.0  # generous: the machine is shared and loaded


@pytest.fixture
def netns() -> Iterator[Callable[..., list[str]]]:
    """A user + network namespace held by a sleeping process; yields ``argv -> argv in it``.

    The namespace (and the veth pair a test makes in it) goes when the holder is killed.
    """
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("unshare/nsenter missing")
    holder = subprocess.Popen(["unshare", "--user", "--map-root-user", "--net", "sleep", "3600"])
    try:
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + WAIT_S
        while holder.poll() is None:
            # In its namespaces, and their root mapped: unshare writes the maps after it enters
            # them (nsenter before that fails: "setgid failed: Invalid argument").
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{holder.pid}/ns/net") != own and all(
                    Path(f"/proc/{holder.pid}/{name}").read_text().strip()
                    for name in ("uid_map", "gid_map")
                ):
                    break
            assert time.monotonic() < deadline, "unshare did not enter its namespace"
            time.sleep(0.05)
        if holder.poll() is not None:
            pytest.skip("cannot create a user + network namespace here")
        yield lambda *argv: ["nsenter", "-t", str(holder.pid), "-U", "-n", *argv]
    finally:
        holder.kill()
        holder.wait(timeout=WAIT_S)


def _wait_for_index(root: Path, dev: str, address: str) -> int:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return roce_gid.resolve(str(root), dev, address)
        except (roce_gid.RoceGidError, OSError):
            assert time.monotonic() < deadline, f"{address} never reached the simulated table"
            time.sleep(0.05)


def test_a_fast_delete_add_readd_moves_the_entry_like_the_kernel(
    tmp_path: Path, netns: Callable[..., list[str]]
) -> None:
    """One `sh -c` of del A; add B; add A, faster than any poll: A's entry moves to new slots."""

    def run(script: str) -> None:
        subprocess.run(netns("sh", "-c", script), check=True, timeout=WAIT_S)

    run(
        "ip link add rail0 type veth peer name peer0 && ip link set rail0 up && "
        "ip link set peer0 up && ip addr add 10.77.0.1/24 dev rail0"
    )
    root = tmp_path / "sys"
    argv = [sys.executable, "-I", str(SIM_PATH), "--watch", "--root", str(root)]
    argv += ["--control-dir", str(tmp_path / "control"), "--map", "rail0=roce0"]
    argv += ["--interval", "2", "--max-seconds", str(WAIT_S * 3)]
    simulator = subprocess.Popen(netns(*argv), stdout=subprocess.PIPE, text=True)
    try:
        assert _wait_for_index(root, "roce0", "10.77.0.1") == 3
        run(
            "ip addr del 10.77.0.1/24 dev rail0; ip addr add 10.77.0.2/24 dev rail0; "
            "ip addr add 10.77.0.1/24 dev rail0"
        )
        # B takes the slots A freed, A the next free ones, as the kernel's GID cache does.
        assert _wait_for_index(root, "roce0", "10.77.0.2") == 3
        assert _wait_for_index(root, "roce0", "10.77.0.1") == 5
        assert sorted(populated(root, "roce0")) == [0, 1, 2, 3, 4, 5]
    finally:
        simulator.terminate()
        out, _ = simulator.communicate(timeout=WAIT_S)
    assert simulator.returncode == 0, out
