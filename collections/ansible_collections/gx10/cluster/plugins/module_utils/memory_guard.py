# SPDX-License-Identifier: Apache-2.0
"""The node-side memory guard's settings: their table, validation and earlyoom's arguments.

Standard library only and no Ansible import: the validate stage checks the inventory values
with it before any node changes (``cluster_plan``), and the memory_guard role renders
``/etc/default/earlyoom`` and its tool's config through the ``gx10.cluster.earlyoom_args`` and
``gx10.cluster.memory_guard_config`` filters, which validate again.

``SETTINGS`` is the one table of every setting: its inventory variable, default, and the allowed
values (a range for numbers, a type for flags and regexes). Percentages are of MemTotal
(available memory) or SwapTotal (free swap), as earlyoom computes them. earlyoom 1.7 (Debian
bookworm) acts only when **both** memory and swap are at or below their minimum, so a swap
minimum of 100 makes available memory alone decide: on a GB10 the GPU's allocations come from
the same memory and cannot be swapped out, and a node that swaps under them stalls instead of
freeing anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = 1
ENABLED_VAR = "memory_guard_enabled"
DROP_CACHES_VAR = "gx10_drop_caches_before_launch"
DEFAULT_TOOL = "/usr/local/sbin/gx10-memory-guard"
DEFAULT_LOG_FILE = "/var/log/gx10/memory-guard.jsonl"
DEFAULT_PAIR_EVENT_FILE = "/var/lib/gx10/pair/memory-event.json"
DEFAULT_DROP_CACHES_FILE = "/proc/sys/vm/drop_caches"
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024
# The comm names (/proc/PID/comm, at most 15 characters) a vLLM rank runs under: the `vllm`
# console script (the API server, the container's main process), the engine's and workers'
# `VLLM::EngineCore` / `VLLM::Worker_TP0` titles (truncated), PyTorch's renamed main thread, and a
# spawned interpreter before it sets its title. gx10's own python daemons rename themselves
# (gx10-pair, gx10-memguard) so this never prefers them.
DEFAULT_PREFER = r"^(vllm|VLLM::.*|pt_main_thread|python[0-9.]*)$"
DEFAULT_AVOID = (
    r"^(init|systemd|systemd-.*|sshd|dockerd|containerd|containerd-shim|earlyoom|gx10-pair"
    r"|gx10-memguard|NetworkManager)$"
)
# A regex passes through /etc/default/earlyoom (sourced by systemd and by sh) and systemd's word
# splitting of $EARLYOOM_ARGS: no whitespace, quotes, backslashes or backquotes.
_REGEX_CHARS = re.compile(r"^[A-Za-z0-9^$|()\[\].*+?{},:/_=@%#!<>-]+$")
_DOLLAR = re.compile(r"\$[^)|]")


class MemoryGuardError(ValueError):
    """The settings are invalid; ``errors`` holds one message per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class Setting:
    """One setting: its inventory variable, default, kind and (numbers) inclusive range."""

    variable: str
    default: Any
    kind: str  # "bool", "percent" (int or float), "int", "number", "regex"
    minimum: float = 0
    maximum: float = 0
    description: str = ""


