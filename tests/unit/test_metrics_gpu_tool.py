"""The metrics_exporter role's node tool (roles/metrics_exporter/files/gx10-gpu-metrics) against
the lab's nvidia-smi simulator and stand-ins that fail: the textfile it writes (strictly parsed,
checked by promtool and read by a real node exporter where those are installed), its atomic
writes, its failures, and the daemon's stop."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import httpx
import pytest
from prometheus_tools import need, node_exporter
from simulators import assert_standalone_script

from gx10.doctor.prometheus import Exposition, parse
from gx10.metrics.dashboard import NODE_EXPORTER_METRICS

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "roles" / "metrics_exporter" / "files" / "gx10-gpu-metrics"
SIM = ROOT / "python" / "gx10" / "lab" / "simulators" / "nvidia_smi.py"


def run(
    tmp_path: Path, *args: str, nvidia_smi: str | Path = SIM, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GX10_SIM_STATE_DIR": str(tmp_path / "sim")}
    return subprocess.run(
        [sys.executable, str(TOOL), "--nvidia-smi", str(nvidia_smi), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def sim_state(tmp_path: Path, **files: float) -> None:
    state = tmp_path / "sim"
    state.mkdir(exist_ok=True)
    for name, value in files.items():
        (state / name).write_text(f"{value}\n")


def value(exposition: Exposition, name: str, **labels: str) -> float:
    family = exposition.family(name)
    assert family is not None, f"{name} missing"
    assert family.type == "gauge", family
    found = [
        s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, family.samples)
    return found[0]


def fake_smi(tmp_path: Path, body: str) -> Path:
    """A stand-in nvidia-smi: a shell script."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_tool_is_a_standalone_script() -> None:
    assert_standalone_script(TOOL)


def test_an_idle_gb10_as_the_simulator_reports_it(tmp_path: Path) -> None:
    proc = run(tmp_path, "--print")
    assert proc.returncode == 0, proc.stderr
    metrics = parse(proc.stdout)  # strict: raises on any line outside the text format
    assert all(family.name.startswith("gx10_gpu_") for family in metrics)
    assert value(metrics, "gx10_gpu_query_success") == 1
    assert value(metrics, "gx10_gpu_query_duration_seconds") > 0  # its figure: see below
    (info,) = metrics.family("gx10_gpu_info").samples  # type: ignore[union-attr]
    assert info.labels["gpu"] == "0"
    assert info.labels["name"] == "NVIDIA GB10"
    assert info.labels["uuid"].startswith("GPU-")
    assert info.labels["pci_bus_id"] == "0000000F:01:00.0"
    assert info.labels["driver_version"] == "580.142"
    # Base units: MHz x 10^6, W, C, percent / 100.
    assert value(metrics, "gx10_gpu_sm_clock_hertz", gpu="0") == 208e6
    assert value(metrics, "gx10_gpu_sm_clock_max_hertz", gpu="0") == 3003e6
    assert 6 < value(metrics, "gx10_gpu_power_draw_watts", gpu="0") < 9
    assert 44 <= value(metrics, "gx10_gpu_temperature_celsius", gpu="0") <= 48
    assert value(metrics, "gx10_gpu_utilization_ratio", gpu="0") == 0
    assert value(metrics, "gx10_gpu_thermal_slowdown", gpu="0", kind="software") == 0
    assert value(metrics, "gx10_gpu_thermal_slowdown", gpu="0", kind="hardware") == 0
    # GB10's memory is unified: nvidia-smi says [N/A], and the families are left out.
    assert metrics.family("gx10_gpu_memory_used_bytes") is None
    assert metrics.family("gx10_gpu_memory_total_bytes") is None


def test_under_load_and_hot_the_slowdown_shows(tmp_path: Path) -> None:
    sim_state(tmp_path, load=0.5)
    warm = parse(run(tmp_path, "--print").stdout)
    assert value(warm, "gx10_gpu_sm_clock_hertz", gpu="0") > 2400e6
    assert value(warm, "gx10_gpu_power_draw_watts", gpu="0") > 15
    assert value(warm, "gx10_gpu_utilization_ratio", gpu="0") == pytest.approx(0.47, abs=0.1)
    assert value(warm, "gx10_gpu_thermal_slowdown", gpu="0", kind="software") == 0
    sim_state(tmp_path, load=1.0, ambient_offset_c=40, thermal_tau_s=0)
    hot = parse(run(tmp_path, "--print").stdout)
    assert value(hot, "gx10_gpu_temperature_celsius", gpu="0") > 82
    assert value(hot, "gx10_gpu_thermal_slowdown", gpu="0", kind="software") == 1
    assert value(hot, "gx10_gpu_sm_clock_hertz", gpu="0") < 2400e6


