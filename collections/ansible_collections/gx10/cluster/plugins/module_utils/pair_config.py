# SPDX-License-Identifier: Apache-2.0
"""The group supervisor's on-node config (``/etc/gx10/pair.json``) and its validation.

"Pair" is the historical name: the agents now supervise a head and any number of workers (a
group of N nodes, issue 15); the names (gx10-pair, pair.json, pair.token) stay.

Standard library only and no Ansible import: the controller's validate stage calls it on the
inventory values before any node changes, and the node's ``gx10-pair`` agent imports it from its
own directory (copied beside it) to check the file it runs from (``gx10-pair check-config``).

``TIMINGS`` is the one table of every timing and threshold the agent uses: its default, the
allowed range, the unit and the inventory variable that sets it (``vllm_supervisor_<key>``).
Seconds may be given as int or float; counts must be int; a bool is never a number here.

The file (``schema: 2``)::

    {"schema": 2, "node": "gx10-a", "role": "head",
     "listen": {"address": "10.0.0.10", "port": 8471},
     "peers": [{"name": "gx10-b", "address": "10.0.0.11", "port": 8471},
               {"name": "gx10-c", "address": "10.0.0.12", "port": 8471}],
     "token_file": "/etc/gx10/pair.token",
     "rank": {"unit": "gx10-vllm-rank.service", "container": "vllm-head",
              "worker_ready_regex": "headless multiproc executor|Worker ready",
              "health_urls": ["http://127.0.0.1:8000/health", "http://127.0.0.1:8000/v1/models"],
              "model": "Qwen/Qwen3-8B", "api_key_file": "/etc/gx10/api_key"},
     "gid": {"mode": "pinned", "port": 1, "sysfs_root": "/sys", "default_index": 3,
             "rails": [{"netdev": "enp1s0f0np0", "address": "192.168.100.10"}],
             "env_file": "/run/gx10/pair/gid.env"},
     "bench_lock": "/run/gx10/bench.lock", "state_dir": "/var/lib/gx10/pair",
     "timings": {"heartbeat_interval": 5, ...}}

``peers``: the head's lists every worker (in rank order, the order it starts them in); a
worker's lists the head only. Schema 1 (two nodes, before issue 15) had one ``peer`` mapping
instead: it is still read (``load_config`` turns it into ``peers`` of one), and ``build_config``
still writes it when given ``peer_name``/``peer_address``/``peer_port`` instead of ``peers``.

``gid.default_index`` (optional) is the provision-time index: the agent uses it only when its own
resolver cannot say at rank start.

The rank's own file (``/etc/gx10/rank.json``, ``RANK_SCHEMA`` 2) is what the rank unit runs, with
or without the agents (one launch path): ``gx10-pair run-rank`` reads it alone, resolves the
node's GID index, writes ``gid.env_file`` and its record in ``state_dir``, then execs ``argv``::

    {"schema": 2, "node": "gx10-a", "role": "head", "state_dir": "/var/lib/gx10/pair",
     "gid": {...as above...}, "argv": ["/usr/bin/docker", "run", "--rm", ...]}
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = 2
SCHEMAS = (1, 2)  # schema 1: one ``peer`` (a pair); schema 2: ``peers`` (a head and N-1 workers)
MAX_PEERS = 63  # the most workers one head supervises (a sanity bound; the lab runs 1)
ROLES = ("head", "worker")
GID_MODES = ("pinned", "auto")
VARIABLE_PREFIX = "vllm_supervisor_"
DEFAULT_WORKER_READY_REGEX = "headless multiproc executor|Worker ready"
DEFAULT_BENCH_LOCK = "/run/gx10/bench.lock"
DEFAULT_STATE_DIR = "/var/lib/gx10/pair"
DEFAULT_ENV_FILE = "/run/gx10/pair/gid.env"
DEFAULT_PORT = 8471
DEFAULT_RANK_UNIT = "gx10-vllm-rank.service"

_CONTAINER = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_UNIT = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class PairConfigError(ValueError):
    """The config is invalid; ``errors`` holds one message per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class Timing:
    """One timing or threshold: default, allowed range (inclusive), unit, what it bounds."""

    default: float
    minimum: float
    maximum: float
    unit: str  # "s" (seconds, int or float) or "count" (int)
    description: str

    @property
    def is_count(self) -> bool:
        return self.unit == "count"


