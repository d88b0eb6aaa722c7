"""gx10.bench.telemetry: the nvidia-smi query's format (real captures), the per-node readers
against the lab's nvidia-smi simulator (samples, gaps and restarts, a silent query, stopping),
and the per-case figures (gx10.bench.metrics.case_telemetry)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_helpers import DOCKER_EXEC_LIKE, processes_mentioning, sim_node

from gx10.bench import telemetry
from gx10.bench.metrics import case_telemetry
from gx10.bench.nodes import Node
from gx10.bench.telemetry import (
    QUERY_FIELDS,
    Sample,
    TelemetryHub,
    parse_line,
    parse_value,
    query_command,
    read_csv,
)

FIXTURES = Path("/work/shared/fixtures/nvidia-smi/h200")


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate(), f"timed out after {timeout} s"


def _capture_lines() -> list[str]:
    """The real -lms capture, cut to the query's five fields (its sixth is event reasons)."""
    path = FIXTURES / "under-load-250ms.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return [", ".join(line.split(", ")[:5]) for line in path.read_text().splitlines()]


def test_parses_the_real_format_with_and_without_units() -> None:
    header, *rows = _capture_lines()
    with pytest.raises(ValueError, match="not a telemetry line"):
        parse_line(header)  # "timestamp, clocks.current.sm [MHz], ..."
    idle = parse_line(rows[0])
    assert idle == ("2026/12/02 08:10:20.307", 345.0, 79.55, 37.0, 0.0)
    loaded = [parse_line(r) for r in rows if "100 %" in r]
    assert loaded
    assert all(r[1] is not None and r[1] > 1000 for r in loaded)
    assert parse_line("2026/12/02 16:13:28.504, 2405, 41.37, 66, 93\n") == (
        "2026/12/02 16:13:28.504",
        2405.0,
        41.37,
        66.0,
        93.0,
    )


def test_not_available_values_are_none() -> None:
    assert parse_line("2026/12/02 16:13:28.504, [N/A], [N/A], 47, [Not Supported]") == (
        "2026/12/02 16:13:28.504",
        None,
        None,
        47.0,
        None,
    )
    assert parse_value("N/A") is None
    assert parse_value("[Unknown Error]") is None
    assert parse_value(" 79.63 W ") == 79.63
    for bad in ("", "\n", "2026/12/02, 1, 2", "a, b, c, d, e, f"):
        with pytest.raises(ValueError, match="not a telemetry line"):
            parse_line(bad)


def test_query_command_goes_through_the_transport() -> None:
    node = Node("n", "head", transport=("ssh", "-T", "h", "--"), remote_shell=True)
    argv = query_command(node, 1000)
    assert argv[:4] == ["ssh", "-T", "h", "--"]
    remote = argv[4]
    assert remote.startswith("sh -c ")
    assert f"--query-gpu={','.join(QUERY_FIELDS)}" in remote
    assert "--format=csv,noheader,nounits -lms 1000" in remote


def test_hub_reads_every_node_and_writes_the_timeline(tmp_path: Path) -> None:
    a, b = sim_node(tmp_path, "node-a"), sim_node(tmp_path, "node-b")
    b.set_ambient(10)
    hub = TelemetryHub([a.node("head"), b.node()], interval_ms=200)
    start = time.monotonic()
    hub.start()
    try:
        assert hub.wait_for(start, 15) == []
        wait_for(
            lambda: all(
                len(hub.window(name, start, time.monotonic())) >= 3 for name in ("node-a", "node-b")
            ),
            timeout=60.0,
        )
        latest_a, latest_b = hub.latest("node-a"), hub.latest("node-b")
        assert latest_a is not None
        assert latest_b is not None
        assert latest_a.sm_clock_mhz == 208  # idle
        assert latest_a.temperature_c == 46
        assert latest_b.temperature_c == 56  # the ambient offset
        assert 6 < (latest_a.power_w or 0) < 9
        assert latest_a.node_time.count("/") == 2
        assert hub.gaps() == []
    finally:
        hub.stop()
    path = tmp_path / "telemetry.csv"
    written = hub.append_csv(path)
    assert written >= 6
    rows = read_csv(path)
    assert len(rows) == written
    assert {r["node"] for r in rows} == {"node-a", "node-b"}
    assert all(r["wall"] > 1e9 for r in rows)
    assert hub.append_csv(path) == 0  # drained
    # Nothing of ours keeps running on the "nodes" once stopped.
    wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 10)


