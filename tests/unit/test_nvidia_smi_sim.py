"""The lab's nvidia-smi simulator, held to output captured from real hardware.

Formats come from the H200 capture in `fixtures/nvidia-smi/h200/` (driver 580): where the renderer
is given the H200's values it must reproduce the capture byte for byte, and with GB10 values it
must keep the same layout, headers and unit styles. The simulator is a standalone script (it runs
as /usr/bin/nvidia-smi in the lab containers), so it is loaded from its file.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from simulators import assert_standalone_script, load_simulator, simulator_path

ROOT = Path(__file__).resolve().parents[2]
SIM_PATH = simulator_path("nvidia_smi")
FIXTURES = Path(os.environ.get("GX10_NVIDIA_SMI_FIXTURES", ROOT / "tests/fixtures/nvidia-smi/h200"))


sim = load_simulator("nvidia_smi")

# The captures ship with the repo (tests/fixtures); a missing copy is an error, not a skip.

# The fixture README's commands.
HEADER_QUERY = (
    "index,name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,"
    "utilization.gpu,memory.total,memory.used,clocks_event_reasons.active"
)
NOHEADER_QUERY = "clocks.sm,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu"
LOAD_QUERY = (
    "timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active"
)
UUID_RE = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A value with a unit as --format=csv prints it: "345 MHz", "79.63 W", "0 %", "143771 MiB".
UNIT_RE = re.compile(r"^-?\d+(?:\.\d+)? (MHz|W|%|MiB)$")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def sim_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs against its own state dir, as root, with loops bounded."""
    state = tmp_path / "state"
    monkeypatch.setenv("GX10_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("GX10_SIM_SEED", "unit-test")
    monkeypatch.setenv("GX10_SIM_MAX_LOOPS", "3")
    monkeypatch.setenv("GX10_SIM_EUID", "0")
    monkeypatch.delenv("GX10_SIM_GPU_UUID", raising=False)
    return state


def smi(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = sim.main(list(args))
    captured = capsys.readouterr()
    assert captured.err == "", "nvidia-smi prints its errors on stdout"
    return code, captured.out


def set_load(state: Path, load: str) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "load").write_text(load + "\n", encoding="utf-8")


def csv_rows(text: str) -> list[list[str]]:
    """Split nvidia-smi CSV the way consumers do: one record per line, ", " between values."""
    return [line.split(", ") for line in text.splitlines()]


def unit_of(value: str) -> str | None:
    match = UNIT_RE.match(value)
    return match.group(1) if match else None


def h200() -> tuple[object, object]:
    """The device and reading the H200 captures were taken from (values from the fixtures)."""
    device = sim.Device(
        uuid="GPU-00000000-0000-0000-0000-000000000000",
        name="NVIDIA H200",
        bus_id="00000000:00:06.0",
        driver_version="580.159.04",
        max_sm_clock_mhz=1980,
        memory_total_mib=143771,
        power_limit_w=700.0,
        ecc_summary="0",
        mig_summary="Disabled",
    )
    captured_at = time.mktime((2026, 12, 2, 8, 9, 45, 0, 0, -1))
    reading = sim.Sample(
        timestamp=captured_at,
        sm_clock_mhz=345,
        power_draw_w=79.63,
        power_instant_w=79.48,
        temperature_c=38,
        utilization_gpu=0,
        utilization_memory=0,
        pstate="P0",
        event_reasons=sim.REASON_GPU_IDLE,
        power_samples=sim.PowerSamples(2.36, 119, 80.75, 79.07, 79.78),
        memory_used_mib=0,
    )
    return device, reading


# --- nvidia-smi (summary table) -------------------------------------------------------------


def test_summary_renderer_reproduces_the_h200_capture() -> None:
    device, reading = h200()
    assert sim.render_summary(device, reading) == fixture("summary.txt")


def test_gb10_summary_keeps_the_real_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys)
    assert code == 0
    real, ours = fixture("summary.txt").splitlines(), out.splitlines()
    assert [len(line) for line in ours] == [len(line) for line in real]
    value_lines = {0, 2, 8, 9, 10}  # timestamp, versions, the GPU's three rows
    for number, (mine, theirs) in enumerate(zip(ours, real, strict=True)):
        if number not in value_lines:
            assert mine == theirs, f"line {number}"
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", ours[0])
    assert "| NVIDIA-SMI 580.142 " in ours[2]
    assert ours[8] == (
        "|   0  NVIDIA GB10                    On  "
        "|   0000000F:01:00.0 Off |                  N/A |"
    )
    # GB10 has no power cap and no memory of its own: "4W /  N/A" and "Not Supported".
    assert re.fullmatch(
        r"\| N/A   4[5-7]C    P8 {13} [4-8]W /  N/A  "
        r"\| Not Supported {10}\|      0%      Default \|",
        ours[9],
    )
    assert ours[10].endswith("|                  N/A |")


# --- --query-gpu ----------------------------------------------------------------------------


def test_csv_renderer_reproduces_the_h200_captures() -> None:
    device, reading = h200()
    header_fields = [sim.FIELDS_BY_NAME[name] for name in HEADER_QUERY.split(",")]
    with_units = sim.render_csv_header(header_fields) + sim.render_csv_row(
        header_fields, device, reading, units=True
    )
    assert with_units == fixture("query-header.csv")
    bare_fields = [sim.FIELDS_BY_NAME[name] for name in NOHEADER_QUERY.split(",")]
    bare = sim.render_csv_row(bare_fields, device, reading, units=False)
    assert bare == fixture("query-noheader.csv")


