"""vLLM's Responses endpoint (`POST /v1/responses`, the API Codex speaks), as the real engine
answers it: captured from vLLM itself (tests/fixtures/vllm-engine/, `python -m
gx10._dev.engine_capture`), and the request turned into a chat completion request as the
simulator's other endpoints are.

- request: `instructions` is the system message; `input` is a string (one user message) or a
  list of items: messages (a string or input_text / output_text parts), function_call items (the
  assistant's calls) and function_call_output items (their results). `tools` are flat functions
  ({type, name, description, parameters}); tool_choice auto, required, none or a named function;
  `max_output_tokens` is the output limit; `input` is required (vLLM's validation message).
- answer: an object "response" (id resp_...): the output items (a reasoning item when the
  reasoning parser separated some, a message with one output_text part, one function_call item
  a call), status completed, or incomplete with incomplete_details.reason max_output_tokens; the
  request's settings echoed as vLLM echoes them; usage input_tokens, output_tokens, total_tokens
  and their details.
- streaming: `event: NAME` + `data: JSON`, each with a sequence_number: response.created,
  response.in_progress, then per item output_item.added, (content_part.added, output_text.delta
  ..., output_text.done, content_part.done) or (function_call_arguments.delta ...,
  function_call_arguments.done), output_item.done; response.completed with the whole response
  last. No `data: [DONE]`.

Errors are vLLM's OpenAI error body (errors.ApiError), as on /v1/chat/completions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from .errors import ApiError, missing_field

Event = tuple[str, dict[str, Any]]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}: content must be a string or a list of content parts")
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text", "text")
    )


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if items is None:
        raise missing_field("input", dict(body))
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError(400, "input: Input should be a valid string or list", param="input")
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ApiError(400, f"input.{n}: Input should be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role", "user"))
            out.append(
                {
                    "role": role if role != "developer" else "system",
                    "content": _text_of(item.get("content"), f"input.{n}"),
                }
            )
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or ""),
                "type": "function",
                "function": {"name": str(item.get("name", "")), "arguments": item.get("arguments")},
            }
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id") or ""),
                    "content": _text_of(item.get("output", ""), f"input.{n}.output"),
                }
            )
        elif kind != "reasoning":  # the model's own earlier reasoning: not sent back to it
            raise ApiError(400, f"input.{n}.type: unknown item type {kind!r}", param="input")
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list) or not all(
        isinstance(t, Mapping) and t.get("type") == "function" and t.get("name") for t in tools
    ):
        raise ApiError(400, "tools: every tool needs type function and a name", param="tools")
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description"),
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "required", "none"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ApiError(400, f"tool_choice: unsupported value {choice!r}", param="tool_choice")


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion request a Responses request makes."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model: Field required", param="model")
    chat: dict[str, Any] = {
        "model": model,
        "messages": _messages(body),
        "stream": bool(body.get("stream")),
    }
    limit = body.get("max_output_tokens")
    if limit is not None:
        chat["max_tokens"] = limit
    for key in ("temperature", "top_p", "top_k", "chat_template_kwargs"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
        chat["tool_choice"] = _tool_choice(body.get("tool_choice", "auto"))
    elif body.get("tool_choice") not in (None, "none", "auto"):
        raise ApiError(400, "tool_choice needs tools", param="tool_choice")
    return chat


def limit_error(error: ApiError) -> ApiError:
    """vLLM names the Responses field in its output-limit error (max_output_tokens)."""
    if error.param != "max_tokens":
        return error
    message = error.message.replace("max_tokens", "max_output_tokens")
    return ApiError(error.status, message, error.err_type, "max_output_tokens")


def _echoed_tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["name"],
            "parameters": t.get("parameters"),
            "strict": t.get("strict"),
            "type": "function",
            "allowed_callers": None,
            "async": None,
            "defer_loading": None,
            "description": t.get("description"),
            "output_schema": None,
        }
        for t in body.get("tools") or []
    ]


def _usage(prompt_tokens: int, output_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": reasoning_tokens,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": prompt_tokens + output_tokens,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = (
        [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}]
        if status == "completed"
        else []
    )
    return {
        "id": item_id,
        "content": content,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": None,
        "status": status,
    }


def _reasoning_item(item_id: str, text: str, status: str | None) -> dict[str, Any]:
    """vLLM's reasoning item: status null in a whole response, in_progress (no content yet) and
    completed in a stream."""
    content = None if status == "in_progress" else [{"text": text, "type": "reasoning_text"}]
    return {
        "content": content,
        "encrypted_content": None,
        "id": item_id,
        "status": status,
        "summary": [],
        "type": "reasoning",
    }


class Response:
    """One Responses request's answer: built whole (whole()) or as its stream (Stream)."""

    def __init__(self, body: Mapping[str, Any], model: str) -> None:
        self.body = body
        self.model = model
        self.id = _id("resp")
        self.created_at = int(time.time())

    def envelope(
        self,
        output: list[dict[str, Any]],
        status: str,
        usage: dict[str, Any] | None,
        reason: str | None,
    ) -> dict[str, Any]:
        body = self.body
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" and reason else None
        return {
            "id": self.id,
            "created_at": self.created_at,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
            "temperature": float(body.get("temperature", 1.0)),
            "tool_choice": body.get("tool_choice", "auto" if body.get("tools") else "none"),
            "tools": _echoed_tools(body),
            "top_p": float(body.get("top_p", 1.0)),
            "background": False,
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }

    def whole(self, chat: Mapping[str, Any], reasoning_tokens: int) -> dict[str, Any]:
        """A whole chat completion as the response."""
        choice = chat["choices"][0]
        answer = choice["message"]
        output: list[dict[str, Any]] = []
        if answer.get("reasoning"):
            output.append(_reasoning_item(_id("rs"), answer["reasoning"], None))
        if answer.get("content"):
            output.append(_message_item(_id("msg"), answer["content"], "completed"))
        for call in answer.get("tool_calls") or []:
            function = call["function"]
            output.append(
                _call_item(
                    _id("fc"), call["id"], function["name"], function["arguments"], "completed"
                )
            )
        usage = chat["usage"]
        status = "incomplete" if choice["finish_reason"] == "length" else "completed"
        return self.envelope(
            output,
            status,
            _usage(usage["prompt_tokens"], usage["completion_tokens"], reasoning_tokens),
            choice["finish_reason"],
        )


