"""The vLLM simulator's tool calls and its Messages endpoint, as vLLM's deepseek_v4 parser and its
Anthropic-compatible route hand them over: OpenAI `tool_calls` (ids, JSON-text arguments),
several calls in one turn, streamed deltas (id and name first, then argument fragments),
tool_choice, reasoning in `reasoning`, `/v1/messages` (content blocks, tool_use, stop_reason,
usage, streamed events) and its authentication; plus the battery's break switch.

The simulator's API server runs in this process on a loopback ephemeral port (instant: time
scale 0), shut down after the module.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from simulators import InProcessHead, vllm_sim_head

from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.vllm_sim.breaks import BreakSwitch
from gx10.lab.simulators.vllm_sim.processes import clear_stall

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
RUN = {
    "type": "function",
    "function": {
        "name": "run_command",
        "description": "Run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
PARALLEL = (
    'In parallel: get_weather with {"city": "Paris"} and get_time with {"timezone": "Asia/Tokyo"}.'
)
STREAM_ID = re.compile(r"^call_[0-9a-f]{24}$")


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHead]:
    with vllm_sim_head(tmp_path_factory.mktemp("sim-tools")) as served:
        yield served


@pytest.fixture(autouse=True)
def no_break(head: InProcessHead) -> Iterator[None]:
    head.break_file.unlink(missing_ok=True)
    yield
    head.break_file.unlink(missing_ok=True)


def post(head: InProcessHead, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    sent = {"authorization": f"Bearer {head.api_key}", **headers}
    return httpx.post(f"{head.url}{path}", json=body, headers=sent, timeout=10)


def chat(head: InProcessHead, text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": head.model, "messages": [{"role": "user", "content": text}], **extra}
    body.setdefault("max_tokens", 512)
    reply = post(head, "/v1/chat/completions", body)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def events(head: InProcessHead, path: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """A streamed answer's server-sent events: (event name or "", parsed data)."""
    found: list[tuple[str, Any]] = []
    name = ""
    headers = {"authorization": f"Bearer {head.api_key}"}
    with httpx.stream("POST", f"{head.url}{path}", json=body, headers=headers, timeout=10) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
                found.append((name, data if data == "[DONE]" else json.loads(data)))
                name = ""
    return found


# --- chat completions: tool calls ------------------------------------------------------------