TIMINGS: dict[str, Timing] = {
    "heartbeat_interval": Timing(5, 1, 60, "s", "seconds between heartbeats, both ways"),
    "heartbeat_timeout": Timing(
        30, 3, 600, "s", "no heartbeat from the peer for this long: the peer is gone"
    ),
    "worker_ready_timeout": Timing(
        600, 10, 7200, "s", "the worker's log must show it joined within this after its start"
    ),
    "head_ready_timeout": Timing(
        7200, 30, 14400, "s", "the head's health URLs must answer within this after its start"
    ),
    "lone_worker_timeout": Timing(
        120, 10, 3600, "s", "a ready worker whose head rank is not running for this long stops"
    ),
    "probe_interval": Timing(60, 10, 3600, "s", "seconds between stall probes of the head"),
    "probe_timeout": Timing(30, 1, 600, "s", "a probe with no token within this is a stall"),
    "stall_threshold": Timing(3, 1, 100, "count", "consecutive stalls that restart the pair"),
    "backoff_initial": Timing(10, 1, 600, "s", "the first restart's delay (doubles each time)"),
    "backoff_max": Timing(300, 1, 3600, "s", "the longest delay between restarts"),
    "breaker_max_restarts": Timing(
        5, 1, 100, "count", "more restarts than this within breaker_window trip the breaker"
    ),
    "breaker_window": Timing(21600, 60, 86400, "s", "the window the breaker counts restarts in"),
    "request_timeout": Timing(5, 1, 60, "s", "one agent-to-agent HTTP request"),
}


def variable(key: str) -> str:
    """The inventory variable that sets timing ``key``."""
    return f"{VARIABLE_PREFIX}{key}"


def default_timings() -> dict[str, float]:
    return {key: timing.default for key, timing in TIMINGS.items()}


def backoff_delay(timings: Mapping[str, float], attempt: int) -> float:
    """The delay before restart number ``attempt`` (1-based): doubling, capped at backoff_max."""
    initial, ceiling = float(timings["backoff_initial"]), float(timings["backoff_max"])
    return float(min(initial * 2 ** max(attempt - 1, 0), ceiling))


def _range_text(timing: Timing) -> str:
    unit = "" if timing.is_count else " s"
    kind = "an integer" if timing.is_count else "a number of seconds"
    return f"{kind} from {timing.minimum:g} to {timing.maximum:g}{unit}"


def _number_error(key: str, value: Any) -> str | None:
    timing = TIMINGS[key]
    name = variable(key)
    allowed = _range_text(timing)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} is {value!r} ({type(value).__name__}): it must be {allowed}; set it to one"
    if timing.is_count and not isinstance(value, int):
        return f"{name} is {value!r}: it is a count and must be {allowed}; use a whole number"
    if math.isnan(value) or not timing.minimum <= value <= timing.maximum:  # NaN fails too
        return f"{name} is {value!r}: it must be {allowed}; set a value in that range"
    return None