def test_gb10_query_has_the_capture_header_and_unit_styles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = smi(capsys, f"--query-gpu={HEADER_QUERY}", "--format=csv")
    assert code == 0
    real_header, real_row = csv_rows(fixture("query-header.csv"))
    header, row = csv_rows(out)
    assert header == real_header  # clocks.sm is printed as "clocks.current.sm [MHz]"
    assert len(row) == len(real_row)
    for name, mine, theirs in zip(header, row, real_row, strict=True):
        if name.startswith("memory."):
            assert mine == "[N/A]", name  # unified memory
        elif name == "power.limit [W]":
            assert mine == "[N/A]"  # GB10 reports no power limit
        else:
            assert unit_of(mine) == unit_of(theirs), name
    assert row[:2] == ["0", "NVIDIA GB10"]
    assert row[3] == "3003 MHz"
    assert re.fullmatch(r"0x[0-9A-F]{16}", row[-1])


def test_noheader_nounits_prints_bare_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys, f"--query-gpu={NOHEADER_QUERY}", "--format=csv,noheader,nounits")
    assert code == 0
    [row] = csv_rows(out)
    [real] = csv_rows(fixture("query-noheader.csv"))
    assert len(row) == len(real)
    clock, max_clock, power, temperature, utilization = (float(value) for value in row)
    assert (clock, max_clock, utilization) == (208, 3003, 0)  # idle GB10
    assert 4.0 <= power <= 8.0
    assert 45 <= temperature <= 47
    assert re.fullmatch(r"\d+\.\d\d", row[2]), "power keeps two decimals, as in the capture"


