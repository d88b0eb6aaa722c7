# SPDX-License-Identifier: Apache-2.0
"""The model sync chain: who fetches from whom (2, 4, 8 nodes), the peer server's count of the
bytes it sent, the bounded wait for a file the upstream node has not verified yet, and a chain of
three nodes on loopback in which the head sends the checkpoint once."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter.model_chain import FilterModule
from ansible_collections.gx10.cluster.plugins.module_utils.model_chain import (
    ChainError,
    chain_links,
    plan_links,
)
from ansible_collections.gx10.cluster.plugins.modules import model_fetch
from ansible_collections.gx10.cluster.tests.unit.test_model_fetch_module import (
    Failed,
    _checkpoint,
    _files,
    _load_server,
    _run,
)

FIXTURE = Path(__file__).parent / "fixtures" / "cluster_plan" / "lab-plan-integ2.json"


def _nodes(count: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """`count` nodes listed out of rank order, and their rail-0 addresses."""
    names = ["head"] + [f"w{rank}" for rank in range(1, count)]
    nodes = [{"name": name, "rank": rank} for rank, name in enumerate(names)]
    return list(reversed(nodes)), {n: f"192.168.100.{10 + i}" for i, n in enumerate(names)}


# --- who fetches from whom ------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 4, 8])
def test_each_node_fetches_from_the_one_before_it_by_rank(count: int) -> None:
    nodes, addresses = _nodes(count)
    links = chain_links(nodes, addresses)
    order = ["head"] + [f"w{rank}" for rank in range(1, count)]
    assert [name for name, _ in sorted(links.items(), key=lambda kv: kv[1]["position"])] == order
    assert links["head"]["upstream"] is None
    assert links["head"]["upstream_address"] is None
    assert links[order[-1]]["downstream"] is None
    for before, after in itertools.pairwise(order):
        assert links[after]["upstream"] == before
        assert links[after]["upstream_address"] == addresses[before]
        assert links[before]["downstream"] == after
        assert links[before]["downstream_address"] == addresses[after]
    # Every node but the last serves exactly one other: the head sends the checkpoint once.
    servers = [n for n, link in links.items() if link["downstream"]]
    assert len(servers) == count - 1
    assert sorted(link["upstream"] for link in links.values() if link["upstream"]) == sorted(
        servers
    )


def test_two_nodes_are_the_worker_fetching_from_the_head_as_before() -> None:
    plan = json.loads(FIXTURE.read_text())
    links = FilterModule().filters()["model_chain"](plan)
    assert links["gx10-b"]["upstream"] == plan["head"] == "gx10-a"
    assert links["gx10-b"]["upstream_address"] == plan["master_addr"]
    assert links["gx10-a"]["downstream"] == "gx10-b"


def test_a_plan_that_is_no_chain_is_named() -> None:
    nodes, addresses = _nodes(3)
    del addresses["w2"]
    with pytest.raises(ChainError, match="no rail-0 address in the plan for w2"):
        chain_links(nodes, addresses)
    with pytest.raises(ChainError, match="listed twice"):
        chain_links([{"name": "a", "rank": 0}, {"name": "a", "rank": 1}], {"a": "x"})
    with pytest.raises(ChainError, match="no rails"):
        plan_links({"nodes": nodes, "rails": []})
    with pytest.raises(AnsibleFilterError, match="expects gx10_plan"):
        FilterModule().filters()["model_chain"]("gx10-a")


# --- the peer server's count --------------------------------------------------------------------


@contextmanager
def _peer(root: Path, state: Path | None = None) -> Iterator[tuple[Any, str]]:
    server = _load_server().serve("127.0.0.1", 0, str(root), str(state) if state else None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _settled(read: Any, expected: int) -> int:
    """The count once it reached `expected` (the server adds an answer's bytes just after the
    client has them all), or what it was after 5 s."""
    deadline = time.monotonic() + 5
    while read() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return int(read())


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    with urllib.request.urlopen(
        urllib.request.Request(url, headers=headers or {}), timeout=10
    ) as r:
        return bytes(r.read())


def test_the_peer_server_counts_the_body_bytes_it_sent(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "node")
    state = tmp_path / "sent.json"
    shard = (root / "model-00001.safetensors").read_bytes()
    with _peer(root, state) as (server, url):
        assert json.loads(state.read_text())["bytes_sent"] == 0  # written at start
        assert _get(url + "model-00001.safetensors") == shard
        assert _get(url + "model-00001.safetensors", {"Range": "bytes=1000-"}) == shard[1000:]
        head = urllib.request.Request(url + "config.json", method="HEAD")
        with urllib.request.urlopen(head, timeout=10):
            pass  # headers only: no body bytes
        with pytest.raises(urllib.error.HTTPError):
            _get(url + "missing.json")
        expected = len(shard) + len(shard) - 1000
        assert _settled(lambda: server.served.bytes_sent, expected) == expected
        totals = json.loads(state.read_text())
    assert totals["bytes_sent"] == expected
    assert totals["files_sent"] == 2
    assert totals["by_client"] == {"127.0.0.1": expected}


def test_a_file_being_received_is_a_404_that_says_how_far_it_got(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "node")
    (root / "model-00002.safetensors").rename(root / "model-00002.safetensors.partial")
    with _peer(root) as (server, url), pytest.raises(urllib.error.HTTPError) as refused:
        _get(url + "model-00002.safetensors")
    assert refused.value.code == 404
    assert refused.value.headers["X-Gx10-Partial-Bytes"] == "300002"
    assert refused.value.headers["X-Gx10-Fetching"] == "0"  # no model_fetch holds the lock
    assert server.served.bytes_sent == 0


def test_a_404_says_whether_the_node_is_fetching_now(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "node")
    lock, other = model_fetch.FetchingLock(), model_fetch.FetchingLock()
    lock.take(root)
    assert lock.fd is not None
    try:
        with _peer(root) as (_, url), pytest.raises(urllib.error.HTTPError) as refused:
            _get(url + "model-00009.safetensors")
        assert refused.value.headers["X-Gx10-Fetching"] == "1"
        assert "X-Gx10-Partial-Bytes" not in refused.value.headers
        other.take(root)
        assert other.fd is None  # one fetch per directory holds it
    finally:
        lock.release()
    other.take(tmp_path / "absent")
    assert other.fd is None
    assert not (tmp_path / "absent").exists()  # never created
    # The lock file is no model file: never reported as an extra.
    assert (root / ".gx10-fetching").exists()
    assert _run(root, _files_without_lock(root), None)["extras"] == []


def _files_without_lock(root: Path) -> list[dict[str, Any]]:
    return [f for f in _files(root) if f["path"] != ".gx10-fetching"]


# --- waiting for the upstream node -------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _until_it_gives_up(relay: model_fetch.Relay, held: int | None) -> model_fetch.FetchError:
    for _ in range(1000):
        try:
            relay.not_yet("shard", held)
        except model_fetch.FetchError as exc:
            return exc
    raise AssertionError("the wait never ended")


def test_the_wait_is_bounded_by_time_without_progress() -> None:
    clock = FakeClock()
    relay = model_fetch.Relay(
        wait=10, upstream="gx10-b", url="http://x/", clock=clock, sleep=clock.sleep, poll=1
    )
    expired = _until_it_gives_up(relay, None)  # the upstream node has not started the file
    assert clock.now == 10
    message = str(expired)
    assert "gx10-b (http://x/) has not verified it after 10 s without progress" in message
    assert "it has not started it" in message
    assert "gx10_model_relay_wait" in message
    assert not expired.retry
    assert expired.abort


def test_a_growing_partial_upstream_restarts_the_clock() -> None:
    clock = FakeClock()
    relay = model_fetch.Relay(
        wait=3, upstream="gx10-b", url="http://x/", clock=clock, sleep=clock.sleep, poll=1
    )
    for held in range(0, 20 * 1000, 1000):  # 20 s of waiting, progress every second
        relay.not_yet("shard", held)
    assert clock.now == 20
    assert "it holds 19000 bytes of it unverified" in str(_until_it_gives_up(relay, 19000))
    assert clock.now == 22  # 3 s after the last growth, seen at 19 s
    relay.progress()  # the file came; the next one gets a fresh wait
    relay.not_yet("next", None)
    assert relay.waited == 23


def test_an_upstream_fetch_that_ended_without_the_file_fails_the_wait_at_once() -> None:
    clock = FakeClock()
    relay = model_fetch.Relay(
        wait=600, upstream="gx10-b", url="http://x/", clock=clock, sleep=clock.sleep, poll=1
    )
    relay.not_yet("shard", None, False)  # not started yet (or not said): wait
    relay.not_yet("shard", 100, True)  # fetching
    with pytest.raises(model_fetch.FetchError, match=r"gx10-b .* ended its fetch without it"):
        relay.not_yet("shard", 100, False)  # its fetch ended: the file will not come
    assert clock.now == 2


def _relay_params(wait: int) -> dict[str, Any]:
    return {"relay_wait": wait, "relay_from": "gx10-b", "attempts": 2, "timeout": 5}


def _relays_on(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The module's relays wait on `clock` (their sleeps advance it at once): each relay the
    module makes (or None: no relay) is listed in the list returned."""
    made: list[Any] = []
    relay_for = model_fetch.relay_for

    def on_the_clock(params: dict[str, Any], source: Any) -> Any:
        relay = relay_for(params, source)
        if relay is not None:
            relay.clock, relay.sleep = clock, clock.sleep
        made.append(relay)
        return relay

    monkeypatch.setattr(model_fetch, "relay_for", on_the_clock)
    return made