def merged_timings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults overlaid with ``values`` (keys are TIMINGS keys); nothing is checked."""
    merged: dict[str, Any] = dict(default_timings())
    merged.update(values)
    return merged


def validate_timings(values: Mapping[str, Any]) -> list[str]:
    """Errors of ``values`` (TIMINGS keys; missing keys take their default), one per problem.

    Each names the inventory variable, the bad value, the allowed range and the fix.
    """
    if not isinstance(values, Mapping):
        return [f"timings must be a mapping of {', '.join(TIMINGS)}, got {values!r}"]
    errors: list[str] = []
    for key in values:
        if key not in TIMINGS:
            errors.append(
                f"{variable(str(key))} is not a supervisor timing: use one of "
                f"{', '.join(variable(k) for k in TIMINGS)}, or remove it"
            )
    merged = merged_timings({k: v for k, v in values.items() if k in TIMINGS})
    bad = set()
    for key in TIMINGS:
        error = _number_error(key, merged[key])
        if error:
            errors.append(error)
            bad.add(key)

    def rule(keys: Sequence[str], holds: Callable[[], bool], message: str) -> None:
        # A rule between fields speaks only when each field is a number in its range.
        if not bad.intersection(keys) and not holds():
            errors.append(message)

    t = merged
    rule(
        ("heartbeat_timeout", "heartbeat_interval"),
        lambda: t["heartbeat_timeout"] >= 3 * t["heartbeat_interval"],
        f"{variable('heartbeat_timeout')} is {t['heartbeat_timeout']!r} but must be at least 3 x "
        f"{variable('heartbeat_interval')} ({t['heartbeat_interval']!r}): raise the timeout or "
        "shorten the interval, so two lost heartbeats never look like a dead peer",
    )
    rule(
        ("request_timeout", "heartbeat_timeout"),
        lambda: t["request_timeout"] < t["heartbeat_timeout"],
        f"{variable('request_timeout')} is {t['request_timeout']!r} but must be below "
        f"{variable('heartbeat_timeout')} ({t['heartbeat_timeout']!r}): shorten it",
    )
    rule(
        ("lone_worker_timeout", "heartbeat_interval"),
        lambda: t["lone_worker_timeout"] >= 2 * t["heartbeat_interval"],
        f"{variable('lone_worker_timeout')} is {t['lone_worker_timeout']!r} but must be at least "
        f"2 x {variable('heartbeat_interval')} ({t['heartbeat_interval']!r}): raise it, or the "
        "worker stops before the head's start can reach it",
    )
    rule(
        ("probe_timeout", "probe_interval"),
        lambda: t["probe_timeout"] < t["probe_interval"],
        f"{variable('probe_timeout')} is {t['probe_timeout']!r} but must be below "
        f"{variable('probe_interval')} ({t['probe_interval']!r}): shorten the timeout or "
        "lengthen the interval, so probes never overlap",
    )
    rule(
        ("backoff_initial", "backoff_max"),
        lambda: t["backoff_initial"] <= t["backoff_max"],
        f"{variable('backoff_initial')} is {t['backoff_initial']!r} but must not exceed "
        f"{variable('backoff_max')} ({t['backoff_max']!r}): lower it or raise the maximum",
    )
    rule(
        ("breaker_window", "backoff_max"),
        lambda: t["breaker_window"] > t["backoff_max"],
        f"{variable('breaker_window')} is {t['breaker_window']!r} but must exceed "
        f"{variable('backoff_max')} ({t['backoff_max']!r}): lengthen the window",
    )
    keys = ("breaker_window", "breaker_max_restarts", "backoff_initial", "backoff_max")
    if not bad.intersection(keys) and t["backoff_initial"] <= t["backoff_max"]:
        needed = sum(backoff_delay(t, n) for n in range(1, int(t["breaker_max_restarts"]) + 2))
        rule(
            keys,
            lambda: t["breaker_window"] >= needed,
            f"{variable('breaker_window')} is {t['breaker_window']!r} but the backoff delays of "
            f"{variable('breaker_max_restarts')} + 1 ({int(t['breaker_max_restarts']) + 1}) "
            f"quick failures add up to {needed:g} s, so the breaker could never trip: make the "
            f"window at least {needed:g} s, or lower the backoff or the restart count",
        )
    return errors


def timings_from_vars(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The ``vllm_supervisor_<key>`` entries of ``variables`` as TIMINGS keys (others ignored)."""
    return {key: variables[variable(key)] for key in TIMINGS if variable(key) in variables}


# --------------------------------------------------------------------------------------------
# The whole file
# --------------------------------------------------------------------------------------------


def gid_with_defaults(gid: Mapping[str, Any]) -> dict[str, Any]:
    """The GID settings (the agent's config and the rank file alike) with the defaults filled in."""
    return {
        "mode": "pinned",
        "port": 1,
        "sysfs_root": "/sys",
        "default_index": None,
        "env_file": DEFAULT_ENV_FILE,
        **gid,
    }


