# SPDX-License-Identifier: Apache-2.0
"""pair_config: the supervisor's timings table and the on-node config file, every rule both ways."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils import pair_config as pc


def config(role: str = "head", **overrides: Any) -> dict[str, Any]:
    built = pc.build_config(
        node="gx10-a" if role == "head" else "gx10-b",
        role=role,
        listen_address="10.0.0.10",
        peer_name="gx10-b" if role == "head" else "gx10-a",
        peer_address="10.0.0.11",
        rank={
            "container": "vllm-head",
            "health_urls": ["http://127.0.0.1:8000/health", "http://127.0.0.1:8000/v1/models"],
            "model": "Qwen/Qwen3-8B",
            "api_key_file": "/etc/gx10/api_key",
        },
        gid={"rails": [{"netdev": "enp1s0f0np0", "address": "192.168.100.10"}]},
    )
    built.update(overrides)
    return built


def one_error(errors: list[str], *needles: str) -> str:
    assert len(errors) == 1, errors
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# --------------------------------------------------------------------------------------------
# Timings
# --------------------------------------------------------------------------------------------


def test_defaults_are_valid_and_in_their_ranges() -> None:
    assert pc.validate_timings({}) == []
    assert pc.validate_timings(pc.default_timings()) == []
    for key, timing in pc.TIMINGS.items():
        assert timing.minimum <= timing.default <= timing.maximum, key
    assert pc.default_timings()["heartbeat_interval"] == 5
    assert pc.default_timings()["breaker_max_restarts"] == 5


@pytest.mark.parametrize("key", sorted(pc.TIMINGS))
def test_every_timing_refuses_out_of_range_both_ends_and_accepts_its_bounds(key: str) -> None:
    timing = pc.TIMINGS[key]
    low = one_error(
        pc.validate_timings({key: timing.minimum - 1}), pc.variable(key), f"{timing.minimum:g}"
    )
    assert f"{timing.maximum:g}" in low
    assert "set a value in that range" in low
    one_error(pc.validate_timings({key: timing.maximum + 1}), pc.variable(key))
    # Each bound alone is in range; cross-field rules may object, but not the range check.
    for bound in (timing.minimum, timing.maximum):
        value: float = int(bound) if timing.is_count else bound
        assert not [e for e in pc.validate_timings({key: value}) if "set a value" in e]


@pytest.mark.parametrize("bad", [True, False, "5", None, [5]])
def test_a_timing_must_be_a_number_and_bool_is_not_one(bad: Any) -> None:
    error = one_error(pc.validate_timings({"heartbeat_interval": bad}), "vllm_supervisor_heartbeat")
    assert repr(bad) in error
    assert "from 1 to 60 s" in error


def test_seconds_take_floats_counts_do_not() -> None:
    assert pc.validate_timings({"heartbeat_interval": 2.5}) == []
    one_error(pc.validate_timings({"stall_threshold": 2.0}), "stall_threshold", "whole number")
    one_error(pc.validate_timings({"request_timeout": float("nan")}), "request_timeout")


def test_unknown_timing_names_the_variable() -> None:
    one_error(
        pc.validate_timings({"heartbeat_intervall": 5}), "vllm_supervisor_heartbeat_intervall"
    )
    assert pc.validate_timings([]) != []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("good", "bad", "names"),
    [
        (
            {"heartbeat_interval": 10, "heartbeat_timeout": 30},
            {"heartbeat_interval": 11, "heartbeat_timeout": 30},
            ("heartbeat_timeout", "3 x"),
        ),
        (
            {"request_timeout": 29, "heartbeat_timeout": 30},
            {"request_timeout": 30, "heartbeat_timeout": 30},
            ("request_timeout", "below"),
        ),
        (
            {"lone_worker_timeout": 20, "heartbeat_interval": 10, "heartbeat_timeout": 30},
            {"lone_worker_timeout": 19, "heartbeat_interval": 10, "heartbeat_timeout": 30},
            ("lone_worker_timeout", "2 x"),
        ),
        (
            {"probe_timeout": 59, "probe_interval": 60},
            {"probe_timeout": 60, "probe_interval": 60},
            ("probe_timeout", "below"),
        ),
        (
            {"backoff_initial": 300, "backoff_max": 300},
            {"backoff_initial": 301, "backoff_max": 300},
            ("backoff_initial", "must not exceed"),
        ),
        (
            # one restart + 1: delays 100, 200 = 300 s, so only the window-vs-maximum rule speaks
            {
                "breaker_window": 301,
                "backoff_max": 300,
                "backoff_initial": 100,
                "breaker_max_restarts": 1,
            },
            {
                "breaker_window": 300,
                "backoff_max": 300,
                "backoff_initial": 100,
                "breaker_max_restarts": 1,
            },
            ("breaker_window", "must exceed"),
        ),
        (
            # 2 restarts + 1: delays 10, 20, 40 = 70 s
            {"breaker_window": 70, "breaker_max_restarts": 2, "backoff_max": 60},
            {"breaker_window": 69, "breaker_max_restarts": 2, "backoff_max": 60},
            ("breaker_window", "could never trip", "70 s"),
        ),
    ],
)
def test_cross_field_rules_both_ways(
    good: dict[str, Any], bad: dict[str, Any], names: tuple[str, ...]
) -> None:
    assert pc.validate_timings(good) == []
    one_error(pc.validate_timings(bad), *names)


def test_cross_rules_stay_quiet_when_a_field_is_already_wrong() -> None:
    errors = pc.validate_timings({"heartbeat_interval": 0})
    one_error(errors, "vllm_supervisor_heartbeat_interval")


def test_backoff_doubles_and_caps() -> None:
    t = pc.default_timings()
    assert [pc.backoff_delay(t, n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]


def test_timings_from_vars_takes_only_supervisor_variables() -> None:
    got = pc.timings_from_vars({"vllm_supervisor_probe_interval": 90, "other": 1})
    assert got == {"probe_interval": 90}


# --------------------------------------------------------------------------------------------
# The whole file
# --------------------------------------------------------------------------------------------


def test_built_configs_are_valid_for_both_roles() -> None:
    head = config()
    assert pc.validate_config(head) == []
    assert head["rank"]["worker_ready_regex"] == pc.DEFAULT_WORKER_READY_REGEX
    assert head["bench_lock"] == "/run/gx10/bench.lock"
    assert head["gid"]["env_file"] == "/run/gx10/pair/gid.env"
    worker = config("worker")
    worker["rank"].update(health_urls=[], model=None, api_key_file=None)
    assert pc.validate_config(worker) == []


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    target = out
    parts = dotted.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):
        target[int(parts[-1])] = value
    else:
        target[parts[-1]] = value
    return out


@pytest.mark.parametrize(
    ("key", "bad", "good"),
    [
        ("schema", 3, 1),
        ("schema", True, 1),
        ("node", "", "gx10-a"),
        ("role", "leader", "worker"),
        ("listen.address", "10.0.0.300", "::1"),
        ("listen.port", 0, 65535),
        ("listen.port", True, 8471),
        ("peer.address", "gx10-b", "10.0.0.11"),
        ("peer.port", 70000, 1),
        ("peer.name", "gx10-a", "gx10-c"),
        ("token_file", "pair.token", "/etc/gx10/pair.token"),
        ("bench_lock", "bench.lock", "/run/gx10/bench.lock"),
        ("state_dir", None, "/var/lib/gx10/pair"),
        ("rank.unit", "gx10-vllm-rank", "gx10-vllm-rank.service"),
        ("rank.container", "-bad", "vllm_head.1"),
        ("rank.worker_ready_regex", "(", "ready"),
        ("rank.health_urls", ["ftp://x/health"], ["https://127.0.0.1:8000/health"]),
        ("rank.health_urls", [], ["http://h:1/health"]),
        ("rank.model", "", "m"),
        ("rank.api_key_file", "key", None),
        ("gid.mode", "manual", "auto"),
        ("gid.port", 0, 2),
        ("gid.sysfs_root", "sys", "/tmp/sys"),
        ("gid.env_file", "gid.env", "/run/x.env"),
        ("gid.default_index", -1, 7),
        ("gid.rails", [], [{"netdev": "eth1", "address": "192.168.1.1/24"}]),
        ("gid.rails.0.address", "fe80::1", "192.168.100.10"),
        ("gid.rails.0.netdev", "", "eth9"),
        (
            "gid.rails.0",
            {"netdev": "eth1", "address": "10.1.1.1", "mtu": 9000},
            {"netdev": "eth1", "address": "10.1.1.1", "rdma_dev": "rocep1s0f0"},
        ),
        ("timings", {"probe_timeout": 0}, {"probe_timeout": 1}),
    ],
)
def test_every_config_key_is_checked_both_ways(key: str, bad: Any, good: Any) -> None:
    base = config()
    assert pc.validate_config(_set(base, key, good)) == []
    errors = pc.validate_config(_set(base, key, bad))
    assert errors, f"{key}={bad!r} was accepted"
    leaf = key.rsplit(".", maxsplit=1)[-1]
    assert any(leaf in e or "timings" in key for e in errors), errors


def test_a_repeated_rail_a_missing_key_and_an_unknown_key_are_named() -> None:
    rail = {"netdev": "eth1", "address": "10.1.1.1"}
    one_error(pc.validate_config(_set(config(), "gid.rails", [rail, rail])), "gid.rails[1].netdev")
    missing = config()
    del missing["state_dir"]
    one_error(pc.validate_config(missing), "state_dir is missing")
    one_error(pc.validate_config({**config(), "extra": 1}), "extra", "not a known key")
    assert pc.validate_config("nope") != []


def test_the_worker_needs_no_health_urls_but_the_head_does() -> None:
    worker = config("worker")
    worker["rank"]["health_urls"] = []
    worker["rank"]["model"] = None
    assert pc.validate_config(worker) == []
    head = config()
    head["rank"]["health_urls"] = []
    one_error(pc.validate_config(head), "rank.health_urls")


def test_load_config_reads_validates_and_fills_timings(tmp_path: Path) -> None:
    data = config()
    data["timings"] = {"probe_interval": 120}
    path = tmp_path / "pair.json"
    path.write_text(json.dumps(data))
    loaded = pc.load_config(str(path))
    assert loaded["timings"]["probe_interval"] == 120
    assert loaded["timings"]["heartbeat_interval"] == 5
    path.write_text(json.dumps({**data, "role": "boss"}))
    with pytest.raises(pc.PairConfigError) as caught:
        pc.load_config(str(path))
    assert "role is 'boss'" in str(caught.value)
    assert str(path) in caught.value.errors[0]
    path.write_text("{")
    with pytest.raises(pc.PairConfigError, match="not JSON"):
        pc.load_config(str(path))
    with pytest.raises(pc.PairConfigError, match="cannot read"):
        pc.load_config(str(tmp_path / "absent.json"))


# --------------------------------------------------------------------------------------------
# Peers: a head and N-1 workers (schema 2), and the pair's schema 1
# --------------------------------------------------------------------------------------------

WORKERS = [
    {"name": f"gx10-{letter}", "address": f"10.0.0.{11 + index}", "port": 8471}
    for index, letter in enumerate("bcd")
]


def group(role: str = "head", peers: Any = None) -> dict[str, Any]:
    """A group of four's config: the head lists its three workers, a worker the head."""
    head = {"name": "gx10-a", "address": "10.0.0.10", "port": 8471}
    built = pc.build_config(
        node="gx10-a" if role == "head" else "gx10-d",
        role=role,
        listen_address="10.0.0.10" if role == "head" else "10.0.0.13",
        peers=peers if isinstance(peers, list) else (WORKERS if role == "head" else [head]),
        rank={
            "container": "vllm",
            "health_urls": ["http://127.0.0.1:8000/health"] if role == "head" else [],
            "model": "m" if role == "head" else None,
        },
        gid={"rails": [{"netdev": "enp1s0f0np0", "address": "192.168.100.10"}]},
    )
    if peers is not None and not isinstance(peers, list):
        built["peers"] = peers  # not a list: only validate_config sees it
    return built


