"""Capture what the real engine answers over HTTP, as data: the contract the lab's vLLM simulator
is tested against (tests/fixtures/vllm-engine/, tests/unit/test_vllm_sim_contract.py).

``python -m gx10._dev.engine_capture`` starts the lab's real engine image (vLLM's CPU build,
python/gx10/lab/engine.py; built if missing) as one process on this machine's Docker, serving
its tiny model under the product's model name with the lab profile's tokenizer mode and parsers,
sends it every probe of PROBES, and writes what came back: the status, the content type, and the
body (JSON as JSON, a stream as its server-sent events, /metrics as its metric families). The
unit test sends the same probes to the simulator and compares the shapes; the values (ids,
times, the random model's text) differ from capture to capture, the shapes do not.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gx10 import _collection
from gx10.lab import _docker, engine

ROOT = Path(__file__).resolve().parents[3]
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "vllm-engine"
MODEL = "deepseek-v4-flash"
MAX_MODEL_LEN = 4096
PROFILE = "dspark-0731-lab-cpu"
BOOT_TIMEOUT = 900.0  # a cold start of the CPU engine on two cores is 60-100 s
# A tool with a short call, so a call fits the probes' output limit on both servers.
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@dataclass(frozen=True)
class Probe:
    """One request: its name in the fixture, method, path, JSON body (the served model added
    unless the body names one), or a raw body sent as JSON."""

    name: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    raw: bytes | None = None
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    def json_body(self, model: str) -> dict[str, Any] | None:
        if self.body is None:
            return None
        return {"model": model, **self.body}


def _responses(name: str, body: dict[str, Any], *, stream: bool = False) -> Probe:
    """A /v1/responses probe; a streamed one sends `stream: true`."""
    return Probe(name, "POST", "/v1/responses", {**body, **({"stream": True} if stream else {})},
                 stream=stream)  # fmt: skip


HI = {"input": "Say hi.", "max_output_tokens": 8}
HI_STREAMED = {"input": "Say hi.", "max_output_tokens": 6}
# The deepseek_v4 reasoning parser takes a random model's whole output as reasoning; with
# thinking off it is the message's text (or, with tool_choice required, a call).
NO_THINKING = {"chat_template_kwargs": {"thinking": False}}
WEATHER = {
    "input": "What is the weather in Paris?",
    "tools": [TOOL],
    "tool_choice": "required",
    "max_output_tokens": 64,
}
HI_CHAT = {"messages": [{"role": "user", "content": "hi"}]}

PROBES: tuple[Probe, ...] = (
    Probe("models", "GET", "/v1/models"),
    _responses("responses", HI),
    _responses("responses_stream", HI_STREAMED, stream=True),
    _responses("responses_without_thinking", {**HI, **NO_THINKING}),
    _responses("responses_stream_without_thinking", {**HI_STREAMED, **NO_THINKING}, stream=True),
    _responses(
        "responses_messages",
        {
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Write fizzbuzz."}]}
            ],
            "max_output_tokens": 6,
        },
    ),
    _responses("responses_tool_stream", WEATHER, stream=True),
    _responses("responses_tool_without_thinking", {**WEATHER, **NO_THINKING}),
    _responses("responses_tool_stream_without_thinking", {**WEATHER, **NO_THINKING}, stream=True),
    _responses(
        "responses_unknown_model",
        {"model": "no-such-model", "input": "hi", "max_output_tokens": 4},
    ),
    _responses("responses_output_too_long", {"input": "hi", "max_output_tokens": 100000}),
    _responses("responses_without_input", {}),
    Probe(
        "chat_unknown_model", "POST", "/v1/chat/completions", {**HI_CHAT, "model": "no-such-model"}
    ),
    Probe(
        "chat_output_too_long", "POST", "/v1/chat/completions", {**HI_CHAT, "max_tokens": 100000}
    ),
    Probe("chat_bad_json", "POST", "/v1/chat/completions", raw=b"{not json"),
    Probe("chat_without_messages", "POST", "/v1/chat/completions", {}),
    Probe("unknown_route", "GET", "/no-such-route"),
    Probe("metrics", "GET", "/metrics"),
)


def parse_events(text: str) -> list[dict[str, Any]]:
    """A server-sent event stream as [{"event": name or None, "data": JSON or the raw text}]."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event: str | None = None
        data = []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                data.append(line.removeprefix("data:").strip())
        payload = "\n".join(data)
        try:
            parsed: Any = json.loads(payload)
        except json.JSONDecodeError:
            parsed = payload
        events.append({"event": event, "data": parsed})
    return events


