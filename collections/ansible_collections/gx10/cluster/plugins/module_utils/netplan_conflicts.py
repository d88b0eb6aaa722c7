# SPDX-License-Identifier: Apache-2.0
"""Find netplan definitions and NetworkManager profiles that configure the rail netdevs.

Pure Python (PyYAML for the rewritten files) so the rules can be unit tested without a node. The
``gx10.cluster.netplan_conflicts`` module reads the files, sysfs and ``nmcli`` and calls these.

A netplan definition configures a netdev when its ``match`` (every criterion given: ``name`` and
``driver`` as shell globs, ``macaddress``) fits the netdev, or, without ``match``, when its key is
the netdev's name. A bond, bridge or VRF listing such a definition in ``interfaces``, or a VLAN on
it (``link``), configures the rail too (the rails must never be bonded).

After a hardware swap (new NICs, new MACs) a definition may still refer to a rail by what it was:
``match: {macaddress: <old MAC>}`` with ``set-name: <rail netdev>`` (the vendor way to pin a
name), or ``match`` on the rail's literal name together with an old MAC. Such definitions no longer
match, but they are stale configuration of the rail and refer to MACs that are gone. So a physical
definition also configures a rail when its ``set-name`` is a rail netdev or its ``match.name``
names one literally, and any definition does when one of its ``addresses`` lies in a rail subnet.
"""

from __future__ import annotations

import copy
import fnmatch
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

# Definitions that stand for a physical device and may select it with `match`.
PHYSICAL_SECTIONS = ("ethernets", "wifis", "modems", "nm-devices")
# Definitions built on other definitions: key -> how they refer to them.
COMPOSITE_SECTIONS = {"bonds": "interfaces", "bridges": "interfaces", "vrfs": "interfaces"}
LINKED_SECTIONS = {"vlans": "link", "tunnels": "link"}
DEVICE_SECTIONS = (
    *PHYSICAL_SECTIONS,
    *COMPOSITE_SECTIONS,
    *LINKED_SECTIONS,
    "dummy-devices",
    "virtual-ethernets",
)
# Where netplan itself writes NetworkManager profiles; those follow the netplan files.
NETPLAN_NM_PREFIXES = ("/run/NetworkManager/system-connections/netplan-", "/etc/netplan/")


@dataclass(frozen=True)
class Netdev:
    """What identifies a netdev to netplan: its name, current MAC and driver (if known)."""

    name: str
    mac: str | None = None
    driver: str | None = None


@dataclass
class Definition:
    """One definition in a netplan file that configures a rail (or a protected netdev)."""

    section: str
    key: str
    netdev: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {
            "section": self.section,
            "id": self.key,
            "netdev": self.netdev,
            "reason": self.reason,
        }


@dataclass
class FileConflict:
    """A netplan file that configures rails: what it defines, and what to do with it."""

    path: str
    definitions: list[Definition] = field(default_factory=list)
    # Definitions that also match a protected netdev (the management interface): hands off.
    blocked: list[Definition] = field(default_factory=list)
    # The file without the rail definitions, or None when nothing else is left in it.
    remainder: dict[str, Any] | None = None

    @property
    def action(self) -> str:
        if self.blocked:
            return "blocked"
        return "remove" if self.remainder is None else "rewrite"

    @property
    def summary(self) -> str:
        verb = {
            "remove": "remove",
            "rewrite": "rewrite without the rails",
            "blocked": "leave alone (it also configures a protected netdev)",
        }[self.action]
        found = "; ".join(
            f"{d.section}.{d.key} configures {d.netdev} ({d.reason})"
            for d in [*self.definitions, *self.blocked]
        )
        return f"{verb} {self.path}: {found}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "action": self.action,
            "summary": self.summary,
            "definitions": [d.as_dict() for d in self.definitions],
            "blocked": [d.as_dict() for d in self.blocked],
            "content": None if self.remainder is None else dump(self.remainder),
        }


def _globs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        return [str(item) for item in value]
    return [str(value)]


