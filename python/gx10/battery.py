"""The tool-call battery (`gx10 smoke --battery`): what a coding agent needs from the served
model's tool calls, checked case by case through the official `openai` client, and, for vLLM's
Anthropic-compatible Messages endpoint, an Anthropic-format request made with httpx.

Cases (docs/BATTERY.md says why each one is there):

- parallel       two tool calls in one turn, each with its own id and arguments
- nested         nested object and array arguments arrive intact and valid for the schema
- long-argument  a string argument of several KB arrives whole, byte for byte
- stream         streamed tool-call deltas reassemble into the calls (ids, names, JSON arguments)
- tool-choice    auto calls when asked, required always calls, none never does, a named
                 function is the one called
- reasoning      with thinking on, the reasoning is in vLLM's reasoning field, not in content
- agent-loop     a multi-turn agent writes fizzbuzz.py and runs it through tools this process
                 executes in a scratch directory; the program's output is then checked
- messages       POST /v1/messages with a tool: a tool_use block, then an answer to its result

Every request sends `max_tokens` and the thinking mode (off, except for `reasoning`): a server
default of unbounded thinking once ran one request for hours (FIELD_NOTES section 4). The cases
that test the tool parser use tool_choice "auto": vLLM answers "required" and a named function
with structured output, which the parser never sees. A case passes or fails with a detail; a
failed case keeps the response that failed it, trimmed. The API key is sent, never reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai

from gx10.endpoint import parse_endpoint

CASES = (
    "parallel",
    "nested",
    "long-argument",
    "stream",
    "tool-choice",
    "reasoning",
    "agent-loop",
    "messages",
)
TRIM = 1600  # characters of a failing response kept in the report
MARKUP = re.compile(r"\uff5cDSML\uff5c|<\|?tool[_\u2581]?call|<think>|</think>", re.I)


class CaseFailed(Exception):
    """A case's check did not hold; `response` is what the server answered."""

    def __init__(self, detail: str, response: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.response = response


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    ok: bool
    detail: str
    seconds: float
    response: str | None = None  # the response that failed the case, trimmed


@dataclass(frozen=True, slots=True)
class BatteryResult:
    base_url: str
    model: str
    cases: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.cases) and all(c.ok for c in self.cases)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cases if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def trim(response: Any, limit: int = TRIM) -> str:
    """A response as JSON text, at most about `limit` characters (its head and its tail)."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(exclude_none=True)
    text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]} ... [{len(text) - head - tail} characters cut] ... {text[-tail:]}"


# --- JSON schema (jsonschema checks the tools' schemas and the arguments against them) -----
#
# A tool's "parameters" (OpenAI) or "input_schema" (Anthropic) name no `$schema`, so a draft is
# chosen: Draft 2020-12, the one pydantic (which the SDKs and vLLM build their schemas with)
# writes, $defs and prefixItems included. Draft 7 would take `prefixItems` for an unknown
# keyword and check nothing. A schema that names its draft in `$schema` is read in that draft.
DEFAULT_VALIDATOR: Any = jsonschema.Draft202012Validator


def _validator_class(schema: Mapping[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, default=DEFAULT_VALIDATOR)


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise jsonschema.SchemaError if `schema` is no valid schema of its draft."""
    _validator_class(schema).check_schema(schema)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _error_order(error: Any) -> tuple[int, tuple[tuple[int, int, str], ...], str, str]:
    """Shallowest first (a missing top-level field says more than what lies under it), then by
    path (indexes as numbers), keyword and message: the same order for the same errors."""
    path = tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.path)
    return len(path), path, str(error.validator), str(error.message)


