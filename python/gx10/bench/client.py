"""The bench's side of the wire: server limits and counters, exact-length unique prompts, and
one streamed chat completion timed on the client.

Plain httpx (async) rather than the openai client: the server-sent events are parsed with one
json.loads per chunk, which keeps the harness's own CPU use small while it drives many streams.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from gx10.endpoint import EndpointError, parse_endpoint
from gx10.errors import Gx10Error

# Candidate filler units, each with its leading space (so no two units merge into one word): short
# words, single letters, digits and symbols. A unit is kept for a server when /tokenize counts it
# as exactly one token (in a run of the same unit), so a prompt grows one token per unit and every
# length is reachable.
FILLER_CANDIDATES = (
    " the",
    " of",
    " and",
    " to",
    " in",
    " is",
    " it",
    " on",
    " at",
    " be",
    " as",
    " or",
    " an",
    " a",
    " I",
    " x",
    " e",
    " s",
    " o",
    " t",
    " n",
    " i",
    " r",
    " 1",
    " 2",
    " 3",
    " 4",
    " 5",
    " -",
    " +",
    " =",
    " (",
    " )",
    " :",
    " ;",
    " .",
    " ,",
)
FILLER_UNITS = 8  # units kept per server (the filler cycles through them pseudo-randomly)
UNIT_PROBE = 16  # a candidate is tried as a run of this many units
FILLER_CHUNK = 4096
NONCE_TRIES = 3
MAX_PAD_ROUNDS = 16
METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class BenchError(Gx10Error):
    """The endpoint cannot be benchmarked (unreachable, no model, bad answer)."""


class RequestFailed(Exception):
    """One request failed: an HTTP error, an error event in the stream, or a broken stream."""


class PaddingFailed(BenchError):
    """No prompt of exactly the target length could be built with the server's tokenizer."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    root: str  # http://host:port
    api_key: str = ""
    model: str | None = None

    @classmethod
    def parse(cls, url: str, api_key: str = "", model: str | None = None) -> Endpoint:
        try:
            root = parse_endpoint(url).root
        except EndpointError as exc:
            raise BenchError(str(exc)) from exc
        return cls(root, api_key, model)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True, slots=True)
class ServerInfo:
    model: str
    max_model_len: int | None
    max_num_seqs: int | None
    metrics: bool  # /metrics answered


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, dict[str, str]]]:
    """Prometheus text: values summed over label sets, and the labels of each `*_info` metric."""
    values: dict[str, float] = {}
    info: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = METRIC_LINE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value):
            values[name] = values.get(name, 0.0) + value
        if labels and name.endswith("_info"):
            info.setdefault(name, {}).update(LABEL.findall(labels))
    return values, info


COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


async def sample_counters(client: httpx.AsyncClient, endpoint: Endpoint) -> dict[str, float]:
    """The server counters the bench keeps per case ({} when /metrics does not answer)."""
    try:
        response = await client.get(f"{endpoint.root}/metrics", headers=endpoint.headers)
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    values, _ = parse_metrics(response.text)
    return {name: values[name] for name in COUNTERS if name in values}


async def server_info(client: httpx.AsyncClient, endpoint: Endpoint) -> ServerInfo:
    url = f"{endpoint.root}/v1/models"
    try:
        response = await client.get(url, headers=endpoint.headers)
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code in (401, 403):
        raise BenchError(f"{url}: HTTP {response.status_code}: the API key was refused")
    if response.status_code != 200:
        raise BenchError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    models = response.json().get("data") or []
    ids = [str(m.get("id")) for m in models]
    if not ids:
        raise BenchError(f"{url}: the server lists no model")
    name = endpoint.model or ids[0]
    if name not in ids:
        raise BenchError(f"model {name!r} is not served; {url} lists {ids}")
    entry = models[ids.index(name)]
    max_len = entry.get("max_model_len")
    max_seqs: int | None = None
    metrics = False
    try:
        answer = await client.get(f"{endpoint.root}/metrics", headers=endpoint.headers)
        metrics = answer.status_code == 200
    except httpx.HTTPError:
        pass
    if metrics:
        _, info = parse_metrics(answer.text)
        for labels in info.values():
            if "max_num_seqs" in labels:
                max_seqs = int(float(labels["max_num_seqs"]))
    return ServerInfo(name, int(max_len) if max_len else None, max_seqs, metrics)