def test_a_file_verified_upstream_later_is_waited_for_then_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    _relays_on(clock, monkeypatch)
    upstream = _checkpoint(tmp_path / "upstream")
    files = _files(upstream)
    late = upstream / "model-00002.safetensors"
    held = late.with_name(late.name + ".partial")
    late.rename(held)  # being received upstream
    # It is verified upstream 3 s (of the relay's clock) after the first time it is asked for.
    not_yet = model_fetch.Relay.not_yet

    def verified_at_3_s(self: Any, *args: Any) -> None:
        not_yet(self, *args)  # sleeps one poll (1 s)
        if clock.now >= 3:
            held.rename(late)

    monkeypatch.setattr(model_fetch.Relay, "not_yet", verified_at_3_s)
    with _peer(upstream) as (_, url):
        result = _run(tmp_path / "here", files, url, **_relay_params(30))
    assert result["ok"]
    assert result["files_fetched"] == 3
    assert result["relay_waited"] == 3.0  # three polls, then the file came
    assert clock.now == 3.0
    assert (tmp_path / "here" / "model-00002.safetensors").read_bytes() == late.read_bytes()


def test_a_file_that_never_comes_fails_naming_the_node_the_file_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    _relays_on(clock, monkeypatch)
    upstream = _checkpoint(tmp_path / "upstream")
    files = _files(upstream)
    (upstream / "model-00001.safetensors").unlink()  # upstream's fetch stopped before it
    with _peer(upstream) as (_, url), pytest.raises(Failed) as failed:
        _run(tmp_path / "here", files, url, **_relay_params(1))
    assert clock.now == 1.0  # it gave up at relay_wait, not later
    assert failed.value.result["relay_waited"] == 1.0
    assert "model-00001.safetensors: gx10-b (" in failed.value.msg
    assert "after 1 s without progress" in failed.value.msg
    assert "gx10_model_relay_wait" in failed.value.msg
    # The files after it come down the chain after it: not waited for one by one.
    assert "1 more file(s) not tried" in failed.value.msg
    assert failed.value.result["files_fetched"] == 1  # config.json, before it in the order
    assert not (tmp_path / "here" / "model-00001.safetensors").exists()