class Stream:
    """Chat completion chunks in, Responses events out; finish() ends the stream with
    response.completed (vLLM sends no `data: [DONE]` here)."""

    def __init__(self, response: Response) -> None:
        self.response = response
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.reason: str | None = None

    def _event(self, name: str, payload: dict[str, Any]) -> Event:
        payload = {**payload, "sequence_number": self.sequence, "type": name}
        self.sequence += 1
        return (name, payload)

    def start(self) -> list[Event]:
        envelope = self.response.envelope([], "in_progress", None, None)
        return [
            self._event("response.created", {"response": envelope}),
            self._event("response.in_progress", {"response": envelope}),
        ]

    def _close(self) -> list[Event]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = len(self.output)
        events: list[Event] = []
        if item["type"] == "message":
            text = item["text"]
            where = {"content_index": 0, "item_id": item["id"], "output_index": index}
            done = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
            events.append(
                self._event("response.output_text.done", {**where, "logprobs": [], "text": text})
            )
            events.append(self._event("response.content_part.done", {**where, "part": done}))
            final = _message_item(item["id"], text, "completed")
        elif item["type"] == "reasoning":
            text = item["text"]
            where = {"content_index": 0, "item_id": item["id"], "output_index": index}
            part = {"text": text, "type": "reasoning_text"}
            events.append(self._event("response.reasoning_text.done", {**where, "text": text}))
            events.append(self._event("response.content_part.done", {**where, "part": part}))
            final = _reasoning_item(item["id"], text, "completed")
        else:
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    {
                        "arguments": item["arguments"],
                        "item_id": item["id"],
                        "output_index": index,
                        "name": item["name"],
                    },
                )
            )
            final = _call_item(
                item["id"], item["call_id"], item["name"], item["arguments"], "completed"
            )
        events.append(
            self._event("response.output_item.done", {"item": final, "output_index": index})
        )
        self.output.append(final)
        return events

    def _open(self, kind: str, **fields: Any) -> list[Event]:
        events = self._close()
        index = len(self.output)
        if kind == "message":
            self.open = {"type": "message", "id": _id("msg"), "text": ""}
            added = _message_item(self.open["id"], "", "in_progress")
        elif kind == "reasoning":
            self.open = {"type": "reasoning", "id": _id("rs"), "text": ""}
            added = _reasoning_item(self.open["id"], "", "in_progress")
        else:
            self.open = {"type": "function_call", "id": _id("fc"), "arguments": "", **fields}
            added = _call_item(
                self.open["id"], fields["call_id"], fields["name"], "", "in_progress"
            )
        events.append(
            self._event("response.output_item.added", {"item": added, "output_index": index})
        )
        if kind in ("message", "reasoning"):
            part = (
                {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
                if kind == "message"
                else {"text": "", "type": "reasoning_text"}
            )
            where = {"content_index": 0, "item_id": self.open["id"], "output_index": index}
            events.append(self._event("response.content_part.added", {**where, "part": part}))
        return events

    def _text(self, kind: str, text: str) -> list[Event]:
        """A reasoning or message delta: its item opened unless it is the open one, then the
        delta event (a message's carries its logprobs, empty)."""
        events = [] if self.open is not None and self.open["type"] == kind else self._open(kind)
        assert self.open is not None
        self.open["text"] += text
        where = {"content_index": 0, "item_id": self.open["id"], "output_index": len(self.output)}
        if kind == "reasoning":
            events.append(self._event("response.reasoning_text.delta", {**where, "delta": text}))
        else:
            payload = {**where, "delta": text, "logprobs": []}
            events.append(self._event("response.output_text.delta", payload))
        return events

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        """The events one chat completion chunk makes (the usage chunk goes to finish())."""
        choice = chunk["choices"][0]
        self.reason = choice.get("finish_reason") or self.reason
        delta = choice.get("delta") or {}
        events: list[Event] = []
        if delta.get("reasoning"):
            events += self._text("reasoning", delta["reasoning"])
        if delta.get("content"):
            events += self._text("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            function = call.get("function") or {}
            if call.get("id") and function.get("name"):
                events += self._open("function_call", call_id=call["id"], name=function["name"])
            if function.get("arguments") and self.open is not None:
                self.open["arguments"] += function["arguments"]
                events.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        {
                            "delta": function["arguments"],
                            "item_id": self.open["id"],
                            "output_index": len(self.output),
                        },
                    )
                )
        return events

    def finish(self, usage: Mapping[str, Any], reasoning_tokens: int) -> list[Event]:
        """The last events, after the usage chunk: the open item's end, response.completed."""
        events = self._close()
        status = "incomplete" if self.reason == "length" else "completed"
        whole = self.response.envelope(
            self.output,
            status,
            _usage(
                int(usage.get("prompt_tokens", 0)),
                int(usage.get("completion_tokens", 0)),
                reasoning_tokens,
            ),
            self.reason,
        )
        events.append(self._event("response.completed", {"response": whole}))
        return events


def dumps(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)