def test_the_remote_query_ends_with_its_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a `docker exec`-like transport (no signal forwarded, no broken pipe), closing
    the query's stdin is what ends nvidia-smi on the node: not the kill of our end that stop()
    falls back to when the query outlives its timeout."""
    killed: list[int] = []
    kill_group = telemetry._kill_group

    def recorded(proc: subprocess.Popen[str]) -> None:
        killed.append(proc.pid)
        kill_group(proc)

    monkeypatch.setattr(telemetry, "_kill_group", recorded)
    a = sim_node(tmp_path, "node-a")
    relay = tmp_path / "docker-exec-like.py"
    relay.write_text(DOCKER_EXEC_LIKE)
    hub = TelemetryHub([a.node("head", relay=(sys.executable, str(relay)))], interval_ms=100)
    hub.start()
    try:
        assert hub.wait_for(0.0, 15) == []
        assert processes_mentioning(str(tmp_path)) != []
    finally:
        hub.stop(timeout=30)  # however slow this machine is, the stdin's close gets its time
    assert killed == []  # the graceful path, not the fallback
    wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 10)
    assert processes_mentioning(str(tmp_path)) == []


def test_a_query_that_ends_is_recorded_as_a_gap_and_restarted(tmp_path: Path) -> None:
    a = sim_node(tmp_path, "node-a")
    node = a.node("head")
    # The simulator stops after three samples, as a crashed or killed nvidia-smi would.
    node = Node(
        node.name,
        node.group,
        (*node.transport, "GX10_SIM_MAX_LOOPS=3"),
        tool=node.tool,
        nvidia_smi=node.nvidia_smi,
    )
    hub = TelemetryHub([node], interval_ms=100, restart_delay_s=0.2)
    hub.start()
    try:
        wait_for(lambda: hub.nodes["node-a"].restarts >= 2 and len(hub.gaps()) >= 2)
        gaps = hub.gaps()
        assert "nvidia-smi query ended (exit 0)" in gaps[0].reason
        assert gaps[0].end_wall is not None  # samples came back after it
        assert len(hub.nodes["node-a"].samples) >= 6
    finally:
        hub.stop()


def test_a_silent_query_is_killed_and_restarted(tmp_path: Path) -> None:
    silent = tmp_path / "nvidia-smi"
    silent.write_text(
        "#!/bin/sh\necho '2026/12/02 16:13:28.504, 208, 7.2, 46, 0'\nexec sleep 300\n"
    )
    silent.chmod(0o755)
    node = Node("quiet", "head", transport=("env", f"MARK={tmp_path}"), nvidia_smi=str(silent))
    hub = TelemetryHub([node], interval_ms=100, stall_s=1.0, restart_delay_s=0.1)
    hub.start()
    try:
        wait_for(lambda: any("no sample for 1 s" in g.reason for g in hub.gaps()), 15)
        wait_for(lambda: len(hub.nodes["quiet"].samples) >= 2, 15)  # restarted
    finally:
        hub.stop()
    wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 10)


def test_a_missing_nvidia_smi_gives_up_with_its_message(tmp_path: Path) -> None:
    node = Node("bare", "head", nvidia_smi=str(tmp_path / "no-such-nvidia-smi"))
    hub = TelemetryHub([node], interval_ms=100, restart_delay_s=0.05, max_restarts=1)
    hub.start()
    try:
        wait_for(lambda: hub.nodes["bare"].given_up is not None)
    finally:
        hub.stop()
    assert hub.latest("bare") is None
    assert "exit 127" in hub.gaps()[0].reason
    assert "gave up after 1 restarts" in hub.nodes["bare"].describe()
    assert "not found" in hub.nodes["bare"].describe()


def _samples(node: str, powers: list[float], temps: list[float]) -> list[Sample]:
    return [
        Sample(node, float(i), 1e9 + i, "t", 2000.0, p, t, 90.0)
        for i, (p, t) in enumerate(zip(powers, temps, strict=True))
    ]


def test_case_figures_and_efficiency() -> None:
    """The reference sweep's 2000 MHz point: 54.4 tok/s on 20.9 + 17.7 W is 1.41 tok/s/W."""
    figures = case_telemetry(
        {
            "a": _samples("a", [20.0, 21.8], [66.0, 68.0]),
            "b": _samples("b", [17.7], [62.0]),
        },
        aggregate_tps=54.4,
        decode_tps=54.4,
        approximate=["b"],
    )
    a, b = figures["nodes"]["a"], figures["nodes"]["b"]
    assert a["power_w"] == {"mean": pytest.approx(20.9), "max": 21.8}
    assert a["temperature_c"] == {"mean": 67.0, "max": 68.0}
    assert (a["samples"], a["approximate"], b["approximate"]) == (2, False, True)
    assert figures["power_w_total"] == pytest.approx(38.6)
    assert figures["tps_per_w"] == pytest.approx(1.409, abs=1e-3)
    assert figures["temperature_c_max"] == 68.0
    # A node without a power reading: no total, so no efficiency (rather than a wrong one).
    partial = case_telemetry(
        {"a": _samples("a", [20.0], [60.0]), "b": [Sample("b", 0, 0, "t", None, None, 50, None)]},
        aggregate_tps=50.0,
    )
    assert partial["power_w_total"] is None
    assert partial["tps_per_w"] is None
