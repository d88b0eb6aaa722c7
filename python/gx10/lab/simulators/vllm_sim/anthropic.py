"""vLLM's Anthropic-compatible Messages endpoint (`POST /v1/messages`), as vLLM builds it: the
request becomes a chat completion request, the chat completion's answer becomes a message.

- request: `system` (text or text blocks) and `messages` (text, tool_use and tool_result blocks;
  thinking blocks are the assistant's reasoning) become chat messages; `tools` (name,
  description, input_schema) become functions; tool_choice auto/any/none/tool becomes
  auto/required/none/named (auto when tools come without one); `max_tokens` is required.
- answer: content blocks thinking (with a signature), text, then one tool_use per call (its id
  the call's, its input the parsed arguments); stop_reason end_turn, max_tokens or tool_use;
  usage input_tokens and output_tokens. The id is the chat completion's (chatcmpl-...).
- streaming: message_start, then per block content_block_start / _delta (thinking_delta and a
  signature_delta, text_delta, input_json_delta) / _stop, message_delta (stop_reason, usage),
  message_stop; each as `event: NAME` + `data: JSON`.
- errors: {"type": "error", "error": {"type", "message"}}.

Authentication is the server's (http_server): `Authorization: Bearer KEY` as on every /v1 route.
vLLM's middleware does not read `x-api-key` (vllm-project/vllm issue 51572), so a request with
only that header is refused there and here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from .errors import ApiError
from .tool_calls import DSML

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
Event = tuple[str, dict[str, Any]]


def _blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, Mapping) for b in content):
        raise ApiError(400, f"{where}: content must be a string or a list of content blocks")
    return content


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", ""))
            for item in content
            if isinstance(item, Mapping) and item.get("type") == "text"
        )
    return "" if content is None else str(content)


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = "".join(
            str(b.get("text", "")) for b in _blocks(system, "system") if b.get("type") == "text"
        )
        out.append({"role": "system", "content": text})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: Field required" if messages is None else "messages: empty")
    for n, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise ApiError(400, f"messages.{n}.role: Input should be 'user' or 'assistant'")
        role = str(message["role"])
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in _blocks(message.get("content"), f"messages.{n}"):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append(
                    {
                        "id": block.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                        "type": "function",
                        "function": {
                            "name": str(block.get("name") or ""),
                            "arguments": json.dumps(block.get("input") or {}),
                        },
                    }
                )
            elif kind == "tool_result" and role == "user":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id") or ""),
                        "content": _tool_result_text(block.get("content")),
                    }
                )
        if texts or calls:
            converted: dict[str, Any] = {"role": role, "content": "".join(texts)}
            if calls:
                converted["tool_calls"] = calls
            out.append(converted)
    return out


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, Mapping):
        raise ApiError(400, "tool_choice: Input should be an object with a type")
    kind = choice.get("type")
    if kind == "tool":
        if not choice.get("name"):
            raise ApiError(400, "tool_choice.name is required when type is 'tool'")
        return {"type": "function", "function": {"name": choice["name"]}}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
    if mapped is None:
        raise ApiError(400, "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    return mapped


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion request vLLM makes of a Messages request."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise ApiError(400, "max_tokens: Field required")
    if max_tokens <= 0:
        raise ApiError(400, "max_tokens must be positive")
    chat: dict[str, Any] = {
        "model": model,
        "messages": _messages(body),
        "max_tokens": max_tokens,
        "stream": bool(body.get("stream")),
    }
    for key in ("temperature", "top_p", "top_k", "chat_template_kwargs"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list) or not all(
            isinstance(t, Mapping) and t.get("name") and isinstance(t.get("input_schema"), Mapping)
            for t in tools
        ):
            raise ApiError(400, "tools: every tool needs a name and an input_schema object")
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description"),
                    "parameters": {"type": "object", **t["input_schema"]},
                },
            }
            for t in tools
        ]
        chat.setdefault("tool_choice", "auto")
    return chat


def error_body(error: ApiError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error.err_type, "message": error.message}}


def _raw_calls_text(calls: list[Mapping[str, Any]]) -> str:
    """The `messages` break: the calls left as the model wrote them (no tool parser)."""
    lines = [f"<{DSML}tool_calls>"]
    for call in calls:
        function = call["function"]
        lines.append(f'<{DSML}invoke name="{function["name"]}">{function["arguments"]}')
        lines.append(f"</{DSML}invoke>")
    lines.append(f"</{DSML}tool_calls>")
    return "\n".join(lines)


def message(chat: Mapping[str, Any], broken: bool = False) -> dict[str, Any]:
    """A whole chat completion as a Messages answer (vLLM drops the None fields)."""
    choice = chat["choices"][0]
    answer = choice["message"]
    calls = list(answer.get("tool_calls") or [])
    reason = choice["finish_reason"]
    content: list[dict[str, Any]] = []
    if answer.get("reasoning"):
        content.append(
            {"type": "thinking", "thinking": answer["reasoning"], "signature": uuid.uuid4().hex}
        )
    text = answer.get("content") or ""
    if broken and calls:
        text, calls, reason = text + _raw_calls_text(calls), [], "stop"
    if text:
        content.append({"type": "text", "text": text})
    for call in calls:
        content.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": json.loads(call["function"]["arguments"]),
            }
        )
    usage = chat["usage"]
    return {
        "id": chat["id"],
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": chat["model"],
        "stop_reason": STOP_REASONS.get(reason, "end_turn"),
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        },
    }


class StreamConverter:
    """Chat completion chunks in, Messages stream events out (vLLM's message_stream_converter).

    The chat side always sends the usage chunk (choices empty) last: it becomes message_delta.
    """

    def __init__(self, input_tokens: int, broken: bool = False) -> None:
        self.input_tokens = input_tokens
        self.broken = broken
        self.started = False
        self.index = 0  # of the next content block
        self.block: str | None = None  # the open block's type
        self.call_id: str | None = None
        self.reason = "stop"
        self.raw_calls: dict[int, dict[str, Any]] = {}

    def _stop_block(self) -> list[Event]:
        if self.block is None:
            return []
        events: list[Event] = []
        if self.block == "thinking":
            delta = {"type": "signature_delta", "signature": uuid.uuid4().hex}
            events.append(self._delta(delta))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        self.block, self.call_id = None, None
        self.index += 1
        return events

    def _start_block(self, block: dict[str, Any]) -> list[Event]:
        events = self._stop_block()
        self.block = str(block["type"])
        payload = {"type": "content_block_start", "index": self.index, "content_block": block}
        events.append(("content_block_start", payload))
        return events

    def _delta(self, delta: dict[str, Any]) -> Event:
        payload = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return ("content_block_delta", payload)

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        if not self.started:
            self.started = True
            start = {
                "id": chunk["id"],
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": chunk["model"],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
            }
            events.append(("message_start", {"type": "message_start", "message": start}))
        if not chunk.get("choices"):
            return events + self._finish(chunk.get("usage") or {})
        choice = chunk["choices"][0]
        self.reason = choice.get("finish_reason") or self.reason
        delta = choice.get("delta") or {}
        if delta.get("reasoning"):
            if self.block != "thinking":
                events += self._start_block({"type": "thinking", "thinking": ""})
            events.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning"]}))
        if delta.get("content"):
            if self.block != "text":
                events += self._start_block({"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            events += self._tool_delta(call)
        return events

    def _tool_delta(self, call: Mapping[str, Any]) -> list[Event]:
        function = call.get("function") or {}
        if self.broken:  # kept, to be written out as text at the end
            raw = self.raw_calls.setdefault(
                int(call.get("index", 0)), {"function": {"name": "", "arguments": ""}}
            )
            raw["function"]["name"] += function.get("name") or ""
            raw["function"]["arguments"] += function.get("arguments") or ""
            return []
        events: list[Event] = []
        if call.get("id") and call["id"] != self.call_id and function.get("name"):
            events += self._start_block(
                {"type": "tool_use", "id": call["id"], "name": function["name"], "input": {}}
            )
            self.call_id = call["id"]
        if function.get("arguments"):
            partial = {"type": "input_json_delta", "partial_json": function["arguments"]}
            events.append(self._delta(partial))
        return events

    def _finish(self, usage: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        reason = self.reason
        if self.raw_calls:
            events += self._start_block({"type": "text", "text": ""})
            text = _raw_calls_text([self.raw_calls[i] for i in sorted(self.raw_calls)])
            events.append(self._delta({"type": "text_delta", "text": text}))
            reason = "stop"
        events += self._stop_block()
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": STOP_REASONS.get(reason, "end_turn")},
                    "usage": {
                        "input_tokens": int(usage.get("prompt_tokens", 0)),
                        "output_tokens": int(usage.get("completion_tokens", 0)),
                    },
                },
            )
        )
        return events

    def done(self) -> list[Event]:
        return [("message_stop", {"type": "message_stop"})]
