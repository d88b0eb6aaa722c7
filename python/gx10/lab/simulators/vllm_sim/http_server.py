"""HTTP: the OpenAI-compatible routes, whole answers and server-sent events."""

from __future__ import annotations

import json
import socketserver
import sys
import time
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .anthropic import StreamConverter, chat_body
from .anthropic import error_body as anthropic_error
from .anthropic import message as anthropic_message
from .api import Piece, Server, finish_reason, usage
from .deepseek_v4_encoding import render_chat, thinking_enabled
from .engine import ENGINE_DEAD_MESSAGE, EngineDeadError, KvLease, Plan
from .errors import ApiError, validation_error
from .log import Log
from .metrics import render_metrics
from .responses import Response, limit_error
from .responses import Stream as ResponseStream
from .responses import chat_body as responses_chat_body
from .tokenizer import BOS, END_THINK, decode, encode, special_id
from .tool_calls import argument_fragments

GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
ROUTES = {
    "/health": ("GET",),
    "/v1/models": ("GET",),
    "/metrics": ("GET",),
    "/tokenize": ("POST",),
    "/detokenize": ("POST",),
    "/v1/chat/completions": ("POST",),
    "/v1/completions": ("POST",),
    "/v1/messages": ("POST",),
    "/v1/responses": ("POST",),
}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: Server, log: Log) -> None:
        super().__init__(address, ApiHandler, bind_and_activate=False)
        self.api = api
        self.log = log

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up between requests is no error (uvicorn says nothing either)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def server_bind(self) -> None:
        """Bind without HTTPServer's getfqdn() lookup (it can stall without DNS)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # uvicorn (asyncio) sets TCP_NODELAY; with Nagle on, each streamed event after the first
    # would wait for the client's delayed ACK (about 40 ms on Linux) and distort every timing.
    disable_nagle_algorithm = True
    server_version = "uvicorn"
    server: ApiServer

    def version_string(self) -> str:
        return self.server_version

    # -- plumbing ------------------------------------------------------------------------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        self.server.log.uvicorn(
            f"{self.client_address[0]}:{self.client_address[1]} - "
            f'"{self.requestline}" {code} {phrase}'
        )

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError as error:
            raise validation_error(
                "json_invalid", f"body.{error.pos}", "JSON decode error", 0, error.msg
            ) from error
        except ValueError as error:  # not UTF-8
            raise validation_error(
                "json_invalid", "body", "JSON decode error", 0, str(error)
            ) from error
        if not isinstance(body, dict):
            raise ApiError(
                400, "Input should be a valid dictionary or object to extract fields from"
            )
        return body

    def _authorized(self) -> bool:
        keys = self.server.api.config.api_keys
        if not keys or not self.path.startswith(GUARDED_PREFIXES):
            return True
        scheme, _, token = (self.headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token in keys

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized():
            self._send_json(401, {"error": "Unauthorized"})
            return
        allowed = ROUTES.get(path)
        if allowed is None:
            self._send_json(404, {"detail": "Not Found"})
            return
        if method not in allowed:
            self._send_json(405, {"detail": "Method Not Allowed"})
            return
        handler = getattr(self, "route_" + path.strip("/").replace("/", "_"))
        try:
            handler()
        except ApiError as error:
            self._send_json(error.status, error.body())
        except EngineDeadError:
            self._send_json(500, ApiError(500, ENGINE_DEAD_MESSAGE, "InternalServerError").body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- routes --------------------------------------------------------------------------

    def route_health(self) -> None:
        if self.server.api.engine.dead.is_set():
            self._send_text(503, "", "application/json")
        else:
            self._send_text(200, "", "application/json")

    def route_metrics(self) -> None:
        api = self.server.api
        text = render_metrics(api.engine, api.config.served_names[0])
        self._send_text(200, text, "text/plain; version=0.0.4; charset=utf-8")

    def route_v1_models(self) -> None:
        config = self.server.api.config
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": config.model.path,
                "parent": None,
                "max_model_len": config.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in config.served_names
        ]
        self._send_json(200, {"object": "list", "data": data})

    def route_tokenize(self) -> None:
        body = self._read_json()
        api = self.server.api
        api.check_model(body)
        if "messages" in body:
            kwargs = dict(api.config.default_kwargs)
            kwargs.update(body.get("chat_template_kwargs") or {})
            text = render_chat(
                body["messages"],
                body.get("tools"),
                thinking_enabled(kwargs) is not None,
                bool(body.get("add_generation_prompt", True)),
            )
            special = False
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise ApiError(400, "prompt: Field required")
            text, special = prompt, bool(body.get("add_special_tokens", True))
        ids, pieces = encode(text)
        if special:
            ids, pieces = [special_id(BOS), *ids], [BOS, *pieces]
        self._send_json(
            200,
            {
                "count": len(ids),
                "max_model_len": api.config.max_model_len,
                "tokens": ids,
                "token_strs": pieces if body.get("return_token_strs") else None,
            },
        )

    def route_detokenize(self) -> None:
        body = self._read_json()
        self.server.api.check_model(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ApiError(400, "tokens: Input should be a valid list of integers")
        self._send_json(200, {"prompt": decode(tokens)})

    def route_v1_chat_completions(self) -> None:
        body = self._read_json()
        api = self.server.api
        model = api.check_model(body)
        plan, mode = api.plan_chat(body)
        separate = api.separates_reasoning(plan, mode)
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        request = _Request(
            self,
            model,
            plan,
            kind="chat",
            separate_reasoning=separate,
            include_usage=bool(options.get("include_usage")),
        )
        request.run(stream)

    def route_v1_messages(self) -> None:
        """Anthropic's Messages API: the request as a chat completion, answered as a message."""
        try:
            body = chat_body(self._read_json())
            api = self.server.api
            model = api.check_model(body)
            plan, mode = api.plan_chat(body)
        except ApiError as error:
            self._send_json(error.status, anthropic_error(error))
            return
        separate = api.separates_reasoning(plan, mode)
        request = _Request(
            self, model, plan, kind="messages", separate_reasoning=separate, include_usage=True
        )
        request.run(bool(body.get("stream")))

    def route_v1_responses(self) -> None:
        """The Responses API (Codex's): the request as a chat completion, answered as a
        response (responses.py)."""
        raw = self._read_json()
        api = self.server.api
        try:
            body = responses_chat_body(raw)
            model = api.check_model(body)
            plan, mode = api.plan_chat(body)
        except ApiError as error:
            raise limit_error(error) from None
        separate = api.separates_reasoning(plan, mode)
        request = _Request(
            self, model, plan, kind="responses", separate_reasoning=separate, include_usage=True
        )
        request.response = Response(raw, model)
        request.run(bool(body.get("stream")))

    def route_v1_completions(self) -> None:
        body = self._read_json()
        api = self.server.api
        model = api.check_model(body)
        plan = api.plan_completion(body)
        options = body.get("stream_options") or {}
        request = _Request(
            self,
            model,
            plan,
            kind="text",
            separate_reasoning=False,
            include_usage=bool(options.get("include_usage")),
        )
        request.run(bool(body.get("stream")))

    # -- streaming -----------------------------------------------------------------------

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def send_event(self, payload: str, event: str | None = None) -> None:
        named = f"event: {event}\n" if event else ""
        data = f"{named}data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Request:
    """One generation request, answered whole or as server-sent events."""

    def __init__(
        self,
        handler: ApiHandler,
        model: str,
        plan: Plan,
        *,
        kind: str,
        separate_reasoning: bool,
        include_usage: bool,
    ) -> None:
        self.handler, self.model, self.plan, self.kind = handler, model, plan, kind
        self.separate = separate_reasoning
        self.include_usage = include_usage
        self.api = handler.server.api
        prefix = "cmpl" if kind == "text" else "chatcmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        # /v1/messages: vLLM converts its own chat completion chunks into Messages events.
        self.converter = (
            StreamConverter(plan.prompt_tokens, broken="messages" in plan.breaks)
            if kind == "messages"
            else None
        )
        self.created = int(time.time())
        self.completion_tokens = 0
        self.reasoning_tokens = 0  # of them, those the reasoning parser separated
        # /v1/responses: the response the chat completion becomes (route_v1_responses).
        self.response: Response | None = None
        self.response_stream: ResponseStream | None = None
        self.had_tool = False
        self.opened_think = False

    def run(self, stream: bool) -> None:
        engine = self.api.engine
        started = time.monotonic()
        first: float | None = None
        lease = engine.admit(self.plan.prompt_tokens)
        reason = "abort"
        try:
            steps = self._holding_kv(self.api.generate(self.plan), lease)
            first = self._stream(steps) if stream else self._whole(steps)
            reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        finally:
            engine.release(lease)
            self.api.finished(self.plan, self.completion_tokens, reason, started, first)

    def _holding_kv(self, steps: Iterator[list[Piece]], lease: KvLease) -> Iterator[list[Piece]]:
        """The steps, with the request's KV blocks following its length (prompt and output)."""
        tokens = self.plan.prompt_tokens
        for pieces in steps:
            tokens += sum(piece.tokens for piece in pieces)
            self.api.engine.grow(lease, tokens)
            yield pieces

    def _text(self, piece: Piece) -> str:
        """Without a reasoning parser the reasoning stays in the content, as the model wrote it.

        The chat template already opened <think> in the prompt, so the output is the reasoning,
        then </think> where the answer starts (nothing closes a reasoning cut by max_tokens).
        """
        if piece.kind == "reasoning" and not self.separate:
            self.opened_think = True
        elif piece.kind == "content" and self.opened_think:
            self.opened_think = False
            return END_THINK + piece.text
        return piece.text

    def _whole(self, steps: Iterator[list[Piece]]) -> float | None:
        first: float | None = None
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        for pieces in steps:
            first = first or time.monotonic()
            for piece in pieces:
                self.completion_tokens += piece.tokens
                if piece.kind == "tool":
                    self.had_tool = True
                    call = self.plan.tool_calls[piece.index]
                    calls.append(
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    )
                elif piece.kind == "reasoning" and self.separate:
                    reasoning.append(piece.text)
                    self.reasoning_tokens += piece.tokens
                else:
                    content.append(self._text(piece))
        reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        body = self._body(reasoning, content, calls, reason)
        if self.kind == "messages":
            body = anthropic_message(body, broken="messages" in self.plan.breaks)
        elif self.response is not None:
            body = self.response.whole(body, self.reasoning_tokens)
        self.handler._send_json(200, body)
        return first

    def _body(
        self, reasoning: list[str], content: list[str], calls: list[dict[str, Any]], reason: str
    ) -> dict[str, Any]:
        if self.kind == "text":
            choice: dict[str, Any] = {
                "index": 0,
                "text": "".join(content),
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        else:
            text = "".join(content)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text if text or not calls else None,
                "tool_calls": calls,
            }
            if self.separate:
                # vLLM's field since 0.11 (`reasoning_content` was removed in early 2026).
                message["reasoning"] = "".join(reasoning) or None
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage(self.plan, self.completion_tokens),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    def _chunk(
        self,
        delta: dict[str, Any] | None,
        text: str | None,
        reason: str | None,
    ) -> dict[str, Any]:
        if self.kind == "text":
            choice: dict[str, Any] = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            obj = "text_completion"
        else:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": reason}
            if reason is not None:
                choice["stop_reason"] = None
            obj = "chat.completion.chunk"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }

    def _deltas(self, pieces: list[Piece]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        for piece in pieces:
            if piece.kind == "tool":
                self.had_tool = True
                deltas += self._call_deltas(piece.index)
            elif piece.kind == "reasoning" and self.separate:
                deltas.append({"reasoning": piece.text})
                self.reasoning_tokens += piece.tokens
            else:
                deltas.append({"content": self._text(piece)})
        return _merge_deltas(deltas)

    def _call_deltas(self, index: int) -> list[dict[str, Any]]:
        """A call as the deepseek_v4 parser streams it: id, type and name first (arguments
        empty), then the arguments in fragments, each delta naming the call's index."""
        call = self.plan.tool_calls[index]
        first = {"index": index, "id": call.stream_id, "type": "function"}
        first["function"] = {"name": call.name, "arguments": ""}
        fragments = argument_fragments(call.arguments)
        if "stream" in self.plan.breaks and index == len(self.plan.tool_calls) - 1:
            del fragments[len(fragments) // 2]  # the `stream` break: one fragment lost
        deltas = [{"tool_calls": [first]}]
        for fragment in fragments:
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        return deltas

    def _emit(self, chunk: dict[str, Any] | str) -> None:
        """One event: a chat chunk (a dict, or "[DONE]"), or the Messages or Responses events
        it makes."""
        if self.response is not None:
            self._emit_response(chunk)
            return
        if self.converter is None:
            self.handler.send_event(chunk if isinstance(chunk, str) else json.dumps(chunk))
            return
        events = self.converter.done() if chunk == "[DONE]" else []
        if isinstance(chunk, dict):
            events = self.converter.feed(chunk)
        for name, payload in events:
            self.handler.send_event(json.dumps(payload), event=name)

    def _emit_response(self, chunk: dict[str, Any] | str) -> None:
        assert self.response is not None
        if self.response_stream is None:
            self.response_stream = ResponseStream(self.response)
            events = self.response_stream.start()
        else:
            events = []
        if isinstance(chunk, dict) and chunk.get("choices"):
            events += self.response_stream.feed(chunk)
        elif isinstance(chunk, dict):  # the usage chunk, last
            events += self.response_stream.finish(chunk.get("usage") or {}, self.reasoning_tokens)
        for name, payload in events:
            self.handler.send_event(json.dumps(payload), event=name)

    def _stream(self, steps: Iterator[list[Piece]]) -> float | None:
        handler = self.handler
        first: float | None = None
        handler.start_stream()
        if self.kind != "text":
            self._emit(self._chunk({"role": "assistant", "content": ""}, None, None))
        try:
            for pieces in steps:
                first = first or time.monotonic()
                self.completion_tokens += sum(p.tokens for p in pieces)
                for delta in self._deltas(pieces):
                    self._emit(self._chunk(delta, delta.get("content"), None))
        except EngineDeadError:
            error = ApiError(500, ENGINE_DEAD_MESSAGE, "InternalServerError")
            if self.converter is not None:
                body = anthropic_error(error)
                handler.send_event(json.dumps(body), event="error")
            elif self.response is not None:
                handler.send_event(json.dumps(error.body()), event="error")
            else:
                handler.send_event(json.dumps(error.body()))
                handler.send_event("[DONE]")
            handler.end_stream()
            raise
        reason = finish_reason(self.plan, self.completion_tokens, self.had_tool)
        self._emit(self._chunk({}, None, reason))
        if self.include_usage:
            self._emit(
                {
                    "id": self.id,
                    "object": "text_completion" if self.kind == "text" else "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage(self.plan, self.completion_tokens),
                }
            )
        self._emit("[DONE]")
        handler.end_stream()
        return first


def _merge_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pieces of one engine step that go to the same field leave in one chunk."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        last = merged[-1] if merged else None
        if (
            last is not None
            and "tool_calls" not in delta
            and "tool_calls" not in last
            and last.keys() == delta.keys()
        ):
            for key in delta:
                last[key] = last[key] + delta[key]
        else:
            merged.append(dict(delta))
    return merged