@pytest.mark.parametrize("fmt", ["csv", "csv,nounits", "csv,noheader,nounits"])
def test_memory_fields_read_na(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    code, out = smi(capsys, "--query-gpu=memory.total,memory.used,memory.free", f"--format={fmt}")
    assert code == 0
    rows = csv_rows(out)
    if "noheader" not in fmt:
        # Units stay in the header even with nounits.
        assert rows.pop(0) == ["memory.total [MiB]", "memory.used [MiB]", "memory.free [MiB]"]
    assert rows == [["[N/A]", "[N/A]", "[N/A]"]]


@pytest.mark.parametrize(
    ("asked", "header"),
    [
        ("clocks.sm", "clocks.current.sm [MHz]"),
        ("clocks.current.sm", "clocks.current.sm [MHz]"),
        ("clocks.gr", "clocks.current.graphics [MHz]"),
        ("clocks.mem", "clocks.current.memory [MHz]"),
        ("clocks.max.sm", "clocks.max.sm [MHz]"),
        ("gpu_name", "name"),
        ("gpu_uuid", "uuid"),
        ("clocks_throttle_reasons.active", "clocks_event_reasons.active"),
        ("enforced.power.limit", "enforced.power.limit [W]"),
        ("utilization.memory", "utilization.memory [%]"),
        ("temperature.gpu", "temperature.gpu"),
    ],
)
def test_headers_use_the_canonical_name(
    capsys: pytest.CaptureFixture[str], asked: str, header: str
) -> None:
    code, out = smi(capsys, f"--query-gpu={asked}", "--format=csv")
    assert code == 0
    assert out.splitlines()[0] == header


@pytest.mark.parametrize(
    "args",
    [
        ["--query-gpu=name,driver_version", "--format", "csv", "-i", "0"],
        ["--query-gpu=name,driver_version", "--format=csv", "--id=0"],
        ["--query-gpu=name,driver_version", "--format=csv", "-i", "0000000F:01:00.0"],
    ],
)
def test_format_and_id_spellings(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    assert smi(capsys, *args) == (0, "name, driver_version\nNVIDIA GB10, 580.142\n")


def test_an_unknown_gpu_is_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert smi(capsys, "--query-gpu=name", "--format=csv", "-i", "1") == (
        6,
        "No devices were found\n",
    )


@pytest.mark.parametrize("query", ["xyz", "index,xyz,name", "clocks.applications.sm"])
def test_an_unknown_field_is_refused_like_the_real_tool(
    capsys: pytest.CaptureFixture[str], query: str
) -> None:
    code, out = smi(capsys, f"--query-gpu={query}", "--format=csv")
    bad = "clocks.applications.sm" if query.startswith("clocks") else "xyz"
    assert (code, out) == (2, f'Field "{bad}" is not a valid field to query.\n\n')


def test_loop_is_bounded_and_prints_the_header_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps: list[float] = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        assert len(sleeps) < 10, "GX10_SIM_MAX_LOOPS did not stop the loop"

    monkeypatch.setattr(sim.time, "sleep", fake_sleep)
    code, out = smi(capsys, f"--query-gpu={LOAD_QUERY}", "--format=csv", "-lms", "250")
    assert code == 0
    header, *rows = csv_rows(out)
    assert header[0] == "timestamp"
    assert len(rows) == 3  # GX10_SIM_MAX_LOOPS
    assert sleeps == [0.25, 0.25]  # between samples, none after the last
    stamps = [time.strptime(row[0][:19], "%Y/%m/%d %H:%M:%S") for row in rows]
    assert stamps == sorted(stamps)
    assert all(re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}", row[0]) for row in rows)


def test_loop_in_seconds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GX10_SIM_MAX_LOOPS", "2")
    sleeps: list[float] = []
    monkeypatch.setattr(sim.time, "sleep", sleeps.append)
    code, out = smi(capsys, "--query-gpu=index", "--format=csv,noheader", "-l", "2")
    assert (code, out, sleeps) == (0, "0\n0\n", [2.0])


def test_loaded_loop_matches_the_capture_columns(
    capsys: pytest.CaptureFixture[str], sim_env: Path
) -> None:
    set_load(sim_env, "1.0")
    code, out = smi(capsys, f"--query-gpu={LOAD_QUERY}", "--format=csv", "-lms", "1")
    assert code == 0
    real_header, *real_rows = csv_rows(fixture("under-load-250ms.csv"))
    header, *rows = csv_rows(out)
    assert header == real_header
    for row in rows:
        assert [unit_of(v) for v in row] == [unit_of(v) for v in real_rows[-1]]
        clock, power, temperature, utilization = (float(v.split()[0]) for v in row[1:5])
        assert 2400 <= clock <= 2500  # GB10 saturates near 2480 MHz
        assert 20 <= power <= 90
        assert 65 <= temperature <= 80
        assert utilization >= 90
        assert row[5] == "0x0000000000000000"


# --- -L -------------------------------------------------------------------------------------


def test_list_gpus_matches_the_capture(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys, "-L")
    assert code == 0
    real = fixture("L.txt")
    assert re.sub(UUID_RE, "UUID", out.replace("GB10", "H200")) == re.sub(UUID_RE, "UUID", real)
    assert re.fullmatch(rf"GPU 0: NVIDIA GB10 \(UUID: {UUID_RE}\)\n", out)


def test_uuid_is_stable_per_host_and_overridable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim.socket, "gethostname", lambda: "gx10-a")
    first, again = smi(capsys, "-L")[1], smi(capsys, "-L")[1]
    monkeypatch.setattr(sim.socket, "gethostname", lambda: "gx10-b")
    other = smi(capsys, "-L")[1]
    assert first == again
    assert first != other
    monkeypatch.setenv("GX10_SIM_GPU_UUID", "12345678-1234-1234-1234-123456789abc")
    assert smi(capsys, "-L")[1] == (
        "GPU 0: NVIDIA GB10 (UUID: GPU-12345678-1234-1234-1234-123456789abc)\n"
    )
    _code, out = smi(capsys, "--query-gpu=uuid", "--format=csv,noheader")
    assert out == "GPU-12345678-1234-1234-1234-123456789abc\n"


# --- -lgc / -rgc ----------------------------------------------------------------------------


def query_clock(capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out = smi(
        capsys,
        "--query-gpu=clocks.sm,clocks_event_reasons.active,pstate",
        "--format=csv,noheader,nounits",
    )
    assert code == 0
    [row] = csv_rows(out)
    return row


def test_lock_and_reset_round_trip(capsys: pytest.CaptureFixture[str], sim_env: Path) -> None:
    set_load(sim_env, "1.0")
    clock, reasons, pstate = query_clock(capsys)
    assert int(clock) > 2400
    assert reasons == "0x0000000000000000"
    assert pstate == "P0"

    assert smi(capsys, "-lgc", "2000,2000") == (
        0,
        'GPU clocks set to "(gpuClkMin 2000, gpuClkMax 2000)" for GPU 0000000F:01:00.0\n'
        "All done.\n",
    )
    assert (sim_env / "locked_clocks").read_text(encoding="utf-8") == "2000,2000\n"
    # Capped below what the load would reach: the clock is the cap, reason "applications clocks".
    assert query_clock(capsys) == ["2000", "0x0000000000000002", "P0"]

    set_load(sim_env, "0")
    assert query_clock(capsys) == ["208", "0x0000000000000001", "P8"]  # idle stays below the cap

    assert smi(capsys, "-rgc") == (0, "All done.\n")
    assert not (sim_env / "locked_clocks").exists()
    set_load(sim_env, "1")
    clock, reasons, _ = query_clock(capsys)
    assert int(clock) > 2400
    assert reasons == "0x0000000000000000"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-lgc", "2100"], "(gpuClkMin 2100, gpuClkMax 2100)"),
        (["--lock-gpu-clocks=1500,2400"], "(gpuClkMin 1500, gpuClkMax 2400)"),
        (["-i", "0", "--lock-gpu-clocks", "2000,2600"], "(gpuClkMin 2000, gpuClkMax 2600)"),
    ],
)
def test_lock_spellings(capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    code, out = smi(capsys, *args)
    assert code == 0
    assert out == f'GPU clocks set to "{expected}" for GPU 0000000F:01:00.0\nAll done.\n'


def test_a_cap_above_the_load_clock_changes_nothing(
    capsys: pytest.CaptureFixture[str], sim_env: Path
) -> None:
    set_load(sim_env, "1")
    assert smi(capsys, "-lgc", "3003,3003")[0] == 0
    clock, reasons, _ = query_clock(capsys)
    assert 2400 < int(clock) < 3003
    assert reasons == "0x0000000000000000"


@pytest.mark.parametrize("value", ["2400,2000", "abc", "2000,", "0,0"])
def test_a_bad_clock_pair_is_refused(
    capsys: pytest.CaptureFixture[str], sim_env: Path, value: str
) -> None:
    code, out = smi(capsys, "-lgc", value)
    assert code == 2
    assert out.startswith("Invalid combination of input arguments.")
    assert not (sim_env / "locked_clocks").exists()


@pytest.mark.parametrize("args", [["-lgc", "2000,2000"], ["-rgc"]])
def test_only_root_changes_clocks(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sim_env: Path,
    args: list[str],
) -> None:
    assert smi(capsys, "-lgc", "1800,1800")[0] == 0  # an existing lock, set as root
    monkeypatch.setenv("GX10_SIM_EUID", "1000")
    assert smi(capsys, *args) == (
        4,
        "The current user does not have permission to change clocks for GPU 0000000F:01:00.0.\n"
        "Terminating early due to previous errors.\n",
    )
    assert (sim_env / "locked_clocks").read_text(encoding="utf-8") == "1800,1800\n"


def test_euid_defaults_to_the_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GX10_SIM_EUID")
    monkeypatch.setattr(sim.os, "geteuid", lambda: 1000)
    assert smi(capsys, "-rgc")[0] == 4


# --- -q -------------------------------------------------------------------------------------


def test_query_log_has_the_capture_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys, "-q", "-d", "CLOCK,POWER,TEMPERATURE,PERFORMANCE")
    assert code == 0
    real = fixture("q-clock-power-temp-perf.txt").split("\n")
    ours = out.split("\n")
    assert len(ours) == len(real)
    measured = re.compile(r"-?\d+(?:\.\d+)? (MHz|W|C|sec|us)")
    for mine, theirs in zip(ours, real, strict=True):
        if theirs.startswith("GPU "):
            assert mine == "GPU 0000000F:01:00.0"
            continue
        key, sep, theirs_value = theirs.partition(" : ")
        assert mine.startswith(key + sep), f"{mine!r} vs {theirs!r}"
        value = mine[len(key + sep) :]
        unit = measured.fullmatch(theirs_value)
        if unit and value != "N/A":  # a reading GB10 has keeps the capture's unit style
            match = measured.fullmatch(value)
            assert match, mine
            assert match.group(1) == unit.group(1), mine
        elif not unit:
            assert (value == "N/A") == (theirs_value == "N/A"), mine