def _messages(error: Any, path: str) -> list[str]:
    """`error` (a jsonschema ValidationError) as "<JSON path>: <reason>" lines."""
    instance, keyword, wanted = error.instance, error.validator, error.validator_value
    if keyword == "type":
        allowed = [wanted] if isinstance(wanted, str) else [str(kind) for kind in wanted]
        note = ""
        if _json_type(instance) == "string" and {"object", "array"} & set(allowed):
            note = " (JSON text where a value belongs: the value was sent as a string)"
        return [f"{path}: expected {'/'.join(allowed)}, got {_json_type(instance)}{note}"]
    if keyword == "enum":
        return [f"{path}: {instance!r} is not one of {wanted}"]
    if keyword == "required" and isinstance(instance, dict):  # one message per missing field
        return [f"{path}.{key}: required, missing" for key in wanted if key not in instance]
    if keyword == "additionalProperties" and wanted is False and isinstance(instance, dict):
        known = error.schema.get("properties") or {}
        patterns = error.schema.get("patternProperties") or {}
        return [
            f"{path}.{key}: not in the schema"
            for key in instance
            if key not in known and not any(re.search(p, key) for p in patterns)
        ]
    return [f"{path}: {error.message}"]


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Where `value` breaks `schema`, each as "<JSON path>: <reason>" (e.g. "$.items[0].sku:
    expected string, got integer"), all of them, shallowest first; `path` names the root."""
    validator = _validator_class(schema)(schema)
    errors: list[str] = []
    for error in sorted(validator.iter_errors(value), key=_error_order):
        for message in _messages(error, path + str(error.json_path)[1:]):
            if message not in errors:  # `required` errors come one per field, each lists all
                errors.append(message)
    return errors


def first_difference(expected: Any, got: Any, path: str = "$") -> str | None:
    """Where `got` first differs from `expected` (None: equal, types included)."""
    if _json_type(expected) != _json_type(got):
        want, have = _json_type(expected), _json_type(got)
        return f"{path}: expected {want} {_short(expected)}, got {have} {_short(got)}"
    if isinstance(expected, dict):
        for key in [*expected, *(k for k in got if k not in expected)]:  # in a stable order
            if key not in got or key not in expected:
                return f"{path}.{key}: {'missing' if key not in got else 'not expected'}"
            found = first_difference(expected[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if len(expected) != len(got):
            return f"{path}: expected {len(expected)} items, got {len(got)}"
        for index, (a, b) in enumerate(zip(expected, got, strict=True)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if expected == got else f"{path}: expected {_short(expected)}, got {_short(got)}"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the cases' tools and inputs -------------------------------------------------------------


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    check_schema(parameters)  # at import: a broken schema fails here, not as a model's fault
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _string_params(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": list(names),
    }


WEATHER = function_tool("get_weather", "Get the current weather in a city", _string_params("city"))
CLOCK = function_tool(
    "get_time", "Get the current local time in a time zone", _string_params("timezone")
)
WRITE_FILE = function_tool(
    "write_file",
    "Write a text file in the working directory (created or replaced)",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file path, relative"},
            "content": {"type": "string", "description": "the whole file content"},
        },
        "required": ["path", "content"],
    },
)
RUN_COMMAND = function_tool(
    "run_command",
    "Run a command in the working directory and return its exit status and output",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "e.g. python3 app.py"}},
        "required": ["command"],
    },
)
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {
                        "street": {"type": "string"},
                        "city": {"type": "string"},
                        "postcode": {"type": "string"},
                    },
                    "required": ["street", "city", "postcode"],
                    "additionalProperties": False,
                },
            },
            "required": ["name", "address"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer"},
                    "options": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["sku", "quantity", "options"],
                "additionalProperties": False,
            },
        },
        "express": {"type": "boolean"},
    },
    "required": ["customer", "items", "express"],
    "additionalProperties": False,
}
ORDER_TOOL = function_tool("create_order", "Create a customer order", ORDER_SCHEMA)
ORDER = {
    "customer": {
        "name": "Ada Lovelace",
        "address": {"street": "12 St James's Square", "city": "London", "postcode": "SW1Y 4JH"},
    },
    "items": [
        {"sku": "AE-1843", "quantity": 2, "options": ["gift-wrap", 'engraving: "A.L."']},
        {"sku": "BN-0042", "quantity": 1, "options": []},
    ],
    "express": True,
}


