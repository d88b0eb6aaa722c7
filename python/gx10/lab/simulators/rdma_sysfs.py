#!/usr/bin/python3
"""RDMA sysfs for a lab node: the GID tables of a GB10's two ConnectX-7 twins, kept like the kernel.

Test equipment. Lab nodes have veth rails and no RDMA device, so this keeps a fake sysfs tree
(default /run/gx10-sim/sys) that the GID resolution reads with `sysfs_root` pointed at it. It
follows the rails' IPv4 addresses the way the kernel's RoCE GID cache does: while watching it
runs `ip -o monitor link address` (started before its first `ip -j addr show` snapshot, so no
change is missed in between) and applies every address and link event on its own, in the order
the kernel sent them, so a delete, an add and a re-add in quick succession move entries exactly
as on a node. A monitor that dies is restarted (`--restarts`, default 5) with a full resync that
never moves an entry that stays; then the watch exits 1 (systemd restarts it, and the tree, the
kernel's memory, keeps every index).

* `class/net/<netdev>/device/infiniband/<rdma_dev>/` maps a rail netdev to its RDMA device (on a
  real node `device` is the PCI function, which holds both), and `class/infiniband/<rdma_dev>/
  device/net/<netdev>/` the other way round.
* `class/infiniband/<rdma_dev>/ports/1/gids/0..N-1` holds every slot of the table (N = 255, the
  `gid_tbl_len` of an mlx5 RoCE port); an empty slot reads as the all-zero GID and has no
  `gid_attrs/types/<i>` or `gid_attrs/ndevs/<i>` (the kernel fails those reads with EINVAL).
* Slots 0 and 1 hold the default GID, fe80::EUI-64 of the netdev's MAC, as `IB/RoCE v1` and
  `RoCE v2`. Each IPv4 address adds a v1 and a v2 entry (`::ffff:a.b.c.d`) in the first free slots.
  A removed address empties its slots and the other entries keep their indices; an address added
  later takes the first free slots again.
* `ports/1/state` follows the netdev's operstate, `ports/1/link_layer` is `Ethernet`.
* A netdev that disappears takes its RDMA device with it (as when the driver unbinds).

Fault switch: a shift N places this node's IPv4 entries from slot N on (v1 at N, v2 at N+1), like
a table with stale slots in front. It comes from the control file `<control-dir>/shift` when that
exists (re-read every `--interval`, so `echo 5 > /run/gx10-sim/rdma/shift` flips the fault on a
running node), else from `--shift N`. While watching, a changed shift rebuilds the table, as a
clean reboot does; so does creating `<control-dir>/reset` (the file is consumed), or `--reset`. A
single `--once` run with a lower shift keeps the entries where they are, as the kernel would,
unless `--reset`.

Only IPv4 addresses are simulated: the rails run IPv4 with link-local IPv6 off.

Standalone on purpose: copied into Debian bookworm lab nodes and run by their python3.11 as a
systemd service, with nothing beyond the standard library.

Usage:
  rdma_sysfs.py --once [--root DIR] [--map NETDEV=RDMADEV ...] [--shift N] [--reset]
  rdma_sysfs.py --watch [--interval 0.5] [--restarts 5] [--max-seconds S] [--control-dir DIR] ...
  rdma_sysfs.py --once --ip-json FILE   (a recorded `ip -j addr show` instead of running ip)
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

DEFAULT_ROOT = "/run/gx10-sim/sys"
DEFAULT_CONTROL_DIR = "/run/gx10-sim/rdma"
DEFAULT_MAPPING: dict[str, str] = {
    "enp1s0f0np0": "rocep1s0f0",
    "enP2p1s0f0np0": "roceP2p1s0f0",
}
TABLE_SIZE = 255  # gid_tbl_len of an mlx5 RoCE port
PORT = 1
ROCE_V1 = "IB/RoCE v1"
ROCE_V2 = "RoCE v2"
GID_TYPES = (ROCE_V1, ROCE_V2)
DEFAULT_GID_SLOTS = 2  # the kernel reserves one default-GID slot per RoCE type
ZERO_GID = ipaddress.IPv6Address(0).exploded
PORT_STATES = {"UP": "4: ACTIVE", "UNKNOWN": "4: ACTIVE"}
PORT_DOWN = "1: DOWN"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Slot:
    """A populated GID table slot."""

    gid: str  # eight groups of four hex digits, as the kernel prints it
    type: str
    ndev: str


@dataclass
class Link:
    """What `ip -j addr show` says about one netdev."""

    name: str
    mac: str | None
    operstate: str
    ipv4: list[str] = field(default_factory=list)


def gid_text(address: ipaddress.IPv6Address) -> str:
    return address.exploded


def ipv4_gid(ipv4: str) -> str:
    """``192.168.100.10`` -> ``0000:0000:0000:0000:0000:ffff:c0a8:640a``."""
    mapped = int(ipaddress.IPv4Address(ipv4)) | (0xFFFF << 32)
    return gid_text(ipaddress.IPv6Address(mapped))


def default_gid(mac: str) -> str:
    """The link-local GID the kernel makes from a MAC: fe80::/64 with the EUI-64 of the MAC."""
    octets = [int(part, 16) for part in mac.split(":")]
    if len(octets) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    eui = [octets[0] ^ 0x02, *octets[1:3], 0xFF, 0xFE, *octets[3:]]
    return gid_text(ipaddress.IPv6Address(bytes([0xFE, 0x80, *([0] * 6), *eui])))


def parse_ip_addr(ip_addr_json: str) -> dict[str, Link]:
    """``ip -j addr show`` output -> {netdev: Link}, IPv4 addresses in the order ip lists them."""
    links: dict[str, Link] = {}
    for item in json.loads(ip_addr_json or "[]"):
        name = item.get("ifname")
        if not name:
            continue
        links[name] = Link(
            name=name,
            mac=item.get("address"),
            operstate=str(item.get("operstate", "UNKNOWN")),
            ipv4=[
                info["local"]
                for info in item.get("addr_info", [])
                if info.get("family") == "inet" and "local" in info
            ],
        )
    return links


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


def port_dir(root: str, rdma_dev: str) -> str:
    return os.path.join(root, "class", "infiniband", rdma_dev, "ports", str(PORT))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _write(path: str, text: str) -> None:
    """Replace a file in one step, so a reader sees the old or the new value, never half."""
    if _read(path) == text:
        return
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    with open(tmp, "w", encoding="ascii") as handle:
        handle.write(text + "\n")
    os.replace(tmp, path)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_table(root: str, rdma_dev: str) -> dict[int, Slot]:
    """The populated slots of a simulated device, read back from the tree."""
    base = port_dir(root, rdma_dev)
    gids = os.path.join(base, "gids")
    table: dict[int, Slot] = {}
    if not os.path.isdir(gids):
        return table
    for name in os.listdir(gids):
        if not name.isdigit():
            continue
        gid = _read(os.path.join(gids, name))
        gid_type = _read(os.path.join(base, "gid_attrs", "types", name))
        ndev = _read(os.path.join(base, "gid_attrs", "ndevs", name))
        if gid and gid != ZERO_GID and gid_type and ndev:
            table[int(name)] = Slot(gid, gid_type, ndev)
    return table


def plan_table(
    current: Mapping[int, Slot],
    link: Link,
    shift: int = 0,
    table_size: int = TABLE_SIZE,
    log: Log | None = None,
) -> dict[int, Slot]:
    """The table after the kernel has caught up with ``link``'s addresses, from ``current``."""
    table = {i: s for i, s in current.items() if s.ndev == link.name and i < table_size}
    if link.mac:
        gid = default_gid(link.mac)
        for index, gid_type in enumerate(GID_TYPES):
            table[index] = Slot(gid, gid_type, link.name)
    wanted = [Slot(ipv4_gid(a), t, link.name) for a in link.ipv4 for t in GID_TYPES]
    first = max(DEFAULT_GID_SLOTS, shift)
    # An address with an entry in front of the shift moves, both its entries together.
    moved = {s.gid for i, s in table.items() if DEFAULT_GID_SLOTS <= i < first}
    for index in [i for i in table if i >= DEFAULT_GID_SLOTS]:
        # Entries of removed addresses go; so do those that move.
        if table[index] not in wanted or table[index].gid in moved:
            del table[index]
    present = set(table.values())
    for slot in wanted:
        if slot in present:
            continue
        free = next((i for i in range(first, table_size) if i not in table), None)
        if free is None:
            if log:
                log(f"{link.name}: GID table full ({table_size} slots), {slot.gid} left out")
            continue
        table[free] = slot
        present.add(slot)
    return table