def build_config(
    *,
    node: str,
    role: str,
    listen_address: str,
    rank: Mapping[str, Any],
    gid: Mapping[str, Any],
    peers: Sequence[Mapping[str, Any]] | None = None,
    peer_name: str | None = None,
    peer_address: str | None = None,
    token_file: str = "/etc/gx10/pair.token",
    listen_port: int = DEFAULT_PORT,
    peer_port: int = DEFAULT_PORT,
    bench_lock: str = DEFAULT_BENCH_LOCK,
    state_dir: str = DEFAULT_STATE_DIR,
    timings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config file's content with defaults filled in; check it with ``validate_config``.

    ``peers`` (a list of ``{name, address, port}``, port defaulting to DEFAULT_PORT) writes
    schema 2; the older ``peer_name``/``peer_address``/``peer_port`` write schema 1 (one peer).
    """
    if (peers is None) == (peer_name is None and peer_address is None):
        raise TypeError("build_config() takes either peers or peer_name and peer_address")
    rank_out: dict[str, Any] = {
        "unit": DEFAULT_RANK_UNIT,
        "worker_ready_regex": DEFAULT_WORKER_READY_REGEX,
        "health_urls": [],
        "model": None,
        "api_key_file": None,
    }
    rank_out.update(rank)
    gid_out = gid_with_defaults(gid)
    peering: dict[str, Any]
    if peers is None:
        peering = {
            "schema": 1,
            "peer": {"name": peer_name, "address": peer_address, "port": peer_port},
        }
    else:
        listed = [{"port": DEFAULT_PORT, **dict(p)} if isinstance(p, Mapping) else p for p in peers]
        peering = {"schema": SCHEMA, "peers": listed}
    return {
        "schema": peering["schema"],
        "node": node,
        "role": role,
        "listen": {"address": listen_address, "port": listen_port},
        **{k: v for k, v in peering.items() if k != "schema"},
        "token_file": token_file,
        "rank": rank_out,
        "gid": gid_out,
        "bench_lock": bench_lock,
        "state_dir": state_dir,
        "timings": merged_timings(timings or {}),
    }


_TOP_KEYS = (
    "schema",
    "node",
    "role",
    "listen",
    "peers",
    "token_file",
    "rank",
    "gid",
    "bench_lock",
    "state_dir",
    "timings",
)
_RANK_KEYS = ("unit", "container", "worker_ready_regex", "health_urls", "model", "api_key_file")
_GID_KEYS = ("mode", "port", "sysfs_root", "default_index", "rails", "env_file")


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, key: str, value: Any, need: str) -> None:
        self.errors.append(f"{key} is {value!r}: {need}")

    def mapping(self, key: str, value: Any, allowed: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(key, value, f"it must be a mapping with {', '.join(allowed)}")
            return {}
        for extra in value:
            if extra not in allowed:
                self.fail(
                    f"{key}.{extra}" if key else str(extra),
                    value[extra],
                    f"not a known key (known: {', '.join(allowed)}); remove it or fix its name",
                )
        return value

    def text(self, key: str, value: Any, pattern: re.Pattern[str] | None = None) -> None:
        if not isinstance(value, str) or not value.strip():
            self.fail(key, value, "it must be a non-empty string; set it")
        elif pattern is not None and not pattern.match(value):
            self.fail(key, value, f"it must match {pattern.pattern}; fix the name")

    def path(self, key: str, value: Any, optional: bool = False) -> None:
        if optional and value is None:
            return
        if not isinstance(value, str) or not os.path.isabs(value) or "\n" in value:
            self.fail(key, value, "it must be an absolute path (starting with /); set one")

    def address(self, key: str, value: Any, v4_only: bool = False) -> None:
        try:
            parsed = ipaddress.ip_address(str(value).split("/")[0] if v4_only else value)
        except ValueError:
            parsed = None
        if not isinstance(value, str) or parsed is None or (v4_only and parsed.version != 4):
            kind = "an IPv4 address" if v4_only else "an IP address"
            self.fail(key, value, f"it must be {kind}; use the node's address from the inventory")

    def integer(self, key: str, value: Any, low: int, high: int, optional: bool = False) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(key, value, f"it must be an integer from {low} to {high}; set one")


def _check_common(
    check: _Checker,
    data: Any,
    *,
    keys: Sequence[str],
    schemas: Sequence[int],
    fixes: tuple[str, str],
    reader: str,
) -> Mapping[str, Any]:
    """The checks the agent's config and the rank file share: a mapping of known keys, none
    missing, a schema the reader knows, the node's name and role. ``fixes``: what to say when
    the file is empty, and when a key is missing. Returns the mapping ({} when it is none)."""
    empty, missing = fixes
    top = check.mapping("", data, keys)
    if not top:
        if not check.errors:
            check.errors.append(empty)
        return {}
    check.errors.extend(f"{key} is missing: {missing}" for key in keys if key not in top)
    schema = top.get("schema")
    if "schema" in top and (isinstance(schema, bool) or schema not in schemas):
        check.fail(
            "schema",
            schema,
            f"{reader} reads schema {' or '.join(map(str, schemas))}; render the file again "
            "with the serve stage of this collection's version",
        )
    if "node" in top:
        check.text("node", top["node"], _NAME)
    if "role" in top and top["role"] not in ROLES:
        check.fail("role", top["role"], f"it must be one of {', '.join(ROLES)}")
    return top


def validate_config(config: Any) -> list[str]:
    """Errors of a whole config file's content, each naming its key, the value and the fix."""
    check = _Checker()
    schema = config.get("schema") if isinstance(config, Mapping) else None
    legacy = schema == 1 and not isinstance(schema, bool)
    # Schema 1 names its one peer ``peer``; schema 2 lists them in ``peers``.
    keys = tuple("peer" if k == "peers" and legacy else k for k in _TOP_KEYS)
    top = _check_common(
        check,
        config,
        keys=keys,
        schemas=SCHEMAS,
        fixes=(
            "the config is empty: write it with build_config",
            "the config needs it (write it with build_config)",
        ),
        reader="this agent",
    )
    if not top:
        return check.errors
    role = top.get("role")
    if "listen" in top:
        listen = check.mapping("listen", top["listen"], ("address", "port"))
        check.address("listen.address", listen.get("address"))
        check.integer("listen.port", listen.get("port"), 1, 65535)
    if "peer" in top and legacy:
        _check_peer(check, "peer", top["peer"], top.get("node"))
    if "peers" in top and not legacy:
        _check_peers(check, top["peers"], top.get("node"), role)
    if "token_file" in top:
        check.path("token_file", top["token_file"])
    for key in ("bench_lock", "state_dir"):
        if key in top:
            check.path(key, top[key])
    if "rank" in top:
        _check_rank(check, top["rank"], role)
    if "gid" in top:
        _check_gid(check, top["gid"])
    if "timings" in top:
        check.errors.extend(validate_timings(top["timings"]))
    return check.errors


def _check_peer(check: _Checker, where: str, value: Any, node: Any) -> Mapping[str, Any]:
    peer = check.mapping(where, value, ("name", "address", "port"))
    check.text(f"{where}.name", peer.get("name"), _NAME)
    check.address(f"{where}.address", peer.get("address"))
    check.integer(f"{where}.port", peer.get("port"), 1, 65535)
    if peer.get("name") is not None and peer.get("name") == node:
        check.fail(f"{where}.name", peer.get("name"), "a peer must be another node of the group")
    return peer


def _check_peers(check: _Checker, value: Any, node: Any, role: Any) -> None:
    """The head lists every worker (1 to MAX_PEERS); a worker lists the head only."""
    if not isinstance(value, list) or not value:
        check.fail("peers", value, "it must list the peers ({name, address, port}): set them")
        return
    if role == "worker" and len(value) != 1:
        check.fail(
            "peers",
            [p.get("name") if isinstance(p, Mapping) else p for p in value],
            "a worker's agent talks to the head only: list the head alone",
        )
    if len(value) > MAX_PEERS:
        check.fail("peers", f"{len(value)} peers", f"a head supervises at most {MAX_PEERS}")
    names: set[Any] = set()
    endpoints: set[tuple[Any, Any]] = set()
    for position, item in enumerate(value):
        where = f"peers[{position}]"
        peer = _check_peer(check, where, item, node)
        name, endpoint = peer.get("name"), (peer.get("address"), peer.get("port"))
        if isinstance(name, str) and name in names:
            check.fail(f"{where}.name", name, "each peer appears once; remove the repeat")
        if peer and endpoint in endpoints:
            check.fail(
                f"{where}.address",
                f"{endpoint[0]}:{endpoint[1]}",
                "two peers cannot share an address and port; give each node its own",
            )
        names.add(name)
        endpoints.add(endpoint)


def _check_rank(check: _Checker, value: Any, role: Any) -> None:
    rank = check.mapping("rank", value, _RANK_KEYS)
    check.text("rank.unit", rank.get("unit"), _UNIT)
    check.text("rank.container", rank.get("container"), _CONTAINER)
    regex = rank.get("worker_ready_regex")
    check.text("rank.worker_ready_regex", regex)
    if isinstance(regex, str):
        try:
            re.compile(regex)
        except re.error as exc:
            check.fail("rank.worker_ready_regex", regex, f"not a valid regex ({exc}); fix it")
    urls = rank.get("health_urls", [])
    if not isinstance(urls, list) or not all(
        isinstance(u, str) and re.match(r"^https?://[^\s/]+(/\S*)?$", u) for u in urls
    ):
        check.fail("rank.health_urls", urls, "it must be a list of http(s) URLs")
    elif role == "head" and not urls:
        check.fail("rank.health_urls", urls, "the head needs its /health and /v1/models URLs")
    model = rank.get("model")
    if role == "head":
        check.text("rank.model", model)
    elif model is not None and not isinstance(model, str):
        check.fail("rank.model", model, "it must be a string or null")
    check.path("rank.api_key_file", rank.get("api_key_file"), optional=True)


def _check_gid(check: _Checker, value: Any) -> None:
    gid = check.mapping("gid", value, _GID_KEYS)
    if gid.get("mode") not in GID_MODES:
        check.fail("gid.mode", gid.get("mode"), f"it must be one of {', '.join(GID_MODES)}")
    check.integer("gid.port", gid.get("port"), 1, 255)
    check.path("gid.sysfs_root", gid.get("sysfs_root"))
    check.path("gid.env_file", gid.get("env_file"))
    check.integer("gid.default_index", gid.get("default_index"), 0, 255, optional=True)
    rails = gid.get("rails")
    if not isinstance(rails, list) or not rails:
        check.fail("gid.rails", rails, "it must list this node's rails ({netdev, address})")
        return
    seen: set[str] = set()
    for position, rail in enumerate(rails):
        where = f"gid.rails[{position}]"
        item = check.mapping(where, rail, ("netdev", "address", "rdma_dev"))
        if not item:
            continue
        check.text(f"{where}.netdev", item.get("netdev"), _NAME)
        check.address(f"{where}.address", item.get("address"), v4_only=True)
        if item.get("rdma_dev") is not None:
            check.text(f"{where}.rdma_dev", item.get("rdma_dev"), _NAME)
        netdev = item.get("netdev")
        if isinstance(netdev, str):
            if netdev in seen:
                check.fail(f"{where}.netdev", netdev, "each rail appears once; remove the repeat")
            seen.add(netdev)


RANK_SCHEMA = 2
_RANK_SPEC_KEYS = ("schema", "node", "role", "state_dir", "gid", "argv")


def build_rank(
    *, node: str, role: str, gid: Mapping[str, Any], argv: Sequence[str],
    state_dir: str = DEFAULT_STATE_DIR,
) -> dict[str, Any]:  # fmt: skip
    """The rank file's content with the GID defaults filled in; check it with validate_rank."""
    return {
        "schema": RANK_SCHEMA,
        "node": node,
        "role": role,
        "state_dir": state_dir,
        "gid": gid_with_defaults(gid),
        "argv": list(argv),
    }


def validate_rank(spec: Any) -> list[str]:
    """Errors of a rank file's content, each naming its key, the value and the fix."""
    check = _Checker()
    top = _check_common(
        check,
        spec,
        keys=_RANK_SPEC_KEYS,
        schemas=(RANK_SCHEMA,),
        fixes=(
            "the rank file is empty: render it with the serve stage",
            "render the rank file with the serve stage",
        ),
        reader="this runner",
    )
    if not top:
        return check.errors
    if "state_dir" in top:
        check.path("state_dir", top["state_dir"])
    if "gid" in top:
        _check_gid(check, top["gid"])
    argv = top.get("argv")
    if "argv" in top and (
        not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv)
    ):
        check.fail("argv", argv, "it must be a non-empty list of non-empty strings")
    return check.errors


def load_rank(path: str) -> dict[str, Any]:
    """Read and validate the rank file at ``path``; PairConfigError lists every problem."""
    return _load(path, validate_rank)


def _load(path: str, validate: Callable[[Any], list[str]]) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise PairConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    except ValueError as exc:
        raise PairConfigError([f"{path} is not JSON ({exc}): rewrite it"]) from None
    errors = validate(data)
    if errors:
        raise PairConfigError([f"{path}: {error}" for error in errors])
    assert isinstance(data, dict)
    return data


def load_config(path: str) -> dict[str, Any]:
    """Read and validate the file at ``path``; PairConfigError lists every problem."""
    data = _load(path, validate_config)
    data["timings"] = merged_timings(data["timings"])
    if data["schema"] == 1:  # one peer: the agent reads every config as a list of peers
        data["peers"] = [data.pop("peer")]
        data["schema"] = SCHEMA
    return data