def test_query_log_order_does_not_follow_the_d_order(capsys: pytest.CaptureFixture[str]) -> None:
    forward = smi(capsys, "-q", "-d", "CLOCK,PERFORMANCE")[1]
    backward = smi(capsys, "-q", "--display=PERFORMANCE,CLOCK")[1]
    strip = re.compile(r"^(Timestamp|\s+(Graphics|SM)) .*$", re.MULTILINE)
    assert strip.sub("", forward) == strip.sub("", backward)
    assert forward.index("Performance State") < forward.index("    Clocks\n")


def test_full_query_log_identifies_the_gb10(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys, "-q")
    assert code == 0
    assert out.startswith("\n==============NVSMI LOG==============\n\n")
    assert out.endswith("\n\n")
    assert f"    {'Product Name':<50} : NVIDIA GB10\n" in out
    assert re.search(rf"\n    GPU UUID {{43}}: {UUID_RE}\n", out)
    for section in ("Performance State", "FB Memory Usage", "Temperature", "Max Clocks"):
        assert f"    {section}" in out


# --- the model ------------------------------------------------------------------------------


def test_samples_are_deterministic_per_seed_and_time() -> None:
    state = sim.GpuState(load=0.6, seed="gx10-a")
    assert sim.sample(state, 1000.0) == sim.sample(state, 1000.0)
    seeds = {sim.sample(sim.GpuState(load=0.6, seed=str(n)), 1000.0) for n in range(20)}
    moments = {sim.sample(state, 1000.0 + n) for n in range(20)}
    assert len(seeds) > 1
    assert len(moments) > 1


def test_idle_and_loaded_values_are_gb10_like() -> None:
    idle = [sim.sample(sim.GpuState(seed="s"), 1000.0 + n / 7) for n in range(200)]
    assert {s.sm_clock_mhz for s in idle} == {208}
    assert {s.pstate for s in idle} == {"P8"}
    assert {s.event_reasons for s in idle} == {sim.REASON_GPU_IDLE}
    assert all(4.0 <= s.power_draw_w <= 8.0 and 45 <= s.temperature_c <= 47 for s in idle)

    busy = [sim.sample(sim.GpuState(load=1.0, seed="s"), 1000.0 + n / 7) for n in range(200)]
    clocks = {s.sm_clock_mhz for s in busy}
    assert min(clocks) >= 2400
    assert max(clocks) <= 2500
    assert all(c == sim.quantize_clock(c) for c in clocks), "GB10 steps are 6.5 MHz"
    assert all(20.0 <= s.power_draw_w <= 90.0 and 65 <= s.temperature_c <= 80 for s in busy)
    assert all(s.pstate == "P0" and s.utilization_gpu >= 90 for s in busy)

    half = [sim.sample(sim.GpuState(load=0.5, seed="s"), 1000.0 + n) for n in range(50)]
    mean = sum(s.power_draw_w for s in half) / len(half)
    assert 15 < mean < sum(s.power_draw_w for s in busy) / len(busy)

    capped = sim.GpuState(load=1.0, lock=sim.ClockLock(2000, 2000), seed="s")
    readings = [sim.sample(capped, 1000.0 + n) for n in range(50)]
    assert {s.sm_clock_mhz for s in readings} == {2000}
    assert all(s.event_reasons & sim.REASON_APPLICATIONS_CLOCKS_SETTING for s in readings)
    assert max(s.power_draw_w for s in readings) < min(s.power_draw_w for s in busy)