def match_reason(key: str, definition: Any, netdev: Netdev) -> str | None:
    """Why a physical definition configures ``netdev`` (None: it does not)."""
    spec = definition if isinstance(definition, Mapping) else {}
    match = spec.get("match")
    if not isinstance(match, Mapping) or not match:
        return f"its id {key!r} is the netdev name" if key == netdev.name else None
    reasons: list[str] = []
    for criterion, value in match.items():
        if criterion == "name":
            patterns = _globs(value)
            if not any(fnmatch.fnmatchcase(netdev.name, p) for p in patterns):
                return None
        elif criterion == "macaddress":
            if netdev.mac is None or str(value).strip().lower() != netdev.mac.lower():
                return None
        elif criterion == "driver":
            patterns = _globs(value)
            if netdev.driver is None or not any(
                fnmatch.fnmatchcase(netdev.driver, p) for p in patterns
            ):
                return None
        else:
            # A criterion we cannot evaluate (netplan may grow new ones): be safe, no match.
            return None
        reasons.append(f"{criterion} {value!r}")
    return "match " + ", ".join(reasons)


def _glob_free(pattern: str) -> bool:
    return not any(char in pattern for char in "*?[")


def stale_reason(key: str, definition: Any, netdev: Netdev) -> str | None:
    """Why a physical definition refers to ``netdev`` although it may no longer match it.

    Used for definitions ``match_reason`` rejects: pinned to the rail's name by ``set-name`` or by
    a literal ``match.name``, with a ``macaddress`` (or driver) of hardware that is gone.
    """
    spec = definition if isinstance(definition, Mapping) else {}
    raw_match = spec.get("match")
    match: Mapping[str, Any] = raw_match if isinstance(raw_match, Mapping) else {}
    mac = match.get("macaddress")
    stale_mac = (
        f" with match macaddress {str(mac)!r}, not its current MAC {netdev.mac}"
        if mac is not None and netdev.mac and str(mac).strip().lower() != netdev.mac.lower()
        else ""
    )
    if str(spec.get("set-name", "")).strip() == netdev.name:
        return f"set-name {netdev.name!r}{stale_mac}"
    if "name" in match and any(
        _glob_free(p) and p == netdev.name for p in _globs(match.get("name"))
    ):
        return f"match name {netdev.name!r}{stale_mac}"
    return None


def _addresses(definition: Any) -> list[str]:
    """The ``addresses`` of a definition: plain strings, or mappings of address to options."""
    if not isinstance(definition, Mapping):
        return []
    value = definition.get("addresses")
    if isinstance(value, str | Mapping):
        value = [value]
    if not isinstance(value, Sequence):
        return []
    found: list[str] = []
    for item in value:
        if isinstance(item, Mapping):
            found.extend(str(address) for address in item)
        else:
            found.append(str(item))
    return found


def subnet_reason(definition: Any, subnets: Sequence[str]) -> str | None:
    """Why a definition configures a rail subnet: an address of it lies in one (None: not)."""
    networks = _networks(subnets)
    for text in _addresses(definition):
        try:
            address = ipaddress.ip_interface(text.strip()).ip
        except ValueError:
            continue
        for network in networks:
            if address in network:
                return f"address {text} in rail subnet {network}"
    return None


