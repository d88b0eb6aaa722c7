"""The smoke test of a served model, through the official `openai` client.

Four checks, each a real request a coding agent makes: the model is listed, a chat completion
returns text, a streamed completion streams, and a request with a tool definition yields a
parsed tool call. `max_tokens` and the thinking mode are always sent: a server default of
unbounded thinking once ran one request for hours (FIELD_NOTES section 4). Thinking is off by
default: the smoke test checks the plumbing, and reasoning could spend all of max_tokens.

The tool call is asked with ``tool_choice="auto"``: the model chooses the call and the server's
tool-call parser finds it, as in a coding agent's session. ``tool_choice="required"`` makes the
server constrain the output to a call instead (structured outputs), for a model that never
chooses one: the lab's real engine serves a tiny model with random weights
(inventories/lab-vllm: ``gx10_smoke_tool_choice: required``).

Once the model is listed, the three requests go at once (a coding agent's requests overlap too,
and the server batches them): the test takes the time of its slowest request, not their sum.
Each check reports its own time; the checks are reported in their fixed order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletionFunctionToolParam

from gx10.endpoint import parse_endpoint

FILE_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file in the workspace",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path"},
                "content": {"type": "string", "description": "file content"},
            },
            "required": ["path", "content"],
        },
    },
}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass(frozen=True, slots=True)
class SmokeResult:
    base_url: str
    model: str
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _timed(name: str, fn: Callable[[], str]) -> Check:
    started = time.monotonic()
    try:
        detail = fn()
        ok = True
    except (openai.OpenAIError, AssertionError, ValueError, KeyError) as exc:
        detail, ok = f"{type(exc).__name__}: {exc}", False
    return Check(name, ok, detail, round(time.monotonic() - started, 3))


def run(
    base_url: str,
    model: str,
    *,
    api_key: str = "EMPTY",
    timeout: float = 120.0,
    max_tokens: int = 128,
    thinking: bool | str = False,
    tool_choice: Literal["auto", "required"] = "auto",
) -> SmokeResult:
    """Run the checks against `base_url`: http(s)://HOST:PORT, with or without /v1 (EndpointError
    when it is neither)."""
    base_url = parse_endpoint(base_url).v1
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout)
    extra = {"chat_template_kwargs": {"thinking": thinking}}

    def models() -> str:
        ids = [m.id for m in client.models.list().data]
        if model not in ids:
            raise AssertionError(f"{model!r} is not served; the server lists {ids}")
        return f"served: {', '.join(ids)}"

    def chat() -> str:
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say hello in five words."}],
            max_tokens=max_tokens,
            temperature=0.6,
            top_p=0.95,
            extra_body=extra,
        )
        text = resp.choices[0].message.content or ""
        if not text.strip():
            raise AssertionError("the completion has no text")
        usage = resp.usage
        return (
            f"{len(text)} chars, usage {usage.prompt_tokens}+{usage.completion_tokens} tokens"
            if usage
            else text[:40]
        )

    def stream() -> str:
        chunks = 0
        text = ""
        for chunk in client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Count from one to ten."}],
            max_tokens=max_tokens,
            stream=True,
            extra_body=extra,
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                chunks += 1
                text += chunk.choices[0].delta.content
        if chunks < 2:
            raise AssertionError(f"expected several streamed chunks, got {chunks}")
        return f"{chunks} chunks, {len(text)} chars"

    def tool_call() -> str:
        resp = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "user", "content": "Write fizzbuzz.py with a FizzBuzz program in it."}
            ],
            tools=[FILE_TOOL],
            tool_choice=tool_choice,
            max_tokens=max_tokens * 4,
            extra_body=extra,
        )
        calls = resp.choices[0].message.tool_calls or []
        if not calls:
            raise AssertionError("no tool call was parsed from the response")
        call = calls[0]
        if call.type != "function":
            raise AssertionError(f"expected a function tool call, got {call.type}")
        name = call.function.name
        args = json.loads(call.function.arguments)
        if name != "write_file" or not isinstance(args, dict):
            raise AssertionError(f"unexpected tool call {name}({args})")
        return f"{name}({', '.join(sorted(args))})"

    checks = [_timed("models", models)]
    if checks[0].ok:
        requests = {"chat": chat, "stream": stream, "tool call": tool_call}
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            running = [pool.submit(_timed, name, fn) for name, fn in requests.items()]
            checks += [future.result() for future in running]
    return SmokeResult(base_url, model, tuple(checks))
