"""What a bench run measures: the case matrix and the request settings, from defaults, a run file
(YAML) and command-line overrides, validated before anything is sent.

The defaults reproduce the reference method (FIELD_NOTES section 5): a context sweep at one
stream (256 ... 524,288 prompt tokens), concurrency sweeps at 256, 2,048 and 8,192 tokens (1 ... 12
streams), `max_tokens` 2048, temperature 0.6, top_p 0.95 and the thinking mode sent explicitly.

A run file holds any of the RunConfig fields, plus either `sweeps` (a list of
`{prompt_lengths, concurrency, clock_caps}` products, whose union is the matrix) or those three
keys at the top level (one product). Command-line axes replace the sweeps with one product; an
axis not given there comes from the run file's single product, else 256 tokens, 1 stream,
unlocked.

Clock caps are MHz (within the node tool's 100-5000) or `unlocked`; a cap other than `unlocked`
needs an inventory (`gx10 bench -i`), which sets and restores the nodes' caps. Cases are grouped
by cap (in the order the caps first appear), so a clock sweep sets each cap once. The clock-sweep
safety settings (cool_down_c, abort_c, cool_down_timeout_s, session_max_s) and the telemetry
interval are RunConfig fields too; they do not change what a case measures, so a resumed run may
change them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gx10.errors import Gx10Error

UNLOCKED = "unlocked"
CLOCK_RANGE_MHZ = (100, 5000)  # what gx10-gpu-clock accepts
REFERENCE_PROMPTS = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)
REFERENCE_CONCURRENCY = (1, 2, 4, 6, 8, 10, 12)


class MatrixError(Gx10Error):
    """The run file or flags describe a matrix that cannot run (every problem listed)."""


@dataclass(frozen=True, slots=True)
class Sweep:
    prompt_lengths: tuple[int, ...]
    concurrency: tuple[int, ...]
    clock_caps: tuple[str, ...] = (UNLOCKED,)


REFERENCE_SWEEPS = (
    Sweep(REFERENCE_PROMPTS, (1,)),
    Sweep((256,), REFERENCE_CONCURRENCY),
    Sweep((2048,), (1, 4, 8, 12)),
    Sweep((8192,), (6, 12)),
)


@dataclass(frozen=True, slots=True, order=True)
class Case:
    clock_cap: str
    concurrency: int
    prompt_tokens: int

    @property
    def id(self) -> str:
        return f"p{self.prompt_tokens}-c{self.concurrency}-{self.clock_cap}"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """A run: its sweeps and how each request is made. See the module docstring."""

    sweeps: tuple[Sweep, ...] = REFERENCE_SWEEPS
    max_tokens: int = 2048
    temperature: float = 0.6
    top_p: float = 0.95
    thinking: bool | str = True  # sent as chat_template_kwargs.thinking on every request
    unique_prompts: bool = True  # False reuses prompts: only to show what a cache hit looks like
    ignore_eos: bool = False
    allow_queueing: bool = False
    max_num_seqs: int | None = None  # from /metrics when the server exports it
    cache_hit_factor: float = 3.0  # prefill this many times its neighbours' median: a cache hit
    prefill_ceiling_tps: float = 6000.0  # prefill above this: a cache hit whatever the neighbours
    request_timeout_s: float = 3600.0
    # Clock-sweep safety and telemetry (with an inventory; see gx10.bench.clocks).
    cool_down_c: float = 70.0  # before each case, every node below this temperature
    abort_c: float = 84.0  # above this (before or during a case), the rest of the run is skipped
    cool_down_timeout_s: float = 900.0  # a cool-down taking longer aborts the run
    session_max_s: float = 86400.0  # the nodes' own deadline for this run's clock sessions
    telemetry_interval_ms: int = 1000  # nvidia-smi -lms

    def capped(self) -> list[str]:
        """The clock caps other than 'unlocked' (they need an inventory)."""
        return [c for c in self.clock_order() if c != UNLOCKED]

    def cases(self) -> list[Case]:
        found = {
            Case(clock, conc, prompt)
            for sweep in self.sweeps
            for prompt in sweep.prompt_lengths
            for conc in sweep.concurrency
            for clock in sweep.clock_caps
        }
        clock_order = {c: i for i, c in enumerate(self.clock_order())}
        return sorted(
            found, key=lambda c: (clock_order[c.clock_cap], c.concurrency, c.prompt_tokens)
        )

    def clock_order(self) -> list[str]:
        seen: list[str] = []
        for sweep in self.sweeps:
            seen += [c for c in sweep.clock_caps if c not in seen]
        return seen

    def settings(self) -> dict[str, Any]:
        """What makes two runs' cases comparable (a resumed run must match these)."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "thinking": self.thinking,
            "unique_prompts": self.unique_prompts,
            "ignore_eos": self.ignore_eos,
        }

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["sweeps"] = [dataclasses.asdict(s) for s in self.sweeps]
        return data


