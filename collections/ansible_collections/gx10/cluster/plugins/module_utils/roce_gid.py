# SPDX-License-Identifier: Apache-2.0
"""Read a RoCE port's GID table from sysfs and find the NCCL GID index of each rail.

Pure Python (standard library only), shared by the ``gx10.cluster.roce_gid_info`` module and unit
tested against fake sysfs trees and the lab's RDMA sysfs simulator.

The kernel lays the table out as ``<sysfs>/class/infiniband/<dev>/ports/<port>/gids/<i>`` (the GID,
printed as eight groups of four hex digits), ``.../gid_attrs/types/<i>`` (``IB/RoCE v1`` or
``RoCE v2``) and ``.../gid_attrs/ndevs/<i>`` (the netdev). Every slot of the table has a ``gids``
file; an empty slot reads as the all-zero GID and its ``types``/``ndevs`` files fail with EINVAL.
Slots 0 and 1 hold the link-local GID made from the MAC (v1, v2); each IP address on the netdev
adds a v1 and a v2 entry (an IPv4 address as ``::ffff:a.b.c.d``) in the first free slots, and a
removed address leaves its slots empty, so indices move as addresses come and go, and one node can
have its rail at index 3 while the other has it at 5.

NCCL takes one ``NCCL_IB_GID_INDEX`` for every HCA in ``NCCL_IB_HCA``: in ``pinned`` mode both rails
of a node must agree, and each node gets its own value (never one literal for all nodes). In
``auto`` mode ``NCCL_IB_GID_INDEX`` stays unset and NCCL picks each device's RoCE v2 IPv4 GID.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ROCE_V1 = "IB/RoCE v1"
ROCE_V2 = "RoCE v2"
MODES = ("pinned", "auto")
DEFAULT_PORT = 1

_IPV4_LINK_LOCAL = ipaddress.IPv4Network("169.254.0.0/16")
_DISAGREE_FIX = (
    "Fix: a clean reboot rebuilds the GID tables (stale slots left by removed or re-added "
    "addresses go away, and both rails come back at the same index), or use mode auto "
    "(NCCL_IB_GID_INDEX unset: NCCL picks each device's RoCE v2 IPv4 GID)."
)
_POLLUTION_FIX = (
    "remove the link-local address from the rail (netplan `link-local: []`, no avahi-autoipd or "
    "NetworkManager ipv4ll on it)"
)


class RoceGidError(ValueError):
    """A table is missing or lacks the rail's entry; ``result`` holds what was read."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result: dict[str, Any] = dict(result or {})


@dataclass(frozen=True)
class GidEntry:
    """One populated slot of a GID table."""

    index: int
    gid: str  # as the kernel prints it: 0000:0000:0000:0000:0000:ffff:c0a8:640a
    ipv4: str | None  # the IPv4 address of an IPv4-mapped GID
    type: str | None  # ROCE_V1, ROCE_V2, or None when the kernel would not say
    ndev: str | None

    @property
    def link_local(self) -> bool:
        """The fe80:: GID the kernel makes from the MAC (slots 0 and 1)."""
        return ipaddress.IPv6Address(self.gid).is_link_local

    @property
    def ipv4_link_local(self) -> bool:
        """A 169.254/16 address: pollution from IPv4 link-local autoconfiguration on the rail."""
        return self.ipv4 is not None and ipaddress.IPv4Address(self.ipv4) in _IPV4_LINK_LOCAL

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "gid": self.gid,
            "ipv4": self.ipv4,
            "type": self.type,
            "ndev": self.ndev,
            "link_local": self.link_local,
            "ipv4_link_local": self.ipv4_link_local,
        }


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip() or None
    except OSError:
        # types/<i> and ndevs/<i> of an empty slot fail with EINVAL on a real kernel.
        return None


def port_dir(root: str, dev: str, port: int = DEFAULT_PORT) -> str:
    """``<root>/class/infiniband/<dev>/ports/<port>``, or a RoceGidError naming what is missing."""
    devices = os.path.join(root, "class", "infiniband")
    base = os.path.join(devices, dev)
    if not os.path.isdir(base):
        present = sorted(os.listdir(devices)) if os.path.isdir(devices) else []
        raise RoceGidError(
            f"RDMA device {dev} not found: no {base} (devices present: "
            f"{', '.join(present) or 'none'}). Is the mlx5_ib driver loaded, and is the name "
            "right (`rdma link show`)?"
        )
    path = os.path.join(base, "ports", str(port))
    if not os.path.isdir(path):
        ports_dir = os.path.join(base, "ports")
        ports = sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []
        raise RoceGidError(
            f"RDMA device {dev} has no port {port} (ports: {', '.join(ports) or 'none'})"
        )
    if not os.path.isdir(os.path.join(path, "gids")):
        raise RoceGidError(f"RDMA device {dev} port {port} has no GID table ({path}/gids)")
    return path