def long_text(lines: int = 64) -> str:
    """About 6.5 KB the parsers must pass through whole: quotes, backslashes, braces, tabs, XML-ish
    tags and non-ASCII letters, numbered so a copy can be checked line by line."""
    return "".join(
        f"{n:03d}\tline {n} of {lines}: \"quoted\" 'single' back\\slash {{braces}} [list] "
        f'<tag a="{n}"/> caf\u00e9 na\u00efve \u6771\u4eac {n * 37 % 1000:03d}\n'
        for n in range(1, lines + 1)
    )


def fizzbuzz_lines(last: int) -> list[str]:
    return [
        "FizzBuzz" if n % 15 == 0 else "Fizz" if n % 3 == 0 else "Buzz" if n % 5 == 0 else str(n)
        for n in range(1, last + 1)
    ]


FIZZBUZZ_LAST = 15
AGENT_TURNS = 6
AGENT_SYSTEM = (
    "You are a coding agent working in an empty directory. Use the tools to act; paths are "
    "relative to that directory. Keep going until the task is done, then answer briefly."
)
AGENT_TASK = (
    f"Write a Python 3 program that prints FizzBuzz for the numbers 1 to {FIZZBUZZ_LAST}, one "
    "per line: Fizz for multiples of 3, Buzz for multiples of 5, FizzBuzz for multiples of "
    'both, otherwise the number. Step 1: call write_file with path "fizzbuzz.py" and the '
    'program as content. Step 2: call run_command with command "python3 fizzbuzz.py". '
    "Step 3: reply with the last line the program printed."
)


# --- the scratch directory the agent loop works in -------------------------------------------