_AXES = ("prompt_lengths", "concurrency", "clock_caps")
_SCALARS = {f.name: f for f in dataclasses.fields(RunConfig) if f.name != "sweeps"}


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """`256,2048` (k/K suffixes: x1024, as the reference tables count tokens)."""
    out: list[int] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            continue
        scale = 1024 if item[-1] in "kK" else 1
        try:
            out.append(int(item[:-1] if scale > 1 else item) * scale)
        except ValueError:
            raise MatrixError(f"{what}: {item!r} is not an integer") from None
    if not out:
        raise MatrixError(f"{what}: no values given")
    return tuple(out)


def parse_clock_caps(text: str) -> tuple[str, ...]:
    return tuple(_clock_text(p) for p in text.split(",") if p.strip())


def _clock_text(value: Any) -> str:
    text = str(value).strip()
    return UNLOCKED if text.lower() == UNLOCKED else text


def _axis(value: Any, name: str, errors: list[str]) -> tuple[Any, ...]:
    if isinstance(value, str):
        if name == "clock_caps":
            return parse_clock_caps(value)
        try:
            return parse_int_list(value, name)
        except MatrixError as exc:
            errors.append(str(exc))
            return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple):
        errors.append(f"{name}: expected a list, got {value!r}")
        return ()
    if name == "clock_caps":
        return tuple(_clock_text(v) for v in value)
    bad = [v for v in value if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        errors.append(f"{name}: not integers: {bad}")
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


def _sweep(data: Mapping[str, Any], where: str, errors: list[str]) -> Sweep:
    unknown = sorted(set(data) - set(_AXES))
    if unknown:
        errors.append(f"{where}: unknown keys {unknown} (expected {list(_AXES)})")
    return Sweep(
        _axis(data.get("prompt_lengths", [256]), "prompt_lengths", errors),
        _axis(data.get("concurrency", [1]), "concurrency", errors),
        _axis(data.get("clock_caps", [UNLOCKED]), "clock_caps", errors),
    )


def load_run_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MatrixError(f"cannot read run file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise MatrixError(f"run file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MatrixError(f"run file {path}: expected a mapping at the top level")
    return data


def build_config(
    run_file: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
) -> RunConfig:
    """Defaults, then the run file, then the overrides (CLI flags; None values are ignored)."""
    data = dict(run_file or {})
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    errors: list[str] = []
    unknown = sorted(set(data) - set(_SCALARS) - set(_AXES) - {"sweeps"})
    if unknown:
        errors.append(f"run file: unknown keys {unknown}")
    if "sweeps" in data and any(a in data for a in _AXES):
        errors.append("run file: give either `sweeps` or top-level axes, not both")
    sweeps: tuple[Sweep, ...] = REFERENCE_SWEEPS
    if isinstance(data.get("sweeps"), list):
        sweeps = tuple(
            _sweep(s, f"sweeps[{i}]", errors) if isinstance(s, dict) else Sweep((), ())
            for i, s in enumerate(data["sweeps"])
        )
        if not sweeps:
            errors.append("run file: `sweeps` is empty")
    elif "sweeps" in data:
        errors.append("run file: `sweeps` must be a list of mappings")
    elif any(a in data for a in _AXES):
        sweeps = (_sweep({a: data[a] for a in _AXES if a in data}, "run file", errors),)
    if any(a in flags for a in _AXES):
        base = sweeps[0] if len(sweeps) == 1 else None
        sweeps = (
            Sweep(
                _axis(
                    flags.get("prompt_lengths", base.prompt_lengths if base else [256]),
                    "prompt_lengths",
                    errors,
                ),
                _axis(
                    flags.get("concurrency", base.concurrency if base else [1]),
                    "concurrency",
                    errors,
                ),
                _axis(
                    flags.get("clock_caps", base.clock_caps if base else [UNLOCKED]),
                    "clock_caps",
                    errors,
                ),
            ),
        )
    values: dict[str, Any] = {}
    for name in _SCALARS:
        if name in flags:
            values[name] = flags[name]
        elif name in data:
            values[name] = data[name]
    config = RunConfig(sweeps=sweeps, **values) if not errors else RunConfig()
    errors += static_problems(config) if not errors else []
    if errors:
        raise MatrixError("invalid bench matrix:\n  - " + "\n  - ".join(errors))
    return config


def _positive(values: Iterable[Any], what: str) -> list[str]:
    bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or v <= 0]
    return [f"{what} must be positive integers, got {bad}"] if bad else []


def static_problems(config: RunConfig) -> list[str]:
    """Problems visible without the server."""
    errors: list[str] = []
    for i, sweep in enumerate(config.sweeps):
        where = f"sweep {i + 1}: " if len(config.sweeps) > 1 else ""
        if not sweep.prompt_lengths or not sweep.concurrency or not sweep.clock_caps:
            errors.append(f"{where}every axis needs at least one value")
        errors += _positive(sweep.prompt_lengths, f"{where}prompt lengths")
        errors += _positive(sweep.concurrency, f"{where}concurrency levels")
        low, high = CLOCK_RANGE_MHZ
        for cap in sweep.clock_caps:
            if cap != UNLOCKED and not (cap.isdigit() and low <= int(cap) <= high):
                errors.append(
                    f"{where}clock cap {cap!r}: expected MHz ({low}-{high}, e.g. 2000) or "
                    "'unlocked'"
                )
    errors += _positive([config.max_tokens], "max_tokens")
    if not isinstance(config.temperature, int | float) or config.temperature < 0:
        errors.append(f"temperature must be >= 0, got {config.temperature!r}")
    if not isinstance(config.top_p, int | float) or not 0 < config.top_p <= 1:
        errors.append(f"top_p must be in (0, 1], got {config.top_p!r}")
    if config.max_num_seqs is not None:
        errors += _positive([config.max_num_seqs], "max_num_seqs")
    if config.cache_hit_factor <= 1:
        errors.append(f"cache_hit_factor must be > 1, got {config.cache_hit_factor!r}")
    if config.request_timeout_s <= 0:
        errors.append(f"request_timeout_s must be > 0, got {config.request_timeout_s!r}")
    errors += safety_problems(config)
    return errors


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def safety_problems(config: RunConfig) -> list[str]:
    """The clock-sweep safety settings: numbers, in range, cool-down below the abort limit."""
    errors: list[str] = []
    for name in ("cool_down_c", "abort_c"):
        value = getattr(config, name)
        if not _number(value) or not 20 <= value <= 110:
            errors.append(f"{name} must be a temperature in C between 20 and 110, got {value!r}")
    both = _number(config.cool_down_c) and _number(config.abort_c)
    if both and config.cool_down_c >= config.abort_c:
        errors.append(
            f"cool_down_c {config.cool_down_c:g} must be below abort_c {config.abort_c:g} "
            "(cooled nodes must be able to run a case)"
        )
    for name in ("cool_down_timeout_s", "session_max_s"):
        value = getattr(config, name)
        if not _number(value) or value <= 0:
            errors.append(f"{name} must be > 0 seconds, got {value!r}")
    interval = config.telemetry_interval_ms
    if not isinstance(interval, int) or isinstance(interval, bool) or not 100 <= interval <= 60000:
        errors.append(f"telemetry_interval_ms must be 100-60000, got {interval!r}")
    return errors


def inventory_problems(config: RunConfig, have_inventory: bool) -> list[str]:
    """Clock caps other than 'unlocked' need the nodes (an inventory) to set and restore them."""
    capped = config.capped()
    if capped and not have_inventory:
        return [
            f"clock caps {capped} need an inventory (gx10 bench -i INV): the caps are set on "
            "the nodes and restored after; against a bare --endpoint only 'unlocked' runs"
        ]
    return []


@dataclass(frozen=True, slots=True)
class Limits:
    """What the server allows: the model's context and the engine's batch."""

    max_model_len: int | None
    max_num_seqs: int | None
    source: Mapping[str, str] = field(default_factory=dict)


def server_problems(config: RunConfig, cases: Sequence[Case], limits: Limits) -> list[str]:
    """Problems that need the server's limits (max_model_len, max_num_seqs)."""
    errors: list[str] = []
    if limits.max_model_len is not None:
        too_long = sorted(
            {
                c.prompt_tokens
                for c in cases
                if c.prompt_tokens + config.max_tokens > limits.max_model_len
            }
        )
        if too_long:
            errors.append(
                f"prompt lengths {too_long} plus max_tokens {config.max_tokens} exceed the "
                f"model's max_model_len {limits.max_model_len} "
                f"({limits.source.get('max_model_len', 'server')})"
            )
    seqs = config.max_num_seqs or limits.max_num_seqs
    if seqs is not None and not config.allow_queueing:
        over = sorted({c.concurrency for c in cases if c.concurrency > seqs})
        if over:
            where = (
                "--max-num-seqs"
                if config.max_num_seqs
                else limits.source.get("max_num_seqs", "server")
            )
            errors.append(
                f"concurrency {over} is above max_num_seqs {seqs} ({where}): the extra requests "
                "would queue and the case would measure the queue; pass --allow-queueing to "
                "measure it anyway"
            )
    return errors