def write_table(
    root: str,
    rdma_dev: str,
    netdev: str,
    table: Mapping[int, Slot],
    state: str,
    *,
    table_size: int = TABLE_SIZE,
    old: Mapping[int, Slot] | None = None,
) -> None:
    """Bring the device's tree to ``table``, each file replaced in one step.

    With ``old`` (what the tree holds now) only the slots that differ are touched, unless the
    tree does not have exactly ``table_size`` slots yet.
    """
    base = port_dir(root, rdma_dev)
    gids = os.path.join(base, "gids")
    types = os.path.join(base, "gid_attrs", "types")
    ndevs = os.path.join(base, "gid_attrs", "ndevs")
    for path in (
        gids,
        types,
        ndevs,
        os.path.join(root, "class", "net", netdev, "device", "infiniband", rdma_dev),
        os.path.join(root, "class", "infiniband", rdma_dev, "device", "net", netdev),
    ):
        os.makedirs(path, exist_ok=True)
    _write(os.path.join(base, "link_layer"), "Ethernet")
    _write(os.path.join(base, "state"), state)
    slots = {name for name in os.listdir(gids) if name.isdigit()}
    if old is None or slots != {str(i) for i in range(table_size)}:
        indices: Iterable[int] = range(table_size)
    else:
        indices = sorted(i for i in set(old) | set(table) if old.get(i) != table.get(i))
    for index in indices:
        name = str(index)
        slot = table.get(index)
        if slot is None:
            # Empty the GID first, then drop its attributes: a reader never sees a stale type.
            _write(os.path.join(gids, name), ZERO_GID)
            _unlink(os.path.join(types, name))
            _unlink(os.path.join(ndevs, name))
        else:
            _write(os.path.join(types, name), slot.type)
            _write(os.path.join(ndevs, name), slot.ndev)
            _write(os.path.join(gids, name), slot.gid)
    for name in slots:
        if int(name) >= table_size:
            for directory in (gids, types, ndevs):
                _unlink(os.path.join(directory, name))