def test_a_head_of_four_and_its_worker_are_valid_schema_2() -> None:
    head = group()
    assert head["schema"] == 2
    assert "peer" not in head
    assert [p["name"] for p in head["peers"]] == ["gx10-b", "gx10-c", "gx10-d"]
    assert pc.validate_config(head) == []
    assert pc.validate_config(group("worker")) == []
    # The port defaults to the agents' port.
    defaulted = group(peers=[{"name": "gx10-b", "address": "10.0.0.11"}])
    assert defaulted["peers"][0]["port"] == pc.DEFAULT_PORT


@pytest.mark.parametrize(
    ("role", "peers", "needles"),
    [
        ("head", [], ("peers is []", "it must list the peers")),
        ("head", "gx10-b", ("peers is 'gx10-b'",)),
        ("worker", WORKERS[:2], ("peers is ['gx10-b', 'gx10-c']", "list the head alone")),
        ("head", [WORKERS[0], {**WORKERS[0], "address": "10.0.0.99"}], ("peers[1].name",)),
        (
            "head",
            [WORKERS[0], {**WORKERS[0], "name": "gx10-z"}],
            ("peers[1].address", "10.0.0.11:8471", "share an address and port"),
        ),
        ("head", [{**WORKERS[0], "name": "gx10-a"}], ("peers[0].name", "another node")),
        ("head", [{**WORKERS[0], "address": "gx10-b"}], ("peers[0].address",)),
        ("head", [{**WORKERS[0], "port": 0}], ("peers[0].port",)),
        ("head", [{**WORKERS[0], "rank": 1}], ("peers[0].rank", "not a known key")),
    ],
)
def test_every_peer_rule_names_the_peer(role: str, peers: Any, needles: tuple[str, ...]) -> None:
    one_error(pc.validate_config(group(role, peers)), *needles)