SETTINGS: dict[str, Setting] = {
    "enabled": Setting(ENABLED_VAR, True, "bool", description="run earlyoom with gx10's hook"),
    "drop_caches": Setting(
        DROP_CACHES_VAR, True, "bool", description="drop the page cache before a rank starts"
    ),
    "mem_term_percent": Setting(
        "memory_guard_mem_term_percent",
        4,
        "percent",
        minimum=1,
        maximum=50,
        description="available memory at or below this % of MemTotal: earlyoom sends SIGTERM",
    ),
    "mem_kill_percent": Setting(
        "memory_guard_mem_kill_percent",
        2,
        "percent",
        minimum=0.5,
        maximum=50,
        description="available memory at or below this % of MemTotal: earlyoom sends SIGKILL",
    ),
    "swap_term_percent": Setting(
        "memory_guard_swap_term_percent",
        100,
        "percent",
        minimum=0,
        maximum=100,
        description="free swap at or below this % (100: swap never holds earlyoom back)",
    ),
    "swap_kill_percent": Setting(
        "memory_guard_swap_kill_percent",
        100,
        "percent",
        minimum=0,
        maximum=100,
        description="free swap at or below this % for SIGKILL (100: never holds it back)",
    ),
    "report_interval": Setting(
        "memory_guard_report_interval",
        60,
        "int",
        minimum=0,
        maximum=86400,
        description="seconds between earlyoom's memory reports in the journal (0: none)",
    ),
    "prefer_regex": Setting(
        "memory_guard_prefer_regex",
        DEFAULT_PREFER,
        "regex",
        description="process names (comm) earlyoom prefers to kill (+300 badness)",
    ),
    "avoid_regex": Setting(
        "memory_guard_avoid_regex",
        DEFAULT_AVOID,
        "regex",
        description="process names (comm) earlyoom avoids killing (-300 badness)",
    ),
    "drop_caches_level": Setting(
        "memory_guard_drop_caches_level",
        3,
        "int",
        minimum=1,
        maximum=3,
        description="what a drop frees: 1 page cache, 2 dentries and inodes, 3 both",
    ),
    "watch_interval": Setting(
        "memory_guard_watch_interval",
        5,
        "number",
        minimum=1,
        maximum=60,
        description="seconds between the pressure watcher's samples",
    ),
    "psi_full_threshold": Setting(
        "memory_guard_psi_full_threshold",
        10,
        "number",
        minimum=0.1,
        maximum=100,
        description="PSI memory full avg10 (%) at or above which the watcher logs pressure",
    ),
    "warn_percent": Setting(
        "memory_guard_warn_percent",
        8,
        "percent",
        minimum=1,
        maximum=90,
        description="available memory at or below this % of MemTotal: the watcher logs it",
    ),
}


def variables() -> list[str]:
    """Every inventory variable the guard reads."""
    return [setting.variable for setting in SETTINGS.values()]


def defaults() -> dict[str, Any]:
    return {key: setting.default for key, setting in SETTINGS.items()}


def settings_from_vars(values: Mapping[str, Any]) -> dict[str, Any]:
    """The inventory variables of ``values`` as SETTINGS keys (absent or None: not given)."""
    return {
        key: values[setting.variable]
        for key, setting in SETTINGS.items()
        if values.get(setting.variable) is not None
    }


def _fix(setting: Setting) -> str:
    if setting.kind == "bool":
        return f"set {setting.variable}: true or false"
    if setting.kind == "regex":
        return (
            f"set {setting.variable} to a POSIX extended regex without spaces, quotes or "
            f"backslashes (write [.] for a literal dot), e.g. {setting.variable}: "
            f"'{setting.default}'"
        )
    kind = "a whole number" if setting.kind == "int" else "a number"
    return (
        f"set {setting.variable} to {kind} from {setting.minimum:g} to {setting.maximum:g}, "
        f"e.g. {setting.variable}: {setting.default}"
    )


def _type_name(value: Any) -> str:
    """The builtin type's name: Ansible hands over subclasses (tagged str, lazy containers)."""
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, str) else value