def remove_device(root: str, rdma_dev: str, netdev: str) -> bool:
    removed = False
    for path in (
        os.path.join(root, "class", "infiniband", rdma_dev),
        os.path.join(root, "class", "net", netdev),
    ):
        if os.path.isdir(path):
            shutil.rmtree(path)
            removed = True
    return removed


def _describe(old: Mapping[int, Slot], new: Mapping[int, Slot]) -> list[str]:
    changes = []
    for index in sorted(set(old) | set(new)):
        before, after = old.get(index), new.get(index)
        if before == after:
            continue
        if before is not None:
            changes.append(f"-{index} {before.type} {before.gid}")
        if after is not None:
            changes.append(f"+{index} {after.type} {after.gid}")
    return changes


def sync_links(
    root: str,
    links: Mapping[str, Link],
    mapping: Mapping[str, str] | None = None,
    shift: int = 0,
    *,
    reset: bool = False,
    table_size: int = TABLE_SIZE,
    log: Log | None = None,
) -> dict[str, dict[int, Slot]]:
    """Bring the tree under ``root`` up to date with ``links`` ({netdev: Link}).

    ``mapping`` is {netdev: rdma_dev} (default: the GB10's two twins). The current tree is the
    kernel's memory: entries that stay keep their slots. ``reset`` starts from empty tables (a
    clean reboot). Returns {rdma_dev: table} for the devices whose netdev exists.
    """
    tables: dict[str, dict[int, Slot]] = {}
    for netdev, rdma_dev in (mapping or DEFAULT_MAPPING).items():
        link = links.get(netdev)
        if link is None:
            if remove_device(root, rdma_dev, netdev) and log:
                log(f"{rdma_dev}: removed ({netdev} is gone)")
            continue
        old = read_table(root, rdma_dev)
        table = plan_table({} if reset else old, link, shift, table_size, log)
        state = PORT_STATES.get(link.operstate.upper(), PORT_DOWN)
        write_table(root, rdma_dev, netdev, table, state, table_size=table_size, old=old)
        changes = _describe(old, table)
        if log and (changes or reset):
            log(f"{rdma_dev} ({netdev}): {', '.join(changes) or 'unchanged'}")
        tables[rdma_dev] = table
    return tables


