#!/usr/bin/python3
"""nvidia-smi for a lab node: one NVIDIA GB10, answered in the real tool's formats.

Test equipment. The lab has no GPU, so this stands where `/usr/bin/nvidia-smi` lives on a GB10
node. Everything a parser could depend on (header names, units, `[N/A]`, padding, error wording,
exit codes) follows output captured from real hardware; only the values are simulated. Reference
captures: an H200 on driver 580 (`fixtures/nvidia-smi/h200/`) for formats, and public GB10 captures
for what GB10 reports differently (bus id 0000000F:01:00.0, memory `[N/A]` / "Not Supported",
power limits N/A, 6.5 MHz clock steps, max SM clock 3003 MHz, application clock 2418 MHz).

Standalone on purpose: it is copied into Debian bookworm containers and run by their python3.11
with no packages beyond the standard library.

Environment:
  GX10_SIM_STATE_DIR      state directory (default /var/lib/gx10-sim/nvidia-smi; files below).
  GX10_SIM_SEED           jitter seed; the same seed and time give the same values (default:
                          hostname). It also sets the node's silicon factor (see Model).
  GX10_SIM_GPU_UUID       GPU UUID (default: uuid5 of the hostname, so stable per node).
  GX10_SIM_MAX_LOOPS      stop -l/-lms after this many samples (default: loop until interrupted).
  GX10_SIM_EUID           effective uid to act as (default: os.geteuid()); non-zero may not set
                          clocks.
  GX10_SIM_THERMAL_TAU_S  thermal time constant in seconds (default 30; `thermal_tau_s` wins).

State directory (one value per file; a missing or malformed file means the default):
  load              load level 0.0-1.0 (the lab's vLLM simulator writes it; default 0, idle).
  locked_clocks     "MIN,MAX" in MHz while -lgc is active (-lgc writes it, -rgc removes it).
  thermal           "TEMPERATURE_C UNIX_TIME": the model's temperature and when it held. Every
                    invocation that reads the device (and -lgc/-rgc) advances it to the present;
                    without it the model starts at the steady state of the current inputs.
  ambient_offset_c  test equipment: degrees C added to the temperature model (default 0): +25
                    takes any loaded node past 84 C and keeps even an idle one above 70 C.
  thermal_tau_s     test equipment: the thermal time constant in seconds (0: no lag).
  .lock             flock(2) lock: one invocation at a time reads, advances and writes `thermal`.
  Files are replaced atomically (temporary file, then rename).

Model (calibrated to the reference clock sweep, FIELD_NOTES section 5):
  clock        idle 208 MHz; under load the SM clock saturates at 2437-2496 MHz (about 2480)
               whatever the cap above that; a -lgc cap below bounds it; from 82 C (the reading)
               SW thermal slowdown pulls it down 100 MHz per degree above 81 C.
  power        idle 7.2 W + load x silicon factor x dynamic power at the clock averaged over the
               reading window (DYNAMIC_POWER_CURVE, through the sweep's 2000/2200/2400 MHz and
               saturated points).
  temperature  first-order lag, T += (T_ss - T) (1 - exp(-dt / tau)) in steps of at most
               tau/10, toward T_ss = 46 C + 0.35 C/W x (power - idle) + 16.2 C x load x silicon
               factor (the rest of the package under load) + ambient offset.
  silicon      factor 0.78-1.0 drawn from the seed: reference node A is 1.0, node B (a few W and C
               cooler) 0.78; the lab's gx10-a comes out near A, gx10-b near B.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import math
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO, TypeAlias

# Exit codes documented for nvidia-smi.
EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_OTHER = 255

DEFAULT_STATE_DIR = "/var/lib/gx10-sim/nvidia-smi"
LOAD_FILE = "load"
LOCK_FILE = "locked_clocks"
THERMAL_FILE = "thermal"
AMBIENT_OFFSET_FILE = "ambient_offset_c"
THERMAL_TAU_FILE = "thermal_tau_s"
MUTEX_FILE = ".lock"

HELP_HINT = "Please run 'nvidia-smi -h' for help."
INVALID_COMBINATION = f"Invalid combination of input arguments. {HELP_HINT}\n\n"

# nvmlClocksEventReason* bits (nvml.h).
REASON_GPU_IDLE = 0x1
REASON_APPLICATIONS_CLOCKS_SETTING = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL_SLOWDOWN = 0x20
REASON_HW_THERMAL_SLOWDOWN = 0x40
REASON_HW_POWER_BRAKE_SLOWDOWN = 0x80
REASON_DISPLAY_CLOCK_SETTING = 0x100

# GB10 SM clocks move in 6.5 MHz steps, reported truncated (208, 2398, 2405, 2411, ..., 3003).
CLOCK_STEP_MHZ = 6.5
IDLE_SM_CLOCK_MHZ = 208
# Under load real GB10s hold 2385-2496 MHz whatever the cap above that (clock saturates).
LOAD_SM_CLOCK_STEPS = range(375, 385)  # 2437 ... 2496 MHz
SATURATED_SM_CLOCK_MHZ = 2480.0
IDLE_POWER_W = 7.2  # field notes: idle about 8 W (readings jitter by 0.6 W)
# Dynamic power (W) of reference node A at load 1.0 by SM clock (MHz), linearly interpolated: idle
# + this gives the clock sweep's 20.9 W at 2000 MHz, 25.7 at 2200, 32.1 at 2400 and, at the mean
# saturated clock (about 2466), 41.3 W (measured 39.7-42.7 with caps of 2600, 2800 and none).
# Below 2000 MHz nothing was measured: the voltage is at its floor there, power falls as clock^3.
DYNAMIC_POWER_CURVE: tuple[tuple[float, float], ...] = (
    (0.0, 0.0),
    (1000.0, 1.7),
    (1500.0, 5.8),
    (2000.0, 13.7),
    (2200.0, 18.5),
    (2400.0, 24.9),
    (2480.0, 36.0),
    (2500.0, 38.8),
)
IDLE_TEMPERATURE_C = 46.0  # steady state at idle power (field notes: 45-47 C)
KELVIN_PER_WATT = 0.35  # GPU power above idle -> degrees above the idle temperature
LOAD_HEAT_C = 16.2  # the rest of the package under inference load (CPU, memory), at load 1.0
# Silicon factor range: reference node B draws 0.78 of node A's dynamic power (A is 1.0).
SILICON_FACTOR_MIN = 0.78
SILICON_FACTOR_MAX = 1.0
SW_THERMAL_SLOWDOWN_C = 82  # field notes: throttling starts at 82 C
THROTTLE_MHZ_PER_C = 100.0  # clock taken off per degree above SW_THERMAL_SLOWDOWN_C - 1
THROTTLE_FLOOR_MHZ = 1000.0
DEFAULT_THERMAL_TAU_S = 30.0
THERMAL_MAX_STEP_S = 3600.0  # a longer gap is the same as reaching steady state
THERMAL_STEADY_TAUS = 20.0  # so is a gap of this many time constants (exp(-20): 2e-9 to go)
THERMAL_STEPS_PER_TAU = 10  # integration steps per time constant
THERMAL_CLOCK_SKEW_S = 600.0  # a `thermal` time further ahead than this is from a wrong clock
AMBIENT_OFFSET_LIMIT_C = 100.0  # |ambient_offset_c| beyond this is clamped

NA = None  # a value the device does not report


# --------------------------------------------------------------------------------------------
# The device, its state, and a sample of its telemetry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """What does not change while the node runs: identity and fixed capabilities."""

    uuid: str
    index: int = 0
    name: str = "NVIDIA GB10"
    bus_id: str = "0000000F:01:00.0"
    driver_version: str = "580.142"
    cuda_version: str = "13.0"
    architecture: str = "Blackwell"
    compute_cap: str = "12.1"
    persistence_mode: bool = True
    addressing_mode: str = "ATS"
    max_sm_clock_mhz: int = 3003
    applications_clock_mhz: int = 2418
    memory_total_mib: int | None = NA  # unified memory: the GPU has no memory of its own
    power_limit_w: float | None = NA  # GB10 reports no power limits
    ecc_summary: str = "N/A"  # "Volatile Uncorr. ECC" cell of the summary table
    mig_summary: str = "N/A"  # "MIG M." cell of the summary table
    display_active: bool = False


@dataclass(frozen=True)
class ClockLock:
    """An SM clock range set with -lgc."""

    min_mhz: int
    max_mhz: int


@dataclass(frozen=True)
class GpuState:
    """The inputs of the telemetry model: what the lab (or a test) controls."""

    load: float = 0.0  # 0.0 idle ... 1.0 saturated
    lock: ClockLock | None = None
    seed: str = ""
    temperature_c: float | None = None  # the thermal model's; None: steady state of the inputs
    ambient_offset_c: float = 0.0  # test equipment (state file `ambient_offset_c`)
    silicon_factor: float | None = None  # None: drawn from the seed


@dataclass(frozen=True)
class PowerSamples:
    """The "Power Samples" block of `nvidia-smi -q -d POWER`."""

    duration_s: float
    count: int
    max_w: float
    min_w: float
    avg_w: float


@dataclass(frozen=True)
class Sample:
    """One reading of the device, as nvidia-smi would report it at `timestamp`."""

    timestamp: float
    sm_clock_mhz: int
    power_draw_w: float  # averaged over about 1 s (power.draw, power.draw.average)
    power_instant_w: float
    temperature_c: int
    utilization_gpu: int
    utilization_memory: int
    pstate: str
    event_reasons: int
    power_samples: PowerSamples
    memory_used_mib: int | None = NA
    fan_speed: int | None = NA


def quantize_clock(mhz: float) -> int:
    """Snap a clock to the GB10 6.5 MHz grid, truncated as the driver reports it."""
    return math.floor(round(mhz / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ)


def _clamp_load(load: float) -> float:
    return min(max(load, 0.0), 1.0) if math.isfinite(load) else 0.0


# The mean of the saturated clock readings: what a power reading averaged over ~1 s sees.
_SATURATED_READINGS = [quantize_clock(step * CLOCK_STEP_MHZ) for step in LOAD_SM_CLOCK_STEPS]
SATURATED_MEAN_MHZ = sum(_SATURATED_READINGS) / len(_SATURATED_READINGS)


def silicon_factor(state: GpuState) -> float:
    """How much dynamic power (and package heat) this chip makes, relative to reference node A.

    Drawn from the seed (the hostname by default), so a node keeps its own: between node B's 0.78
    and node A's 1.0, as no two GB10s draw quite the same at the same clock.
    """
    if state.silicon_factor is not None:
        return state.silicon_factor
    digest = hashlib.sha256(f"gx10-sim-silicon:{state.seed}".encode()).digest()
    unit = int.from_bytes(digest[:4], "big") / 2**32
    return SILICON_FACTOR_MIN + (SILICON_FACTOR_MAX - SILICON_FACTOR_MIN) * unit


def dynamic_power_w(clock_mhz: float) -> float:
    """Reference node A's dynamic power at load 1.0 and this SM clock (DYNAMIC_POWER_CURVE)."""
    points = DYNAMIC_POWER_CURVE
    if clock_mhz <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if clock_mhz <= x1:
            return y0 + (y1 - y0) * (clock_mhz - x0) / (x1 - x0)
    return points[-1][1]


