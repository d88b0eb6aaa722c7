# SPDX-License-Identifier: Apache-2.0
"""container_wait: ready on a log line or HTTP status; fails fast on exit, bounded on timeout."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.modules import container_wait

# The head's health URL (the fakes below answer it; nothing listens there).
HEALTH = "http://127.0.0.1:8000/health"
# The fake node's wall clock starts here (2026-12-04T03:00:00Z), as docker's log stamps do.
EPOCH = 1796353200.0


def stamp(at: float) -> str:
    """docker logs --timestamps' prefix for a line logged ``at`` seconds into the test."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(EPOCH + int(at)))
    return f"{whole}.{int(at % 1 * 1e9):09d}Z "


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return EPOCH + self.now

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
        lambda c, tail=None, stamped=False: [
            (stamp(at) if stamped else "") + line for at, line in world["log"] if at <= clock.now
        ][-(tail or 0) :],
    )
    monkeypatch.setattr(
        container_wait,
        "_http_status",
        lambda url, key=None: max(
            (s for at, s in world["http"].items() if at <= clock.now), default=None
        ),
    )
    return world


def waited(params: dict[str, Any], node: dict[str, Any]) -> tuple[bool, str, float, list[str]]:
    got = container_wait.wait(params, node["clock"])
    return got["ready"], got["reason"], got["elapsed"], got["tail"]


def test_ready_when_the_log_line_appears(node: dict[str, Any]) -> None:
    node["log"] = [(0, "Launching vLLM"), (10, "headless multiproc executor, with head node")]
    ready, reason, elapsed, _ = waited(_params(log_regex="headless multiproc executor"), node)
    assert (ready, reason) == (True, "ready")
    assert elapsed == 10


def test_ready_when_health_answers(node: dict[str, Any]) -> None:
    node["http"] = {20: 200}
    ready, _, elapsed, _ = waited(_params(url=["http://127.0.0.1:8000/health"]), node)
    assert ready
    assert elapsed == 20


def test_fails_fast_with_the_log_when_the_container_exits(node: dict[str, Any]) -> None:
    node["state"] = lambda t: "running" if t < 6 else "exited"
    node["log"] = [(0, "boot"), (5, "RuntimeError: NCCL error: unhandled system error")]
    ready, reason, elapsed, tail = waited(_params(url=["http://127.0.0.1:8000/health"]), node)
    assert not ready
    assert reason == "container gx10-vllm is exited"
    assert elapsed == 6
    assert tail[-1].startswith("RuntimeError: NCCL error")


def test_times_out_naming_what_it_waited_for(node: dict[str, Any]) -> None:
    ready, reason, elapsed, _ = waited(_params(url=["http://h/health"], timeout=30), node)
    assert not ready
    assert reason == "timed out after 30 s waiting for http://h/health to answer 200"
    assert 30 <= elapsed < 33


def test_a_created_container_is_about_to_run(node: dict[str, Any]) -> None:
    """docker run creates the container, then starts it: a wait that looks in between waits."""
    node["state"] = lambda t: "created" if t < 4 else "running"
    node["log"] = [(5, "headless multiproc executor")]
    ready, reason, elapsed, _ = waited(_params(log_regex="headless multiproc executor"), node)
    assert (ready, reason, elapsed) == (True, "ready", 6)


def test_a_missing_container_may_be_waited_for(node: dict[str, Any]) -> None:
    """missing_ok: the pair supervisor starts the rank a moment after the wait begins."""
    node["state"] = lambda t: None if t < 10 else "running"
    node["log"] = [(12, "headless multiproc executor")]
    ready, _, elapsed, _ = waited(_params(log_regex="headless", missing_ok=True), node)
    assert (ready, elapsed) == (True, 12)
    node["clock"].now = 0.0
    node["state"] = lambda t: None
    ready, reason, _, _ = waited(_params(log_regex="x", missing_ok=True, timeout=6), node)
    assert not ready
    assert reason == "timed out after 6 s: container gx10-vllm was never started"


def _unit(node: dict[str, Any], monkeypatch: pytest.MonkeyPatch, states: Any) -> list[str]:
    """The rank's unit: its ActiveState by the fake time; its journal, as read, recorded."""
    clock, read = node["clock"], []
    monkeypatch.setattr(container_wait, "_unit_state", lambda unit: states(clock.now))

    def journal(unit: str, lines: int) -> list[str]:
        read.append(unit)
        return ["ValueError: the rank's own last words", f"{unit}: Failed with result 'exit-code'."]

    monkeypatch.setattr(container_wait, "_journal", journal)
    return read