class Sandbox:
    """The agent loop's tools, run by this process: only within `root`, bounded.

    write_file writes a relative path inside root (no `..`, no absolute path, no symlink out),
    at most MAX_FILE bytes. run_command runs only `python3 FILE [ARGS]` with FILE inside root:
    this interpreter in isolated mode, cwd root, an empty environment, no stdin, its own process
    group (killed whole at the time limit), CPU, memory and file-size limits, output cut at
    MAX_OUTPUT. The program is the model's: the limits bound it, they do not jail it (as the
    reference deployment's agent ran it).
    """

    MAX_FILE = 64 * 1024
    MAX_OUTPUT = 8 * 1024
    SECONDS = 10.0

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.calls: list[tuple[str, str]] = []  # (tool, result) in order

    def inside(self, relative: str) -> Path:
        path = Path(relative)
        if not relative or path.is_absolute():
            raise ValueError(f"{relative!r}: give a path relative to the working directory")
        resolved = (self.root / path).resolve()
        if not resolved.is_relative_to(self.root) or resolved == self.root:
            raise ValueError(f"{relative!r} is outside the working directory")
        return resolved

    def call(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments)
            if not isinstance(args, dict):
                raise ValueError("the arguments are not a JSON object")
            tools: dict[str, Callable[[dict[str, Any]], str]] = {
                "write_file": self.write_file,
                "run_command": self.run_command,
            }
            if name not in tools:
                raise ValueError(f"no tool {name!r}; the tools are {', '.join(tools)}")
            result = tools[name](args)
        except (ValueError, OSError) as exc:
            result = f"error: {exc}"
        self.calls.append((name, result))
        return result

    def write_file(self, args: dict[str, Any]) -> str:
        path, content = args.get("path"), args.get("content")
        if not isinstance(path, str) or not isinstance(content, str):
            raise ValueError("write_file takes a string path and a string content")
        data = content.encode("utf-8")
        if len(data) > self.MAX_FILE:
            raise ValueError(f"content is {len(data)} bytes; at most {self.MAX_FILE}")
        target = self.inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {path}"

    def run_command(self, args: dict[str, Any]) -> str:
        command = args.get("command")
        if not isinstance(command, str):
            raise ValueError("run_command takes a string command")
        argv = shlex.split(command)
        if len(argv) < 2 or Path(argv[0]).name not in ("python3", "python"):
            raise ValueError("only `python3 FILE [ARGS]` runs here")
        script = self.inside(argv[1])
        if not script.is_file():
            raise ValueError(f"{argv[1]}: no such file")
        code, output = self.run([str(script), *argv[2:]])
        return f"exit status {code}\n{output}"

    def run(self, argv: Sequence[str]) -> tuple[int | str, str]:
        def limits() -> None:  # in the child, before exec
            resource.setrlimit(resource.RLIMIT_CPU, (5, 5))
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.MAX_FILE, self.MAX_FILE))

        proc = subprocess.Popen(
            [sys.executable, "-I", *argv],
            cwd=self.root,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limits,  # noqa: PLW1509 - rlimits only; the battery starts no threads
        )
        try:
            out, _ = proc.communicate(timeout=self.SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own group: only what it started
            out, _ = proc.communicate()
            return f"killed after {self.SECONDS:g} s", out.decode("utf-8", "replace")[
                : self.MAX_OUTPUT
            ]
        return proc.returncode, out.decode("utf-8", "replace")[: self.MAX_OUTPUT]


# --- the cases --------------------------------------------------------------------------------


@dataclass
class Context:
    client: openai.OpenAI
    http: httpx.Client
    root: str  # the server root (scheme://host:port)
    model: str
    api_key: str

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        max_tokens: int = 512,
        thinking: bool = False,
    ) -> Any:
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
            extra["tool_choice"] = tool_choice or "auto"
        return self.create(messages, max_tokens=max_tokens, thinking=thinking, **extra)

    def create(
        self, messages: list[dict[str, Any]], *, max_tokens: int, thinking: bool, **extra: Any
    ) -> Any:
        """chat.completions.create with the battery's fixed fields: max_tokens and the thinking
        mode always sent, temperature 0."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "extra_body": {"chat_template_kwargs": {"thinking": thinking}},
            **extra,
        }
        return self.client.chat.completions.create(**request)


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _calls(response: Any) -> list[Any]:
    return list(response.choices[0].message.tool_calls or [])


def _arguments(call: Any, response: Any) -> Any:
    try:
        return json.loads(call.function.arguments)
    except (TypeError, ValueError) as exc:
        raise CaseFailed(
            f"{call.function.name}: the arguments are not JSON ({exc})", response
        ) from exc


def _no_markup(text: str | None, response: Any, what: str = "content") -> None:
    if text and MARKUP.search(text):
        raise CaseFailed(
            f"tool-call or thinking markup in the {what}: {_short(text, 120)} (the server's "
            "parser did not take it out)",
            response,
        )


def _expect_calls(response: Any, wanted: Mapping[str, Any]) -> list[str]:
    """The answer calls exactly the tools in `wanted` (name -> arguments), in one turn."""
    choice = response.choices[0]
    calls = _calls(response)
    _no_markup(choice.message.content, response)
    names = [c.function.name for c in calls]
    if sorted(names) != sorted(wanted):
        raise CaseFailed(
            f"expected the calls {', '.join(sorted(wanted))} in one turn, got "
            f"{', '.join(names) or 'none'} (finish_reason {choice.finish_reason})",
            response,
        )
    ids = [c.id for c in calls]
    if not all(ids) or len(set(ids)) != len(ids):
        raise CaseFailed(f"every call needs its own id; got {ids}", response)
    for call in calls:
        difference = first_difference(wanted[call.function.name], _arguments(call, response))
        if difference:
            raise CaseFailed(f"{call.function.name}: {difference}", response)
    if choice.finish_reason != "tool_calls":
        raise CaseFailed(f"finish_reason {choice.finish_reason}, expected tool_calls", response)
    return names


def case_parallel(ctx: Context) -> str:
    wanted = {"get_weather": {"city": "Paris"}, "get_time": {"timezone": "Asia/Tokyo"}}
    response = ctx.chat(
        _user(
            "Call both tools in parallel, in this one turn, and write no text: get_weather with "
            'the arguments {"city": "Paris"} and get_time with the arguments '
            '{"timezone": "Asia/Tokyo"}.'
        ),
        tools=[WEATHER, CLOCK],
    )
    names = _expect_calls(response, wanted)
    return f"{len(names)} calls in one turn, distinct ids: {', '.join(names)}"


def case_nested(ctx: Context) -> str:
    response = ctx.chat(
        _user(
            "Call create_order once with exactly these arguments (JSON, unchanged): "
            + json.dumps(ORDER, ensure_ascii=False)
        ),
        tools=[ORDER_TOOL],
        max_tokens=1024,
    )
    _expect_calls(response, {"create_order": ORDER})
    errors = schema_errors(_arguments(_calls(response)[0], response), ORDER_SCHEMA)
    if errors:
        raise CaseFailed("not valid for the tool's schema: " + "; ".join(errors[:3]), response)
    return "create_order: nested objects and arrays intact, valid for the schema"


def case_long_argument(ctx: Context) -> str:
    content = long_text()
    wanted = {"path": "notes.txt", "content": content}
    response = ctx.chat(
        _user(
            "Call write_file once with exactly these arguments (JSON, unchanged; the content is "
            "long: copy all of it, byte for byte): " + json.dumps(wanted, ensure_ascii=False)
        ),
        tools=[WRITE_FILE],
        max_tokens=8192,
    )
    calls = _calls(response)
    if len(calls) != 1 or calls[0].function.name != "write_file":
        names = [c.function.name for c in calls]
        _no_markup(response.choices[0].message.content, response)
        raise CaseFailed(
            f"expected one write_file call, got {names or 'none'} "
            f"(finish_reason {response.choices[0].finish_reason})",
            response,
        )
    args = _arguments(calls[0], response)
    got = args.get("content") if isinstance(args, dict) else None
    expected = content.encode("utf-8")
    if not isinstance(got, str):
        raise CaseFailed(f"content is {_json_type(got)}, not a string", response)
    data = got.encode("utf-8")
    if data != expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(expected, data, strict=False)) if a != b),
            min(len(expected), len(data)),
        )
        raise CaseFailed(
            f"content is {len(data)} bytes, expected {len(expected)}; they differ from byte {at} "
            f"(expected {expected[at : at + 24]!r}, got {data[at : at + 24]!r})",
            response,
        )
    return f"write_file content: {len(data)} bytes, byte-identical"


def case_stream(ctx: Context) -> str:
    wanted = {"get_weather": {"city": "Lisbon"}, "get_time": {"timezone": "America/New_York"}}
    stream = ctx.create(
        _user(
            "Call both tools in parallel, in this one turn, and write no text: get_weather with "
            'the arguments {"city": "Lisbon"} and get_time with the arguments '
            '{"timezone": "America/New_York"}.'
        ),
        max_tokens=512,
        thinking=False,
        tools=[WEATHER, CLOCK],
        tool_choice="auto",
        stream=True,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, Any]] = {}
    chunks: list[Any] = []
    content, reason, deltas = "", None, 0
    with contextlib.closing(stream):
        for chunk in stream:
            chunks.append(chunk.model_dump(exclude_none=True))
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            reason = choice.finish_reason or reason
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                deltas += 1
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                if delta.id:
                    if call["id"] not in (None, delta.id):
                        raise CaseFailed(
                            f"call {delta.index} changed its id from {call['id']} to {delta.id}",
                            chunks,
                        )
                    call["id"] = delta.id
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    _no_markup(content, chunks)
    if sorted(c["name"] for c in calls.values()) != sorted(wanted):
        raise CaseFailed(
            f"expected the streamed calls {', '.join(sorted(wanted))}, reassembled "
            f"{[c['name'] for c in calls.values()] or 'none'}",
            chunks,
        )
    ids = [c["id"] for c in calls.values()]
    if not all(ids) or len(set(ids)) != len(ids):
        raise CaseFailed(f"every streamed call needs its own id; got {ids}", chunks)
    for index, call in sorted(calls.items()):
        try:
            args = json.loads(call["arguments"])
        except ValueError as exc:
            raise CaseFailed(
                f"call {index} ({call['name']}): the reassembled arguments are not JSON ({exc}): "
                f"{_short(call['arguments'], 120)}",
                chunks,
            ) from exc
        difference = first_difference(wanted[call["name"]], args)
        if difference:
            raise CaseFailed(f"call {index} ({call['name']}): {difference}", chunks)
    if reason != "tool_calls":
        raise CaseFailed(f"finish_reason {reason}, expected tool_calls", chunks)
    return f"{len(calls)} calls from {deltas} deltas, ids and JSON arguments whole"


def case_tool_choice(ctx: Context) -> str:
    ask = "What is the weather in Paris? Use get_weather."
    problems: list[tuple[str, Any]] = []

    def check(mode: str, prompt: str, choice: Any, test: Callable[[Any], str | None]) -> None:
        response = ctx.chat(
            _user(prompt), tools=[WEATHER, CLOCK], tool_choice=choice, max_tokens=256
        )
        problem = test(response)
        if problem:
            problems.append((f"{mode}: {problem}", response))

    def calls_tool(name: str, only: bool) -> Callable[[Any], str | None]:
        def test(response: Any) -> str | None:
            names = [c.function.name for c in _calls(response)]
            if name not in names or (only and set(names) != {name}):
                return f"expected a call to {name}{' only' if only else ''}, got {names or 'none'}"
            return None

        return test

    def no_call(response: Any) -> str | None:
        names = [c.function.name for c in _calls(response)]
        text = response.choices[0].message.content or ""
        if names:
            return f"expected no call, got {names}"
        if not text.strip():
            return "expected a text answer, got none"
        if MARKUP.search(text):
            return f"tool-call markup in the text: {_short(text, 80)}"
        return None

    check("auto", ask, "auto", calls_tool("get_weather", only=False))
    check(
        "required",
        "Say hello in three words.",
        "required",
        lambda r: None if _calls(r) else "expected at least one call, got none",
    )
    check("none", ask, "none", no_call)
    named = {"type": "function", "function": {"name": "get_time"}}
    check("named", ask, named, calls_tool("get_time", only=True))
    if problems:
        raise CaseFailed("; ".join(p for p, _ in problems), problems[0][1])
    return "auto calls, required calls, none answers in text, named calls get_time"


def reasoning_of(message: Any) -> tuple[str, str | None]:
    """(field, text): vLLM's `reasoning`, or the `reasoning_content` older servers sent."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if value:
            return name, str(value)
    return "", None