def test_gpus_with_their_own_memory_and_units_left_on(tmp_path: Path) -> None:
    """Two GPUs (an H200 pair's shape): one sample per GPU, MiB to bytes, units tolerated."""
    lines = [
        "0, GPU-aaa, NVIDIA H200, 00000000:19:00.0, 580.95.05, 1980, 1980, 256.86 W, 51, 100 %, "
        "120000, 143771, Not Active, Not Active",
        "1, GPU-bbb, NVIDIA H200, 00000000:3B:00.0, 580.95.05, 345, 1980, [N/A], 30, 0, 0, "
        "143771, Active, [Not Supported]",
    ]
    smi = fake_smi(tmp_path, "cat <<'EOF'\n" + "\n".join(lines) + "\nEOF")
    metrics = parse(run(tmp_path, "--print", nvidia_smi=smi).stdout)
    assert value(metrics, "gx10_gpu_sm_clock_hertz", gpu="1") == 345e6
    assert value(metrics, "gx10_gpu_power_draw_watts", gpu="0") == 256.86
    assert value(metrics, "gx10_gpu_utilization_ratio", gpu="0") == 1.0
    assert value(metrics, "gx10_gpu_memory_used_bytes", gpu="0") == 120000 * 1024 * 1024
    assert value(metrics, "gx10_gpu_memory_total_bytes", gpu="1") == 143771 * 1024 * 1024
    power = metrics.family("gx10_gpu_power_draw_watts")
    assert power is not None
    assert [s.labels["gpu"] for s in power.samples] == ["0"]  # [N/A]: no sample, not a zero
    assert value(metrics, "gx10_gpu_thermal_slowdown", gpu="1", kind="software") == 1
    slowdown = metrics.family("gx10_gpu_thermal_slowdown")
    assert slowdown is not None
    assert len(slowdown.samples) == 3  # GPU 1's hardware flag is not supported


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
         "driver.' ; exit 9", "exited 9: NVIDIA-SMI has failed because it could not"),
        ("echo 'Field \"bogus\" is not a valid field to query.' >&2; exit 2",
         "exited 2: Field \"bogus\" is not a valid field to query."),
        ("echo '0, GPU-a, NVIDIA GB10, 208'", "has 4 fields, not 14"),
        ("true", "answered with no GPU"),
        ('echo $$ > "$0.pid"; exec sleep 30', "did not answer within 0.5 s"),
    ],
)  # fmt: skip
def test_a_failed_query_gives_no_value_and_says_why(tmp_path: Path, body: str, said: str) -> None:
    smi = fake_smi(tmp_path, body)
    proc = run(tmp_path, "--print", "--timeout", "0.5", nvidia_smi=smi)
    if "sleep" in body:  # the query that never answers: killed and reaped, not waited for
        with pytest.raises(ProcessLookupError):
            os.kill(int(smi.with_name(smi.name + ".pid").read_text()), 0)
    assert proc.returncode == 1
    assert said in proc.stderr
    assert said.split(":", maxsplit=1)[0] in proc.stdout  # the file's comment says it too
    metrics = parse(proc.stdout)
    assert value(metrics, "gx10_gpu_query_success") == 0
    assert [family.name for family in metrics] == [
        "gx10_gpu_query_success",
        "gx10_gpu_query_duration_seconds",
    ]