@pytest.mark.parametrize(("text", "load"), [("0.25", 0.25), ("7", 1.0), ("-1", 0.0), ("x", 0.0)])
def test_load_file_is_read_and_clamped(sim_env: Path, text: str, load: float) -> None:
    set_load(sim_env, text)
    config = sim.SimConfig.from_env(os.environ)
    assert sim.load_state(config).load == load


# --- the clock/power/thermal model ----------------------------------------------------------

# FIELD_NOTES section 5, clock sweep under benchmark load: cap -> (power W, temperature C) for
# reference nodes A and B; "unlocked" is no cap. Node A is silicon factor 1.0, node B 0.78.
REFERENCE_SWEEP = {
    2000: ((20.9, 67), (17.7, 62)),
    2200: ((25.7, 68), (21.8, 65)),
    2400: ((32.1, 69), (26.6, 65)),
    2600: ((39.7, 72), (33.4, 71)),
    2800: ((40.8, 73), (32.8, 69)),
    None: ((42.7, 75), (35.7, 72)),
}
NODE_FACTORS = {"A": 1.0, "B": 0.78}
T0 = 1_750_000_000.0  # an injected "now" for the thermal model


def config() -> object:
    return sim.SimConfig.from_env(os.environ)


def write_state(state: Path, **files: object) -> None:
    state.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (state / name).write_text(f"{value}\n", encoding="utf-8")


def thermal_at(state: Path, temperature: float, when: float) -> None:
    write_state(state, thermal=f"{temperature} {when}")


def loaded(cap: int | None = None, **fields: object) -> object:
    lock = None if cap is None else sim.ClockLock(208, cap)
    return sim.GpuState(load=1.0, lock=lock, seed="s", **fields)


def test_power_grows_with_clock_and_with_load() -> None:
    caps = range(1000, 2501, 50)
    by_clock = [sim.mean_power_w(loaded(cap), 50.0) for cap in caps]
    assert all(a < b for a, b in itertools.pairwise(by_clock)), by_clock
    loads = [n / 10 for n in range(11)]
    by_load = [sim.mean_power_w(sim.GpuState(load=x, seed="s"), 50.0) for x in loads]
    assert all(a < b for a, b in itertools.pairwise(by_load)), by_load
    # Above the saturation point a cap changes nothing: the real clock stops near 2480.
    assert sim.mean_power_w(loaded(2800), 50.0) == sim.mean_power_w(loaded(), 50.0)
    # The readings follow the model, noise included.
    for low, high in ((2000, 2400), (2200, 2800)):
        mean = {
            cap: sum(sim.sample(loaded(cap), T0 + n).power_draw_w for n in range(100)) / 100
            for cap in (low, high)
        }
        assert mean[low] < mean[high]


@pytest.mark.parametrize("node", ["A", "B"])
@pytest.mark.parametrize("cap", list(REFERENCE_SWEEP))
def test_steady_state_matches_the_reference_clock_sweep(node: str, cap: int | None) -> None:
    power_ref, temperature_ref = REFERENCE_SWEEP[cap][0 if node == "A" else 1]
    state = loaded(cap, silicon_factor=NODE_FACTORS[node])
    readings = [sim.sample(state, T0 + n * 0.37) for n in range(300)]
    power = sum(s.power_draw_w for s in readings) / len(readings)
    temperature = sum(s.temperature_c for s in readings) / len(readings)
    assert abs(power - power_ref) <= 0.15 * power_ref, (power, power_ref)
    assert abs(temperature - temperature_ref) <= 0.15 * temperature_ref
    assert abs(temperature - temperature_ref) <= 4.5, (temperature, temperature_ref)
    assert all(s.event_reasons & sim.REASON_SW_THERMAL_SLOWDOWN == 0 for s in readings)


def test_idle_and_the_hottest_loaded_point_bracket_the_field_notes() -> None:
    idle = sim.GpuState(seed="s")
    assert sim.equilibrium_temperature_c(idle) == pytest.approx(46.0, abs=0.5)
    assert 6.5 <= sim.mean_power_w(idle, 46.0) <= 8.5
    hottest = sim.equilibrium_temperature_c(loaded(silicon_factor=1.0))
    assert 70.0 <= hottest < 80.0  # load 65-67 average, 80 peak, slowdown from 82


def test_one_node_runs_cooler_deterministically() -> None:
    factor_a = sim.silicon_factor(sim.GpuState(seed="gx10-a"))
    factor_b = sim.silicon_factor(sim.GpuState(seed="gx10-b"))
    assert factor_a == sim.silicon_factor(sim.GpuState(seed="gx10-a"))
    assert all(0.78 <= f <= 1.0 for f in (factor_a, factor_b))
    hot = sim.GpuState(load=1.0, seed="gx10-a")
    cool = sim.GpuState(load=1.0, seed="gx10-b")
    power_gap = sim.mean_power_w(hot, 60.0) - sim.mean_power_w(cool, 60.0)
    heat_gap = sim.equilibrium_temperature_c(hot) - sim.equilibrium_temperature_c(cool)
    assert 3.0 <= power_gap <= 10.0  # node B drew 7 W less unlocked
    assert 2.0 <= heat_gap <= 8.0  # and ran 3-5 C cooler
    factors = {sim.silicon_factor(sim.GpuState(seed=f"node-{n}")) for n in range(50)}
    assert len(factors) > 40