def temperature_reading(temperature_c: float) -> int:
    """The whole degrees nvidia-smi shows for a model temperature."""
    return math.floor(temperature_c + 0.5)


def thermal_clock_limit(temperature_c: float) -> float | None:
    """The SM clock SW thermal slowdown allows at this temperature; None below 82 C."""
    if temperature_reading(temperature_c) < SW_THERMAL_SLOWDOWN_C:
        return None
    above = temperature_c - (SW_THERMAL_SLOWDOWN_C - 1)
    return max(SATURATED_SM_CLOCK_MHZ - THROTTLE_MHZ_PER_C * above, THROTTLE_FLOOR_MHZ)


def effective_clock_mhz(state: GpuState, temperature_c: float) -> float:
    """The SM clock under load averaged over a power reading: saturated, capped, throttled."""
    clock = SATURATED_MEAN_MHZ
    if state.lock is not None:
        clock = min(clock, state.lock.max_mhz)
    limit = thermal_clock_limit(temperature_c)
    if limit is not None:
        clock = min(clock, limit)
    return clock


def mean_power_w(state: GpuState, temperature_c: float) -> float:
    """Power draw without reading noise: idle + load x silicon x dynamic power at the clock."""
    load = _clamp_load(state.load)
    if load <= 0.0:
        return IDLE_POWER_W
    dynamic = dynamic_power_w(effective_clock_mhz(state, temperature_c))
    return IDLE_POWER_W + load * silicon_factor(state) * dynamic


def steady_temperature_c(state: GpuState, power_w: float) -> float:
    """Where the temperature heads while the device draws `power_w` under `state`."""
    load = _clamp_load(state.load)
    return (
        IDLE_TEMPERATURE_C
        + KELVIN_PER_WATT * (power_w - IDLE_POWER_W)
        + LOAD_HEAT_C * load * silicon_factor(state)
        + state.ambient_offset_c
    )


