"""Requests: the head's API logic (validation, token budget, plan, timed generation), not HTTP."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .breaks import BreakSwitch
from .deepseek_v4_encoding import render_chat, thinking_enabled
from .engine import Engine, Plan, block_hashes
from .errors import ApiError, missing_field
from .generation import REASONING_WORDS, WORDS, token_stream
from .model import ModelInfo
from .tokenizer import BOS, count_tokens, token_pieces
from .tool_calls import break_calls, dsml, followup, plan_tool_calls

# Tokens of markup around a call's arguments (invoke and parameter tags).
CALL_OVERHEAD_TOKENS = 4


@dataclass
class Piece:
    kind: str  # "reasoning" | "content" | "tool"
    text: str
    tokens: int
    index: int = 0  # a "tool" piece: which of the plan's calls


@dataclass(frozen=True)
class ServerConfig:
    served_names: tuple[str, ...]
    model: ModelInfo
    max_model_len: int
    api_keys: tuple[str, ...]
    reasoning_parser: str | None
    tool_parser: str | None
    auto_tools: bool
    default_kwargs: Mapping[str, Any]
    seed: int


class Server:
    """The head's API logic, independent of the HTTP plumbing."""

    def __init__(self, config: ServerConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.breaks = BreakSwitch(engine.env.breaks, engine.env.break_file, engine.log)

    def check_model(self, body: Mapping[str, Any]) -> str:
        name = body.get("model")
        if name is None:
            return self.config.served_names[0]
        if name not in self.config.served_names:
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")
        return str(name)

    def budget(self, prompt_tokens: int, requested: Any) -> int:
        limit = self.config.max_model_len
        if prompt_tokens > limit or (requested is None and prompt_tokens >= limit):
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. "
                f"However, your request has {prompt_tokens} input tokens. Please "
                "reduce the length of the input messages.",
            )
        if requested is None:
            return limit - prompt_tokens
        if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {requested}.")
        if requested + prompt_tokens > limit:
            raise ApiError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: "
                f"{requested}. This model's maximum context length is {limit} tokens "
                f"and your request has {prompt_tokens} input tokens ({requested} > "
                f"{limit} - {prompt_tokens}).",
                param="max_tokens",
            )
        return requested

    def _rng(self, text: str, body: Mapping[str, Any]) -> random.Random:
        seed = body.get("seed")
        digest = hashlib.sha256(f"{self.config.seed}:{seed}:{text}".encode()).hexdigest()
        return random.Random(int(digest[:16], 16))

    def separates_reasoning(self, plan: Plan, mode: str | None) -> bool:
        """Whether the reasoning parser hands the reasoning over apart from the content (the
        `reasoning` break: as without a parser, the reasoning stays in the content)."""
        return (
            mode is not None
            and self.config.reasoning_parser is not None
            and "reasoning" not in plan.breaks
        )

    def plan_chat(self, body: Mapping[str, Any]) -> tuple[Plan, str | None]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            if messages is None:
                raise missing_field("messages", dict(body))
            raise ApiError(400, "messages must be a non-empty list")
        tools = body.get("tools") or None
        tool_choice = body.get("tool_choice", "auto" if tools else "none")
        if (
            tools
            and tool_choice == "auto"
            and not (self.config.auto_tools and self.config.tool_parser)
        ):
            raise ApiError(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
            )
        kwargs = dict(self.config.default_kwargs)
        kwargs.update(body.get("chat_template_kwargs") or {})
        mode = thinking_enabled(kwargs, body.get("reasoning_effort"))
        prompt = render_chat(messages, tools, mode is not None)
        pieces = token_pieces(prompt)
        prompt_tokens = len(pieces)
        max_tokens = self.budget(
            prompt_tokens, body.get("max_completion_tokens", body.get("max_tokens"))
        )
        rng = self._rng(prompt, body)
        breaks = self.breaks.active()
        if "tool-choice" in breaks:
            tool_choice = "auto"
        calls = []
        if tools:
            calls = plan_tool_calls(
                messages, tools, tool_choice, broken_fizzbuzz="agent-loop" in breaks
            )
            calls = break_calls(calls, breaks, stream=bool(body.get("stream")))
        reasoning = 0
        if mode is not None:
            reasoning = max_tokens if mode == "max" else rng.randint(600, 4000)
        answer_text = None if calls else followup(messages)
        answer = len(token_pieces(answer_text)) if answer_text else rng.randint(24, 160)
        plan = Plan(
            prompt_tokens,
            max_tokens,
            rng,
            reasoning,
            answer,
            calls,
            bool(body.get("ignore_eos")),
            self._hashes(pieces),
            answer_text=answer_text,
            breaks=breaks,
        )
        return plan, mode

    def _hashes(self, pieces: Sequence[str]) -> tuple[str, ...]:
        engine = self.engine
        if engine.prefix_cache.capacity <= 0:
            return ()
        return block_hashes(pieces, engine.block_size)

    def plan_completion(self, body: Mapping[str, Any]) -> Plan:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a string (or a list of one string)")
        pieces = [BOS, *token_pieces(prompt)]
        prompt_tokens = len(pieces)
        max_tokens = self.budget(prompt_tokens, body.get("max_tokens", 16))
        rng = self._rng(prompt, body)
        return Plan(
            prompt_tokens,
            max_tokens,
            rng,
            0,
            rng.randint(24, 160),
            [],
            bool(body.get("ignore_eos")),
            self._hashes(pieces),
        )

    def generate(self, plan: Plan) -> Iterator[list[Piece]]:
        """Steps of output (several tokens per step with speculative decoding), timed.

        The prefill's forward pass yields the first token; every later step takes its tokens
        over the model's decode rate for the running count when the step starts, timed against
        a deadline so that sleeps do not drift.
        """
        engine = self.engine
        clock = engine.clock_cap()
        engine.wait_while_stalled()
        engine.prefill(plan, clock)
        with engine.cond:
            engine.decoding += 1
        try:
            for pieces in self._decode(plan, clock):
                engine.wait_while_stalled()
                yield pieces
        finally:
            with engine.cond:
                engine.decoding -= 1

    def _decode(self, plan: Plan, clock: float | None) -> Iterator[list[Piece]]:
        engine = self.engine
        scale = engine.env.time_scale
        budget = plan.max_tokens
        reasoning = plan.max_tokens if plan.ignore_eos else plan.reasoning_tokens
        answer = plan.max_tokens if plan.ignore_eos else plan.answer_tokens
        thoughts = token_stream(plan.rng, REASONING_WORDS)
        words = token_stream(plan.rng, WORDS)
        if plan.answer_text:
            words = iter(token_pieces(plan.answer_text))
        produced = 0
        deadline = time.monotonic()
        if plan.tool_calls:
            answer = 0
        while produced < budget and (reasoning > 0 or answer > 0):
            step = 1 if produced == 0 else min(engine.spec_step(plan.rng), budget - produced)
            pieces: list[Piece] = []
            for _ in range(step):
                if reasoning > 0:
                    pieces.append(Piece("reasoning", next(thoughts), 1))
                    reasoning -= 1
                elif answer > 0:
                    pieces.append(Piece("content", next(words), 1))
                    answer -= 1
            first = produced == 0
            produced += len(pieces)
            if not first:
                rate = engine.perf.decode_rate(plan.prompt_tokens + produced, engine.running, clock)
                rate *= engine.spec_speed
                deadline += len(pieces) / max(rate, 1e-6) * scale
                engine.sleep_until(deadline)
            yield pieces
        if plan.tool_calls and produced < budget:
            yield from self._calls(plan, budget - produced, clock, deadline)

    def _calls(
        self, plan: Plan, room: int, clock: float | None, deadline: float
    ) -> Iterator[list[Piece]]:
        """The calls, each timed as its tokens. Calls that do not fit in the budget are cut:
        the parser never sees their end, so the markup stays in the content (finish "length")."""
        engine = self.engine
        rate = engine.perf.decode_rate(plan.prompt_tokens, 1, clock) * engine.spec_speed
        sizes = [count_tokens(c.arguments) + CALL_OVERHEAD_TOKENS for c in plan.tool_calls]
        if sum(sizes) > room:
            markup = dsml(plan.tool_calls)
            deadline += room / max(rate, 1e-6) * engine.env.time_scale
            engine.sleep_until(deadline)
            yield [Piece("content", markup[: len(markup) * room // sum(sizes)], room)]
            return
        for index, (call, tokens) in enumerate(zip(plan.tool_calls, sizes, strict=True)):
            deadline += tokens / max(rate, 1e-6) * engine.env.time_scale
            engine.sleep_until(deadline)
            yield [Piece("tool", call.arguments, tokens, index)]

    def finished(
        self,
        plan: Plan,
        completion_tokens: int,
        reason: str,
        started: float,
        first_token: float | None,
    ) -> None:
        counters = self.engine.counters
        with self.engine.cond:
            counters.prompt_tokens += plan.prompt_tokens
            counters.prefix_queries += plan.prompt_tokens
            counters.generation_tokens += completion_tokens
            # The engine finishes a tool call like any other stop; "tool_calls" is API-level.
            engine_reason = "stop" if reason == "tool_calls" else reason
            counters.success[engine_reason] = counters.success.get(engine_reason, 0) + 1
            if first_token is not None:
                counters.ttft.observe(first_token - started)
            counters.e2e.observe(time.monotonic() - started)


def finish_reason(plan: Plan, completion_tokens: int, had_tool: bool) -> str:
    if had_tool:
        return "tool_calls"
    return "length" if completion_tokens >= plan.max_tokens else "stop"


def usage(plan: Plan, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "total_tokens": plan.prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }
