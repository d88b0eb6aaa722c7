# SPDX-License-Identifier: Apache-2.0
"""container_wait: ready on a log line or HTTP status; fails fast on exit, bounded on timeout."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.modules import container_wait


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _params(**kw: Any) -> dict[str, Any]:
    base = {"container": "gx10-vllm", "log_regex": None, "url": None, "status": 200}
    return {**base, "timeout": 60, "interval": 2.0, "tail": 5, **kw}


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A fake container whose state, log and HTTP answer change with the fake time."""
    clock = FakeClock()
    world: dict[str, Any] = {"clock": clock, "state": lambda t: "running", "log": [], "http": {}}
    monkeypatch.setattr(container_wait, "_state", lambda c: world["state"](clock.now))
    monkeypatch.setattr(
        container_wait,
        "_logs",
        lambda c, tail=None: [line for at, line in world["log"] if at <= clock.now][-(tail or 0) :],
    )
    monkeypatch.setattr(
        container_wait,
        "_http_status",
        lambda url: max((s for at, s in world["http"].items() if at <= clock.now), default=None),
    )
    return world


def test_ready_when_the_log_line_appears(node: dict[str, Any]) -> None:
    node["log"] = [(0, "Launching vLLM"), (10, "headless multiproc executor, with head node")]
    ready, reason, elapsed, _ = container_wait.wait(
        _params(log_regex="headless multiproc executor"), node["clock"]
    )
    assert (ready, reason) == (True, "ready")
    assert elapsed == 10


def test_ready_when_health_answers(node: dict[str, Any]) -> None:
    node["http"] = {20: 200}
    ready, _, elapsed, _ = container_wait.wait(
        _params(url="http://127.0.0.1:8000/health"), node["clock"]
    )
    assert ready
    assert elapsed == 20


def test_fails_fast_with_the_log_when_the_container_exits(node: dict[str, Any]) -> None:
    node["state"] = lambda t: "running" if t < 6 else "exited"
    node["log"] = [(0, "boot"), (5, "RuntimeError: NCCL error: unhandled system error")]
    ready, reason, elapsed, tail = container_wait.wait(
        _params(url="http://127.0.0.1:8000/health"), node["clock"]
    )
    assert not ready
    assert reason == "container gx10-vllm is exited"
    assert elapsed == 6
    assert tail[-1].startswith("RuntimeError: NCCL error")


def test_times_out_naming_what_it_waited_for(node: dict[str, Any]) -> None:
    ready, reason, elapsed, _ = container_wait.wait(
        _params(url="http://h/health", timeout=30), node["clock"]
    )
    assert not ready
    assert reason == "timed out after 30 s waiting for http://h/health to answer 200"
    assert 30 <= elapsed < 33


def test_missing_container(node: dict[str, Any]) -> None:
    node["state"] = lambda t: None
    ready, reason, _, _ = container_wait.wait(_params(log_regex="x"), node["clock"])
    assert not ready
    assert reason == "container gx10-vllm does not exist"