def test_without_relay_wait_a_404_is_final_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _relays_on(FakeClock(), monkeypatch)
    upstream = _checkpoint(tmp_path / "upstream")
    files = _files(upstream)
    (upstream / "model-00001.safetensors").unlink()
    with _peer(upstream) as (_, url), pytest.raises(Failed) as failed:
        _run(tmp_path / "here", files, url)
    assert made == [None]  # no relay: nothing waits for the file
    assert "HTTP 404" in failed.value.msg
    assert failed.value.result["relay_waited"] == 0.0


# --- a chain on loopback ---------------------------------------------------------------------


def test_a_chain_of_three_nodes_sends_the_checkpoint_once_per_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Head -> w1 -> w2, both workers fetching at once: w2 waits for what w1 has not verified,
    each server sends the checkpoint exactly once, and every copy matches."""
    monkeypatch.setattr(model_fetch, "RELAY_POLL_SECONDS", 0.02)
    head = _checkpoint(tmp_path / "head")
    for index in range(3, 7):
        (head / f"model-0000{index}.safetensors").write_bytes(os.urandom(200_000))
    files = _files(head)
    total = sum(f["size"] for f in files)
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    w1.mkdir()
    w2.mkdir()
    results: dict[str, Any] = {}

    def fetch(name: str, dest: Path, url: str, wait: int) -> None:
        try:
            results[name] = _run(dest, files, url, relay_wait=wait, relay_from="w1", timeout=5)
        except Failed as exc:  # pragma: no cover (reported by the assertion below)
            results[name] = exc.msg

    with _peer(head, tmp_path / "head.json") as (head_server, head_url):
        with _peer(w1, tmp_path / "w1.json") as (w1_server, w1_url):
            threads = [
                # w2 starts first, against a w1 that holds nothing yet.
                threading.Thread(target=fetch, args=("w2", w2, w1_url, 30)),
                threading.Thread(target=fetch, args=("w1", w1, head_url, 0)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            sent_w1 = _settled(lambda: w1_server.served.bytes_sent, total)
        sent_head = _settled(lambda: head_server.served.bytes_sent, total)
    assert isinstance(results["w1"], dict), results["w1"]
    assert isinstance(results["w2"], dict), results["w2"]
    assert results["w2"]["relay_waited"] > 0  # it did start before w1 had the files
    assert sent_head == total  # once, whatever the chain's length
    assert sent_w1 == total
    for node in (w1, w2):
        for entry in files:
            assert (node / entry["path"]).read_bytes() == (head / entry["path"]).read_bytes()
        assert not list(node.rglob("*.partial"))
