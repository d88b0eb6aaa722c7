"""NCCL and Gloo environment, checked against sysfs the way the libraries fail."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .env import SimEnv
from .errors import SimFatal
from .log import Log

NCCL_VERSION = "2.27.3"


@dataclass(frozen=True)
class CommProblem:
    """One failure as the library reports it: its log lines, then the exception raised."""

    lines: tuple[str, ...]
    exc_type: str
    message: str


def _list_dir(path: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in path.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _nccl_prefix(env: SimEnv) -> str:
    pid = os.getpid()
    return f"{env.hostname}:{pid}:{pid} [0]"


def _nccl_error(env: SimEnv, where: str, warn: str, hints: Sequence[str] = ()) -> CommProblem:
    lines = [f"{_nccl_prefix(env)} {where} NCCL WARN {warn}"]
    lines += [f"{_nccl_prefix(env)} NCCL INFO [gx10-sim] {hint}" for hint in hints]
    return CommProblem(
        tuple(lines),
        "RuntimeError",
        "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    )


def _match_list(spec: str) -> tuple[bool, bool, list[str]]:
    """NCCL's interface/HCA list syntax: [^][=]a,b (exclude, exact match, prefixes)."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    return exclude, exact, [item.strip() for item in spec.split(",") if item.strip()]


def _matches(name: str, item: str, exact: bool) -> bool:
    return name == item if exact else name.startswith(item)


def check_gloo(env: SimEnv) -> CommProblem | None:
    spec = env.raw.get("GLOO_SOCKET_IFNAME")
    if not spec:
        return None
    present = set(_list_dir(env.sysfs_root / "class" / "net"))
    for name in (item.strip() for item in spec.split(",")):
        if name and name not in present:
            return CommProblem(
                (),
                "RuntimeError",
                "[enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:83] "
                f"ifa != nullptr. Unable to find address for: {name}",
            )
    return None


def check_nccl_socket(env: SimEnv) -> CommProblem | None:
    spec = env.raw.get("NCCL_SOCKET_IFNAME")
    if not spec:
        return None
    present = _list_dir(env.sysfs_root / "class" / "net")
    exclude, exact, items = _match_list(spec)
    hits = [name for name in present if any(_matches(name, item, exact) for item in items)]
    usable = [n for n in present if n not in hits and n != "lo"] if exclude else hits
    if usable:
        return None
    return _nccl_error(
        env,
        "misc/socket.cc:484",
        "Bootstrap : no socket interface found",
        [f"NCCL_SOCKET_IFNAME={spec} matches none of {present} in {env.sysfs_root}/class/net"],
    )


def select_hcas(env: SimEnv) -> tuple[list[tuple[str, int]], CommProblem | None]:
    """The (device, port) pairs NCCL would use, or the problem with NCCL_IB_HCA."""
    ib_root = env.sysfs_root / "class" / "infiniband"
    devices = _list_dir(ib_root)
    spec = env.raw.get("NCCL_IB_HCA", "")
    if not spec:
        return [(dev, 1) for dev in devices], None
    exclude, exact, items = _match_list(spec)
    if exclude:
        return [(d, 1) for d in devices if not any(_matches(d, i, exact) for i in items)], None
    selected: list[tuple[str, int]] = []
    for item in items:
        name, _, port_text = item.partition(":")
        port = int(port_text) if port_text.isdigit() else 1
        found = [dev for dev in devices if _matches(dev, name, exact)]
        if not found:
            return [], _nccl_error(
                env,
                "transport/net_ib.cc:707",
                f"NET/IB : No device found matching NCCL_IB_HCA entry '{item}'.",
                [f"RDMA devices in {ib_root}: {devices or 'none'}"],
            )
        selected += [(dev, port) for dev in found if (dev, port) not in selected]
    return selected, None


@dataclass(frozen=True)
class GidEntry:
    index: int
    gid: str
    kind: str | None
    ipv4: str | None