def _error(key: str, value: Any) -> str | None:
    setting = SETTINGS[key]
    shown = f"{_plain(value)!r} ({_type_name(value)})"
    if setting.kind == "bool":
        return (
            None if isinstance(value, bool) else f"{setting.variable} is {shown}: {_fix(setting)}"
        )
    if setting.kind == "regex":
        # `$` only as an anchor: before `)`, `|` or the end (sh would expand `$(`, `${`, `$x`).
        if not isinstance(value, str) or not _REGEX_CHARS.match(value) or _DOLLAR.search(value):
            return f"{setting.variable} is {shown}: {_fix(setting)}"
        try:
            re.compile(value)
        except re.error as exc:
            return (
                f"{setting.variable} is {_plain(value)!r}, which does not compile ({exc}): "
                f"{_fix(setting)}"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{setting.variable} is {shown}: {_fix(setting)}"
    if setting.kind == "int" and not isinstance(value, int):
        return f"{setting.variable} is {value!r}: {_fix(setting)}"
    if math.isnan(value) or not setting.minimum <= value <= setting.maximum:
        return f"{setting.variable} is {value!r}: {_fix(setting)}"
    return None


def merged(values: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults overlaid with ``values`` (SETTINGS keys); nothing is checked."""
    out = defaults()
    out.update({key: value for key, value in values.items() if key in SETTINGS})
    return out


def validate_settings(values: Mapping[str, Any]) -> list[str]:
    """Errors of ``values`` (SETTINGS keys; missing keys take their default), one per problem.

    Each names the inventory variable, the bad value and the fix.
    """
    if not isinstance(values, Mapping):
        return [f"the memory guard settings must be a mapping, got {values!r}"]
    errors = [
        f"{key!r} is not a memory guard setting: use one of {', '.join(SETTINGS)}"
        for key in values
        if key not in SETTINGS
    ]
    s = merged(values)
    bad = set()
    for key in SETTINGS:
        error = _error(key, s[key])
        if error:
            errors.append(error)
            bad.add(key)

    def pair(low: str, high: str, why: str, strict: bool = False) -> None:
        if bad.intersection((low, high)):
            return
        holds = s[low] < s[high] if strict else s[low] <= s[high]
        if not holds:
            lo, hi = SETTINGS[low].variable, SETTINGS[high].variable
            relation = "below" if strict else "at most"
            errors.append(
                f"{lo} is {s[low]!r} but must be {relation} {hi} ({s[high]!r}): {why}; "
                f"lower {lo} or raise {hi}"
            )

    pair(
        "mem_kill_percent",
        "mem_term_percent",
        "earlyoom sends SIGTERM first and SIGKILL only further down",
    )
    pair(
        "swap_kill_percent",
        "swap_term_percent",
        "earlyoom sends SIGTERM first and SIGKILL only further down",
    )
    pair(
        "mem_term_percent",
        "warn_percent",
        "the watcher must log the pressure before earlyoom kills",
        strict=True,
    )
    return errors


def checked(values: Mapping[str, Any]) -> dict[str, Any]:
    """The merged settings, or MemoryGuardError listing every problem."""
    errors = validate_settings(values)
    if errors:
        raise MemoryGuardError(errors)
    return merged(values)


def _number(value: float) -> str:
    return f"{value:g}"


def earlyoom_args(values: Mapping[str, Any], notify: str = DEFAULT_TOOL) -> str:
    """EARLYOOM_ARGS for /etc/default/earlyoom (earlyoom 1.7's options, see earlyoom(1)).

    ``notify`` is the absolute path earlyoom runs (``-N``) after each kill, with the victim in
    EARLYOOM_PID, EARLYOOM_NAME and EARLYOOM_UID.
    """
    s = checked(values)
    if not notify.startswith("/") or not _REGEX_CHARS.match(notify):
        raise MemoryGuardError([f"the notify script {notify!r} must be an absolute plain path"])
    parts = [
        f"-m {_number(s['mem_term_percent'])},{_number(s['mem_kill_percent'])}",
        f"-s {_number(s['swap_term_percent'])},{_number(s['swap_kill_percent'])}",
        f"-r {s['report_interval']}",
        f"--prefer '{s['prefer_regex']}'",
        f"--avoid '{s['avoid_regex']}'",
        f"-N {notify}",
    ]
    return " ".join(parts)


def tool_config(
    values: Mapping[str, Any],
    *,
    log_file: str = DEFAULT_LOG_FILE,
    pair_event_file: str | None = DEFAULT_PAIR_EVENT_FILE,
    drop_caches_file: str = DEFAULT_DROP_CACHES_FILE,
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
) -> dict[str, Any]:
    """The node tool's config (``/etc/gx10/memory-guard.json``, ``schema`` 1)."""
    s = checked(values)
    errors = [
        f"{name} is {path!r}: it must be an absolute path"
        for name, path in (
            ("the log file", log_file),
            ("the drop_caches file", drop_caches_file),
            ("the pair event file", pair_event_file or "/"),
        )
        if not isinstance(path, str) or not path.startswith("/")
    ]
    if (
        isinstance(log_max_bytes, bool)
        or not isinstance(log_max_bytes, int)
        or log_max_bytes < 4096
    ):
        errors.append(f"the log size limit is {log_max_bytes!r}: it must be 4096 bytes or more")
    if errors:
        raise MemoryGuardError(errors)
    return {
        "schema": SCHEMA,
        "log_file": log_file,
        "log_max_bytes": log_max_bytes,
        "pair_event_file": pair_event_file,
        "drop_caches_file": drop_caches_file,
        "drop_caches_level": s["drop_caches_level"],
        "watch": {
            "interval": s["watch_interval"],
            "psi_full_threshold": s["psi_full_threshold"],
            "warn_percent": s["warn_percent"],
        },
    }
