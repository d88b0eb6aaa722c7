"""The engine's own counters, read from the head's Prometheus `/metrics` on the controller.

A draft model loaded wrong does not fail: vLLM serves, every answer is right (the target model
verifies each draft token), and decode runs at half speed. Only the speculative-decoding counters
show it. vLLM V1 registers them when a speculative config is set (vllm/v1/spec_decode/metrics.py,
SpecDecodingProm), as prometheus_client counters named without the suffix; prometheus_client's
text exposition appends ``_total`` (prometheus_client/exposition.py, generate_latest: "if mtype ==
'counter': mname = mname + '_total'") and adds a ``_created`` gauge per counter. Labels are
``engine`` and ``model_name`` (vllm/v1/metrics/loggers.py: ``labelnames = ["model_name",
"engine"]``), plus ``position`` (0 .. k-1) on the per-position counter. Peers read the same names
(MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark benchmarks/needle_acceptance_sweep.py). vLLM's
own acceptance rate is accepted over draft tokens (SpecDecodingLogging: "Avg Draft acceptance
rate"; the PromQL of SpecDecodingProm's docstring), and the mean acceptance length is 1 +
accepted / drafts.

`/metrics` is outside the routes vLLM's ``--api-key`` guards (vllm/entrypoints/openai/
api_server.py: the authentication middleware passes every path not under ``/v1``), so no key is
needed; one is sent when given, for a proxy in front that asks for it.

The judgment: `bands` derives the thresholds from the expected range (model_catalog's
SpecAcceptance) and `judge` places a measured rate in them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import httpx

from gx10._collection import load as module_utils
from gx10.doctor.prometheus import (
    Exposition,
    MetricFamily,
    PrometheusParseError,
    parse,
    total,
)
from gx10.endpoint import EndpointError, parse_endpoint
from gx10.errors import Gx10Error

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POSITION)

# Fewer proposed draft tokens than this say nothing yet (a few short answers swing the rate).
MIN_DRAFT_TOKENS = 1000
# Tokens per decode step are 1 + k x rate (the target's own token plus the accepted drafts). At
# k=5 and the field's low end 0.83 that is 5.15; 0.94 x low (0.78) gives 4.9, 5 % fewer, about
# what the workload moves it (prose, code and reasoning draft differently): a warning. 0.70 x low
# (0.58) gives 3.9, a quarter of the decode speed gone: no workload does that, the draft is broken.
WARNING_FACTOR = 0.94
ERROR_FACTOR = 0.70
METRICS_TIMEOUT = 5.0  # seconds for the whole scrape
MAX_METRICS_BYTES = 16 * 1024 * 1024  # vLLM's /metrics is tens of kB

Verdict = Literal["unmeasured", "ok", "warning", "error"]


class EngineMetricsError(Gx10Error):
    """The server's speculative-decoding counters are not what vLLM exports."""


@dataclass(frozen=True, slots=True)
class SpecDecodeCounters:
    """vLLM's speculative-decoding counters since the server started (all engines summed)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...] = ()

    @property
    def acceptance(self) -> float | None:
        """Accepted over proposed draft tokens (vLLM's "draft acceptance rate")."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per decode step: the target's own plus the accepted drafts."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def tokens_per_draft(self) -> float | None:
        """Draft tokens proposed per step: the server's num_speculative_tokens."""
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    def position_rates(self) -> tuple[float, ...]:
        """Per draft position, the share of steps that accepted it (vLLM's per-position rate)."""
        if self.drafts <= 0:
            return ()
        return tuple(n / self.drafts for n in self.accepted_per_position)

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance": self.acceptance,
            "mean_acceptance_length": self.mean_acceptance_length,
        }


def spec_decode_counters(exposition: Exposition) -> SpecDecodeCounters | None:
    """The speculative-decoding counters of a scrape; None when the server exports none (no
    speculative config). EngineMetricsError when they are there but not vLLM's shape."""
    found = {name: exposition.family(name) for name in SPEC_COUNTERS}
    present = [name for name, family in found.items() if family is not None]
    if not present:
        return None
    missing = [name for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED) if found[name] is None]
    if missing:
        raise EngineMetricsError(
            f"the server exports {', '.join(present)} but not {', '.join(missing)}"
        )
    families = {name: family for name, family in found.items() if family is not None}
    for name, family in families.items():
        if family.type != "counter":
            raise EngineMetricsError(f"{name} is a {family.type}, vLLM exports it as a counter")
    per_position = families.get(ACCEPTED_PER_POSITION)
    return SpecDecodeCounters(
        drafts=total(families[DRAFTS]),
        draft_tokens=total(families[DRAFT_TOKENS]),
        accepted_tokens=total(families[ACCEPTED]),
        accepted_per_position=_per_position(per_position) if per_position else (),
    )