def test_a_unit_still_starting_its_container_is_waited_for(
    node: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """unit: `systemctl start` returns before `docker run` has created the container."""
    node["state"] = lambda t: None if t < 6 else "running"
    node["log"] = [(8, "headless multiproc executor")]
    read = _unit(node, monkeypatch, lambda t: "active")
    params = _params(log_regex="headless", unit="gx10-vllm-rank.service")
    ready, _, elapsed, _ = waited(params, node)
    assert (ready, elapsed, read) == (True, 8, [])


@pytest.mark.parametrize("ended", ["failed", "inactive"])
def test_a_unit_that_ended_without_its_container_fails_at_once_with_its_journal(
    node: dict[str, Any], monkeypatch: pytest.MonkeyPatch, ended: str
) -> None:
    """The rank died and `docker run --rm` removed it (or its start failed before the
    container): the wait fails at once, with the unit's journal, not at its timeout."""
    node["state"] = lambda t: "running" if 4 <= t < 10 else None
    read = _unit(node, monkeypatch, lambda t: "active" if t < 10 else ended)
    ready, reason, elapsed, tail = waited(
        _params(url=["http://127.0.0.1:8000/health"], unit="gx10-vllm-rank.service"), node
    )
    assert not ready
    assert reason == f"container gx10-vllm is gone and its unit gx10-vllm-rank.service is {ended}"
    assert elapsed < 14  # one poll and the journal's settle, not the 60 s timeout
    assert tail[0] == "ValueError: the rank's own last words"
    assert read == ["gx10-vllm-rank.service"]


@pytest.mark.parametrize("state", ["exited", "removing"])
def test_a_container_its_unit_is_removing_is_reported_from_the_journal(
    node: dict[str, Any], monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """`docker run --rm`: a container that exited is being removed, and `docker logs` of it may
    already answer "No such container"; the unit's journal has the rank's output whole, read
    once the unit has ended."""
    node["state"] = lambda t: "running" if t < 4 else state
    node["log"] = [(0, "Error: No such container: gx10-vllm")]
    read = _unit(node, monkeypatch, lambda t: "active" if t < 7 else "failed")
    ready, reason, elapsed, tail = waited(_params(url=[HEALTH], unit="u.service"), node)
    assert not ready
    assert reason == f"container gx10-vllm is {state}"
    assert tail[0] == "ValueError: the rank's own last words"
    assert read == ["u.service"]
    assert 7 <= elapsed <= 10  # waited for the unit to end (0.5 s polls), then the settle


def test_a_container_that_reappears_while_its_unit_settles_is_followed(
    node: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the unit's ExecStartPre and its `docker run`, systemd may still show the last
    run's end: a container there after the settle is the new run, followed as usual."""
    node["state"] = lambda t: None if t < 1 else "running"
    node["log"] = [(1, "headless multiproc executor")]
    read = _unit(node, monkeypatch, lambda t: "failed")
    ready, _, _, _ = waited(_params(log_regex="headless", unit="gx10-vllm-rank.service"), node)
    assert ready
    assert read == []


def test_missing_container(node: dict[str, Any]) -> None:
    node["state"] = lambda t: None
    ready, reason, _, _ = waited(_params(log_regex="x"), node)
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
    ready, _, elapsed, _ = waited(_params(url=list(answers)), node)
    assert ready
    assert elapsed == 12
    node["clock"].now = 0.0
    ready, reason, _, _ = waited(_params(url=list(answers), timeout=4), node)
    assert not ready
    assert (
        reason
        == "timed out after 4 s waiting for http://h/health and http://h/v1/models to answer 200"
    )


# Boot phases: vLLM's own lines, as a first boot with an empty compile cache prints them.
BOOT = [
    (0, "INFO 12-04 03:00:00 [api_server.py:1885] vLLM API server version 0.25.2"),
    (1, "INFO 12-04 03:00:01 [utils.py:253] non-default args: {'model': '/models/x'}"),
    (30, "(EngineCore_DP0 pid=212) INFO [gpu_model_runner.py:2602] Starting to load model /m"),
    (300, "(EngineCore_DP0 pid=212) INFO [default_loader.py:299] Loading weights took 270 s"),
    (302, "(EngineCore_DP0 pid=212) INFO [backends.py:548] Dynamo bytecode transform time: 9 s"),
    (2100, "(EngineCore_DP0 pid=212) INFO [monitor.py:34] torch.compile takes 1790.12 s in total"),
    (2101, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67"),
    (2160, "(EngineCore_DP0 pid=212) INFO [gpu_model_runner.py:3480] Graph capturing finished"),
    (2170, "INFO [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000"),
]
LIMITS = {"start": 600, "weights": 1800, "compile": 3600, "graph_capture": 900, "api": 300}


def test_a_long_cold_compile_within_its_phase_limit_is_not_killed(node: dict[str, Any]) -> None:
    node["log"] = BOOT
    node["http"] = {2180: 200}
    got = container_wait.wait(
        _params(url=["http://h/health"], timeout=7200, phase_timeouts=LIMITS), node["clock"]
    )
    assert got["ready"]
    assert got["elapsed"] == 2180
    assert got["phase"] == "api"
    assert got["phase_seconds"] == 10.0
    assert not any(line.startswith("2026-") for line in got["tail"])  # stamps are stripped


def test_a_hung_phase_fails_naming_the_phase_before_the_whole_timeout(
    node: dict[str, Any],
) -> None:
    node["log"] = BOOT[:5]  # the compile starts at 302 s and never ends
    got = container_wait.wait(
        _params(
            url=["http://h/health"],
            timeout=7200,
            phase_timeouts=LIMITS,
            phase_timeouts_name="vllm_serve_phase_timeouts",
        ),
        node["clock"],
    )
    assert not got["ready"]
    assert got["reason"] == (
        "stuck in phase compile for 3602 s (its limit is 3600 s): vllm_serve_phase_timeouts.compile"
    )
    assert got["phase"] == "compile"
    assert 3902 <= got["elapsed"] <= 3906


def test_the_phase_is_timed_from_its_log_stamp_not_from_the_wait(node: dict[str, Any]) -> None:
    """A wait that begins late (the action's next slice, a re-run) still sees a phase's age."""
    node["log"] = BOOT[:3]  # loading since 30 s
    node["clock"].now = 1900.0
    got = container_wait.wait(
        _params(url=["http://h/health"], timeout=60, phase_timeouts=LIMITS), node["clock"]
    )
    assert got["reason"] == (
        "stuck in phase weights for 1870 s (its limit is 1800 s): phase_timeouts.weights"
    )
    assert got["elapsed"] == 0


def test_a_head_serving_longer_than_the_api_limit_is_ready(node: dict[str, Any]) -> None:
    """A re-apply that restarts nothing: the head logged "Starting vLLM API server" an hour ago
    (its last phase marker) and serves; ready, not "stuck in phase api"."""
    node["log"] = BOOT
    node["http"] = {2180: 200}
    node["clock"].now = 2180.0 + 3600
    got = container_wait.wait(
        _params(url=["http://h/health"], timeout=60, phase_timeouts=LIMITS), node["clock"]
    )
    assert got["ready"], got["reason"]
    assert got["phase"] == "api"
    assert got["elapsed"] == 0


def test_phases_only_move_forward() -> None:
    from ansible_collections.gx10.cluster.plugins.module_utils import (  # noqa: PLC0415
        boot_phases,
    )

    lines = [stamp(at) + line for at, line in BOOT[:5]] + [stamp(400) + "Loading weights from /m"]
    assert boot_phases.current_phase(lines) == ("compile", EPOCH + 302)
    assert boot_phases.current_phase(["plain line"]) == (None, None)
    assert boot_phases.current_phase(["Loading weights from /m"]) == ("weights", None)


def test_a_timeout_for_no_phase_or_not_in_seconds_is_refused(node: dict[str, Any]) -> None:
    from ansible_collections.gx10.cluster.plugins.module_utils import (  # noqa: PLC0415
        boot_phases,
    )

    with pytest.raises(boot_phases.PhaseError, match="'compiling' is no phase"):
        container_wait.wait(_params(log_regex="x", phase_timeouts={"compiling": 10}), node["clock"])
    with pytest.raises(boot_phases.PhaseError, match=r"phase_timeouts\.compile: 0 is not"):
        container_wait.wait(_params(log_regex="x", phase_timeouts={"compile": 0}), node["clock"])
    with pytest.raises(boot_phases.PhaseError, match="needs a name and a marker"):
        boot_phases.phases_from([{"name": "x"}])


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
        {
            **_timeout(10, ["loading shard 1", "loading shard 2"]),
            "phase": "weights",
            "phase_seconds": 7.4,
        },
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
    assert shown[0].startswith(
        "[gx10-a] gx10-vllm: not ready after 10 of 60 s (phase weights for 7 s); last log lines:"
    )
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


def test_the_phase_timeouts_check_names_every_problem() -> None:
    """The validate stage's check (boot_phases.phase_errors), as this module reads the mapping."""
    from ansible_collections.gx10.cluster.plugins.module_utils.boot_phases import (  # noqa: PLC0415
        phase_errors,
    )

    assert phase_errors(LIMITS) == []
    assert phase_errors({"compile": 0, "compiling": 5, "api": True}) == [
        "compile: 0 is not a number of seconds >= 1",
        "'compiling' is no phase (phases: start, weights, compile, graph_capture, api)",
        "api: True is not a number of seconds >= 1",
    ]
    assert phase_errors([600]) == ["[600] is not a mapping of phase to seconds"]