def read_gid_table(root: str, dev: str, port: int = DEFAULT_PORT) -> list[GidEntry]:
    """The populated slots of ``dev``'s GID table, by index; empty (all-zero) slots are left out."""
    base = port_dir(root, dev, port)
    gids_dir = os.path.join(base, "gids")
    entries: list[GidEntry] = []
    for name in sorted((n for n in os.listdir(gids_dir) if n.isdigit()), key=int):
        text = _read(os.path.join(gids_dir, name))
        if text is None:
            continue
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            raise RoceGidError(
                f"RDMA device {dev} port {port}: {gids_dir}/{name} holds {text!r}, not a GID"
            ) from None
        if int(address) == 0:
            continue
        mapped = address.ipv4_mapped
        entries.append(
            GidEntry(
                index=int(name),
                gid=text,
                ipv4=str(mapped) if mapped is not None else None,
                type=_read(os.path.join(base, "gid_attrs", "types", name)),
                ndev=_read(os.path.join(base, "gid_attrs", "ndevs", name)),
            )
        )
    return entries


def format_table(dev: str, entries: Sequence[GidEntry], port: int = DEFAULT_PORT) -> str:
    """The table as an operator reads it (like `show_gids`), for error messages and reports."""
    lines = [f"GID table of {dev} port {port}:"]
    if not entries:
        lines.append("  (empty: no populated slot)")
    for entry in entries:
        note = ""
        if entry.ipv4 is not None:
            note = f"  {entry.ipv4}" + ("  <- IPv4 link-local" if entry.ipv4_link_local else "")
        elif entry.link_local:
            note = "  link-local"
        lines.append(
            f"  {entry.index:>3}  {entry.gid}  {entry.type or '?':<10}  {entry.ndev or '?'}{note}"
        )
    return "\n".join(lines)


def _find(entries: Sequence[GidEntry], ipv4: str, gid_type: str) -> GidEntry | None:
    return next((e for e in entries if e.ipv4 == ipv4 and e.type == gid_type), None)


def _ipv4(address: str) -> str:
    """A rail address, bare or with a prefix length (``192.168.100.10/24``), as a bare IPv4."""
    try:
        return str(ipaddress.IPv4Interface(str(address).strip()).ip)
    except ValueError:
        raise RoceGidError(f"rail address {address!r} is not an IPv4 address") from None


def _missing_message(dev: str, port: int, ipv4: str, entries: Sequence[GidEntry]) -> str:
    v1 = _find(entries, ipv4, ROCE_V1)
    if v1 is not None:
        why = (
            f"only a RoCE v1 entry (index {v1.index}) has it: the device or its driver offers "
            "no RoCE v2 for it"
        )
    else:
        why = (
            "the kernel adds this entry when the address is configured on the device's netdev: "
            "is the address on the rail and the netdev up?"
        )
    return (
        f"RDMA device {dev} port {port} has no RoCE v2 GID for {ipv4} (::ffff:{ipv4}): {why}\n"
        f"{format_table(dev, entries, port)}"
    )


def resolve_in(dev: str, entries: Sequence[GidEntry], ipv4: str, port: int = DEFAULT_PORT) -> int:
    """Index of the RoCE v2 entry for ``ipv4`` in an already read table."""
    address = _ipv4(ipv4)
    entry = _find(entries, address, ROCE_V2)
    if entry is None:
        raise RoceGidError(_missing_message(dev, port, address, entries))
    return entry.index


def resolve(root: str, dev: str, ipv4: str, port: int = DEFAULT_PORT) -> int:
    """Index of the RoCE v2 entry of ``dev`` whose GID is ``::ffff:<ipv4>``."""
    return resolve_in(dev, read_gid_table(root, dev, port), ipv4, port)


def rdma_device_for(root: str, netdev: str) -> str:
    """The RDMA device of a netdev, from ``<root>/class/net/<netdev>/device/infiniband/<dev>``."""
    base = os.path.join(root, "class", "net", netdev)
    if not os.path.isdir(base):
        raise RoceGidError(f"netdev {netdev} does not exist (no {base})")
    ib_dir = os.path.join(base, "device", "infiniband")
    found = sorted(os.listdir(ib_dir)) if os.path.isdir(ib_dir) else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise RoceGidError(
            f"netdev {netdev} has no RDMA device (nothing in {ib_dir}): is the mlx5_ib driver "
            "loaded? Set rdma_dev on the rail to name the device."
        )
    raise RoceGidError(
        f"netdev {netdev} has several RDMA devices ({', '.join(found)}): set rdma_dev on the rail"
    )