def _per_position(family: MetricFamily) -> tuple[float, ...]:
    by_position: dict[int, float] = {}
    for sample in family.samples:
        text = sample.labels.get("position", "")
        if not text.isdigit():
            raise EngineMetricsError(
                f"{ACCEPTED_PER_POSITION} has a series without a position 0, 1, ...: "
                f"{dict(sample.labels)}"
            )
        if not math.isnan(sample.value):
            by_position[int(text)] = by_position.get(int(text), 0.0) + sample.value
    if sorted(by_position) != list(range(len(by_position))):
        raise EngineMetricsError(
            f"{ACCEPTED_PER_POSITION} positions are {sorted(by_position)}, not 0 .. k-1"
        )
    return tuple(by_position[i] for i in range(len(by_position)))


# --- the scrape ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineScrape:
    """One read of a server's `/metrics`: its spec-decode counters, or why there are none."""

    url: str
    spec: SpecDecodeCounters | None = None
    problem: str | None = None  # why nothing was measured (no answer, not Prometheus, ...)


def scrape(
    endpoint: str,
    *,
    api_key: str | None = None,
    timeout: float = METRICS_TIMEOUT,
    transport: httpx.BaseTransport | None = None,
) -> EngineScrape:
    """Read the server's `/metrics` within `timeout` seconds in all. Never raises: whatever went
    wrong (no answer, an HTTP error, text that is not the exposition format, counters of another
    shape) is the result's `problem`."""
    try:
        url = parse_endpoint(endpoint, "the head's endpoint").root + "/metrics"
    except EndpointError as exc:
        return EngineScrape(endpoint, problem=str(exc))
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout
    body = bytearray()
    try:
        with (
            httpx.Client(transport=transport, timeout=timeout) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            if response.status_code != 200:
                hint = (
                    ": a proxy in front asks for a key (gx10 doctor --api-key-file)"
                    if response.status_code in (401, 403)
                    else ""
                )
                status = response.status_code
                return EngineScrape(url, problem=f"{url} answered HTTP {status}{hint}")
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_METRICS_BYTES:
                    return EngineScrape(url, problem=f"{url} sent over {MAX_METRICS_BYTES} bytes")
                if time.monotonic() > deadline:
                    return EngineScrape(url, problem=f"{url} took over {timeout:g} s to answer")
    except httpx.HTTPError as exc:
        return EngineScrape(url, problem=f"{url} did not answer ({type(exc).__name__}: {exc})")
    try:
        counters = spec_decode_counters(parse(body.decode("utf-8", errors="replace")))
    except PrometheusParseError as exc:
        return EngineScrape(url, problem=f"{url} is not Prometheus text ({exc})")
    except EngineMetricsError as exc:
        return EngineScrape(url, problem=f"{url}: {exc}")
    return EngineScrape(url, spec=counters)


# --- the judgment ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcceptanceBands:
    """The expected range and the thresholds derived from it (rounded to whole percent)."""

    low: float
    high: float
    warning_below: float
    error_below: float
    method: str
    num_speculative_tokens: int
    source: str
    checkpoint: str = ""

    def describe(self) -> str:
        return (
            f"expected {self.low:.0%}-{self.high:.0%} for {self.method} "
            f"k={self.num_speculative_tokens} ({self.source}); warning below "
            f"{self.warning_below:.2f} ({WARNING_FACTOR:g} x {self.low:g}), error below "
            f"{self.error_below:.2f} ({ERROR_FACTOR:g} x {self.low:g})"
        )


def _catalog() -> ModuleType:
    return module_utils("model_catalog")


def bands(figure: Any, checkpoint: str = "") -> AcceptanceBands:
    """The thresholds of a catalog SpecAcceptance (or anything with its fields)."""
    low, high = float(figure.low), float(figure.high)
    return AcceptanceBands(
        low=low,
        high=high,
        warning_below=round(WARNING_FACTOR * low, 2),
        error_below=round(ERROR_FACTOR * low, 2),
        method=str(figure.method),
        num_speculative_tokens=int(figure.num_speculative_tokens),
        source=str(figure.source),
        checkpoint=checkpoint,
    )


def expected_bands(speculative: Mapping[str, Any] | None) -> AcceptanceBands | None:
    """The bands for the speculative config the serve stage renders, from the model catalog;
    None when speculative decoding is off or the catalog has no figure for its method and k."""
    if not speculative:
        return None
    method = str(speculative.get("method") or "")
    try:
        k = int(speculative.get("num_speculative_tokens") or 0)
    except (TypeError, ValueError):
        return None
    found = _catalog().expected_spec_acceptance(method, k)
    if found is None:
        return None
    entry, figure = found
    return bands(figure, str(entry.name))


def judge(counters: SpecDecodeCounters, expected: AcceptanceBands) -> Verdict:
    rate = counters.acceptance
    if rate is None or counters.draft_tokens < MIN_DRAFT_TOKENS:
        return "unmeasured"
    if rate < expected.error_below:
        return "error"
    if rate < expected.warning_below:
        return "warning"
    return "ok"
