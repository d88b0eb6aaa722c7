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
        lambda url, key=None: max(
            (s for at, s in world["http"].items() if at <= clock.now), default=None
        ),
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
        _params(url=["http://127.0.0.1:8000/health"]), node["clock"]
    )
    assert ready
    assert elapsed == 20


def test_fails_fast_with_the_log_when_the_container_exits(node: dict[str, Any]) -> None:
    node["state"] = lambda t: "running" if t < 6 else "exited"
    node["log"] = [(0, "boot"), (5, "RuntimeError: NCCL error: unhandled system error")]
    ready, reason, elapsed, tail = container_wait.wait(
        _params(url=["http://127.0.0.1:8000/health"]), node["clock"]
    )
    assert not ready
    assert reason == "container gx10-vllm is exited"
    assert elapsed == 6
    assert tail[-1].startswith("RuntimeError: NCCL error")


def test_times_out_naming_what_it_waited_for(node: dict[str, Any]) -> None:
    ready, reason, elapsed, _ = container_wait.wait(
        _params(url=["http://h/health"], timeout=30), node["clock"]
    )
    assert not ready
    assert reason == "timed out after 30 s waiting for http://h/health to answer 200"
    assert 30 <= elapsed < 33


def test_missing_container(node: dict[str, Any]) -> None:
    node["state"] = lambda t: None
    ready, reason, _, _ = container_wait.wait(_params(log_regex="x"), node["clock"])
    assert not ready
    assert reason == "container gx10-vllm does not exist"


def test_every_url_must_answer(node: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """/health can answer before /v1/models: ready only once both do."""
    answers = {"http://h/health": 5, "http://h/v1/models": 12}
    monkeypatch.setattr(
        container_wait,
        "_http_status",
        lambda url, key=None: 200 if node["clock"].now >= answers[url] else None,
    )
    ready, _, elapsed, _ = container_wait.wait(_params(url=list(answers)), node["clock"])
    assert ready
    assert elapsed == 12
    node["clock"].now = 0.0
    ready, reason, _, _ = container_wait.wait(_params(url=list(answers), timeout=4), node["clock"])
    assert not ready
    assert (
        reason
        == "timed out after 4 s waiting for http://h/health and http://h/v1/models to answer 200"
    )


# --------------------------------------------------------------------------------------------
# The action plugin: slices, progress lines on the controller, the whole timeout in the message
# --------------------------------------------------------------------------------------------


class _Task:
    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.async_val = 0
        self.check_mode = False
        self.diff = False
        self.action = "gx10.cluster.container_wait"


def _plugin(
    args: dict[str, Any], answers: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    from ansible_collections.gx10.cluster.plugins.action import (  # noqa: PLC0415
        container_wait as action,
    )

    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = _Task(args)
    calls: list[dict[str, Any]] = []

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        calls.append(module_args)
        return answers[len(calls) - 1]

    plugin._execute_module = execute
    return plugin, calls


def _timeout(piece: int, tail: list[str]) -> dict[str, Any]:
    return {
        "failed": True,
        "timed_out": True,
        "log_tail": tail,
        "msg": f"timed out after {piece} s waiting for http://h/health to answer 200; last log "
        "lines:\n" + "\n".join(tail),
    }


def test_action_prints_the_log_tail_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.action import ActionBase  # noqa: PLC0415

    from ansible_collections.gx10.cluster.plugins.action import (  # noqa: PLC0415
        container_wait as action,
    )

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    shown: list[str] = []
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: shown.append(msg))
    clock = FakeClock()
    monkeypatch.setattr(action.time, "monotonic", clock.monotonic)
    answers = [
        _timeout(10, ["loading shard 1", "loading shard 2"]),
        {"changed": False, "log_tail": []},
    ]
    plugin, calls = _plugin(
        {
            "container": "gx10-vllm",
            "url": ["http://h/health"],
            "timeout": 60,
            "progress_interval": 10,
        },
        answers,
    )

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        calls.append(module_args)
        clock.sleep(module_args["timeout"] if len(calls) == 1 else 3)
        return answers[len(calls) - 1]

    plugin._execute_module = execute
    result = plugin.run(task_vars={"inventory_hostname": "gx10-a"})
    assert not result.get("failed")
    assert [c["timeout"] for c in calls] == [10, 10]
    assert len(shown) == 1
    assert shown[0].startswith("[gx10-a] gx10-vllm: not ready after 10 of 60 s; last log lines:")
    assert shown[0].endswith("    loading shard 1\n    loading shard 2")
    assert result["elapsed"] == 13


def test_action_fails_with_the_whole_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.action import ActionBase  # noqa: PLC0415

    from ansible_collections.gx10.cluster.plugins.action import (  # noqa: PLC0415
        container_wait as action,
    )

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: None)
    clock = FakeClock()
    monkeypatch.setattr(action.time, "monotonic", clock.monotonic)
    plugin, calls = _plugin({"container": "c", "timeout": 25, "progress_interval": 10}, [])
    answers = [_timeout(10, ["a"]), _timeout(10, ["b"]), _timeout(5, ["c"])]

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        calls.append(module_args)
        clock.sleep(module_args["timeout"])
        return answers[len(calls) - 1]

    plugin._execute_module = execute
    result = plugin.run(task_vars={})
    assert [c["timeout"] for c in calls] == [10, 10, 5]
    assert result["failed"]
    assert result["msg"].startswith("timed out after 25 s waiting for http://h/health")


def test_action_stops_at_once_when_the_container_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.action import ActionBase  # noqa: PLC0415

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    died = {"failed": True, "timed_out": False, "msg": "container c is exited; ...", "log_tail": []}
    plugin, calls = _plugin({"container": "c", "timeout": 600, "progress_interval": 10}, [died])
    result = plugin.run(task_vars={})
    assert len(calls) == 1
    assert result["msg"] == "container c is exited; ..."