def test_temperature_follows_power_with_the_time_constant(sim_env: Path) -> None:
    set_load(sim_env, "1")
    thermal_at(sim_env, 46.0, T0)
    target = sim.equilibrium_temperature_c(sim.load_state(config()))
    assert target > 65
    after_tau = sim.advance(config(), T0 + 30.0).temperature_c
    assert (after_tau - 46.0) / (target - 46.0) == pytest.approx(1 - math.exp(-1), abs=0.01)
    assert sim.read_thermal(sim_env) == sim.Thermal(pytest.approx(after_tau), T0 + 30.0)
    # Small steps compound to the same curve: after 3 tau about 95% of the way.
    for n in range(1, 61):
        temperature = sim.advance(config(), T0 + 30.0 + n).temperature_c
    assert (temperature - 46.0) / (target - 46.0) == pytest.approx(1 - math.exp(-3), abs=0.01)
    # A long gap is steady state, whatever its length.
    assert sim.advance(config(), T0 + 10**7).temperature_c == pytest.approx(target, abs=0.01)


def test_the_time_constant_is_set_by_file_then_environment(
    sim_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fraction_after_10_s() -> float:
        thermal_at(sim_env, 46.0, T0)
        target = sim.equilibrium_temperature_c(sim.load_state(config()))
        return (sim.advance(config(), T0 + 10.0).temperature_c - 46.0) / (target - 46.0)

    set_load(sim_env, "1")
    assert fraction_after_10_s() == pytest.approx(1 - math.exp(-10 / 30))  # default 30 s
    monkeypatch.setenv("GX10_SIM_THERMAL_TAU_S", "10")
    assert fraction_after_10_s() == pytest.approx(1 - math.exp(-1))
    write_state(sim_env, thermal_tau_s=5)  # the lab's switch wins over the environment
    assert fraction_after_10_s() == pytest.approx(1 - math.exp(-2))
    write_state(sim_env, thermal_tau_s=0)  # no lag at all
    assert fraction_after_10_s() == pytest.approx(1.0)
    write_state(sim_env, thermal_tau_s="soon")  # malformed: back to the environment
    assert fraction_after_10_s() == pytest.approx(1 - math.exp(-1))


def test_the_node_cools_when_the_load_drops(sim_env: Path) -> None:
    set_load(sim_env, "0")
    thermal_at(sim_env, 74.0, T0)
    temperatures = [sim.advance(config(), T0 + n * 5.0).temperature_c for n in range(1, 7)]
    assert all(a > b for a, b in itertools.pairwise(temperatures))
    assert temperatures[-1] == pytest.approx(46.0 + 28.0 * math.exp(-1), abs=0.05)
    assert sim.sample(sim.advance(config(), T0 + 600.0), T0 + 600.0).temperature_c == 46


def test_ambient_offset_pushes_a_loaded_node_past_the_abort_limit(sim_env: Path) -> None:
    set_load(sim_env, "1")
    thermal_at(sim_env, 46.0, T0)
    write_state(sim_env, ambient_offset_c=25)
    readings = []
    for n in range(1, 121):
        now = T0 + n * 5.0
        readings.append(sim.sample(sim.advance(config(), now), now))
    assert readings[0].temperature_c < 70
    assert readings[-1].temperature_c > 84  # the benchmark's abort limit
    hot = [s for s in readings if s.temperature_c >= 82]
    assert hot
    assert all(s.event_reasons & sim.REASON_SW_THERMAL_SLOWDOWN for s in hot)
    assert max(s.sm_clock_mhz for s in hot) < 2400  # slowed down, not saturated
    # The same offset keeps an idle node above the 70 C cool-down threshold.
    set_load(sim_env, "0")
    assert sim.sample(sim.advance(config(), T0 + 10**5), T0 + 10**5).temperature_c > 70
    write_state(sim_env, ambient_offset_c="warm")  # malformed: no offset
    assert sim.sample(sim.advance(config(), T0 + 10**6), T0 + 10**6).temperature_c == 46


def test_a_long_step_follows_the_slowdown_feedback() -> None:
    """Heating from 73 C with +25 for 6 time constants ends near equilibrium, not beyond it."""
    state = loaded(ambient_offset_c=25.0)
    settled = sim.equilibrium_temperature_c(state)
    assert 84 < settled < 92
    unthrottled = sim.steady_temperature_c(state, sim.mean_power_w(state, 73.0))
    assert unthrottled > settled + 5  # what holding the starting power would head for
    assert sim.thermal_step(state, 73.0, 180.0, 30.0) == pytest.approx(settled, abs=0.5)
    assert sim.thermal_step(state, 73.0, 10**4, 30.0) == pytest.approx(settled, abs=1e-6)
    assert sim.thermal_step(state, 73.0, 1.0, 0.0) == pytest.approx(settled, abs=1e-6)


def test_thermal_slowdown_from_82_c() -> None:
    def at(temperature: float, load: float = 1.0) -> object:
        return sim.sample(sim.GpuState(load=load, seed="s", temperature_c=temperature), T0)

    cool, edge, hot = at(81.4), at(81.5), at(86.0)
    assert (cool.temperature_c, edge.temperature_c, hot.temperature_c) == (81, 82, 86)
    assert cool.event_reasons == 0
    assert 2400 < cool.sm_clock_mhz <= 2496
    assert edge.event_reasons == sim.REASON_SW_THERMAL_SLOWDOWN
    assert edge.sm_clock_mhz <= 2430
    assert hot.sm_clock_mhz <= 1980
    assert hot.sm_clock_mhz == sim.quantize_clock(hot.sm_clock_mhz)
    assert sim.mean_power_w(hot_state := sim.GpuState(load=1.0, seed="s"), 86.0) < (
        sim.mean_power_w(hot_state, 60.0) - 10.0
    )
    idle = at(86.0, load=0.0)  # the idle clock is below any limit; the reason still shows
    assert idle.sm_clock_mhz == 208
    assert idle.event_reasons == sim.REASON_GPU_IDLE | sim.REASON_SW_THERMAL_SLOWDOWN
    capped = sim.sample(loaded(1500, temperature_c=83.0), T0)
    assert capped.sm_clock_mhz == 1500
    assert capped.event_reasons == (
        sim.REASON_APPLICATIONS_CLOCKS_SETTING | sim.REASON_SW_THERMAL_SLOWDOWN
    )


def test_a_clock_cap_takes_effect_from_when_it_was_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sim_env: Path
) -> None:
    set_load(sim_env, "1")
    thermal_at(sim_env, 46.0, T0)
    unlocked = sim.equilibrium_temperature_c(sim.load_state(config()))
    monkeypatch.setattr(sim.time, "time", lambda: T0 + 30.0)
    assert smi(capsys, "-lgc", "2000,2000")[0] == 0
    at_lock = sim.read_thermal(sim_env)
    assert at_lock is not None
    assert at_lock.timestamp == T0 + 30.0
    assert at_lock.temperature_c == pytest.approx(46 + (unlocked - 46) * (1 - math.exp(-1)))
    capped = sim.equilibrium_temperature_c(sim.load_state(config()))
    later = sim.advance(config(), T0 + 60.0).temperature_c
    expected = capped + (at_lock.temperature_c - capped) * math.exp(-1)
    assert later == pytest.approx(expected)
    monkeypatch.setattr(sim.time, "time", lambda: T0 + 90.0)
    assert smi(capsys, "-rgc")[0] == 0
    assert sim.read_thermal(sim_env).timestamp == T0 + 90.0