def test_workers_on_one_address_with_their_own_ports_are_valid() -> None:
    same = [{**WORKERS[0], "port": 9001}, {**WORKERS[1], "address": "10.0.0.11", "port": 9002}]
    assert pc.validate_config(group(peers=same)) == []


def test_schema_2_refuses_the_single_peer_and_schema_1_refuses_peers() -> None:
    head = group()
    mixed = {**{k: v for k, v in head.items() if k != "peers"}, "peer": WORKERS[0]}
    errors = pc.validate_config(mixed)
    assert any("peer is" in e and "not a known key" in e for e in errors), errors
    assert any(e.startswith("peers is missing") for e in errors), errors
    legacy = config()
    assert legacy["schema"] == 1
    assert pc.validate_config(legacy) == []
    errors = pc.validate_config({**legacy, "peers": WORKERS})
    assert any("peers is" in e and "not a known key" in e for e in errors), errors
    one_error(pc.validate_config({**head, "schema": 3}), "schema is 3", "schema 1 or 2")


def test_build_config_takes_peers_or_the_single_peer_not_both() -> None:
    with pytest.raises(TypeError, match="either peers or peer_name"):
        pc.build_config(
            node="a",
            role="head",
            listen_address="10.0.0.10",
            peers=WORKERS,
            peer_name="gx10-b",
            peer_address="10.0.0.11",
            rank={},
            gid={},
        )
    with pytest.raises(TypeError, match="either peers or peer_name"):
        pc.build_config(node="a", role="head", listen_address="10.0.0.10", rank={}, gid={})


def test_load_config_reads_both_schemas_as_a_list_of_peers(tmp_path: Path) -> None:
    path = tmp_path / "pair.json"
    path.write_text(json.dumps(config()))
    loaded = pc.load_config(str(path))
    assert loaded["peers"] == [{"name": "gx10-b", "address": "10.0.0.11", "port": 8471}]
    assert "peer" not in loaded
    path.write_text(json.dumps(group()))
    assert pc.load_config(str(path))["peers"] == WORKERS