def test_the_query_duration_is_the_clock_around_the_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gx10_gpu_query_duration_seconds, on a fake clock: the time from before the nvidia-smi run
    to after it, whether the query answered or failed."""
    loader = SourceFileLoader("gx10_gpu_metrics", str(TOOL))
    tool = module_from_spec(spec_from_loader(loader.name, loader))  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, loader.name, tool)  # its dataclasses look themselves up
    loader.exec_module(tool)
    monkeypatch.setenv("GX10_SIM_STATE_DIR", str(tmp_path / "sim"))
    for smi, error in ((SIM, ""), (fake_smi(tmp_path, "true"), "nvidia-smi answered with no GPU")):
        ticks = iter([5000.0, 5000.375])
        text, said = tool.measure(str(smi), 10.0, clock=lambda ticks=ticks: next(ticks))
        assert said == error
        assert value(parse(text), "gx10_gpu_query_duration_seconds") == 0.375
        assert next(ticks, None) is None  # read twice: before and after


def test_a_missing_nvidia_smi(tmp_path: Path) -> None:
    proc = run(tmp_path, "--print", nvidia_smi=tmp_path / "no-nvidia-smi")
    assert proc.returncode == 1
    assert "no-nvidia-smi not found" in proc.stderr


def test_once_replaces_the_file_atomically_readable_by_node_exporter(tmp_path: Path) -> None:
    out = tmp_path / "textfile" / "gx10_gpu.prom"
    out.parent.mkdir()
    out.write_text("stale 1\n")
    os.chmod(out, 0o600)
    proc = run(tmp_path, "--once", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # node exporter runs as another user
    assert value(parse(out.read_text()), "gx10_gpu_query_success") == 1
    assert sorted(p.name for p in out.parent.iterdir()) == ["gx10_gpu.prom"]  # no temporary left


def test_once_into_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    proc = run(tmp_path, "--once", "--out", str(tmp_path / "absent" / "gx10_gpu.prom"))
    assert proc.returncode == 1
    assert "cannot write" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--out", "/tmp/gx10_gpu.txt"), "reads only *.prom files"),
        (("--interval", "0"), "expected seconds in 0.1..3600"),
        (("--interval", "nan"), "expected seconds in 0.1..3600"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2
    assert said in proc.stderr


def test_the_daemon_rewrites_the_file_and_removes_it_on_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "gx10_gpu.prom"
    env = {**os.environ, "GX10_SIM_STATE_DIR": str(tmp_path / "sim")}
    proc = subprocess.Popen(
        [sys.executable, str(TOOL), "--nvidia-smi", str(SIM), "--out", str(out),
         "--interval", "0.3"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not out.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no file within 20 s"
            time.sleep(0.05)
        first = out.stat().st_mtime_ns
        sim_state(tmp_path, load=1.0)
        while out.stat().st_mtime_ns == first or 'gx10_gpu_utilization_ratio{gpu="0"} 0.0' in (
            out.read_text()
        ):
            assert time.monotonic() < deadline, "the file was not rewritten with the load"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not out.exists(), "a stopped writer must not leave its last reading"
    assert f"removed {out}" in err


def test_promtool_accepts_the_text(tmp_path: Path) -> None:
    promtool = need("promtool")
    text = run(tmp_path, "--print").stdout
    check = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # No lint finding at all (names in base units, no counter without _total, HELP everywhere).
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "", check.stdout
    assert check.stderr.strip() == "", check.stderr


def test_a_real_node_exporter_serves_the_file(tmp_path: Path) -> None:
    """Debian's node exporter reads the file as the role configures it (textfile collector) and
    serves every gx10_gpu_ family; the meminfo names the dashboard reads are its own."""
    directory = tmp_path / "textfile"
    directory.mkdir()
    assert run(tmp_path, "--once", "--out", str(directory / "gx10_gpu.prom")).returncode == 0
    # A temporary file the writer might leave mid-write is not read (only *.prom is).
    (directory / ".gx10_gpu.prom.x.tmp").write_text("not prometheus text {\n")
    with node_exporter(directory, "meminfo") as url:
        served = parse(httpx.get(url, timeout=10).text)
    assert value(served, "node_textfile_scrape_error") == 0
    assert value(served, "gx10_gpu_query_success") == 1
    assert value(served, "gx10_gpu_sm_clock_hertz", gpu="0") == 208e6
    assert served.family("gx10_gpu_info") is not None
    for name in NODE_EXPORTER_METRICS:
        assert served.family(name) is not None, f"node exporter serves no {name}"


# The root tools' stop on SIGTERM (this daemon's, the pair supervisor's gx10-pair, and the clock
# session of gx10-gpu-clock): a Python signal handler runs in the main thread between two
# bytecodes, possibly inside the stop Event's wait() while that holds the Event's lock. A handler
# calling Event.set() there waits for itself forever: a SIGTERM'd daemon that never exits (a fresh
# clone's unit run saw this one hang). Here the main thread holds the lock when the signal comes:
# the stop must still arrive, from the tool's signal thread.
SIGNAL_UNDER_THE_LOCK = """
import os, signal, sys, threading, time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
loader = SourceFileLoader("tool", sys.argv[1])
tool = sys.modules["tool"] = module_from_spec(spec_from_loader("tool", loader))
loader.exec_module(tool)
reason = ["none"]
if sys.argv[2] == "metrics":
    stop = tool.stop_on_signals()
elif sys.argv[2] == "pair":
    stop = threading.Event()
    tool.shutdown_on_signals(stop.set)
else:
    stop = threading.Event()
    tool.end_on_signals(stop, reason)
with stop._cond:  # as inside Event.wait()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.3)  # the handler runs in this thread meanwhile
print("stopped" if stop.wait(10) else "not stopped", reason[0], flush=True)
"""
PAIR = ROOT / "roles" / "vllm_supervisor" / "files" / "gx10-pair"
CLOCK = ROOT / "roles" / "gpu_clock" / "files" / "gx10-gpu-clock"
MODULE_UTILS = ROOT / "collections" / "ansible_collections" / "gx10" / "cluster" / "plugins"


@pytest.mark.parametrize(
    ("tool", "kind", "shown"),
    [(TOOL, "metrics", "none"), (PAIR, "pair", "none"), (CLOCK, "clock", "SIGTERM")],
)
def test_a_signal_while_the_main_thread_holds_the_stop_lock_still_stops(
    tool: Path, kind: str, shown: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(MODULE_UTILS / "module_utils")}
    run = subprocess.run(
        [sys.executable, "-c", SIGNAL_UNDER_THE_LOCK, str(tool), kind],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert (run.returncode, run.stdout.split()) == (0, ["stopped", shown]), run.stderr