def test_a_whole_answer_carries_the_parsers_calls(head: InProcessHead) -> None:
    body = chat(head, PARALLEL, tools=[WEATHER, CLOCK])
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    calls = message["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert all(c["id"].startswith("chatcmpl-tool-") and c["type"] == "function" for c in calls)
    assert len({c["id"] for c in calls}) == 2
    # JSON text, as vLLM's json.dumps writes it, passed verbatim from the user's JSON blocks.
    assert calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    assert json.loads(calls[1]["function"]["arguments"]) == {"timezone": "Asia/Tokyo"}


def test_without_parallel_the_agent_calls_one_tool_per_turn_then_answers(
    head: InProcessHead,
) -> None:
    task = (
        'Write FizzBuzz for 1 to 5. Step 1: write_file with path "fb.py" and the program as '
        'content. Step 2: run_command with command "python3 fb.py".'
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    names = []
    for result in ("wrote it", "exit status 0\n1\n2\nFizz\n4\nBuzz\n"):
        body = {"model": head.model, "messages": messages, "tools": [WRITE, RUN], "max_tokens": 512}
        message = post(head, "/v1/chat/completions", body).json()["choices"][0]["message"]
        (call,) = message["tool_calls"]
        names.append(call["function"]["name"])
        messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": result}]
        if call["function"]["name"] == "write_file":
            args = json.loads(call["function"]["arguments"])
            assert args["path"] == "fb.py"
            assert "range(1, 6)" in args["content"]
        else:
            assert json.loads(call["function"]["arguments"]) == {"command": "python3 fb.py"}
    assert names == ["write_file", "run_command"]
    body = {"model": head.model, "messages": messages, "tools": [WRITE, RUN], "max_tokens": 512}
    final = post(head, "/v1/chat/completions", body).json()["choices"][0]
    assert final["finish_reason"] == "stop"
    assert not final["message"]["tool_calls"]
    assert final["message"]["content"] == "Done. The last tool result ends with: Buzz"


def test_nested_arguments_pass_verbatim(head: InProcessHead) -> None:
    args = {"a": {"b": [1, {"c": '\u6771\u4eac "q"'}]}, "d": True, "e": None}
    tool = {"type": "function", "function": {"name": "put", "parameters": {"type": "object"}}}
    body = chat(head, f"Call put with {json.dumps(args)} please.", tools=[tool])
    (call,) = body["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == args
    assert "\u6771\u4eac" in call["function"]["arguments"]  # ensure_ascii=False, as vLLM


def test_streamed_calls_come_as_the_parser_streams_them(head: InProcessHead) -> None:
    body = {
        "model": head.model,
        "messages": [{"role": "user", "content": PARALLEL}],
        "tools": [WEATHER, CLOCK],
        "max_tokens": 512,
        "stream": True,
    }
    chunks = [data for _, data in events(head, "/v1/chat/completions", body) if data != "[DONE]"]
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    firsts = [d for d in deltas if "id" in d]
    assert [d["index"] for d in firsts] == [0, 1]
    for first in firsts:
        assert STREAM_ID.match(first["id"])
        assert first["type"] == "function"
        assert first["function"]["arguments"] == ""
    assert [f["function"]["name"] for f in firsts] == ["get_weather", "get_time"]
    rest = [d for d in deltas if "id" not in d]
    assert all(
        set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in rest
    )
    arguments = {0: "", 1: ""}
    for delta in rest:
        arguments[delta["index"]] += delta["function"]["arguments"]
    assert arguments == {0: '{"city":"Paris"}', 1: '{"timezone":"Asia/Tokyo"}'}
    assert len([d for d in rest if d["index"] == 1]) >= 4  # key, value piece(s), quote, brace
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_argument_fragments_stream_strings_in_pieces() -> None:
    args = {"path": "a.py", "content": "x" * 40 + '\n\u00e9"', "n": [1, {"k": 2}]}
    fragments = vllm_sim.argument_fragments(json.dumps(args))
    assert json.loads("".join(fragments)) == args
    assert fragments[0] == '{"path":"'
    assert fragments[-1] == "}"
    assert ',"n":' in fragments
    assert '[1, {"k": 2}]' in fragments  # other values whole
    assert len([f for f in fragments if set(f) == {"x"}]) == 2  # 40 characters, 16 a piece
    assert vllm_sim.argument_fragments("{}") == ["{}"]


def test_tool_choice_none_required_and_named(head: InProcessHead) -> None:
    asked = "What is the weather in Paris? Use get_weather."
    none = chat(head, asked, tools=[WEATHER], tool_choice="none")["choices"][0]
    assert not none["message"]["tool_calls"]
    assert none["message"]["content"]
    required = chat(head, "Say hello.", tools=[WEATHER, CLOCK], tool_choice="required")
    assert [c["function"]["name"] for c in required["choices"][0]["message"]["tool_calls"]] == [
        "get_weather"
    ]
    auto = chat(head, "Say hello.", tools=[WEATHER, CLOCK], tool_choice="auto")
    assert not auto["choices"][0]["message"]["tool_calls"]
    named = {"type": "function", "function": {"name": "get_time"}}
    forced = chat(head, asked, tools=[WEATHER, CLOCK], tool_choice=named)["choices"][0]
    assert [c["function"]["name"] for c in forced["message"]["tool_calls"]] == ["get_time"]


def test_calls_cut_by_max_tokens_stay_markup_in_the_content(head: InProcessHead) -> None:
    long = {"city": "x" * 400}
    body = chat(head, f"Call get_weather with {json.dumps(long)}", tools=[WEATHER], max_tokens=20)
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert not choice["message"]["tool_calls"]
    assert choice["message"]["content"].startswith("<\uff5cDSML\uff5ctool_calls>")
    assert body["usage"]["completion_tokens"] == 20


def test_reasoning_goes_to_the_reasoning_field(head: InProcessHead) -> None:
    thinking = {"chat_template_kwargs": {"thinking": True}}
    message = chat(head, "Why?", max_tokens=40, **thinking)["choices"][0]["message"]
    assert message["reasoning"]
    assert "reasoning_content" not in message  # removed from vLLM in early 2026
    assert "think>" not in (message["content"] or "")
    body = {"model": head.model, "messages": [{"role": "user", "content": "Why?"}]}
    body |= {"max_tokens": 40, "stream": True, **thinking}
    deltas = [
        data["choices"][0]["delta"]
        for _, data in events(head, "/v1/chat/completions", body)
        if data != "[DONE]" and data["choices"]
    ]
    assert any(d.get("reasoning") for d in deltas)
    assert not any("reasoning_content" in d for d in deltas)


# --- /v1/messages ----------------------------------------------------------------------------

ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def messages_body(head: InProcessHead, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": head.model,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        "tools": [ANTHROPIC_TOOL],
        **extra,
    }


def test_messages_answer_with_a_tool_use_block(head: InProcessHead) -> None:
    reply = post(
        head, "/v1/messages", messages_body(head, 'Call get_weather with {"city": "Oslo"}')
    )
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["type"] == "message"
    assert answer["role"] == "assistant"
    assert answer["id"].startswith("chatcmpl-")  # vLLM keeps its chat completion's id
    assert answer["stop_reason"] == "tool_use"
    (use,) = answer["content"]
    assert use["type"] == "tool_use"
    assert use["name"] == "get_weather"
    assert use["input"] == {"city": "Oslo"}
    assert use["id"].startswith("chatcmpl-tool-")
    assert answer["usage"]["input_tokens"] > 0
    assert answer["usage"]["output_tokens"] > 0
    # The tool's result goes back as a tool_result block: the model answers in text.
    body = messages_body(head, "")
    body["messages"] = [
        {"role": "user", "content": 'Call get_weather with {"city": "Oslo"}'},
        {"role": "assistant", "content": answer["content"]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use["id"],
                    "content": [{"type": "text", "text": "3 C, snow"}],
                }
            ],
        },
    ]
    second = post(head, "/v1/messages", body).json()
    assert second["stop_reason"] == "end_turn"
    assert second["content"] == [
        {"type": "text", "text": "Done. The last tool result ends with: 3 C, snow"}
    ]


def test_messages_tool_choice_and_thinking(head: InProcessHead) -> None:
    body = messages_body(head, "Say hello.", tool_choice={"type": "any"})
    assert post(head, "/v1/messages", body).json()["stop_reason"] == "tool_use"
    body = messages_body(head, "Call get_weather for Oslo", tool_choice={"type": "none"})
    answer = post(head, "/v1/messages", body).json()
    assert answer["stop_reason"] in ("end_turn", "max_tokens")
    assert [b["type"] for b in answer["content"]] == ["text"]
    body = messages_body(head, "Why?", chat_template_kwargs={"thinking": True}, max_tokens=30)
    thought = post(head, "/v1/messages", body).json()
    assert thought["content"][0]["type"] == "thinking"
    assert thought["content"][0]["thinking"]
    assert re.fullmatch(r"[0-9a-f]{32}", thought["content"][0]["signature"])


def test_messages_stream_as_vllm_converts_its_chunks(head: InProcessHead) -> None:
    body = messages_body(head, 'Call get_weather with {"city": "Oslo"}', stream=True)
    found = events(head, "/v1/messages", body)
    names = [name for name, _ in found]
    assert all(name == data["type"] for name, data in found)  # `event:` names the data's type
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    start = next(data for name, data in found if name == "content_block_start")
    block = start["content_block"]
    assert block["type"] == "tool_use"
    assert block["name"] == "get_weather"
    assert block["input"] == {}
    assert STREAM_ID.match(block["id"])
    partial = "".join(
        data["delta"]["partial_json"]
        for name, data in found
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "Oslo"}
    assert names.count("content_block_start") == names.count("content_block_stop") == 1
    delta = found[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] > 0
    assert found[0][1]["message"]["usage"]["input_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, 400, "model"),
        ({"model": "M", "messages": [{"role": "user", "content": "hi"}]}, 400, "max_tokens"),
        ({"model": "M", "max_tokens": 5, "messages": []}, 400, "messages"),
        (
            {"model": "other", "max_tokens": 5, "messages": [{"role": "user", "content": "h"}]},
            404,
            "other",
        ),
    ],
)
def test_messages_errors_are_anthropic_errors(
    head: InProcessHead, body: dict[str, Any], status: int, message: str
) -> None:
    if body.get("model") == "M":
        body["model"] = head.model
    reply = post(head, "/v1/messages", body)
    assert reply.status_code == status
    error = reply.json()
    assert error["type"] == "error"
    assert message in error["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"authorization": "Bearer wrong"}, 401),
        ({"x-api-key": "KEY"}, 401),  # vLLM reads Bearer only (vllm-project/vllm issue 51572)
        ({"authorization": "Bearer KEY"}, 200),
        ({"authorization": "Bearer KEY", "x-api-key": "KEY"}, 200),
    ],
)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions"])
def test_the_api_key_guards_messages_like_the_openai_routes(
    head: InProcessHead, path: str, headers: dict[str, str], status: int
) -> None:
    sent = {k: v.replace("KEY", head.api_key) for k, v in headers.items()}
    body = (
        messages_body(head, "hi")
        if path == "/v1/messages"
        else {"model": head.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    )
    reply = httpx.post(f"{head.url}{path}", json=body, headers=sent, timeout=10)
    assert reply.status_code == status
    if status == 401:
        assert reply.json() == {"error": "Unauthorized"}


# --- the break switch ------------------------------------------------------------------------


def test_the_break_file_is_read_at_every_request(head: InProcessHead) -> None:
    def calls() -> int:
        return len(
            chat(head, PARALLEL, tools=[WEATHER, CLOCK])["choices"][0]["message"]["tool_calls"]
        )

    assert calls() == 2
    head.break_file.write_text("parallel\n")
    assert calls() == 1
    head.break_file.write_text("stream, nested")  # other modes leave whole answers' calls alone
    assert calls() == 2
    head.break_file.unlink()
    assert calls() == 2


def test_the_switch_reads_the_environment_and_warns_once_of_unknown_modes(tmp_path: Path) -> None:
    env = vllm_sim.SimEnv.from_env(
        {"GX10_SIM_BREAK": "Nested, agent-loop,,", "GX10_SIM_BREAK_FILE": str(tmp_path / "b")}
    )
    assert env.breaks == ("nested", "agent-loop")
    assert env.break_file == tmp_path / "b"
    assert vllm_sim.SimEnv.from_env({}).break_file == Path(vllm_sim.DEFAULT_BREAK_FILE)
    out = io.StringIO()
    switch = BreakSwitch(env.breaks, env.break_file, vllm_sim.Log(out=out))
    assert switch.active() == {"nested", "agent-loop"}
    env.break_file.write_text("stream typo")
    assert switch.active() == {"nested", "agent-loop", "stream"}
    assert switch.active() == {"nested", "agent-loop", "stream"}
    assert out.getvalue().count("unknown break mode 'typo' ignored") == 1
    assert set(vllm_sim.BREAK_CASES) == {
        "parallel", "nested", "long-argument", "stream", "tool-choice", "reasoning",
        "agent-loop", "messages",
    }  # fmt: skip


def test_a_starting_head_removes_a_leftover_break_file(tmp_path: Path) -> None:
    env = vllm_sim.SimEnv(stall_file=tmp_path / "stall", break_file=tmp_path / "break")
    env.break_file.write_text("parallel")
    out = io.StringIO()
    clear_stall(env, vllm_sim.Log(out=out))
    assert not env.break_file.exists()
    assert f"removed a leftover break file {env.break_file}" in out.getvalue()
    clear_stall(env, vllm_sim.Log(out=out))  # nothing to remove: no error
