# SPDX-License-Identifier: Apache-2.0
"""The gateway's key map (module_utils/gateway_keys.py) and the gateway_keys module, run by a real
ansible-playbook on localhost. The runtime API against a running HAProxy is in the repository's
tests/unit/test_api_gateway.py."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.gateway_keys import (
    GatewayKeyError,
    KeyEntry,
    NotRunningError,
    RuntimeApi,
    add_key,
    max_concurrent_error,
    name_error,
    parse_map,
    remove_key,
    render_map,
    runtime_changes,
    set_limit,
)
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_tasks


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


ALICE = KeyEntry("alice", sha("alice-key"), "2026-01-02T03:04:05Z")
BOB = KeyEntry("bob", sha("bob-key"), "2026-01-03T00:00:00Z")


@pytest.mark.parametrize("name", ["alice", "ci-bot", "a", "x.y_z-1", "0" * 63])
def test_valid_names(name: str) -> None:
    assert name_error(name) is None


@pytest.mark.parametrize("name", ["", "Alice", "-alice", ".x", "a b", "a/b", "0" * 64, "é", 7])
def test_invalid_names_say_the_pattern(name: Any) -> None:
    error = name_error(name)
    assert error is not None
    assert "[a-z0-9][a-z0-9._-]{0,62}" in error


def test_service_is_reserved_for_the_inventorys_key() -> None:
    error = name_error("service")
    assert error is not None
    assert "reserved" in error
    assert "vllm_serve_api_key" in error
    assert name_error("service", allow_reserved=True) is None


def test_the_map_round_trips_with_creation_times() -> None:
    text = render_map([ALICE, BOB])
    assert f"{ALICE.sha256} alice\n" in text
    assert "# created 2026-01-02T03:04:05Z\n" in text
    assert parse_map(text) == [ALICE, BOB]


def test_haproxy_reads_only_hash_and_name_lines() -> None:
    lines = [line for line in render_map([ALICE]).splitlines() if not line.startswith("#")]
    assert lines == [f"{ALICE.sha256} alice"]


def test_a_hand_written_line_without_its_comment_parses() -> None:
    assert parse_map(f"\n  {BOB.sha256}\tbob  \n") == [KeyEntry("bob", BOB.sha256, "")]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("abc alice\n", "line 1 is not '<sha256 hex> <key name> [<max concurrent>]'"),
        (f"{ALICE.sha256} alice extra\n", "line 1"),
        (f"{ALICE.sha256} alice 2 3\n", "line 1"),
        (f"{ALICE.sha256} alice -1\n", "line 1"),
        (f"{ALICE.sha256} alice 4097\n", "line 1"),
        (f"{ALICE.sha256.upper()} alice\n", "line 1"),
        (f"{ALICE.sha256} alice\n{BOB.sha256} alice\n", "'alice' appears more than once"),
        (f"{ALICE.sha256} alice\n{ALICE.sha256} bob\n", "hash appears more than once"),
    ],
)
def test_a_map_in_another_format_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_map(text)


def test_adding_a_name_twice_is_refused_naming_the_fix() -> None:
    with pytest.raises(GatewayKeyError) as caught:
        add_key([ALICE], KeyEntry("alice", sha("other"), "now"))
    assert "already exists" in str(caught.value)
    assert "gx10 keys revoke alice" in str(caught.value)


def test_the_same_key_under_another_name_is_refused() -> None:
    with pytest.raises(GatewayKeyError, match="already registered as 'alice'"):
        add_key([ALICE], KeyEntry("carol", ALICE.sha256, "now"))


def test_replace_swaps_the_names_key_and_keeps_the_rest() -> None:
    new = KeyEntry("service", sha("new"), "later")
    old = KeyEntry("service", sha("old"), "earlier")
    assert add_key([ALICE, old], new, replace=True) == [ALICE, new]
    # The same key again changes nothing (not even its creation time).
    assert add_key([ALICE, old], KeyEntry("service", sha("old"), "later"), replace=True) == [
        ALICE,
        old,
    ]


def test_add_checks_the_name_and_hash() -> None:
    with pytest.raises(GatewayKeyError, match="not valid"):
        add_key([], KeyEntry("Bad Name", sha("x")))
    with pytest.raises(GatewayKeyError, match="64 lower-case hex"):
        add_key([], KeyEntry("alice", "1234"))
    with pytest.raises(GatewayKeyError, match="reserved"):
        add_key([], KeyEntry("service", sha("x")))


def test_removing_an_unknown_name_is_refused_listing_the_names() -> None:
    with pytest.raises(GatewayKeyError) as caught:
        remove_key([ALICE, BOB], "carol")
    assert "no key named 'carol'" in str(caught.value)
    assert "alice, bob" in str(caught.value)
    assert remove_key([ALICE], "carol", missing_ok=True) == [ALICE]
    assert remove_key([ALICE, BOB], "alice") == [BOB]


def test_listing_shows_a_hash_prefix_only() -> None:
    listed = ALICE.listed()
    assert listed == {
        "name": "alice",
        "created": "2026-01-02T03:04:05Z",
        "sha256_prefix": ALICE.sha256[:12],
        "kind": "user",
        "max_concurrent": None,
    }
    assert KeyEntry("service", sha("s")).listed()["kind"] == "service"


# --- a key's own limit of requests in flight ---------------------------------------------------


def test_a_limit_is_the_entrys_second_word_for_haproxy() -> None:
    swarm = KeyEntry("swarm", sha("swarm-key"), "now", max_concurrent=2)
    free = KeyEntry("ci", sha("ci-key"), "now", max_concurrent=0)
    lines = [line for line in render_map([ALICE, swarm, free]).splitlines() if line[0] != "#"]
    assert lines == [f"{ALICE.sha256} alice", f"{swarm.sha256} swarm 2", f"{free.sha256} ci 0"]
    assert parse_map(render_map([ALICE, swarm, free])) == [ALICE, swarm, free]
    assert swarm.listed()["max_concurrent"] == 2


def test_set_limit_changes_one_key_and_none_gives_back_the_default() -> None:
    limited = set_limit([ALICE, BOB], "alice", 3)
    assert limited == [KeyEntry("alice", ALICE.sha256, ALICE.created, 3), BOB]
    assert set_limit(limited, "alice", None) == [ALICE, BOB]
    with pytest.raises(GatewayKeyError, match="no key named 'carol'"):
        set_limit([ALICE], "carol", 1)
    with pytest.raises(GatewayKeyError, match="reserved"):
        set_limit([KeyEntry("service", sha("s"))], "service", 1)
    with pytest.raises(GatewayKeyError, match=re.escape("--max-concurrent 2")):
        set_limit([ALICE], "alice", 5000)


@pytest.mark.parametrize("value", [-1, 4097, True, 1.5, "2", None])
def test_a_limit_must_be_a_whole_number_in_range(value: Any) -> None:
    assert max_concurrent_error(value) is not None
    assert max_concurrent_error(0) is None
    assert max_concurrent_error(4096) is None


def test_adding_the_same_key_with_another_limit_needs_replace() -> None:
    again = KeyEntry("alice", ALICE.sha256, "later", max_concurrent=1)
    with pytest.raises(GatewayKeyError, match="already exists"):
        add_key([ALICE], again)
    assert add_key([ALICE], again, replace=True) == [again]
    # The same key, name and limit: nothing to do (its creation time stays).
    assert add_key([ALICE], KeyEntry("alice", ALICE.sha256, "later"), replace=True) == [ALICE]


def test_the_runtime_api_is_sent_a_value_with_its_space_escaped() -> None:
    sent: list[str] = []

    class Recording(RuntimeApi):
        def command(self, line: str) -> str:
            sent.append(line)
            return "\n"

    Recording("/nowhere").add("/etc/haproxy/gx10-keys.map", ALICE.sha256, "alice 2")
    assert sent == [f"add map /etc/haproxy/gx10-keys.map {ALICE.sha256} alice\\ 2"]


def test_runtime_changes_delete_stale_and_wrong_entries_and_add_missing() -> None:
    running = {
        ALICE.sha256: ["alice"],  # right
        BOB.sha256: ["bob", "bob"],  # there twice: deleted, added once
        sha("revoked"): ["carol"],  # revoked: deleted
        sha("renamed"): ["old-name"],  # wrong value: deleted, added again
    }
    wanted = [ALICE, BOB, KeyEntry("new-name", sha("renamed")), KeyEntry("dave", sha("d"))]
    adds, deletes = runtime_changes(running, wanted)
    assert sorted(deletes) == sorted([BOB.sha256, sha("revoked"), sha("renamed")])
    assert sorted(adds) == sorted(
        [(BOB.sha256, "bob"), (sha("renamed"), "new-name"), (sha("d"), "dave")]
    )
    assert runtime_changes({ALICE.sha256: ["alice"]}, [ALICE]) == ([], [])
    # A limit changed: the entry's value differs, so it is deleted and added with the new one.
    limited = KeyEntry("alice", ALICE.sha256, max_concurrent=2)
    assert runtime_changes({ALICE.sha256: ["alice"]}, [limited]) == (
        [(ALICE.sha256, "alice 2")],
        [ALICE.sha256],
    )


def test_no_socket_means_no_running_gateway(tmp_path: Path) -> None:
    with pytest.raises(NotRunningError):
        RuntimeApi(str(tmp_path / "admin.sock")).show_map("/etc/haproxy/gx10-keys.map")


# --- the module, through a real ansible-playbook ------------------------------------------------


def test_the_module_adds_refuses_lists_and_revokes(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "gx10-keys.map"
    path.parent.mkdir()
    common = {
        "path": str(path),
        "owner": pwd.getpwuid(os.getuid()).pw_name,
        "group": grp.getgrgid(os.getgid()).gr_name,
    }
    module = "gx10.cluster.gateway_keys"
    alice, bob = sha("alice-secret"), sha("bob-secret")
    results = run_tasks(
        tmp_path,
        [
            {module: {**common, "name": "alice", "sha256": alice}, "check_mode": True},  # r0
            {module: {**common, "name": "alice", "sha256": alice}},  # r1
            {module: {**common, "name": "alice", "sha256": alice}},  # r2 duplicate
            {module: {**common, "name": "bob", "sha256": bob}},  # r3
            {module: {**common, "name": "carol", "state": "absent"}},  # r4 unknown
            {module: {**common, "state": "query"}},  # r5
            {module: {**common, "name": "alice", "state": "absent"}},  # r6
            {module: {**common, "name": "Bad Name", "sha256": alice}},  # r7
            {module: {**common, "name": "service", "sha256": alice}},  # r8 reserved
            {module: {**common, "name": "dave", "sha256": bob}},  # r9 same key as bob
            {module: {**common, "name": "bob", "state": "limit", "max_concurrent": 2}},  # r10
            {module: {**common, "name": "bob", "state": "limit", "max_concurrent": 2}},  # r11
            {module: {**common, "name": "eve", "sha256": alice, "max_concurrent": 9999}},  # r12
            {module: {**common, "name": "carol", "state": "limit", "max_concurrent": 1}},  # r13
        ],
    )
    r = results
    assert r["r0"]["changed"] is True
    assert not r["r0"].get("failed")
    assert r["r1"]["changed"] is True
    assert not r["r1"].get("failed")
    assert r["r1"]["running"] is False  # no socket given: the file only
    assert r["r2"]["failed"] is True
    assert "already exists" in r["r2"]["msg"]
    assert "nothing was changed" in r["r2"]["msg"]
    assert r["r3"]["changed"] is True
    assert r["r4"]["failed"] is True
    assert "no key named 'carol'" in r["r4"]["msg"]
    assert r["r5"]["changed"] is False
    assert [k["name"] for k in r["r5"]["keys"]] == ["alice", "bob"]
    assert r["r5"]["keys"][0]["sha256_prefix"] == alice[:12]
    assert r["r5"]["keys"][0]["created"].endswith("Z")
    assert r["r6"]["changed"] is True
    assert [k["name"] for k in r["r6"]["keys"]] == ["bob"]
    assert r["r7"]["failed"] is True
    assert "not valid" in r["r7"]["msg"]
    assert r["r8"]["failed"] is True
    assert "reserved" in r["r8"]["msg"]
    assert r["r9"]["failed"] is True
    assert "already registered as 'bob'" in r["r9"]["msg"]
    assert r["r10"]["changed"] is True
    assert r["r10"]["keys"][0]["max_concurrent"] == 2
    assert r["r11"]["changed"] is False
    assert r["r12"]["failed"] is True
    assert "max_concurrent 9999 is not valid" in r["r12"]["msg"]
    assert r["r13"]["failed"] is True
    assert "no key named 'carol'" in r["r13"]["msg"]
    # Never a whole hash in any result (the sha256 parameter is no_log).
    dumped = json.dumps(results)
    assert alice not in dumped
    assert bob not in dumped
    # The file: bob only, written whole, with the asked mode.
    assert parse_map(path.read_text())[0].name == "bob"
    assert [e.name for e in parse_map(path.read_text())] == ["bob"]
    assert parse_map(path.read_text())[0].max_concurrent == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".gx10-keys.")]


def test_the_module_refuses_a_map_it_cannot_read_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "gx10-keys.map"
    path.write_text("not a map line\n")
    group = grp.getgrgid(os.getgid()).gr_name
    results = run_tasks(
        tmp_path,
        [
            {
                "gx10.cluster.gateway_keys": {
                    "path": str(path),
                    "group": group,
                    "name": "alice",
                    "sha256": sha("a"),
                }
            },
            {
                "gx10.cluster.gateway_keys": {
                    "path": str(tmp_path / "missing-dir" / "gx10-keys.map"),
                    "group": group,
                    "name": "alice",
                    "sha256": sha("a"),
                }
            },
        ],
    )
    assert results["r0"]["failed"] is True
    assert "not in the gateway's format" in results["r0"]["msg"]
    assert path.read_text() == "not a map line\n"
    assert results["r1"]["failed"] is True
    assert "is the API gateway installed here?" in results["r1"]["msg"]
