"""Everything the simulator reads from the environment, once, at start.

The package docstring lists the variables; SimEnv.from_env reads them."""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .perf import DEFAULT_PERF_MODEL

DEFAULT_VERSION = "0.11.1+gx10sim"
DEFAULT_STALL_FILE = "/run/gx10-vllm-sim/stall"  # stall mode's switch (see GX10_SIM_STALL_FILE)
DEFAULT_BREAK_FILE = "/run/gx10-vllm-sim/break"  # the battery's break switch (breaks.py)


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env[name])
    except (KeyError, ValueError):
        return default


def _gib_env(env: Mapping[str, str], name: str) -> float | None:
    """A size in GiB, or None when unset; a value that is no size >= 0 is refused at start
    (SimEnv.problems), not read as a default: a memory model must not guess."""
    text = (env.get(name) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return float("nan")
    return value if value >= 0 else float("nan")


@dataclass(frozen=True)
class SimEnv:
    """Everything read from the environment, once, at start."""

    boot_seconds: float = 2.0
    compile_seconds: float = 0.0
    capture_seconds: float = 0.1
    hang_phase: str | None = None
    rendezvous_timeout: float = 600.0
    sysfs_root: Path = Path("/sys")
    gpus_per_node: int = 1
    time_scale: float = 1.0
    heartbeat_seconds: float = 1.0
    execute_model_timeout: float = 300.0
    perf_model: str = "reference"
    state_dir: Path = Path("/var/lib/gx10-sim/nvidia-smi")
    stall_file: Path = Path(DEFAULT_STALL_FILE)
    breaks: tuple[str, ...] = ()
    break_file: Path = Path(DEFAULT_BREAK_FILE)
    sm_clock_mhz: float | None = None
    prefix_cache_tokens: int = 2_097_152
    spec_acceptance: float = 0.85
    # The memory model (memory.py): the node's memory and the checkpoint's size, in GiB; None
    # reads them from the node (/proc/meminfo) and the model directory.
    mem_total_gib: float | None = None
    mem_available_gib: float | None = None
    weights_gib: float | None = None
    seed: int = 0
    version: str = DEFAULT_VERSION
    log_level: str = "INFO"
    api_key: str | None = None
    host_ip: str | None = None
    hostname: str = "localhost"
    raw: Mapping[str, str] = field(default_factory=dict)

    @property
    def boot_total(self) -> float:
        """Seconds a cold boot takes after the rendezvous: weights, compile, graph capture."""
        return self.boot_seconds + self.compile_seconds + self.capture_seconds

    def problems(self) -> list[str]:
        """Knobs set to something that is not a size: each names the variable and the fix."""
        out = []
        for name, value in (
            ("GX10_SIM_MEM_TOTAL_GIB", self.mem_total_gib),
            ("GX10_SIM_MEM_AVAILABLE_GIB", self.mem_available_gib),
            ("GX10_SIM_WEIGHTS_GIB", self.weights_gib),
        ):
            if value is not None and math.isnan(value):  # set, but not a size
                out.append(
                    f"{name}={self.raw.get(name)!r} is not a size in GiB: set a number >= 0 "
                    "(for example 121.6) or unset it"
                )
        if self.mem_total_gib is not None and self.mem_total_gib == 0:
            out.append("GX10_SIM_MEM_TOTAL_GIB=0: a node has some memory; set it above 0")
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SimEnv:
        return cls(
            boot_seconds=max(_float_env(env, "GX10_SIM_BOOT_SECONDS", 2.0), 0.0),
            compile_seconds=max(_float_env(env, "GX10_SIM_COMPILE_SECONDS", 0.0), 0.0),
            capture_seconds=max(_float_env(env, "GX10_SIM_CAPTURE_SECONDS", 0.1), 0.0),
            hang_phase=env.get("GX10_SIM_HANG_PHASE") or None,
            rendezvous_timeout=max(_float_env(env, "GX10_SIM_RENDEZVOUS_TIMEOUT", 600.0), 0.0),
            sysfs_root=Path(env.get("GX10_SIM_SYSFS_ROOT") or "/sys"),
            gpus_per_node=max(int(_float_env(env, "GX10_SIM_GPUS_PER_NODE", 1)), 0),
            time_scale=max(_float_env(env, "GX10_SIM_TIME_SCALE", 1.0), 0.0),
            heartbeat_seconds=max(_float_env(env, "GX10_SIM_HEARTBEAT_SECONDS", 1.0), 0.05),
            execute_model_timeout=max(
                _float_env(env, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 300.0), 0.0
            ),
            perf_model=env.get("GX10_SIM_PERF_MODEL") or DEFAULT_PERF_MODEL,
            state_dir=Path(env.get("GX10_SIM_STATE_DIR") or "/var/lib/gx10-sim/nvidia-smi"),
            stall_file=Path(env.get("GX10_SIM_STALL_FILE") or DEFAULT_STALL_FILE),
            breaks=tuple(
                part.strip().lower()
                for part in (env.get("GX10_SIM_BREAK") or "").split(",")
                if part.strip()
            ),
            break_file=Path(env.get("GX10_SIM_BREAK_FILE") or DEFAULT_BREAK_FILE),
            sm_clock_mhz=_float_env(env, "GX10_SIM_SM_CLOCK_MHZ", 0.0) or None,
            prefix_cache_tokens=max(
                int(_float_env(env, "GX10_SIM_PREFIX_CACHE_TOKENS", 2_097_152)), 0
            ),
            spec_acceptance=min(max(_float_env(env, "GX10_SIM_SPEC_ACCEPTANCE", 0.85), 0.0), 1.0),
            mem_total_gib=_gib_env(env, "GX10_SIM_MEM_TOTAL_GIB"),
            mem_available_gib=_gib_env(env, "GX10_SIM_MEM_AVAILABLE_GIB"),
            weights_gib=_gib_env(env, "GX10_SIM_WEIGHTS_GIB"),
            seed=int(_float_env(env, "GX10_SIM_SEED", 0)),
            version=env.get("GX10_SIM_VLLM_VERSION") or DEFAULT_VERSION,
            log_level=(env.get("VLLM_LOGGING_LEVEL") or "INFO").upper(),
            api_key=env.get("VLLM_API_KEY") or None,
            host_ip=env.get("VLLM_HOST_IP") or None,
            hostname=socket.gethostname(),
            raw=dict(env),
        )