def case_reasoning(ctx: Context) -> str:
    response = ctx.chat(
        _user("Is 9.11 greater than 9.8? Think it through, then answer in one short sentence."),
        max_tokens=1024,
        thinking=True,
    )
    message = response.choices[0].message
    content = message.content or ""
    name, reasoning = reasoning_of(message)
    if "<think>" in content or "</think>" in content:
        raise CaseFailed("the reasoning is in the content (think tags in it)", response)
    if not reasoning:
        raise CaseFailed(
            "no reasoning field (reasoning or reasoning_content) with thinking on: is the server "
            "started with --reasoning-parser?",
            response,
        )
    if content and reasoning.strip() and reasoning.strip()[:80] in content:
        raise CaseFailed("the reasoning is repeated in the content", response)
    cut = " (max_tokens ended it before the answer)" if not content.strip() else ""
    return f"{len(reasoning)} characters of reasoning in `{name}`, none in content{cut}"


def case_agent_loop(ctx: Context) -> str:
    with tempfile.TemporaryDirectory(prefix="gx10-battery-") as scratch:
        box = Sandbox(Path(scratch))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": AGENT_TASK},
        ]
        answer: str | None = None
        for _turn in range(AGENT_TURNS):
            response = ctx.chat(messages, tools=[WRITE_FILE, RUN_COMMAND], max_tokens=1024)
            choice = response.choices[0]
            calls = _calls(response)
            if choice.finish_reason == "length":
                raise CaseFailed("a turn ran out of max_tokens (1024)", response)
            if not calls:
                answer = choice.message.content or ""
                _no_markup(answer, response)
                break
            messages.append(
                {
                    "role": "assistant",
                    "content": choice.message.content or "",
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.function.name,
                                "arguments": c.function.arguments,
                            },
                        }
                        for c in calls
                    ],
                }
            )
            for call in calls:
                result = box.call(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return _judge_agent(box, messages, answer)


def _judge_agent(box: Sandbox, messages: list[dict[str, Any]], answer: str | None) -> str:
    used = [name for name, _ in box.calls]
    if answer is None:
        raise CaseFailed(f"no answer after {AGENT_TURNS} turns (tools called: {used})", messages)
    for tool in ("write_file", "run_command"):
        if tool not in used:
            raise CaseFailed(
                f"the agent never called {tool} (it called {used or 'nothing'})", messages
            )
    if not any(name == "run_command" and r.startswith("exit status 0") for name, r in box.calls):
        raise CaseFailed("no run_command exited 0", messages)
    program = box.root / "fizzbuzz.py"
    if not program.is_file():
        raise CaseFailed("the agent wrote no fizzbuzz.py", messages)
    code, output = box.run([str(program)])
    lines = output.splitlines()
    expected = fizzbuzz_lines(FIZZBUZZ_LAST)
    if code != 0 or lines != expected:
        wrong = next(
            (
                f"line {i + 1}: {a!r} instead of {b!r}"
                for i, (a, b) in enumerate(zip(lines, expected, strict=False))
                if a != b
            ),
            f"{len(lines)} lines instead of {len(expected)}",
        )
        raise CaseFailed(f"fizzbuzz.py (exit {code}) prints wrong: {wrong}", messages)
    if expected[-1] not in answer:
        raise CaseFailed(
            f"the final answer does not give the last line ({expected[-1]}): {_short(answer, 80)}",
            messages,
        )
    turns = sum(1 for m in messages if m["role"] == "assistant") + 1
    return f"{turns} turns ({', '.join(used)}); fizzbuzz.py prints 1..{FIZZBUZZ_LAST} right"


def case_messages(ctx: Context) -> str:
    url = f"{ctx.root}/v1/messages"
    # Both: vLLM's middleware reads only `Authorization: Bearer` (vllm issue 51572); Anthropic
    # clients send `x-api-key`.
    headers = {"anthropic-version": "2023-06-01"}
    if ctx.api_key:
        headers |= {"x-api-key": ctx.api_key, "authorization": f"Bearer {ctx.api_key}"}
    tool = {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "input_schema": WEATHER["function"]["parameters"],
    }
    question = {
        "role": "user",
        "content": 'Call get_weather with the arguments {"city": "Reykjavik"}.',
    }
    body: dict[str, Any] = {
        "model": ctx.model,
        "max_tokens": 512,
        "messages": [question],
        "tools": [tool],
        "chat_template_kwargs": {"thinking": False},
    }
    first = _post(ctx.http, url, headers, body)
    uses = [b for b in first.get("content", []) if b.get("type") == "tool_use"]
    texts = "".join(b.get("text", "") for b in first.get("content", []) if b.get("type") == "text")
    if len(uses) != 1 or uses[0].get("name") != "get_weather":
        raise CaseFailed(
            f"expected one tool_use block for get_weather, got "
            f"{[u.get('name') for u in uses] or 'none'} "
            f"(stop_reason {first.get('stop_reason')}"
            + (", the call came back as text" if MARKUP.search(texts) else "")
            + ")",
            first,
        )
    use = uses[0]
    if not use.get("id") or use.get("input") != {"city": "Reykjavik"}:
        raise CaseFailed(f"tool_use id {use.get('id')!r}, input {use.get('input')}", first)
    if first.get("stop_reason") != "tool_use":
        raise CaseFailed(f"stop_reason {first.get('stop_reason')}, expected tool_use", first)
    usage = first.get("usage") or {}
    if not all(isinstance(usage.get(k), int) for k in ("input_tokens", "output_tokens")):
        raise CaseFailed(f"usage without input_tokens and output_tokens: {usage}", first)
    result = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": use["id"], "content": "4 degrees C, light rain"}
        ],
    }
    body["messages"] = [question, {"role": "assistant", "content": first["content"]}, result]
    second = _post(ctx.http, url, headers, body)
    reply = "".join(b.get("text", "") for b in second.get("content", []) if b.get("type") == "text")
    if second.get("stop_reason") != "end_turn" or not reply.strip():
        raise CaseFailed(
            f"after the tool_result: stop_reason {second.get('stop_reason')}, text "
            f"{_short(reply, 60)}; expected end_turn with text",
            second,
        )
    return "tool_use block (stop_reason tool_use), then end_turn text after the tool_result"