def sync(
    root: str,
    ip_addr_json: str,
    mapping: Mapping[str, str] | None = None,
    shift: int = 0,
    *,
    reset: bool = False,
    table_size: int = TABLE_SIZE,
    log: Log | None = None,
) -> dict[str, dict[int, Slot]]:
    """Bring the tree under ``root`` up to date with ``ip -j addr show`` output (a full resync).

    Entries of addresses that are still there never move; see `sync_links`.
    """
    return sync_links(
        root,
        parse_ip_addr(ip_addr_json),
        mapping,
        shift,
        reset=reset,
        table_size=table_size,
        log=log,
    )


# --------------------------------------------------------------------------------------------
# Address and link events, in the order the kernel sent them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One line of `ip -o monitor link address`: an IPv4 address or a link came or went."""

    netdev: str
    deleted: bool
    ipv4: str | None = None  # an address event; None: a link event
    operstate: str | None = None
    mac: str | None = None


_EVENT = re.compile(r"^(?P<deleted>Deleted\s+)?\d+:\s+(?P<name>[^\s:@]+)(?P<rest>.*)$")
_INET = re.compile(r"^\s+inet\s+(?P<address>[0-9.]+)[/\s]")
_LINK = re.compile(r"^(@\S*)?:\s+<")
_STATE = re.compile(r"\sstate\s+(\S+)")
_ETHER = re.compile(r"\slink/ether\s+([0-9a-fA-F:]{17})")


def parse_event(line: str) -> Event | None:
    """A monitor line -> Event; None for what the GID cache ignores (IPv6, routes, garbage).

    Accepts the ``[ADDR]``/``[LINK]`` prefixes and timestamps ip adds with some options.
    """
    text = line.rstrip("\n")
    while text.startswith(("[", "Timestamp:")):
        if text.startswith("Timestamp:"):
            return None  # the timestamp has a line of its own; the event is the next line
        end = text.find("]")
        if end < 0:
            return None
        text = text[end + 1 :].lstrip()
    match = _EVENT.match(text)
    if match is None:
        return None
    name, rest, deleted = match["name"], match["rest"], bool(match["deleted"])
    inet = _INET.match(rest)
    if inet is not None:
        try:
            address = str(ipaddress.IPv4Address(inet["address"]))
        except ValueError:
            return None
        return Event(name, deleted, ipv4=address)
    if _LINK.match(rest) is None:
        return None
    state = _STATE.search(rest)
    ether = _ETHER.search(rest)
    return Event(
        name,
        deleted,
        operstate=state[1] if state else None,
        mac=ether[1].lower() if ether else None,
    )


def apply_event(links: dict[str, Link], event: Event) -> None:
    """Update ``links`` ({netdev: Link}, the addresses in the order they came) with one event."""
    if event.ipv4 is None and event.deleted:
        links.pop(event.netdev, None)
        return
    link = links.get(event.netdev)
    if link is None:
        link = links[event.netdev] = Link(event.netdev, None, "UNKNOWN")
    if event.ipv4 is None:
        if event.mac:
            link.mac = event.mac
        if event.operstate:
            link.operstate = event.operstate
    elif event.deleted:
        if event.ipv4 in link.ipv4:
            link.ipv4.remove(event.ipv4)
    elif event.ipv4 not in link.ipv4:
        link.ipv4.append(event.ipv4)


class EventSource(Protocol):
    """Where the watcher gets its events: `Monitor`, or a fake in tests."""

    def start(self) -> None: ...

    def read(self, timeout: float) -> list[str] | None:
        """The lines that came within ``timeout`` seconds ([] if none); None once it has died."""

    def stop(self) -> None: ...


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{name}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    return inodes


def subscribed(pid: int, netlink_table: str = "/proc/net/netlink") -> bool:
    """Whether process ``pid`` holds a rtnetlink socket bound to multicast groups."""
    inodes = _socket_inodes(pid)
    if not inodes:
        return False
    try:
        with open(netlink_table, encoding="ascii") as handle:
            rows = handle.read().splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        cols = row.split()
        # sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
        if len(cols) >= 10 and cols[1] == "0" and int(cols[3], 16) and cols[9] in inodes:
            return True
    return False