def read_gids(env: SimEnv, dev: str, port: int) -> list[GidEntry]:
    base = env.sysfs_root / "class" / "infiniband" / dev / "ports" / str(port)
    entries: list[GidEntry] = []
    for name in _list_dir(base / "gids"):
        if not name.isdigit():
            continue
        gid = _read(base / "gids" / name) or ""
        kind = _read(base / "gid_attrs" / "types" / name)
        ipv4: str | None = None
        try:
            mapped = ipaddress.IPv6Address(gid).ipv4_mapped
        except ValueError:
            mapped = None
        if mapped is not None:
            ipv4 = str(mapped)
        entries.append(GidEntry(int(name), gid, kind, ipv4))
    return sorted(entries, key=lambda entry: entry.index)


def usable_gid_indexes(entries: Sequence[GidEntry], host_ip: str | None) -> list[int]:
    """RoCE v2 entries of a routable IPv4 address; this node's own address if it is there."""
    usable = [
        e
        for e in entries
        if e.kind == "RoCE v2"
        and e.ipv4 is not None
        and e.ipv4 != "0.0.0.0"
        and not ipaddress.IPv4Address(e.ipv4).is_link_local
    ]
    own = [e.index for e in usable if host_ip is not None and e.ipv4 == host_ip]
    return own or [e.index for e in usable]


def _describe_gid(entry: GidEntry | None, index: int) -> str:
    if entry is None:
        return f"GID index {index} does not exist"
    return f"GID index {index} is {entry.kind or 'unset'} {entry.gid}"


def check_gid(env: SimEnv, hcas: Sequence[tuple[str, int]]) -> CommProblem | None:
    pinned = env.raw.get("NCCL_IB_GID_INDEX", "").strip()
    for dev, port in hcas:
        entries = read_gids(env, dev, port)
        good = usable_gid_indexes(entries, env.host_ip)
        if not pinned:
            if good:
                continue
            return _nccl_error(
                env,
                "transport/net_ib.cc:436",
                f"NET/IB : {dev}:{port} has no RoCE v2 GID for an IPv4 address",
                ["RoCE GIDs come from IP addresses: give this rail an IPv4 address"],
            )
        index = int(pinned) if pinned.lstrip("-").isdigit() else -1
        if index in good:
            continue
        entry = next((e for e in entries if e.index == index), None)
        expected = f"index {good[0]}" if good else "no usable entry"
        if entry is None:
            return _nccl_error(
                env,
                "misc/ibvwrap.cc:122",
                "Call to ibv_query_gid failed with error Invalid argument",
                [
                    f"{dev}:{port} NCCL_IB_GID_INDEX={pinned}: {_describe_gid(None, index)}; "
                    f"the RoCE v2 IPv4 entry of this node is {expected}"
                ],
            )
        return _nccl_error(
            env,
            "misc/ibvwrap.cc:187",
            "Call to ibv_modify_qp failed with error Network is unreachable",
            [
                f"{dev}:{port} NCCL_IB_GID_INDEX={pinned}: {_describe_gid(entry, index)}; "
                f"the RoCE v2 IPv4 entry of this node is {expected}"
            ],
        )
    return None


def check_comm_env(env: SimEnv, multi_rank: bool) -> CommProblem | None:
    """Gloo first (the CPU group), then NCCL bootstrap, then the IB transport."""
    problem = check_gloo(env)
    if problem is not None or not multi_rank:
        return problem
    problem = check_nccl_socket(env)
    if problem is not None:
        return problem
    if env.raw.get("NCCL_IB_DISABLE", "0").strip() == "1":
        return None
    hcas, problem = select_hcas(env)
    if problem is not None:
        return problem
    return check_gid(env, hcas)


def comm_init(env: SimEnv, log: Log, multi_rank: bool) -> CommProblem | None:
    problem = check_comm_env(env, multi_rank)
    if problem is not None:
        for line in problem.lines:
            log.raw(line)
    elif multi_rank:
        log.info_at("pynccl.py:70", f"vLLM is using nccl=={NCCL_VERSION}")
    return problem


def remote_comm_error(env: SimEnv, peer: str) -> SimFatal:
    prefix = _nccl_prefix(env)
    return SimFatal(
        "RuntimeError",
        f"NCCL error: remote process exited or there was a network "
        f"error\n{prefix} misc/socket.cc:540 NCCL WARN Net : Connection closed by "
        f"remote peer {peer}",
    )