def metric_families(text: str) -> dict[str, str]:
    """Prometheus text as {family: type}, from its # TYPE lines."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            families[name] = kind
    return families


def answer(probe: Probe, status: int, content_type: str, text: str) -> dict[str, Any]:
    """What the fixture keeps of one answer."""
    kind = content_type.split(";", maxsplit=1)[0].strip()
    body: Any
    if probe.name == "metrics":
        body = metric_families(text)
    elif kind == "text/event-stream":
        body = parse_events(text)
    else:
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = text
    return {"status": status, "content_type": kind, "body": body}


def send(client: httpx.Client, base: str, probe: Probe, model: str) -> dict[str, Any]:
    """Send one probe and return answer()'s record of it."""
    headers = dict(probe.headers)
    if probe.raw is not None:
        headers["Content-Type"] = "application/json"
        request = client.build_request(
            probe.method, base + probe.path, content=probe.raw, headers=headers
        )
    else:
        request = client.build_request(
            probe.method, base + probe.path, json=probe.json_body(model), headers=headers
        )
    reply = client.send(request, stream=probe.stream)
    try:
        text = "".join(reply.iter_text()) if probe.stream else reply.text
    finally:
        reply.close()
    return answer(probe, reply.status_code, reply.headers.get("content-type", ""), text)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_args() -> list[str]:
    """`vllm serve` as the capture runs it: one process, the lab profile's parsers."""
    serve_profiles = _collection.load("serve_profiles")

    def value(key: str) -> str:
        return str(serve_profiles.profile_value(PROFILE, key))

    return [
        "serve", engine.TINY_MODEL, "--served-model-name", MODEL,
        "--max-model-len", str(MAX_MODEL_LEN), "--host", "0.0.0.0", "--port", "8000",
        "--tokenizer-mode", value("tokenizer_mode"),
        "--tool-call-parser", value("tool_call_parser"),
        "--reasoning-parser", value("reasoning_parser"),
        "--enable-auto-tool-choice",
    ]  # fmt: skip


def capture(out: Path) -> Path:
    """Start the engine, send every probe, write the fixture; the container is removed after."""
    tag = engine.ensure_image(print)
    port = _free_port()
    name = f"gx10-engine-capture-{port}"
    _docker.docker(
        "run", "-d", "--name", name, "--shm-size", "2g",
        "-e", "VLLM_CPU_KVCACHE_SPACE=1", "-p", f"127.0.0.1:{port}:8000",
        tag, *serve_args(),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT
        with httpx.Client(timeout=300) as client:
            while True:
                try:
                    if client.get(f"{base}/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"the engine did not answer /health in {BOOT_TIMEOUT:.0f} s")
                time.sleep(2)
            probes = {probe.name: send(client, base, probe, MODEL) for probe in PROBES}
        version = _docker.docker("run", "--rm", "--entrypoint", "vllm", tag, "--version")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    document = {
        "command": "python -m gx10._dev.engine_capture",
        "image_recipe": tag,
        "vllm_version": version.strip().splitlines()[-1],
        "serve_args": serve_args(),
        "probes": probes,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gx10._dev.engine_capture", description=__doc__)
    ap.add_argument(
        "--out", type=Path,
        default=FIXTURE_DIR / f"vllm-cpu-{engine.engine_version()}.json",
    )  # fmt: skip
    args = ap.parse_args(argv)
    print(f"wrote {capture(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