class Monitor:
    """``ip -o monitor link address`` as a child process, its lines read as they come."""

    def __init__(
        self,
        ip: str = "ip",
        *,
        ready_timeout: float = 5.0,
        log: Log | None = None,
    ) -> None:
        self.argv = [ip, "-o", "monitor", "link", "address"]
        self.ready_timeout = ready_timeout
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def start(self) -> None:
        """Start ip and wait (bounded) until it listens, so the snapshot after misses nothing."""
        self.stop()
        self._buffer = b""
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None
        )
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]
        deadline = time.monotonic() + self.ready_timeout
        while self.proc.poll() is None and not subscribed(self.proc.pid):
            if time.monotonic() > deadline:
                if self.log:
                    self.log(f"{' '.join(self.argv)}: not seen listening, going on")
                break
            time.sleep(0.01)

    def read(self, timeout: float) -> list[str] | None:
        if self.proc is None or self.proc.stdout is None:
            return None
        stream = self.proc.stdout
        ready, _, _ = select.select([stream], [], [], max(0.0, timeout))
        if not ready:
            return []
        chunk = b""
        with contextlib.suppress(BlockingIOError):
            chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            self.stop()
            return None  # end of file: ip has exited
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


# --------------------------------------------------------------------------------------------
# Watching
# --------------------------------------------------------------------------------------------


def read_shift(control_dir: str, default: int) -> int:
    text = _read(os.path.join(control_dir, "shift"))
    if not text:
        return default
    try:
        return max(0, int(text))
    except ValueError:
        return default


def take_reset(control_dir: str) -> bool:
    path = os.path.join(control_dir, "reset")
    if not os.path.exists(path):
        return False
    _unlink(path)
    return True


