"""The vLLM simulator's stall mode (test equipment for `gx10 lab stall`): HTTP up, no tokens.

The simulator runs as a real process on loopback (the Launcher of test_vllm_sim, killed by PID);
the stall is switched at run time by its state file, as `gx10 lab stall` does in the serving
container. Every wait is bounded; the "no token" checks wait a short while for something that,
while stalled, never comes, so load on the machine cannot make them fail.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from typing import Any

import pytest
from test_vllm_sim import Launcher, free_port, healthy, http, wait_until


def _start_head(launcher: Launcher, stall: Path) -> tuple[Any, str]:
    """A single-node simulator head on loopback with its stall file at ``stall``, healthy."""
    port = free_port()
    head = launcher.start(
        "single",
        str(launcher.model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        env={"GX10_SIM_STALL_FILE": str(stall)},
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: healthy(url) or not head.alive(), 15, "the single-node server")
    return head, url


@pytest.fixture
def stalled_head(tmp_path: Path) -> Iterator[tuple[str, Path, Launcher]]:
    """A single-node head whose stall file is under tmp_path; yields its URL, the file, the lab."""
    launcher = Launcher(tmp_path)
    stall = tmp_path / "state" / "stall"
    try:
        head, url = _start_head(launcher, stall)
        assert head.alive(), head.output()
        yield url, stall, launcher
    finally:
        launcher.close()


def _chat(model: str, stream: bool) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 8,
        "stream": stream,
    }
    return json.dumps(body).encode()


def _open_stream(url: str, model: str, timeout: float) -> HTTPResponse:
    host, port = url.removeprefix("http://").split(":")
    conn = HTTPConnection(host, int(port), timeout=timeout)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=_chat(model, stream=True),
        headers={"content-type": "application/json"},
    )
    return conn.getresponse()


def _read_lines(response: HTTPResponse, lines: list[bytes], most: int) -> None:
    for _ in range(most):
        lines.append(response.readline())


def _content_events(lines: list[bytes]) -> list[str]:
    """The non-empty `content` deltas among the SSE lines read so far."""
    found = []
    for line in lines:
        if not line.startswith(b"data: {"):
            continue
        for choice in json.loads(line[len(b"data: ") :]).get("choices", []):
            if choice.get("delta", {}).get("content"):
                found.append(choice["delta"]["content"])
    return found


def test_a_stalled_engine_keeps_http_up_and_makes_no_token(
    stalled_head: tuple[str, Path, Launcher],
) -> None:
    url, stall, launcher = stalled_head
    model = str(launcher.model)
    stall.parent.mkdir(parents=True)
    stall.touch()  # switched at run time: no restart
    assert http("GET", f"{url}/health")[0] == 200
    status, body = http("GET", f"{url}/v1/models")
    assert status == 200
    assert json.loads(body)["data"][0]["id"] == model
    # Non-streamed: the request hangs until the client gives up.
    with pytest.raises((TimeoutError, socket.timeout)):
        http("POST", f"{url}/v1/chat/completions", json.loads(_chat(model, False)), timeout=1.5)
    # Streamed: the headers (and vLLM's opening role chunk) come, then no content, no end.
    response = _open_stream(url, model, timeout=1.5)
    assert response.status == 200
    lines: list[bytes] = []
    with pytest.raises((TimeoutError, socket.timeout)):
        _read_lines(response, lines, 100)  # bounded: the stall never ends the stream
    assert _content_events(lines) == []
    assert b"data: [DONE]\n" not in lines
    response.close()
    assert http("GET", f"{url}/health")[0] == 200  # still up after the clients gave up
    assert "engine stalled" in launcher.procs[0].output()


def test_clearing_the_stall_lets_a_waiting_request_finish(
    stalled_head: tuple[str, Path, Launcher],
) -> None:
    url, stall, launcher = stalled_head
    model = str(launcher.model)
    stall.parent.mkdir(parents=True)
    stall.touch()
    response = _open_stream(url, model, timeout=30.0)
    lines: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        for _ in range(1000):
            line = response.readline()
            lines.append(line)
            if not line or line == b"data: [DONE]\n":
                break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert not done.wait(1.0)  # stalled: nothing ends the stream
    assert _content_events(list(lines)) == []
    stall.unlink()  # cleared at run time
    assert done.wait(30.0), lines
    assert _content_events(lines), lines
    assert lines[-1] == b"data: [DONE]\n"
    status, body = http("POST", f"{url}/v1/chat/completions", json.loads(_chat(model, False)))
    assert status == 200
    assert json.loads(body)["usage"]["completion_tokens"] > 0
    wait_until(lambda: "engine stall cleared" in launcher.procs[0].output(), 10, "the log")
    response.close()


def test_a_starting_head_removes_a_leftover_stall(tmp_path: Path) -> None:
    """A restarted rank is no longer stalled, even if its container kept the file."""
    launcher = Launcher(tmp_path)
    stall = tmp_path / "stall"
    stall.write_text("")
    try:
        head, url = _start_head(launcher, stall)
        assert not stall.exists()
        started = time.monotonic()
        status, _ = http(
            "POST", f"{url}/v1/chat/completions", json.loads(_chat(str(launcher.model), False))
        )
        assert status == 200, time.monotonic() - started
        assert "removed a leftover stall file" in head.output()
    finally:
        launcher.close()