def _post(http: httpx.Client, url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    reply = http.post(url, headers=headers, json=body)
    if reply.status_code == 404:
        raise CaseFailed("the server has no /v1/messages (404)", reply.text)
    if reply.status_code != 200:
        raise CaseFailed(f"HTTP {reply.status_code} from /v1/messages", reply.text)
    try:
        document = reply.json()
    except ValueError as exc:
        raise CaseFailed(f"/v1/messages answered no JSON ({exc})", reply.text) from exc
    if not isinstance(document, dict) or document.get("type") != "message":
        raise CaseFailed("/v1/messages answered no message object", document)
    return document


RUNNERS: dict[str, Callable[[Context], str]] = {
    "parallel": case_parallel,
    "nested": case_nested,
    "long-argument": case_long_argument,
    "stream": case_stream,
    "tool-choice": case_tool_choice,
    "reasoning": case_reasoning,
    "agent-loop": case_agent_loop,
    "messages": case_messages,
}


def _run_case(name: str, ctx: Context) -> CaseResult:
    started = time.monotonic()
    response: str | None = None
    try:
        detail, ok = RUNNERS[name](ctx), True
    except CaseFailed as failed:
        detail, ok = failed.detail, False
        response = None if failed.response is None else trim(failed.response)
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        detail, ok = f"{type(exc).__name__}: {exc}", False
        body = getattr(exc, "body", None) or getattr(getattr(exc, "response", None), "text", None)
        response = None if body is None else trim(body)
    return CaseResult(name, ok, detail, round(time.monotonic() - started, 3), response)


def run(
    base_url: str,
    model: str,
    *,
    api_key: str = "",
    timeout: float = 120.0,
    cases: Iterable[str] | None = None,
) -> BatteryResult:
    """Run the cases (all by default; always in CASES order) against `base_url` (http(s)://HOST:PORT,
    with or without /v1; EndpointError otherwise). A case unknown here is a ValueError."""
    wanted = set(CASES if cases is None else cases)
    unknown = sorted(wanted - set(CASES))
    selected = [name for name in CASES if name in wanted]
    if unknown:
        raise ValueError(
            f"unknown battery case {', '.join(unknown)}; the cases: {', '.join(CASES)}"
        )
    endpoint = parse_endpoint(base_url)
    client = openai.OpenAI(
        base_url=endpoint.v1, api_key=api_key or "EMPTY", timeout=timeout, max_retries=0
    )
    with httpx.Client(timeout=timeout) as http:
        ctx = Context(client, http, endpoint.root, model, api_key)
        results = tuple(_run_case(name, ctx) for name in selected)
    return BatteryResult(endpoint.v1, model, results)