def watch(
    root: str,
    read_ip: Callable[[], str],
    mapping: Mapping[str, str] | None = None,
    shift: int = 0,
    *,
    events: EventSource,
    reset: bool = False,
    control_dir: str = DEFAULT_CONTROL_DIR,
    interval: float = 0.5,
    max_seconds: float | None = None,
    restarts: int = 5,
    table_size: int = TABLE_SIZE,
    log: Log | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Follow ``events`` in order until ``max_seconds`` pass or ``stop()``; returns the rounds.

    The event source starts before the snapshot (``read_ip``), so nothing is lost between the two;
    then every address or link event is applied on its own, in the order it came, as the kernel's
    GID cache does: a removed address frees its slots at once and the next address takes the
    first free ones. If the source dies it is restarted, at most ``restarts`` times, each time
    followed by a full resync, which never moves an entry that stays; after that the watch gives
    up and raises `MonitorDied`.

    A round waits at most ``interval`` for events. The shift is re-read from
    ``<control_dir>/shift`` every round (``shift`` when absent); a changed shift, or a
    ``<control_dir>/reset`` file (consumed), rebuilds the tables. ``reset`` rebuilds them first.
    """
    netdevs = dict(mapping or DEFAULT_MAPPING)
    start = clock()
    links: dict[str, Link] | None = None
    applied: int | None = None
    rounds = 0
    died = 0

    def resync(wanted: int, rebuild: bool) -> dict[str, Link] | None:
        try:
            snapshot = parse_ip_addr(read_ip())
            sync_links(
                root, snapshot, netdevs, wanted, reset=rebuild, table_size=table_size, log=log
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            if log:
                log(f"sync failed: {exc}")
            return None
        return snapshot

    events.start()
    try:
        while not stop():
            wanted = read_shift(control_dir, shift)
            rebuild = take_reset(control_dir) or (applied is not None and wanted != applied)
            if links is None:
                links = resync(wanted, rebuild or (reset and applied is None))
                applied = wanted
            elif rebuild:
                sync_links(root, links, netdevs, wanted, reset=True, table_size=table_size, log=log)
                applied = wanted
            lines = events.read(interval)
            if lines is None:
                if died >= restarts:
                    raise MonitorDied(f"the event monitor died {died + 1} times; giving up")
                died += 1
                if log:
                    log(f"the event monitor died; restarting it ({died} of {restarts})")
                events.start()
                links = None  # the next round resyncs, after the monitor listens again
            elif links is not None:
                _apply_lines(
                    root,
                    links,
                    lines,
                    netdevs=netdevs,
                    shift=applied,
                    table_size=table_size,
                    log=log,
                )
            rounds += 1
            if max_seconds is not None and clock() - start >= max_seconds:
                break
    finally:
        events.stop()
    return rounds


def _apply_lines(
    root: str,
    links: dict[str, Link],
    lines: Iterable[str],
    *,
    netdevs: Mapping[str, str],
    shift: int | None,
    table_size: int,
    log: Log | None,
) -> None:
    """Apply monitor lines one by one, each event synced before the next is looked at."""
    for line in lines:
        event = parse_event(line)
        if event is None:
            continue
        apply_event(links, event)
        if event.netdev not in netdevs:
            continue
        try:
            sync_links(
                root,
                links,
                {event.netdev: netdevs[event.netdev]},
                shift or 0,
                table_size=table_size,
                log=log,
            )
        except (OSError, ValueError) as exc:
            if log:
                log(f"sync failed: {exc}")


class MonitorDied(RuntimeError):
    """The event monitor kept dying."""


def run_ip(ip: str = "ip") -> str:
    return subprocess.run(
        [ip, "-j", "addr", "show"], check=True, capture_output=True, text=True, timeout=10
    ).stdout


def _mapping(pairs: Sequence[str] | None) -> dict[str, str]:
    if not pairs:
        return dict(DEFAULT_MAPPING)
    mapping = {}
    for pair in pairs:
        netdev, sep, rdma_dev = pair.partition("=")
        if not sep or not netdev or not rdma_dev:
            raise argparse.ArgumentTypeError(f"--map wants NETDEV=RDMADEV, got {pair!r}")
        mapping[netdev] = rdma_dev
    return mapping


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rdma_sysfs", description="Keep a fake RDMA sysfs tree in step with `ip -j addr`."
    )
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--once", action="store_true", help="sync once and exit")
    when.add_argument(
        "--watch", action="store_true", help="follow `ip -o monitor` events and keep in sync"
    )
    parser.add_argument("--root", default=DEFAULT_ROOT, help=f"tree root (default {DEFAULT_ROOT})")
    parser.add_argument(
        "--map",
        action="append",
        metavar="NETDEV=RDMADEV",
        help="a rail and its RDMA device; repeat (default: the GB10 twins)",
    )
    parser.add_argument("--shift", type=int, default=0, help="first slot of the IPv4 entries")
    parser.add_argument("--reset", action="store_true", help="rebuild the tables (a reboot)")
    parser.add_argument("--control-dir", default=DEFAULT_CONTROL_DIR, help="shift/reset files")
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between looks at the control files"
    )
    parser.add_argument(
        "--restarts", type=int, default=5, help="times the event monitor is restarted if it dies"
    )
    parser.add_argument("--max-seconds", type=float, default=None, help="stop watching after")
    parser.add_argument("--table-size", type=int, default=TABLE_SIZE, help="GID table slots")
    parser.add_argument("--ip", default="ip", help="the ip command")
    parser.add_argument("--ip-json", help="read `ip -j addr show` output from this file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        mapping = _mapping(args.map)
    except argparse.ArgumentTypeError as exc:
        print(f"rdma_sysfs: {exc}", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        print(message, flush=True)

    def read_ip() -> str:
        if args.ip_json:
            with open(args.ip_json, encoding="utf-8") as handle:
                return handle.read()
        return run_ip(args.ip)

    if args.once:
        shift = read_shift(args.control_dir, args.shift)
        sync(
            args.root,
            read_ip(),
            mapping,
            shift,
            reset=args.reset,
            table_size=args.table_size,
            log=log,
        )
        return 0
    stopping = False

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        watch(
            args.root,
            read_ip,
            mapping,
            args.shift,
            events=Monitor(args.ip, log=log),
            reset=args.reset,
            control_dir=args.control_dir,
            interval=args.interval,
            max_seconds=args.max_seconds,
            restarts=args.restarts,
            table_size=args.table_size,
            log=log,
            stop=lambda: stopping,
        )
    except (MonitorDied, OSError) as exc:
        print(f"rdma_sysfs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
