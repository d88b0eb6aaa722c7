# SPDX-License-Identifier: Apache-2.0
"""The NCCL environment of one node, derived from the cluster plan and its resolved GID index.

Pure Python (standard library only), shared by the ``gx10.cluster.nccl_env``,
``gx10.cluster.nccl_env_file`` and ``gx10.cluster.nccl_env_parse`` filters and unit tested
without Ansible.

Every derived value comes from the plan (``gx10_plan``: this node's rails, their netdevs and
addresses) or from the node's own GID resolution (``gx10.cluster.roce_gid_info``: the RDMA device
of each rail and, in ``pinned`` mode, the node's RoCE v2 GID index). Nothing is typed twice, and
``NCCL_IB_GID_INDEX`` is never one literal for all nodes: each node passes its own resolved value
(``None`` in ``auto`` mode, where the key is left out and NCCL picks the RoCE v2 IPv4 GID itself).

The file format is what ``docker run --env-file`` reads (docker's ``opts/envfile.go``): one
``KEY=value`` per line, leading whitespace of a line dropped, ``#`` lines and blank lines skipped,
the value taken raw after the first ``=`` (quotes are NOT stripped, nothing is unescaped). So values
are written raw, and a value that this format cannot carry, or would carry differently from what
was meant, is refused: a newline, carriage return or NUL, leading or trailing whitespace, or a
quote at either end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
DEFAULT_DEBUG = "WARN"

# Every key this module derives, in the order it writes them. NCCL_IB_GID_INDEX is derived (per
# node) even in auto mode, where it is left out: an extra may not slip one literal in for all nodes.
DERIVED_KEYS = (
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "VLLM_HOST_IP",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_CROSS_NIC",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_DEBUG",
)

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUOTES = ("'", '"')


class NcclEnvError(ValueError):
    """The inputs do not give a valid environment; the message names the key and the fix."""


def nccl_env(
    plan: Mapping[str, Any],
    host: str,
    rdma_devices: Sequence[Any],
    gid_index: int | None,
    *,
    extra: Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    debug: str = DEFAULT_DEBUG,
) -> dict[str, str]:
    """This node's environment, derived keys first (``DERIVED_KEYS`` order), then the extras.

    ``rdma_devices`` is one entry per rail of the plan, in rail order: a device name, or a mapping
    with ``rdma_dev`` (and optionally ``netdev``, checked against the plan), as in the ``rails``
    that ``gx10.cluster.roce_gid_info`` returns. ``gid_index`` is the node's resolved index
    (``pinned`` mode) or None (``auto`` mode: ``NCCL_IB_GID_INDEX`` is left out). An extra that
    names a derived key replaces it only when the key is listed in ``overrides``.
    """
    rails = _host_rails(plan, host)
    devices = _devices(rails, rdma_devices, host)
    first = rails[0]
    if debug not in DEBUG_LEVELS:
        raise NcclEnvError(
            f"NCCL_DEBUG must be one of {', '.join(DEBUG_LEVELS)}, got {debug!r} (nccl_env_debug)"
        )
    derived: dict[str, str] = {"NCCL_IB_HCA": ",".join(devices)}
    if gid_index is not None:
        if isinstance(gid_index, bool) or not isinstance(gid_index, int) or gid_index < 0:
            raise NcclEnvError(
                f"gid_index for {host} must be a non-negative integer (the node's resolved RoCE "
                f"v2 GID index) or None (auto mode), got {gid_index!r}"
            )
        derived["NCCL_IB_GID_INDEX"] = str(gid_index)
    derived.update(
        {
            "NCCL_IB_DISABLE": "0",
            "NCCL_SOCKET_IFNAME": first["netdev"],
            "GLOO_SOCKET_IFNAME": first["netdev"],
            "TP_SOCKET_IFNAME": first["netdev"],
            "VLLM_HOST_IP": first["address"],
            "NCCL_IB_ADDR_FAMILY": "AF_INET",
            "NCCL_IB_ROCE_VERSION_NUM": "2",
            "NCCL_CROSS_NIC": "1",
            "NCCL_IGNORE_CPU_AFFINITY": "1",
            "NCCL_DEBUG": debug,
        }
    )
    return _merge(derived, extra or {}, list(overrides))


def render_env_file(mapping: Mapping[str, Any], header: str | None = None) -> str:
    """``KEY=value`` lines for ``docker run --env-file``, values raw; refuse what would break it.

    ``header`` (optional) is written first as ``#`` comment lines.
    """
    lines = [f"# {line}".rstrip() for line in (header or "").splitlines()]
    for key, value in mapping.items():
        text = _string(str(key), value)
        _check_key(str(key))
        _check_value(str(key), text)
        lines.append(f"{key}={text}")
    return "\n".join(lines) + "\n" if lines else ""


def parse_env_file(text: str) -> dict[str, str]:
    """Read an env file the way ``docker run --env-file`` does (for verification)."""
    result: dict[str, str] = {}
    for number, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise NcclEnvError(
                f"line {number}: {key!r} has no '=' (docker would copy it from the caller's "
                "environment): write KEY=value"
            )
        _check_key(key, where=f"line {number}: ")
        result[key] = value
    return result


# --- internals -------------------------------------------------------------------------------


def _host_rails(plan: Mapping[str, Any], host: str) -> list[dict[str, str]]:
    hosts = plan.get("hosts") if isinstance(plan, Mapping) else None
    if not isinstance(hosts, Mapping) or host not in hosts:
        known = ", ".join(str(h) for h in hosts) if isinstance(hosts, Mapping) else "none"
        raise NcclEnvError(
            f"host {host!r} is not in the cluster plan (hosts: {known}): pass gx10_plan from "
            "playbooks/validate.yml and a host of the head or workers group"
        )
    rails = hosts[host].get("rails") if isinstance(hosts[host], Mapping) else None
    if not isinstance(rails, Sequence) or isinstance(rails, str) or not rails:
        raise NcclEnvError(f"the cluster plan has no rails for {host}")
    result: list[dict[str, str]] = []
    for position, rail in enumerate(rails):
        netdev = rail.get("netdev") if isinstance(rail, Mapping) else None
        address = rail.get("address") if isinstance(rail, Mapping) else None
        if not isinstance(netdev, str) or not netdev or not isinstance(address, str) or not address:
            raise NcclEnvError(
                f"rail {position} of {host} in the cluster plan lacks netdev or address: {rail!r}"
            )
        result.append({"netdev": str(netdev), "address": str(address)})
    return result


def _devices(rails: Sequence[Mapping[str, str]], given: Sequence[Any], host: str) -> list[str]:
    if isinstance(given, str) or not isinstance(given, Sequence):
        raise NcclEnvError(
            f"rdma_devices for {host} must be a list (one RDMA device per rail), got {given!r}"
        )
    if len(given) != len(rails):
        raise NcclEnvError(
            f"{host} has {len(rails)} rails in the plan "
            f"({', '.join(r['netdev'] for r in rails)}) but {len(given)} RDMA devices were "
            f"given ({given!r}): NCCL_IB_HCA lists one device per rail, in rail order"
        )
    devices: list[str] = []
    for rail, entry in zip(rails, given, strict=True):
        item = entry
        if isinstance(entry, Mapping):
            netdev = entry.get("netdev")
            if netdev is not None and str(netdev) != rail["netdev"]:
                raise NcclEnvError(
                    f"RDMA devices for {host} are not in rail order: got {netdev} where the plan "
                    f"has {rail['netdev']}"
                )
            item = entry.get("rdma_dev")
        if not isinstance(item, str) or not _KEY.match(item.replace("-", "_")):
            raise NcclEnvError(
                f"RDMA device of {host} rail {rail['netdev']} must be a device name like "
                f"rocep1s0f0, got {item!r}"
            )
        devices.append(str(item))
    if len(set(devices)) != len(devices):
        raise NcclEnvError(
            f"{host}: two rails map to the same RDMA device ({', '.join(devices)}): each rail is "
            "its own CX-7 twin; check gx10_rdma_devices"
        )
    return devices


def _merge(
    derived: dict[str, str], extra: Mapping[str, Any], overrides: Sequence[str]
) -> dict[str, str]:
    if not isinstance(extra, Mapping):
        raise NcclEnvError(f"extra (nccl_env_extra) must be a mapping, got {extra!r}")
    unknown = [str(key) for key in overrides if key not in DERIVED_KEYS]
    if unknown:
        raise NcclEnvError(
            f"overrides (nccl_env_overrides) names {', '.join(unknown)}, which is not a derived "
            f"key; only {', '.join(DERIVED_KEYS)} can be overridden (other keys go in "
            "nccl_env_extra directly)"
        )
    result = dict(derived)
    for raw_key, raw_value in extra.items():
        key = str(raw_key)
        _check_key(key, where="extra: ")
        value = _string(key, raw_value)
        _check_value(key, value)
        if key in DERIVED_KEYS and key not in overrides:
            if key == "NCCL_IB_GID_INDEX":
                why = (
                    "it is resolved per node from each node's own GID table; one literal for all "
                    "nodes wedges NCCL when their tables differ"
                )
            else:
                why = f"it is derived (here {derived.get(key, 'unset')!r})"
            raise NcclEnvError(
                f"extra key {key} would override a derived value: {why}. Remove it from "
                f"nccl_env_extra, or list {key} in nccl_env_overrides if you mean it"
            )
        result[key] = value
    return result


def _string(key: str, value: Any) -> str:
    if isinstance(value, bool):
        raise NcclEnvError(
            f"{key}: {value!r} is a boolean (YAML reads yes/no/true/false as one): quote the "
            "value you mean, e.g. '1' or '0'"
        )
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int | float):
        return str(value)
    raise NcclEnvError(f"{key}: value must be a string or a number, got {value!r}")


def _check_key(key: str, where: str = "") -> None:
    if not _KEY.match(key):
        raise NcclEnvError(
            f"{where}{key!r} is not a valid environment variable name (letters, digits and _, "
            "not starting with a digit)"
        )


def _check_value(key: str, value: str) -> None:
    problem = None
    if any(c in value for c in "\n\r\x00"):
        problem = "contains a newline, carriage return or NUL, which the file cannot carry"
    elif value != value.strip():
        problem = "has leading or trailing whitespace, which readers of the file treat differently"
    elif value[:1] in _QUOTES or value[-1:] in _QUOTES:
        problem = (
            "starts or ends with a quote: docker --env-file keeps quotes as part of the value; "
            "write the value without them"
        )
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            problem = "is not valid UTF-8"
    if problem:
        raise NcclEnvError(f"{key}={value!r}: the value {problem}")