def _rail_fields(rail: Mapping[str, Any], position: int) -> tuple[str, str, str | None]:
    netdev, address = rail.get("netdev"), rail.get("address")
    if not isinstance(netdev, str) or not netdev:
        raise RoceGidError(f"rail {position}: netdev is missing (got {rail!r})")
    if not isinstance(address, str) or not address:
        raise RoceGidError(f"rail {position} ({netdev}): address is missing (got {rail!r})")
    rdma_dev = rail.get("rdma_dev")
    return netdev, address, str(rdma_dev) if rdma_dev else None


def _rail_warnings(
    rail: Mapping[str, Any], entries: Sequence[GidEntry], index: int, mode: str
) -> list[str]:
    dev, netdev = rail["rdma_dev"], rail["netdev"]
    warnings = []
    polluted = [e for e in entries if e.ipv4_link_local]
    if polluted:
        listed = ", ".join(f"{e.index} ({e.ipv4}, {e.type})" for e in polluted)
        warnings.append(
            f"{dev} ({netdev}) has GID entries for IPv4 link-local addresses at {listed}: they "
            f"take slots and move the indices; {_POLLUTION_FIX}"
        )
    if mode == "auto":
        # NCCL's own choice walks the table and keeps the first RoCE v2 IPv4 GID it meets.
        first = next((e for e in entries if e.ipv4 is not None and e.type == ROCE_V2), None)
        if first is not None and first.index < index:
            warnings.append(
                f"{dev} ({netdev}): NCCL's automatic GID choice may take index {first.index} "
                f"({first.ipv4}) before the rail's {rail['address']} at {index}; remove that "
                "address or use mode pinned"
            )
    return warnings


def resolve_node(
    root: str,
    rails: Sequence[Mapping[str, Any]],
    mode: str = "pinned",
    port: int = DEFAULT_PORT,
) -> dict[str, Any]:
    """Resolve every rail of one node.

    Each rail is ``{netdev, address, rdma_dev?}`` (``rdma_dev`` overrides the sysfs mapping).
    Returns ``{mode, gid_index, rails: [{netdev, rdma_dev, address, gid_index, table}], warnings}``
    where ``gid_index`` is the node's single index in ``pinned`` mode and None in ``auto`` mode.
    Raises RoceGidError with every problem found (``result`` holds the tables that were read).
    """
    if mode not in MODES:
        raise RoceGidError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not rails:
        raise RoceGidError("no rails given: nothing to resolve")
    results: list[dict[str, Any]] = []
    tables: list[list[GidEntry]] = []
    errors: list[str] = []
    for position, rail in enumerate(rails):
        netdev, address, rdma_dev = _rail_fields(rail, position)
        item: dict[str, Any] = {
            "netdev": netdev,
            "rdma_dev": rdma_dev,
            "address": address,
            "gid_index": None,
            "table": [],
        }
        results.append(item)
        entries: list[GidEntry] = []
        tables.append(entries)
        try:
            item["address"] = _ipv4(address)
            item["rdma_dev"] = rdma_dev or rdma_device_for(root, netdev)
            entries.extend(read_gid_table(root, item["rdma_dev"], port))
            item["table"] = [e.as_dict() for e in entries]
            item["gid_index"] = resolve_in(item["rdma_dev"], entries, item["address"], port)
        except RoceGidError as exc:
            errors.append(f"rail {netdev}: {exc}")
    result: dict[str, Any] = {"mode": mode, "gid_index": None, "rails": results, "warnings": []}
    if errors:
        raise RoceGidError("\n\n".join(errors), result)
    for item, entries in zip(results, tables, strict=True):
        result["warnings"].extend(_rail_warnings(item, entries, item["gid_index"], mode))
    if mode == "auto":
        return result
    indices = {item["gid_index"] for item in results}
    if len(indices) > 1:
        found = ", ".join(
            f"{item['rdma_dev']} ({item['netdev']}, {item['address']}) at {item['gid_index']}"
            for item in results
        )
        shown = "\n".join(
            format_table(item["rdma_dev"], entries, port)
            for item, entries in zip(results, tables, strict=True)
        )
        raise RoceGidError(
            f"rails disagree on the RoCE v2 GID index: {found}. NCCL_IB_GID_INDEX is one value "
            f"for every device in NCCL_IB_HCA, so a pinned index needs both rails at the same "
            f"slot. {_DISAGREE_FIX}\n{shown}",
            result,
        )
    result["gid_index"] = indices.pop()
    return result
