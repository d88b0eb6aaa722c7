"""gx10.endpoint: one normalisation of the server URL for `gx10 smoke` and `gx10 bench`; smoke
against a loopback server that answers only under /v1 (issue 16 item 4)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from gx10 import smoke
from gx10.bench.client import BenchError, Endpoint
from gx10.cli import main
from gx10.endpoint import EndpointError, parse_endpoint

MODEL = "m1"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1/",
        " http://127.0.0.1:8000/v1 ",
    ],
)
def test_with_or_without_v1_and_a_trailing_slash(url: str) -> None:
    parsed = parse_endpoint(url)
    assert parsed.root == "http://127.0.0.1:8000"
    assert parsed.v1 == "http://127.0.0.1:8000/v1"
    assert Endpoint.parse(url).root == parsed.root


def test_https_and_a_host_name() -> None:
    assert parse_endpoint("https://gx10-a:8443/v1").v1 == "https://gx10-a:8443/v1"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("gx10-a:8000", "the scheme must be http or https"),
        ("ftp://gx10-a:8000", "the scheme must be http or https"),
        ("http://:8000", "no host"),
        ("http://gx10-a:8000/v2", "unexpected path '/v2'"),
        ("http://gx10-a:8000/v1/models", "unexpected path"),
        ("http://gx10-a:port", "Port could not be cast"),
    ],
)
def test_other_forms_are_refused_saying_what_is_expected(url: str, problem: str) -> None:
    with pytest.raises(EndpointError, match="expected http://HOST:PORT or http://HOST:PORT/v1"):
        parse_endpoint(url)
    with pytest.raises(EndpointError, match=problem):
        parse_endpoint(url)
    with pytest.raises(BenchError, match=r"--endpoint .*expected"):
        Endpoint.parse(url)


class V1Only(BaseHTTPRequestHandler):
    """The OpenAI API under /v1 and nothing else (404 elsewhere), like a proxied server."""

    seen: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        self.seen.append(f"POST {self.path}")
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        base = {"id": "c1", "created": 0, "model": MODEL}
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for word in ("one", " two", " three"):
                chunk = {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True
            return
        message: dict[str, Any] = {"role": "assistant", "content": "Hello there, how are you?"}
        if body.get("tools"):
            args = json.dumps({"path": "fizzbuzz.py", "content": "print(1)"})
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call1",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": args},
                    }
                ],
            }
        self._json(
            200,
            {
                **base,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
            },
        )


@pytest.fixture
def v1_only() -> Iterator[str]:
    V1Only.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), V1Only)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class AllAtOnce(V1Only):
    """Answers no chat request until all three of the smoke test's have arrived (a bounded
    wait: a request that waits in vain gets a 503, so checks sent one after another fail)."""

    arrived: ClassVar[threading.Barrier] = threading.Barrier(3)

    def do_POST(self) -> None:
        try:
            self.arrived.wait(timeout=5)
        except threading.BrokenBarrierError:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self._json(503, {"detail": "the other requests never came"})
            return
        super().do_POST()


def test_smoke_sends_its_three_requests_at_once() -> None:
    AllAtOnce.arrived = threading.Barrier(3)
    server = ThreadingHTTPServer(("127.0.0.1", 0), AllAtOnce)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = smoke.run(f"http://127.0.0.1:{server.server_address[1]}", MODEL, timeout=10.0)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert result.ok, result.checks
    # Reported in the fixed order, each with its own time.
    assert [check.name for check in result.checks] == ["models", "chat", "stream", "tool call"]


class RecordsToolChoice(V1Only):
    """Records the tool_choice of each request that declares tools."""

    choices: ClassVar[list[object]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        body = json.loads(raw or b"{}")
        if body.get("tools"):
            self.choices.append(body.get("tool_choice"))
        self.rfile = io.BytesIO(raw)
        super().do_POST()


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_smoke_asks_for_the_tool_call_with_the_tool_choice_given(choice: str) -> None:
    """auto by default (the model chooses, the parser finds the call); required for a model that
    never chooses one, which the server then constrains to a call (the lab's real engine)."""
    RecordsToolChoice.choices = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordsToolChoice)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        if choice == "auto":
            result = smoke.run(url, MODEL, timeout=10.0)
        else:
            result = smoke.run(url, MODEL, timeout=10.0, tool_choice="required")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert result.ok, result.checks
    assert RecordsToolChoice.choices == [choice]


def test_the_smoke_command_passes_its_tool_choice(
    v1_only: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["smoke", "--endpoint", v1_only, "--model", MODEL, "--tool-choice", "required"]
    assert main(argv) == 0
    with pytest.raises(SystemExit) as refused:
        main([*argv[:-1], "sometimes"])
    assert refused.value.code != 0
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_smoke_accepts_the_server_with_or_without_v1(v1_only: str, suffix: str) -> None:
    result = smoke.run(v1_only + suffix, MODEL, timeout=10.0)
    assert result.ok, result.checks
    assert result.base_url == f"{v1_only}/v1"
    assert "GET /v1/models" in V1Only.seen
    assert not [s for s in V1Only.seen if " /v1/" not in s]


def test_the_smoke_command_takes_the_bare_server(
    v1_only: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["smoke", "--endpoint", v1_only, "--model", MODEL, "--timeout", "10"]) == 0
    out = capsys.readouterr().out
    assert f"OK: {v1_only}/v1 model {MODEL}" in out


def test_the_smoke_command_names_the_expected_form(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["smoke", "--endpoint", "gx10-a:8000", "--model", MODEL])
    assert code != 0
    err = capsys.readouterr().err
    assert "expected http://HOST:PORT or http://HOST:PORT/v1" in err