def _networks(subnets: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for subnet in subnets:
        try:
            networks.append(ipaddress.ip_network(str(subnet), strict=False))
        except ValueError:
            continue
    return networks


def _sections(network: Mapping[str, Any], names: Iterable[str]) -> Iterable[tuple[str, Any, Any]]:
    for section in names:
        entries = network.get(section)
        if isinstance(entries, Mapping):
            for key, definition in entries.items():
                yield section, str(key), definition


def _refs(definition: Any, attribute: str) -> list[str]:
    if not isinstance(definition, Mapping):
        return []
    value = definition.get(attribute)
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return [str(item) for item in value]
    return []


def find_file_conflict(
    path: str,
    document: Any,
    netdevs: Sequence[Netdev],
    protected: Sequence[Netdev] = (),
    subnets: Sequence[str] = (),
) -> FileConflict | None:
    """The rail definitions in one parsed netplan file, or None if it leaves the rails alone.

    ``subnets`` are the rail subnets: a definition with an address in one configures a rail.
    """
    if not isinstance(document, Mapping) or not isinstance(document.get("network"), Mapping):
        return None
    network: Mapping[str, Any] = document["network"]
    conflict = FileConflict(path)
    # id -> the rail netdev it configures (for composites built on it)
    taken: dict[str, str] = {}

    def claim(section: str, key: str, definition: Any, netdev: str, reason: str) -> None:
        conflict.definitions.append(Definition(section, key, netdev, reason))
        taken.setdefault(key, netdev)
        if section not in PHYSICAL_SECTIONS:
            return
        for other in protected:
            also = match_reason(key, definition, other)
            if also is not None:
                conflict.blocked.append(Definition(section, key, other.name, f"{also} (protected)"))

    for section, key, definition in _sections(network, PHYSICAL_SECTIONS):
        for netdev in netdevs:
            reason = match_reason(key, definition, netdev) or stale_reason(key, definition, netdev)
            if reason is not None:
                claim(section, key, definition, netdev.name, reason)
    # Composites on composites (a VLAN on a bond on a rail): repeat until nothing new is found.
    references = {**COMPOSITE_SECTIONS, **LINKED_SECTIONS}
    found = True
    while found:
        found = False
        for section, key, definition in _sections(network, references):
            if key in taken:
                continue
            for ref in _refs(definition, references[section]):
                rail = taken.get(ref) or next((n.name for n in netdevs if n.name == ref), None)
                if rail is not None:
                    conflict.definitions.append(
                        Definition(section, key, rail, f"{references[section]} {ref!r}")
                    )
                    taken[key] = rail
                    found = True
                    break
    # Whatever holds an address in a rail subnet competes with the rails for its routes.
    for section, key, definition in _sections(network, DEVICE_SECTIONS):
        if key not in taken:
            reason = subnet_reason(definition, subnets)
            if reason is not None:
                claim(section, key, definition, key, reason)
    if not conflict.definitions:
        return None
    conflict.remainder = _remainder(document, taken)
    return conflict


def _remainder(document: Mapping[str, Any], removed: Mapping[str, str]) -> dict[str, Any] | None:
    """The document without the removed definitions; None if no definition is left."""
    rest = copy.deepcopy(dict(document))
    network = dict(rest["network"])
    left = False
    for section in DEVICE_SECTIONS:
        entries = network.get(section)
        if not isinstance(entries, Mapping):
            continue
        kept = {key: value for key, value in entries.items() if str(key) not in removed}
        if kept:
            network[section] = kept
            left = True
        else:
            del network[section]
    if not left:
        return None
    rest["network"] = network
    return rest


def dump(document: Mapping[str, Any]) -> str:
    header = (
        "# Rewritten by gx10 (rail_network) without its rail definitions, which the gx10 rails\n"
        "# file now holds; the original was backed up first (rail_network_backup_dir).\n"
    )
    return header + yaml.safe_dump(dict(document), default_flow_style=False, sort_keys=False)


# --- NetworkManager ------------------------------------------------------------------------------


def split_terse(line: str) -> list[str]:
    """Split one line of ``nmcli -t`` output on unescaped colons, undoing the escapes."""
    fields: list[str] = []
    current: list[str] = []
    escaped = False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def parse_connection_list(text: str) -> list[dict[str, str]]:
    """``nmcli -t -f NAME,UUID,TYPE,FILENAME connection show`` -> one dict per profile."""
    profiles = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = split_terse(line)
        if len(parts) < 4:
            continue
        name, uuid, kind, filename = parts[:4]
        profiles.append({"name": name, "uuid": uuid, "type": kind, "filename": filename})
    return profiles


def parse_connection_details(text: str) -> dict[str, str]:
    """``nmcli -t -f <settings> connection show <uuid>`` -> {setting: value}."""
    details: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            details[key.strip()] = split_terse(value)[0] if "\\" in value else value.strip()
    return details


def profile_reason(
    profile: Mapping[str, str],
    details: Mapping[str, str],
    netdevs: Sequence[Netdev],
    subnets: Sequence[str],
) -> str | None:
    """Why a NetworkManager profile configures a rail (None: it does not, or netplan owns it)."""
    if profile.get("type") not in ("802-3-ethernet", "ethernet"):
        return None
    if any(profile.get("filename", "").startswith(p) for p in NETPLAN_NM_PREFIXES):
        return None
    names = {n.name for n in netdevs}
    interface = details.get("connection.interface-name", "").strip()
    if interface in names:
        return f"interface-name {interface}"
    mac = details.get("802-3-ethernet.mac-address", "").strip().lower()
    if mac and mac in {n.mac.lower() for n in netdevs if n.mac}:
        return f"mac-address {mac}"
    networks = _networks(subnets)
    for item in details.get("ipv4.addresses", "").split(","):
        text = item.strip()
        if not text:
            continue
        try:
            address = ipaddress.ip_interface(text).ip
        except ValueError:
            continue
        if any(address in network for network in networks):
            return f"ipv4.addresses {text} (a rail subnet)"
    return None