# --------------------------------------------------------------------------------------------
# Prompts: unique, exactly N tokens as the server counts them
# --------------------------------------------------------------------------------------------


# (endpoint root, model) -> the filler units that are one token each for its tokenizer
_UNITS: dict[tuple[str, str], tuple[str, ...]] = {}


@dataclass(slots=True)
class PromptBuilder:
    """Pads `nonce + filler units` to an exact prompt token count with the server's /tokenize.

    The filler units are pieces of text that the server's tokenizer counts as one token each
    (found once per server with /tokenize and cached), so adding a unit adds one token and the
    search can step by one: every length from the template's own up is reachable, whatever the
    tokenizer. The nonce opens the prompt, so no prompt shares even its first cache block with
    another (the prefix cache hashes blocks chained from the start). With `unique=False` every
    prompt opens the same way: what a careless benchmark does.
    """

    client: httpx.AsyncClient
    endpoint: Endpoint
    model: str
    template_kwargs: Mapping[str, Any]
    unique: bool = True
    units: tuple[str, ...] = ()
    sequence: list[str] = field(default_factory=list)
    last_units: dict[int, int] = field(default_factory=dict)
    too_short: list[int] = field(default_factory=list)
    calls: int = 0

    def _filler(self, count: int) -> str:
        """The first `count` units of one fixed pseudo-random sequence (same in every run)."""
        while len(self.sequence) < count:
            rng = random.Random(len(self.sequence) // FILLER_CHUNK)
            self.sequence += [rng.choice(self.units) for _ in range(FILLER_CHUNK)]
        return "".join(self.sequence[:count])

    def messages(self, nonce: str, units: int, filler: str | None = None) -> list[dict[str, str]]:
        text = f"Benchmark request {nonce}. Read the notes and summarise them.\n"
        body = self._filler(units) if filler is None else filler
        return [{"role": "user", "content": text + body}]

    async def count(self, messages: list[dict[str, str]]) -> int:
        self.calls += 1
        body = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": True,
            "chat_template_kwargs": dict(self.template_kwargs),
        }
        try:
            response = await self.client.post(
                f"{self.endpoint.root}/tokenize", json=body, headers=self.endpoint.headers
            )
        except httpx.HTTPError as exc:
            raise RequestFailed(f"/tokenize: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise RequestFailed(f"/tokenize: HTTP {response.status_code}: {response.text[:200]}")
        return int(response.json()["count"])

    async def discover_units(self) -> tuple[str, ...]:
        """The filler units of one token each for this server's tokenizer (cached per server)."""
        key = (self.endpoint.root, self.model)
        cached = _UNITS.get(key)
        if cached:
            self.units = cached
            return cached
        nonce = "0" * 32
        base = await self.count(self.messages(nonce, 0, ""))
        found: list[str] = []
        for unit in FILLER_CANDIDATES:
            if await self.count(self.messages(nonce, 0, unit * UNIT_PROBE)) - base == UNIT_PROBE:
                found.append(unit)
                if len(found) == FILLER_UNITS:
                    break
        if not found:
            raise PaddingFailed(
                f"the tokenizer of model {self.model!r} at {self.endpoint.root} counts none of "
                f"the filler units {list(FILLER_CANDIDATES)} as one token: cannot pad prompts"
            )
        self.units = _UNITS[key] = tuple(found)
        return self.units

    async def build(self, target: int) -> tuple[list[dict[str, str]], str]:
        """(messages, nonce) whose chat prompt is exactly `target` tokens.

        Unit counts are searched with /tokenize: each step moves by the tokens still missing (one
        unit is one token, so this converges, down to steps of one); when one unit more
        overshoots and one less undershoots (the tokenizer merged units), another nonce is tried.
        """
        cached = (self.endpoint.root, self.model) in _UNITS
        if not self.units:
            await self.discover_units()
        tried: list[str] = []
        self.too_short = []
        for attempt in range(NONCE_TRIES * 2):
            if attempt == NONCE_TRIES:
                if len(self.too_short) == NONCE_TRIES:
                    raise PaddingFailed(
                        f"prompt length {target} is shorter than the template and nonce "
                        f"({min(self.too_short)} tokens or more for model {self.model!r})"
                    )
                if not cached:
                    break
                # Units cached from another server once on this address: find them again.
                _UNITS.pop((self.endpoint.root, self.model), None)
                self.units, self.sequence, self.last_units = (), [], {}
                await self.discover_units()
            nonce = uuid.uuid4().hex if self.unique else f"{attempt % NONCE_TRIES:032d}"
            found = await self._fit(nonce, target, tried)
            if found is not None:
                return self.messages(nonce, found), nonce
        raise PaddingFailed(
            f"could not pad a prompt to exactly {target} tokens via /tokenize (model "
            f"{self.model!r} at {self.endpoint.root}, filler units {list(self.units)}); "
            f"unit counts -> lengths tried: {'; '.join(tried)}"
        )

    async def _fit(self, nonce: str, target: int, tried_log: list[str]) -> int | None:
        base = await self.count(self.messages(nonce, 0))
        if base > target:  # another nonce may tokenize shorter
            self.too_short.append(base)
            tried_log.append(f"0->{base}")
            return None
        tried: dict[int, int] = {0: base}
        units = self.last_units.get(target, target - base)
        for _ in range(MAX_PAD_ROUNDS):
            units = max(units, 0)
            have = tried.get(units)
            if have is None:
                have = tried[units] = await self.count(self.messages(nonce, units))
            if have == target:
                self.last_units[target] = units
                return units
            diff = target - have
            if units + diff in tried and (tried[units + diff] > target) == (diff > 0):
                break  # one unit more overshoots, one less undershoots
            units += diff
        tried_log.append(", ".join(f"{u}->{n}" for u, n in sorted(tried.items())))
        return None


# --------------------------------------------------------------------------------------------
# One streamed request
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RequestResult:
    """Client timestamps are perf_counter seconds (None: never happened, e.g. `sent` of a request
    whose prompt could not be prepared); durations are filled in by the case."""

    index: int
    target_tokens: int
    nonce: str = ""
    ok: bool = False
    error: str = ""
    status: int | None = None
    sent: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    done: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    chunks: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def request_body(
    model: str, messages: list[dict[str, str]], settings: Mapping[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": settings["max_tokens"],
        "temperature": settings["temperature"],
        "top_p": settings["top_p"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"thinking": settings["thinking"]},
    }
    if settings.get("ignore_eos"):
        body["ignore_eos"] = True
    return body


def _has_token(delta: Mapping[str, Any]) -> bool:
    return bool(
        delta.get("content")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
    )


async def stream_chat(
    client: httpx.AsyncClient, endpoint: Endpoint, body: Mapping[str, Any], result: RequestResult
) -> RequestResult:
    """Send one streamed chat completion; fills `result` (ok, or the error and when it came)."""
    clock = time.perf_counter
    result.sent = clock()
    try:
        async with client.stream(
            "POST", f"{endpoint.root}/v1/chat/completions", json=body, headers=endpoint.headers
        ) as response:
            result.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                raise RequestFailed(f"HTTP {response.status_code}: {_error_message(text)}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    result.done = clock()
                    break
                now = clock()
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise RequestFailed(f"error event: {_error_message(payload)}")
                for choice in chunk.get("choices") or ():
                    if _has_token(choice.get("delta") or {}):
                        result.chunks += 1
                        if result.first_token is None:
                            result.first_token = now
                        result.last_token = now
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                usage = chunk.get("usage")
                if usage:
                    result.prompt_tokens = usage.get("prompt_tokens")
                    result.completion_tokens = usage.get("completion_tokens")
                    details = usage.get("prompt_tokens_details") or {}
                    result.cached_tokens = details.get("cached_tokens")
        if result.done is None:
            raise RequestFailed("the stream ended without [DONE]")
        if result.completion_tokens is None:
            raise RequestFailed("the stream carried no usage (stream_options.include_usage)")
        if result.first_token is None:
            raise RequestFailed("the stream carried no token")
        result.ok = True
    except RequestFailed as exc:
        result.error = str(exc)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    if result.done is None:
        result.done = clock()
    return result


def _error_message(text: str) -> str:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message"))[:300]
    if isinstance(data, dict) and "message" in data:
        return str(data["message"])[:300]
    return text[:300]