def thermal_step(state: GpuState, temperature_c: float, dt_s: float, tau_s: float) -> float:
    """The temperature `dt_s` seconds on, under `state` (first-order lag, time constant tau).

    In steps of at most tau/10, each holding the power of its starting temperature, so thermal
    slowdown's feedback is followed; a negative step (clock skew) is none, and a step beyond
    THERMAL_STEADY_TAUS time constants is the steady state (so is any step with tau 0).
    """
    dt = min(max(dt_s, 0.0), THERMAL_MAX_STEP_S)
    if tau_s <= 0.0 or dt >= THERMAL_STEADY_TAUS * tau_s:
        return equilibrium_temperature_c(state)
    steps = max(math.ceil(dt * THERMAL_STEPS_PER_TAU / tau_s), 1)
    decay = math.exp(-dt / steps / tau_s)
    for _ in range(steps):
        target = steady_temperature_c(state, mean_power_w(state, temperature_c))
        temperature_c = target + (temperature_c - target) * decay
    return temperature_c


def equilibrium_temperature_c(state: GpuState) -> float:
    """The temperature `state` settles at: T = T_ss(power(T)), thermal slowdown feeding back.

    T_ss(power(T)) - T only falls as T rises (slowdown lowers the power), so bisection finds it;
    under slowdown the device settles near 82 C, as a real GPU holds its slowdown point.
    """
    low, high = -100.0, 300.0
    for _ in range(60):
        middle = (low + high) / 2
        if steady_temperature_c(state, mean_power_w(state, middle)) > middle:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def sample(state: GpuState, now: float) -> Sample:
    """The telemetry the device shows at `now` for `state`.

    The clock/power/thermal model of the module docstring. `state.temperature_c` is the thermal
    model's current temperature (see `advance`); None means the steady state of the inputs (a
    node that has been in this state for a while). Jitter is drawn from (seed, now) so a given
    seed and time always read the same.
    """
    rng = random.Random(f"gx10-nvidia-smi:{state.seed}:{int(now * 1000)}")
    load = _clamp_load(state.load)
    busy = load > 0.0
    temperature = state.temperature_c
    if temperature is None:
        temperature = equilibrium_temperature_c(state)

    natural = (
        quantize_clock(rng.choice(LOAD_SM_CLOCK_STEPS) * CLOCK_STEP_MHZ)
        if busy
        else IDLE_SM_CLOCK_MHZ
    )
    clock = natural
    reasons = 0 if busy else REASON_GPU_IDLE
    if state.lock is not None and state.lock.max_mhz < natural:
        # A lock is an upper bound in practice: raising the minimum above what the chip
        # reaches under load has no effect on GB10 (-lgc 3003 still reads about 2480).
        clock = state.lock.max_mhz
        reasons |= REASON_APPLICATIONS_CLOCKS_SETTING
    limit = thermal_clock_limit(temperature)
    if limit is not None:
        reasons |= REASON_SW_THERMAL_SLOWDOWN
        if limit < clock:
            clock = math.floor(math.floor(limit / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ)

    idle_power = IDLE_POWER_W + rng.uniform(-0.6, 0.6)
    dynamic = mean_power_w(state, temperature) - IDLE_POWER_W
    power = max(idle_power + dynamic + (rng.uniform(-1.5, 1.5) if busy else 0.0), 0.5)
    instant = max(power + rng.uniform(-0.4, 0.4) * (1.0 + dynamic / 10.0), 0.5)

    util_gpu = min(max(round(load * 96 + rng.uniform(-2.0, 2.0)), 1), 100) if busy else 0
    util_mem = min(max(round(load * 30 + rng.uniform(-2.0, 2.0)), 0), 100) if busy else 0
    spread = 0.3 + dynamic * 0.03
    samples = PowerSamples(
        duration_s=round(rng.uniform(2.30, 2.45), 2),
        count=rng.randint(115, 122),
        max_w=power + spread + rng.uniform(0.0, spread),
        min_w=max(power - spread - rng.uniform(0.0, spread), 0.5),
        avg_w=power + rng.uniform(-0.1, 0.1),
    )
    return Sample(
        timestamp=now,
        sm_clock_mhz=clock,
        power_draw_w=power,
        power_instant_w=instant,
        temperature_c=temperature_reading(temperature),
        utilization_gpu=util_gpu,
        utilization_memory=util_mem,
        pstate="P0" if busy else "P8",
        event_reasons=reasons,
        power_samples=samples,
    )


# --------------------------------------------------------------------------------------------
# Configuration and persisted state
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimConfig:
    """Settings read from the environment (see the module docstring)."""

    state_dir: Path
    seed: str
    gpu_uuid: str
    max_loops: int | None
    euid: int
    thermal_tau_s: float | None = None  # GX10_SIM_THERMAL_TAU_S; the state file wins

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SimConfig:
        hostname = socket.gethostname()
        raw_uuid = env.get("GX10_SIM_GPU_UUID", "").strip()
        if raw_uuid:
            gpu_uuid = raw_uuid if raw_uuid.startswith("GPU-") else f"GPU-{raw_uuid}"
        else:
            gpu_uuid = default_gpu_uuid(hostname)
        return cls(
            state_dir=Path(env.get("GX10_SIM_STATE_DIR") or DEFAULT_STATE_DIR),
            seed=env.get("GX10_SIM_SEED", hostname),
            gpu_uuid=gpu_uuid,
            max_loops=_positive_int(env.get("GX10_SIM_MAX_LOOPS")),
            euid=_int_or(env.get("GX10_SIM_EUID"), os.geteuid()),
            thermal_tau_s=_duration(env.get("GX10_SIM_THERMAL_TAU_S")),
        )


def default_gpu_uuid(hostname: str) -> str:
    """A GPU UUID that stays the same for a node name (real UUIDs are burnt into the chip)."""
    namespace = uuid.uuid5(uuid.NAMESPACE_DNS, "nvidia-smi.sim.gx10")
    return f"GPU-{uuid.uuid5(namespace, hostname)}"


def _positive_int(text: str | None) -> int | None:
    value = _int_or(text, 0)
    return value if value > 0 else None


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None and text.strip() else default
    except ValueError:
        return default


def _duration(text: str | None) -> float | None:
    """A time constant in seconds (>= 0); None when absent or malformed."""
    value = _float_or_none(text)
    return value if value is not None and value >= 0.0 else None


def _float_or_none(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None and text.strip() else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _read_float(path: Path) -> float | None:
    try:
        return _float_or_none(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def load_state(config: SimConfig) -> GpuState:
    """Read the model's inputs (load, clock lock, ambient offset); a missing or unreadable file
    means the default. The temperature is left to `advance`."""
    load = _read_float(config.state_dir / LOAD_FILE) or 0.0
    offset = _read_float(config.state_dir / AMBIENT_OFFSET_FILE) or 0.0
    return GpuState(
        load=_clamp_load(load),
        lock=read_lock(config.state_dir),
        seed=config.seed,
        ambient_offset_c=min(max(offset, -AMBIENT_OFFSET_LIMIT_C), AMBIENT_OFFSET_LIMIT_C),
    )


def thermal_tau_s(config: SimConfig) -> float:
    """The thermal time constant: the `thermal_tau_s` file, else GX10_SIM_THERMAL_TAU_S, else 30."""
    from_file = _duration(_read_text(config.state_dir / THERMAL_TAU_FILE))
    if from_file is not None:
        return from_file
    return config.thermal_tau_s if config.thermal_tau_s is not None else DEFAULT_THERMAL_TAU_S


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class Thermal:
    """The persisted thermal state: the model temperature and the time it held."""

    temperature_c: float
    timestamp: float


def read_thermal(state_dir: Path) -> Thermal | None:
    parts = (_read_text(state_dir / THERMAL_FILE) or "").split()
    values = [_float_or_none(part) for part in parts]
    if len(values) != 2 or values[0] is None or values[1] is None:
        return None
    return Thermal(values[0], values[1])


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text` in one rename: a reader sees the old or the new file, whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_thermal(state_dir: Path, thermal: Thermal) -> None:
    _write_atomically(
        state_dir / THERMAL_FILE, f"{thermal.temperature_c:.4f} {thermal.timestamp:.3f}\n"
    )


@contextlib.contextmanager
def state_mutex(state_dir: Path) -> Iterator[bool]:
    """Hold the state directory's flock (serialises read-advance-write across invocations).

    Yields False, holding nothing, where the lock cannot be taken (no permission to create the
    directory or the lock file): the caller then must not write the shared state.
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / MUTEX_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        fd = -1
    if fd < 0:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _advance_locked(config: SimConfig, now: float, persist: bool) -> GpuState:
    state = load_state(config)
    previous = read_thermal(config.state_dir)
    if previous is None:
        temperature, stamp = equilibrium_temperature_c(state), now
    else:
        dt = now - previous.timestamp
        temperature = thermal_step(state, previous.temperature_c, dt, thermal_tau_s(config))
        # An invocation that took its time to get the lock does not move the time backwards; a
        # time far ahead came from a clock since set back, and would freeze the model: drop it.
        stamp = now if dt < -THERMAL_CLOCK_SKEW_S else max(now, previous.timestamp)
    if persist:
        with contextlib.suppress(OSError):  # a read-only state dir: the model just does not keep
            write_thermal(config.state_dir, Thermal(temperature, stamp))
    return replace(state, temperature_c=temperature)


def advance(config: SimConfig, now: float) -> GpuState:
    """Step the thermal model to `now` under the current inputs; the state to sample.

    The inputs (load, cap, ambient offset) are taken to have held since the last invocation;
    -lgc/-rgc advance the model before changing the cap, so a cap change takes effect from then.
    """
    with state_mutex(config.state_dir) as locked:
        return _advance_locked(config, now, persist=locked)


def read_lock(state_dir: Path) -> ClockLock | None:
    try:
        text = (state_dir / LOCK_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    return parse_clock_pair(text.strip())


def write_lock(state_dir: Path, lock: ClockLock | None) -> None:
    """Persist (or clear) the lock so later invocations see it, as the driver remembers it."""
    path = state_dir / LOCK_FILE
    if lock is None:
        path.unlink(missing_ok=True)
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, f"{lock.min_mhz},{lock.max_mhz}\n")


def parse_clock_pair(text: str) -> ClockLock | None:
    """`MIN,MAX` or a single `CLOCK` (min = max), in MHz; None when malformed."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    low, high = int(parts[0]), int(parts[1])
    if low <= 0 or low > high:
        return None
    return ClockLock(low, high)


# --------------------------------------------------------------------------------------------
# --query-gpu fields
# --------------------------------------------------------------------------------------------

Value: TypeAlias = str | int | float | None


@dataclass(frozen=True)
class Field:
    """A --query-gpu property: the header shows `name [unit]` whichever alias was asked for."""

    name: str
    unit: str | None
    value: Callable[[Device, Sample], Value]
    aliases: tuple[str, ...] = ()
    help: str = ""

    @property
    def header(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit else self.name

    def render(self, device: Device, reading: Sample, units: bool) -> str:
        value = self.value(device, reading)
        if value is None:
            return "[N/A]"  # also with nounits
        text = f"{value:.2f}" if isinstance(value, float) else str(value)
        return f"{text} {self.unit}" if units and self.unit else text


def _reason(bit: int) -> Callable[[Device, Sample], Value]:
    return lambda _d, s: "Active" if s.event_reasons & bit else "Not Active"


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _memory_free(device: Device, reading: Sample) -> Value:
    if device.memory_total_mib is None or reading.memory_used_mib is None:
        return None
    return device.memory_total_mib - reading.memory_used_mib


def format_timestamp(now: float) -> str:
    """`YYYY/MM/DD HH:MM:SS.msec`, local time, as the timestamp field prints it."""
    millis = int(now * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{millis:03d}"


_REASON_ALIASES = ("clocks_event_reasons", "clocks_throttle_reasons")

FIELDS: tuple[Field, ...] = (
    Field(
        "timestamp",
        None,
        lambda _d, s: format_timestamp(s.timestamp),
        help='The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".',
    ),
    Field(
        "driver_version",
        None,
        lambda d, _s: d.driver_version,
        help="The version of the installed NVIDIA display driver.",
    ),
    Field("count", None, lambda _d, _s: 1, help="The number of NVIDIA GPUs in the system."),
    Field(
        "name",
        None,
        lambda d, _s: d.name,
        ("gpu_name",),
        help="The official product name of the GPU.",
    ),
    Field(
        "uuid",
        None,
        lambda d, _s: d.uuid,
        ("gpu_uuid",),
        help="The globally unique immutable alphanumeric identifier of the GPU.",
    ),
    Field(
        "pci.bus_id",
        None,
        lambda d, _s: d.bus_id,
        ("gpu_bus_id",),
        help='PCI bus id as "domain:bus:device.function", in hex.',
    ),
    Field("index", None, lambda d, _s: d.index, help="Zero based index of the GPU."),
    Field(
        "persistence_mode",
        None,
        lambda d, _s: _enabled(d.persistence_mode),
        help="Whether persistence mode is enabled for the GPU.",
    ),
    Field(
        "addressing_mode",
        None,
        lambda d, _s: d.addressing_mode,
        help="The addressing mode of the GPU: HMM, ATS or None.",
    ),
    Field("fan.speed", "%", lambda _d, s: s.fan_speed, help="The intended fan speed."),
    Field(
        "pstate",
        None,
        lambda _d, s: s.pstate,
        help="The current performance state for the GPU (P0 maximum ... P12 minimum).",
    ),
    Field(
        "clocks_event_reasons.active",
        None,
        lambda _d, s: f"0x{s.event_reasons:016X}",
        ("clocks_throttle_reasons.active",),
        help="Bitmask of active clock event reasons. See nvml.h for more details.",
    ),
    *(
        Field(
            f"clocks_event_reasons.{suffix}",
            None,
            _reason(bit),
            (f"clocks_throttle_reasons.{suffix}",),
            help=f"Clock event reason 0x{bit:X}.",
        )
        for suffix, bit in (
            ("gpu_idle", REASON_GPU_IDLE),
            ("applications_clocks_setting", REASON_APPLICATIONS_CLOCKS_SETTING),
            ("sw_power_cap", REASON_SW_POWER_CAP),
            ("hw_slowdown", REASON_HW_SLOWDOWN),
            ("hw_thermal_slowdown", REASON_HW_THERMAL_SLOWDOWN),
            ("hw_power_brake_slowdown", REASON_HW_POWER_BRAKE_SLOWDOWN),
            ("sw_thermal_slowdown", REASON_SW_THERMAL_SLOWDOWN),
            ("sync_boost", REASON_SYNC_BOOST),
        )
    ),
    Field(
        "memory.total", "MiB", lambda d, _s: d.memory_total_mib, help="Total installed GPU memory."
    ),
    Field(
        "memory.reserved",
        "MiB",
        lambda d, _s: None if d.memory_total_mib is None else 0,
        help="Total memory reserved by the NVIDIA driver and firmware.",
    ),
    Field(
        "memory.used",
        "MiB",
        lambda _d, s: s.memory_used_mib,
        help="Total memory allocated by active contexts.",
    ),
    Field("memory.free", "MiB", _memory_free, help="Total free memory."),
    Field("compute_mode", None, lambda _d, _s: "Default", help="The compute mode flag."),
    Field(
        "compute_cap",
        None,
        lambda d, _s: d.compute_cap,
        help="The CUDA Compute Capability, represented as Major DOT Minor.",
    ),
    Field(
        "utilization.gpu",
        "%",
        lambda _d, s: s.utilization_gpu,
        help="Percent of time over the past sample period during which a kernel ran.",
    ),
    Field(
        "utilization.memory",
        "%",
        lambda _d, s: s.utilization_memory,
        help="Percent of time over the past sample period memory was read or written.",
    ),
    Field(
        "temperature.gpu",
        None,
        lambda _d, s: s.temperature_c,
        help="Core GPU temperature, in degrees C.",
    ),
    Field(
        "power.draw",
        "W",
        lambda _d, s: s.power_draw_w,
        help="The last measured power draw for the entire board, in watts.",
    ),
    Field(
        "power.draw.average",
        "W",
        lambda _d, s: s.power_draw_w,
        help="The last measured average power draw for the entire board, in watts.",
    ),
    Field(
        "power.draw.instant",
        "W",
        lambda _d, s: s.power_instant_w,
        help="The last measured instant power draw for the entire board, in watts.",
    ),
    *(
        Field(name, "W", lambda d, _s: d.power_limit_w, help=text)
        for name, text in (
            ("power.limit", "The software power limit in watts."),
            ("enforced.power.limit", "The power management algorithm's power ceiling, in watts."),
            ("power.default_limit", "The default power management algorithm's power ceiling."),
            ("power.min_limit", "The minimum value in watts that power limit can be set to."),
            ("power.max_limit", "The maximum value in watts that power limit can be set to."),
        )
    ),
    Field(
        "clocks.current.graphics",
        "MHz",
        lambda _d, s: s.sm_clock_mhz,
        ("clocks.gr",),
        help="Current frequency of graphics (shader) clock.",
    ),
    Field(
        "clocks.current.sm",
        "MHz",
        lambda _d, s: s.sm_clock_mhz,
        ("clocks.sm",),
        help="Current frequency of SM (Streaming Multiprocessor) clock.",
    ),
    Field(
        "clocks.current.memory",
        "MHz",
        lambda _d, _s: None,
        ("clocks.mem",),
        help="Current frequency of memory clock.",
    ),
    Field(
        "clocks.applications.graphics",
        "MHz",
        lambda d, _s: d.applications_clock_mhz,
        ("clocks.applications.gr",),
        help="User specified frequency of graphics clock.",
    ),
    Field(
        "clocks.default_applications.graphics",
        "MHz",
        lambda d, _s: d.applications_clock_mhz,
        ("clocks.default_applications.gr",),
        help="Default frequency of applications graphics clock.",
    ),
    Field(
        "clocks.max.graphics",
        "MHz",
        lambda d, _s: d.max_sm_clock_mhz,
        ("clocks.max.gr",),
        help="Maximum frequency of graphics (shader) clock.",
    ),
    Field(
        "clocks.max.sm",
        "MHz",
        lambda d, _s: d.max_sm_clock_mhz,
        ("clocks.max.sm",),
        help="Maximum frequency of SM (Streaming Multiprocessor) clock.",
    ),
    Field(
        "clocks.max.memory",
        "MHz",
        lambda _d, _s: None,
        ("clocks.max.mem",),
        help="Maximum frequency of memory clock.",
    ),
)

FIELDS_BY_NAME: dict[str, Field] = {
    alias: spec for spec in FIELDS for alias in (spec.name, *spec.aliases)
}


def render_csv_header(fields: Sequence[Field]) -> str:
    return ", ".join(spec.header for spec in fields) + "\n"


def render_csv_row(fields: Sequence[Field], device: Device, reading: Sample, units: bool) -> str:
    return ", ".join(spec.render(device, reading, units) for spec in fields) + "\n"


# --------------------------------------------------------------------------------------------
# `nvidia-smi` (summary table) and `nvidia-smi -L`
# --------------------------------------------------------------------------------------------

_BAR = "+" + "-" * 89 + "+"
_GPU_RULE = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
_GPU_HEADER = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|=========================================+========================+======================|",
)
_PROCESSES = (
    "| Processes:                                                                              |",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|=========================================================================================|",
    "|  No running processes found                                                             |",
)


def render_summary(device: Device, reading: Sample) -> str:
    d, s = device, reading
    version = d.driver_version
    fan = "N/A" if s.fan_speed is None else f"{s.fan_speed}%"
    usage = f"{int(s.power_draw_w)}W"
    cap = " N/A " if d.power_limit_w is None else f"{int(d.power_limit_w)}W".rjust(5)
    if d.memory_total_mib is None or s.memory_used_mib is None:
        memory = " Not Supported".ljust(24)
    else:
        used, total = f"{s.memory_used_mib}MiB", f"{d.memory_total_mib}MiB"
        memory = f"{used:>11} / {total:>9} "
    persistence = "On" if d.persistence_mode else "Off"
    display = "On" if d.display_active else "Off"
    lines = [
        time.ctime(s.timestamp) + " " * 7,
        _BAR,
        f"| NVIDIA-SMI {version:<22} Driver Version: {version:<14} "
        f"CUDA Version: {d.cuda_version:<9}|",
        _GPU_RULE,
        *_GPU_HEADER,
        f"|{d.index:>4}  {d.name:<29} {persistence:>3}  |   {d.bus_id} {display:>3} "
        f"| {d.ecc_summary:>20} |",
        f"| {fan:>3}  {s.temperature_c:>3}C    {s.pstate:<2}{usage:>16} / {cap} |{memory}"
        f"| {s.utilization_gpu:>6}%      {'Default':<7} |",
        f"|{'':41}|{'':24}| {d.mig_summary:>20} |",
        _GPU_RULE,
        "",
        _BAR,
        *_PROCESSES,
        _BAR,
    ]
    return "\n".join(lines) + "\n"


def render_list(device: Device) -> str:
    return f"GPU {device.index}: {device.name} (UUID: {device.uuid})\n"


# --------------------------------------------------------------------------------------------
# `nvidia-smi -q [-d ...]` (NVSMI LOG)
# --------------------------------------------------------------------------------------------

KEY_WIDTH = 54  # the value column starts at 57 in driver 580 output

# Display types the real tool accepts for -d; only those in QUERY_SECTIONS print anything here.
DISPLAY_TYPES = frozenset(
    {
        "MEMORY",
        "UTILIZATION",
        "ECC",
        "TEMPERATURE",
        "POWER",
        "CLOCK",
        "COMPUTE",
        "PIDS",
        "PERFORMANCE",
        "SUPPORTED_CLOCKS",
        "PAGE_RETIREMENT",
        "ACCOUNTING",
        "ENCODER_STATS",
        "SUPPORTED_GPU_TARGET_TEMP",
        "VOLTAGE",
        "FBC_STATS",
        "ROW_REMAPPER",
        "RESET_STATUS",
        "GSP_FIRMWARE_VERSION",
        "POWER_SMOOTHING",
        "POWER_PROFILES",
    }
)


def _kv(depth: int, key: str, value: object) -> str:
    return f"{'    ' * depth + key:<{KEY_WIDTH}} : {value}"


def _title(depth: int, title: str) -> str:
    return "    " * depth + title


def _mhz(value: int | None) -> str:
    return "N/A" if value is None else f"{value} MHz"


def _watts(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f} W"


def _active(reading: Sample, bit: int) -> str:
    return "Active" if reading.event_reasons & bit else "Not Active"


def _identity_section(d: Device, s: Sample) -> list[str]:
    bus = d.bus_id.split(":")
    return [
        _kv(1, "Product Name", d.name),
        _kv(1, "Product Architecture", d.architecture),
        _kv(1, "Persistence Mode", _enabled(d.persistence_mode)),
        _kv(1, "Addressing Mode", d.addressing_mode),
        _kv(1, "GPU UUID", d.uuid),
        _kv(1, "Minor Number", d.index),
        _title(1, "PCI"),
        _kv(2, "Bus", f"0x{bus[1]}"),
        _kv(2, "Device", f"0x{bus[2].split('.')[0]}"),
        _kv(2, "Domain", f"0x{bus[0][-4:]}"),
        _kv(2, "Bus Id", d.bus_id),
        _kv(1, "Fan Speed", "N/A" if s.fan_speed is None else f"{s.fan_speed} %"),
    ]


def _performance_section(_d: Device, s: Sample) -> list[str]:
    return [
        _kv(1, "Performance State", s.pstate),
        _title(1, "Clocks Event Reasons"),
        _kv(2, "Idle", _active(s, REASON_GPU_IDLE)),
        _kv(2, "Applications Clocks Setting", _active(s, REASON_APPLICATIONS_CLOCKS_SETTING)),
        _kv(2, "SW Power Cap", _active(s, REASON_SW_POWER_CAP)),
        _kv(2, "HW Slowdown", _active(s, REASON_HW_SLOWDOWN)),
        _kv(3, "HW Thermal Slowdown", _active(s, REASON_HW_THERMAL_SLOWDOWN)),
        _kv(3, "HW Power Brake Slowdown", _active(s, REASON_HW_POWER_BRAKE_SLOWDOWN)),
        _kv(2, "Sync Boost", _active(s, REASON_SYNC_BOOST)),
        _kv(2, "SW Thermal Slowdown", _active(s, REASON_SW_THERMAL_SLOWDOWN)),
        _kv(2, "Display Clock Setting", _active(s, REASON_DISPLAY_CLOCK_SETTING)),
        _title(1, "Clocks Event Reasons Counters"),
        _kv(2, "SW Power Capping", "0 us"),
        _kv(2, "Sync Boost", "0 us"),
        _kv(2, "SW Thermal Slowdown", "0 us"),
        _kv(2, "HW Thermal Slowdown", "0 us"),
        _kv(2, "HW Power Braking", "0 us"),
        _kv(1, "Sparse Operation Mode", "Disabled"),
    ]


def _memory_section(d: Device, s: Sample) -> list[str]:
    def mib(value: Value) -> str:
        return "N/A" if value is None else f"{value} MiB"

    return [
        _title(1, "FB Memory Usage"),
        _kv(2, "Total", mib(d.memory_total_mib)),
        _kv(2, "Reserved", mib(None if d.memory_total_mib is None else 0)),
        _kv(2, "Used", mib(s.memory_used_mib)),
        _kv(2, "Free", mib(_memory_free(d, s))),
    ]


def _compute_section(_d: Device, _s: Sample) -> list[str]:
    return [_kv(1, "Compute Mode", "Default")]


def _utilization_section(_d: Device, s: Sample) -> list[str]:
    return [
        _title(1, "Utilization"),
        _kv(2, "GPU", f"{s.utilization_gpu} %"),
        _kv(2, "Memory", f"{s.utilization_memory} %"),
        _kv(2, "Encoder", "0 %"),
        _kv(2, "Decoder", "0 %"),
        _kv(2, "JPEG", "0 %"),
        _kv(2, "OFA", "0 %"),
    ]


def _temperature_section(_d: Device, s: Sample) -> list[str]:
    return [
        _title(1, "Temperature"),
        _kv(2, "GPU Current Temp", f"{s.temperature_c} C"),
        _kv(2, "GPU T.Limit Temp", "N/A"),
        _kv(2, "GPU Shutdown T.Limit Temp", "N/A"),
        _kv(2, "GPU Slowdown T.Limit Temp", "N/A"),
        _kv(2, "GPU Max Operating T.Limit Temp", "N/A"),
        _kv(2, "GPU Target Temperature", "N/A"),
        _kv(2, "Memory Current Temp", "N/A"),
        _kv(2, "Memory Max Operating T.Limit Temp", "N/A"),
    ]


def _power_section(d: Device, s: Sample) -> list[str]:
    limit = _watts(d.power_limit_w)
    p = s.power_samples
    return [
        _title(1, "GPU Power Readings"),
        _kv(2, "Average Power Draw", _watts(s.power_draw_w)),
        _kv(2, "Instantaneous Power Draw", _watts(s.power_instant_w)),
        _kv(2, "Current Power Limit", limit),
        _kv(2, "Requested Power Limit", limit),
        _kv(2, "Default Power Limit", limit),
        _kv(2, "Min Power Limit", limit),
        _kv(2, "Max Power Limit", limit),
        _title(1, "Power Samples"),
        _kv(2, "Duration", f"{p.duration_s:.2f} sec"),
        _kv(2, "Number of Samples", p.count),
        _kv(2, "Max", _watts(p.max_w)),
        _kv(2, "Min", _watts(p.min_w)),
        _kv(2, "Avg", _watts(p.avg_w)),
        _title(1, "GPU Memory Power Readings "),  # the trailing space is in the real output
        _kv(2, "Average Power Draw", "N/A"),
        _kv(2, "Instantaneous Power Draw", "N/A"),
        _title(1, "Module Power Readings"),
        *(
            _kv(2, key, "N/A")
            for key in (
                "Average Power Draw",
                "Instantaneous Power Draw",
                "Current Power Limit",
                "Requested Power Limit",
                "Default Power Limit",
                "Min Power Limit",
                "Max Power Limit",
            )
        ),
    ]


def _clock_section(d: Device, s: Sample) -> list[str]:
    not_found = [
        _kv(2, key, "Not Found") for key in ("Duration", "Number of Samples", "Max", "Min", "Avg")
    ]
    return [
        _title(1, "Clocks"),
        _kv(2, "Graphics", _mhz(s.sm_clock_mhz)),
        _kv(2, "SM", _mhz(s.sm_clock_mhz)),
        _kv(2, "Memory", "N/A"),
        _kv(2, "Video", "N/A"),
        _title(1, "Applications Clocks"),
        _kv(2, "Graphics", _mhz(d.applications_clock_mhz)),
        _kv(2, "Memory", "N/A"),
        _title(1, "Default Applications Clocks"),
        _kv(2, "Graphics", _mhz(d.applications_clock_mhz)),
        _kv(2, "Memory", "N/A"),
        _title(1, "Deferred Clocks"),
        _kv(2, "Memory", "N/A"),
        _title(1, "Max Clocks"),
        _kv(2, "Graphics", _mhz(d.max_sm_clock_mhz)),
        _kv(2, "SM", _mhz(d.max_sm_clock_mhz)),
        _kv(2, "Memory", "N/A"),
        _kv(2, "Video", "N/A"),
        _title(1, "Max Customer Boost Clocks"),
        _kv(2, "Graphics", "N/A"),
        _title(1, "SM Clock Samples"),
        *not_found,
        _title(1, "Memory Clock Samples"),
        *not_found,
        _title(1, "Clock Policy"),
        _kv(2, "Auto Boost", "N/A"),
        _kv(2, "Auto Boost Default", "N/A"),
    ]


# In the order the real tool prints them, whatever the order given to -d.
QUERY_SECTIONS: tuple[tuple[str, Callable[[Device, Sample], list[str]]], ...] = (
    ("PERFORMANCE", _performance_section),
    ("MEMORY", _memory_section),
    ("COMPUTE", _compute_section),
    ("UTILIZATION", _utilization_section),
    ("TEMPERATURE", _temperature_section),
    ("POWER", _power_section),
    ("CLOCK", _clock_section),
)


def render_query(device: Device, reading: Sample, display: frozenset[str] | None) -> str:
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", time.ctime(reading.timestamp)),
        _kv(0, "Driver Version", device.driver_version),
        _kv(0, "CUDA Version", device.cuda_version),
        "",
        _kv(0, "Attached GPUs", 1),
        f"GPU {device.bus_id}",
    ]
    if display is None:
        lines += _identity_section(device, reading)
    for name, section in QUERY_SECTIONS:
        if display is None or name in display:
            lines += section(device, reading)
    return "\n".join(lines) + "\n\n"


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


class UsageError(Exception):
    """Bad command line: `message` is printed (stdout, as the real tool does) and exit `code`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class Options:
    list_gpus: bool = False
    query: bool = False
    display: frozenset[str] | None = None
    ids: list[str] = field(default_factory=list)
    query_gpu: list[str] | None = None
    noheader: bool = False
    nounits: bool = False
    loop_ms: int | None = None
    lock: ClockLock | None = None
    reset_clocks: bool = False
    help: bool = False
    version: bool = False
    help_query_gpu: bool = False
    format_given: bool = False


_FLAGS = {
    "-L": "list_gpus",
    "--list-gpus": "list_gpus",
    "-q": "query",
    "--query": "query",
    "-rgc": "reset_clocks",
    "--reset-gpu-clocks": "reset_clocks",
    "-h": "help",
    "--help": "help",
    "--version": "version",
    "--help-query-gpu": "help_query_gpu",
}
_WITH_VALUE = {
    "-i": "id",
    "--id": "id",
    "-d": "display",
    "--display": "display",
    "--query-gpu": "query_gpu",
    "--format": "format",
    "-l": "loop",
    "--loop": "loop",
    "-lms": "loop_ms",
    "--loop-ms": "loop_ms",
    "-lgc": "lock",
    "--lock-gpu-clocks": "lock",
}
DEFAULT_LOOP_S = 5


def parse_args(argv: Sequence[str]) -> Options:
    opts = Options()
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        name, has_inline, inline = token.partition("=")
        if not token.startswith("--") or not has_inline:
            name, inline = token, ""
        if name in _FLAGS and not inline:
            setattr(opts, _FLAGS[name], True)
            continue
        kind = _WITH_VALUE.get(name)
        if kind is None:
            message = f"ERROR: Option {token} is not recognized. {HELP_HINT}\n\n"
            raise UsageError(message, EXIT_OTHER)
        if inline:
            value = inline
        elif kind == "loop" and (i >= len(args) or not args[i].isdigit()):
            value = str(DEFAULT_LOOP_S)  # -l alone loops every 5 s
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            message = f"ERROR: Option {name} is missing its value. {HELP_HINT}\n\n"
            raise UsageError(message, EXIT_OTHER)
        _apply(opts, kind, value)
    _check_combination(opts)
    return opts


def _apply(opts: Options, kind: str, value: str) -> None:
    if kind == "id":
        opts.ids += [part.strip() for part in value.split(",")]
    elif kind == "display":
        names = frozenset(part.strip().upper() for part in value.split(","))
        if not names <= DISPLAY_TYPES:
            raise UsageError(INVALID_COMBINATION, EXIT_INVALID_ARGUMENT)
        opts.display = (opts.display or frozenset()) | names
    elif kind == "query_gpu":
        opts.query_gpu = [part.strip() for part in value.split(",")]
    elif kind == "format":
        parts = {part.strip() for part in value.split(",")}
        if "csv" not in parts or not parts <= {"csv", "noheader", "nounits"}:
            raise UsageError(INVALID_COMBINATION, EXIT_INVALID_ARGUMENT)
        opts.format_given = True
        opts.noheader = "noheader" in parts
        opts.nounits = "nounits" in parts
    elif kind in ("loop", "loop_ms"):
        if not value.isdigit() or int(value) <= 0:
            raise UsageError(INVALID_COMBINATION, EXIT_INVALID_ARGUMENT)
        opts.loop_ms = int(value) * (1000 if kind == "loop" else 1)
    elif kind == "lock":
        lock = parse_clock_pair(value)
        if lock is None:
            raise UsageError(INVALID_COMBINATION, EXIT_INVALID_ARGUMENT)
        opts.lock = lock


def _check_combination(opts: Options) -> None:
    if opts.help or opts.version or opts.help_query_gpu:
        return
    modes = [
        opts.list_gpus,
        opts.query,
        opts.query_gpu is not None,
        opts.lock is not None,
        opts.reset_clocks,
    ]
    invalid = (
        sum(modes) > 1
        or (opts.display is not None and not opts.query)
        or (opts.format_given != (opts.query_gpu is not None))
        or (opts.loop_ms is not None and (opts.lock is not None or opts.reset_clocks))
    )
    if invalid:
        raise UsageError(INVALID_COMBINATION, EXIT_INVALID_ARGUMENT)


def _select(device: Device, ids: Sequence[str]) -> bool:
    """Whether -i/--id names this device (by index, PCI bus id or UUID); no -i means all."""
    accepted = {str(device.index), device.bus_id.upper(), device.uuid.upper()}
    return all(item.upper() in accepted for item in ids)


def render_help(device: Device) -> str:
    return f"""NVIDIA System Management Interface -- v{device.driver_version}

NVSMI provides monitoring information for Tesla and select Quadro devices.
(gx10 lab simulator: one {device.name}; only the options below are implemented.)

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
    --version                   Print version information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU (index, PCI bus id or UUID).
    -l,   --loop=               Probe until Ctrl+C at specified second interval.
    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.

  QUERY OPTIONS:

    -q,   --query               Display GPU or Unit info.
    -d,   --display=            Display only selected information: PERFORMANCE, MEMORY,
                                    COMPUTE, UTILIZATION, TEMPERATURE, POWER, CLOCK.
    --query-gpu=                Information about GPU.
                                Call --help-query-gpu for more info.
    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical values

  DEVICE MODIFICATION OPTIONS:

    -lgc  --lock-gpu-clocks=    Specifies <minGpuClock,maxGpuClock> clocks as a pair
                                (e.g. 1500,1500) that defines the range of desired locked
                                GPU clock speed in MHz.
    -rgc  --reset-gpu-clocks    Resets the Gpu clocks to the default values.
"""


def render_help_query_gpu() -> str:
    lines = ['List of valid properties to query for the switch "--query-gpu":', ""]
    for spec in FIELDS:
        names = " or ".join(f'"{name}"' for name in dict.fromkeys((spec.name, *spec.aliases)))
        lines += [names, spec.help, ""]
    return "\n".join(lines) + "\n"


def render_version(device: Device) -> str:
    return (
        f"NVIDIA-SMI version  : {device.driver_version}\n"
        f"NVML version        : {'.'.join(device.driver_version.split('.')[:2])}\n"
        f"DRIVER version      : {device.driver_version}\n"
        f"CUDA Version        : {device.cuda_version}\n"
    )


def _change_clocks(opts: Options, config: SimConfig, device: Device, out: TextIO) -> int:
    if config.euid != 0:
        out.write(
            "The current user does not have permission to change clocks for GPU "
            f"{device.bus_id}.\nTerminating early due to previous errors.\n"
        )
        return EXIT_NO_PERMISSION
    try:
        with state_mutex(config.state_dir) as locked:
            # The temperature so far followed the old cap: bring it to now before changing it.
            _advance_locked(config, time.time(), persist=locked)
            write_lock(config.state_dir, opts.lock)
    except OSError as error:  # a lab setup problem, not something the real tool can report
        print(f"nvidia-smi simulator: cannot record the clock lock: {error}", file=sys.stderr)
        return EXIT_OTHER
    if opts.lock is not None:
        out.write(
            f'GPU clocks set to "(gpuClkMin {opts.lock.min_mhz}, gpuClkMax {opts.lock.max_mhz})"'
            f" for GPU {device.bus_id}\n"
        )
    out.write("All done.\n")
    return EXIT_OK


def _repeat(
    render: Callable[[Sample, int], str], opts: Options, config: SimConfig, out: TextIO
) -> int:
    """Print one sample, or one per interval under -l/-lms (bounded by GX10_SIM_MAX_LOOPS)."""
    count = 0
    while True:
        now = time.time()
        out.write(render(sample(advance(config, now), now), count))
        out.flush()
        count += 1
        if opts.loop_ms is None or (config.max_loops is not None and count >= config.max_loops):
            return EXIT_OK
        time.sleep(opts.loop_ms / 1000)


def run(opts: Options, config: SimConfig, out: TextIO) -> int:
    device = Device(uuid=config.gpu_uuid)
    if opts.help:
        out.write(render_help(device))
        return EXIT_OK
    if opts.version:
        out.write(render_version(device))
        return EXIT_OK
    if opts.help_query_gpu:
        out.write(render_help_query_gpu())
        return EXIT_OK
    fields: list[Field] = []
    for name in opts.query_gpu or []:
        spec = FIELDS_BY_NAME.get(name)
        if spec is None:
            out.write(f'Field "{name}" is not a valid field to query.\n\n')
            return EXIT_INVALID_ARGUMENT
        fields.append(spec)
    if not _select(device, opts.ids):
        out.write("No devices were found\n")
        return EXIT_NOT_FOUND
    if opts.lock is not None or opts.reset_clocks:
        return _change_clocks(opts, config, device, out)
    if opts.list_gpus:
        out.write(render_list(device))
        return EXIT_OK
    if opts.query_gpu is not None:
        units = not opts.nounits
        header = "" if opts.noheader else render_csv_header(fields)
        return _repeat(
            lambda s, n: (header if n == 0 else "") + render_csv_row(fields, device, s, units),
            opts,
            config,
            out,
        )
    if opts.query:
        return _repeat(lambda s, _n: render_query(device, s, opts.display), opts, config, out)
    return _repeat(lambda s, _n: render_summary(device, s), opts, config, out)


def main(argv: list[str] | None = None) -> int:
    out = sys.stdout
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        out.write(error.message)
        return error.code
    try:
        return run(opts, SimConfig.from_env(os.environ), out)
    except KeyboardInterrupt:  # Ctrl+C ends -l/-lms loops, as with the real tool
        return EXIT_OK
    except BrokenPipeError:  # e.g. `nvidia-smi -lms 100 | head -3`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