def test_the_loop_advances_the_model_every_sample(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sim_env: Path
) -> None:
    clock = [T0]
    monkeypatch.setattr(sim.time, "time", lambda: clock[0])
    monkeypatch.setattr(sim.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setenv("GX10_SIM_MAX_LOOPS", "8")
    set_load(sim_env, "1")
    thermal_at(sim_env, 46.0, T0)
    code, out = smi(
        capsys, "--query-gpu=temperature.gpu,power.draw", "--format=csv,noheader,nounits", "-l", "5"
    )
    assert code == 0
    temperatures = [int(row[0]) for row in csv_rows(out)]
    assert len(temperatures) == 8
    assert temperatures[0] == 46
    assert all(a < b for a, b in itertools.pairwise(temperatures)), temperatures
    assert temperatures[-1] >= 60  # 35 s at tau 30 s: about 70% of the way to ~74 C
    assert sim.read_thermal(sim_env).timestamp == T0 + 35.0


def test_concurrent_updates_are_serialised(monkeypatch: pytest.MonkeyPatch, sim_env: Path) -> None:
    """Every advance reads, steps and writes under the lock: none overlaps, none is lost."""
    set_load(sim_env, "1")
    thermal_at(sim_env, 46.0, T0)
    read, write = sim.read_thermal, sim.write_thermal
    events: list[tuple[str, int]] = []

    def slow_read(state_dir: Path) -> object:
        events.append(("read", threading.get_ident()))
        found = read(state_dir)
        time.sleep(0.002)  # widen the read-modify-write window an unlocked update would race in
        return found

    def logged_write(state_dir: Path, thermal: object) -> None:
        events.append(("write", threading.get_ident()))
        write(state_dir, thermal)

    monkeypatch.setattr(sim, "read_thermal", slow_read)
    monkeypatch.setattr(sim, "write_thermal", logged_write)
    monkeypatch.setattr(sim.time, "time", lambda: T0 + 2.0)  # -lgc/-rgc advance to "now" too
    cfg = config()
    stamps = [T0 + 1 + n * 0.01 for n in range(160)]
    errors: list[BaseException] = []

    def worker(mine: list[float]) -> None:
        try:
            for now in mine:
                sim.advance(cfg, now)
        except BaseException as error:  # reported by the test thread
            errors.append(error)

    def toggle() -> None:
        codes = []
        for n in range(20):
            opts = sim.parse_args(["-rgc"] if n % 2 else ["-lgc", "2000,2000"])
            codes.append(sim.run(opts, cfg, io.StringIO()))
        if codes != [0] * 20:
            errors.append(AssertionError(f"-lgc/-rgc exit codes {codes}"))

    threads = [threading.Thread(target=worker, args=(stamps[n::8],)) for n in range(8)]
    threads.append(threading.Thread(target=toggle))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    # Each read is followed by the same thread's write: no other update got in between.
    assert len(events) == 2 * (len(stamps) + 20)
    pairs = list(zip(events[::2], events[1::2], strict=True))
    assert all(r == ("read", w[1]) and w[0] == "write" for r, w in pairs), pairs[:5]
    final = read(sim_env)
    assert final is not None
    assert final.timestamp >= max(stamps)  # a lost update could leave an older time
    assert 46.0 < final.temperature_c < 80.0
    leftovers = sorted(
        p.name for p in sim_env.iterdir() if p.name.startswith(".") and p.name != ".lock"
    )
    assert leftovers == []


def test_concurrent_processes_keep_the_state_whole(sim_env: Path) -> None:
    """A 1 ms telemetry loop in several processes while -lgc/-rgc run: every reading parses."""
    set_load(sim_env, "1")
    env = {**os.environ, "GX10_SIM_MAX_LOOPS": "40"}
    query = ["--query-gpu=temperature.gpu,clocks.sm", "--format=csv,noheader,nounits"]
    loops = [
        subprocess.Popen(
            [sys.executable, str(SIM_PATH), *query, "-lms", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    try:
        for n in range(10):
            args = ["-rgc"] if n % 2 else ["-lgc", "2000,2000"]
            result = subprocess.run(
                [sys.executable, str(SIM_PATH), *args],
                capture_output=True,
                text=True,
                env=env,
                check=False,
                timeout=30,
            )
            assert result.returncode == 0, result.stdout + result.stderr
        outputs = [loop.communicate(timeout=60) for loop in loops]
    finally:
        for loop in loops:
            if loop.poll() is None:
                loop.kill()  # this PID only
                loop.wait(timeout=5)
    for loop, (out, err) in zip(loops, outputs, strict=True):
        assert (loop.returncode, err) == (0, "")
        rows = csv_rows(out)
        assert len(rows) == 40
        assert all(50 <= int(temp) <= 80 and int(clock) >= 2000 for temp, clock in rows)
    final = sim.read_thermal(sim_env)
    assert final is not None
    assert 50 < final.temperature_c < 80


def test_a_thermal_time_from_a_clock_set_back_is_dropped(sim_env: Path) -> None:
    set_load(sim_env, "0")
    thermal_at(sim_env, 70.0, T0 + 10**6)
    assert sim.advance(config(), T0).temperature_c == pytest.approx(70.0)
    assert sim.read_thermal(sim_env) == sim.Thermal(pytest.approx(70.0), T0)
    cooled = sim.advance(config(), T0 + 30.0).temperature_c
    assert cooled == pytest.approx(46.0 + 24.0 * math.exp(-1))
    thermal_at(sim_env, 70.0, T0 + 5.0)  # a little ahead (a slow lock holder): kept
    sim.advance(config(), T0)
    assert sim.read_thermal(sim_env).timestamp == T0 + 5.0


def test_a_state_dir_that_cannot_be_created_still_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("GX10_SIM_STATE_DIR", str(blocker / "state"))
    code, out = smi(capsys, "--query-gpu=temperature.gpu", "--format=csv,noheader")
    assert (code, out) == (0, "46\n")


# --- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "out"),
    [
        (
            ["-x"],
            255,
            "ERROR: Option -x is not recognized. Please run 'nvidia-smi -h' for help.\n\n",
        ),
        (
            ["--query-gpu"],
            255,
            "ERROR: Option --query-gpu is missing its value. Please run 'nvidia-smi -h' for help."
            "\n\n",
        ),
        (["-L", "--query-gpu=name", "--format=csv"], 2, None),
        (["--query-gpu=name"], 2, None),
        (["--format=csv"], 2, None),
        (["-d", "CLOCK"], 2, None),
        (["-q", "-d", "BOGUS"], 2, None),
        (["--query-gpu=name", "--format=json"], 2, None),
        (["-lgc", "2000,2000", "-rgc"], 2, None),
    ],
)
def test_bad_arguments_use_the_real_wording(
    capsys: pytest.CaptureFixture[str], args: list[str], code: int, out: str | None
) -> None:
    expected = (
        out or "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
    )
    assert smi(capsys, *args) == (code, expected)


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = smi(capsys, "-h")
    assert code == 0
    assert out.startswith("NVIDIA System Management Interface -- v580.142\n")
    assert "--lock-gpu-clocks" in out
    assert "--query-gpu" in out
    assert smi(capsys, "--version") == (
        0,
        "NVIDIA-SMI version  : 580.142\nNVML version        : 580.142\n"
        "DRIVER version      : 580.142\nCUDA Version        : 13.0\n",
    )
    code, out = smi(capsys, "--help-query-gpu")
    assert code == 0
    assert '"clocks.current.sm" or "clocks.sm"' in out


def test_the_script_runs_standalone_on_the_standard_library(sim_env: Path) -> None:
    assert_standalone_script(SIM_PATH)

    result = subprocess.run(
        [sys.executable, str(SIM_PATH), "-L"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GX10_SIM_GPU_UUID": "GPU-00000000-0000-0000-0000-000000000001"},
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "GPU 0: NVIDIA GB10 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n",
        "",
    )
