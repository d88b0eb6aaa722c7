"""Tool calls: which calls the model makes for a request, as vLLM's deepseek_v4 parser hands them
to the API (OpenAI `tool_calls`: ids, JSON-text arguments; several calls in one turn).

Deterministic, from the request alone:

- which tools: each mention of a tool's exact name in the task (the last user message) is one
  call, in the order written; without any, the tool whose name and description words best match
  the task's words. One call per turn, the next one not made yet since the task (an agent loop:
  call, tool result, next call, ..., then a text answer); all at once when the task asks for them
  in parallel. tool_choice: "none" makes no call, "required" at least one, a named function
  exactly that one (vLLM forces these two with structured output).
- the arguments of a call: a JSON object written in its clause (the text from its mention to the
  next), verbatim; else per property an explicit `name "value"`, a FizzBuzz program for a
  content-like property when the task asks for FizzBuzz, and what the schema and the task's words
  give (tool_arguments).
- after a tool result, with nothing left to call, the answer names the result's last line.

Streaming follows the parser too (argument_fragments): the first delta of a call carries its id
(`call_` and 24 hex digits) and name, later ones the arguments in pieces, each string value
streamed as it is generated.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .breaks import LONG_ARGUMENT_CUT
from .deepseek_v4_encoding import message_text

DSML = "\uff5cDSML\uff5c"  # the fullwidth-bar marker of DeepSeek's tool-call markup
PARALLEL_RE = re.compile(
    r"\bparallel\b|\bat the same time\b|\bsimultaneous|\bin (?:this|one|a single) turn\b", re.I
)
FIZZBUZZ_RE = re.compile(r"fizz\s*buzz", re.I)
RANGE_RE = re.compile(r"\b1\s*(?:to|through|-|\u2013|\.\.)\s*(\d{1,4})\b")
CONTENT_PROPERTIES = frozenset({"content", "code", "text", "source", "body", "program"})
STRING_PIECE = 16  # characters of a string argument per streamed delta


def _new_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def _new_stream_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the parser serialises it (json.dumps, ensure_ascii=False)
    # vLLM gives a whole answer's calls its default tool-call id; the deepseek_v4 parser makes
    # its own for streamed calls.
    id: str = field(default_factory=_new_id)
    stream_id: str = field(default_factory=_new_stream_id)


# -- arguments ------------------------------------------------------------------------------


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


STOPWORDS = frozenset(
    _split(
        "the a an and or of to for in on at by with from this that is are be can you your please "
        "what whats which when where how get set use using into about it its me my our"
    )
)


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def _tool_words(function: Mapping[str, Any]) -> set[str]:
    name = str(function.get("name", ""))
    words = _words(name.replace("_", " ").replace("-", " "))
    description = str(function.get("description", ""))
    return words | {w for w in _words(description) if len(w) >= 4}


def _extract_string(prop: str, schema: Mapping[str, Any], text: str) -> str:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        mentioned = [str(v) for v in enum if str(v).lower() in text.lower()]
        return mentioned[0] if mentioned else str(enum[0])
    quoted = re.findall(r"`([^`]+)`|\"([^\"]+)\"|'([^']{2,})'", text)
    if quoted:
        return str(next(part for part in quoted[0] if part))
    lowered = prop.lower()
    if any(k in lowered for k in ("path", "file", "name")):
        found = re.findall(r"[\w./-]+\.[A-Za-z0-9]{1,5}\b", text)
        if found:
            return str(found[0])
    place = re.findall(r"\b(?:in|for|at|of|to)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", text)
    if place:
        return str(place[-1])
    capitals = re.findall(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z][\w-]*)", text)
    if capitals:
        return str(capitals[-1])
    return text.strip()[:64]


def tool_arguments(parameters: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Arguments for a JSON schema, taken from the user's words where they can be."""
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or props.keys())
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    args: dict[str, Any] = {}
    for name, schema in props.items():
        if not isinstance(schema, dict) or name not in required:
            continue
        kind = schema.get("type", "string")
        if kind == "integer":
            args[name] = int(float(numbers[0])) if numbers else 1
        elif kind == "number":
            args[name] = float(numbers[0]) if numbers else 1.0
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = _extract_string(name, schema, text)
    return args


def fizzbuzz_program(last: int, *, broken: bool = False) -> str:
    """The FizzBuzz a coding model writes; `broken` tests 3 before 15 (15 prints Fizz)."""
    order = ((3, "Fizz"), (15, "FizzBuzz")) if broken else ((15, "FizzBuzz"), (3, "Fizz"))
    (first, first_word), (second, second_word) = order
    return (
        f"for i in range(1, {last + 1}):\n"
        f"    if i % {first} == 0:\n"
        f'        print("{first_word}")\n'
        f"    elif i % {second} == 0:\n"
        f'        print("{second_word}")\n'
        "    elif i % 5 == 0:\n"
        '        print("Buzz")\n'
        "    else:\n"
        "        print(i)\n"
    )


def _json_block(text: str) -> dict[str, Any] | None:
    """The first JSON object written in `text` (what the user asked to pass verbatim)."""
    decoder = json.JSONDecoder()
    for attempt, match in enumerate(re.finditer(r"\{", text)):
        if attempt >= 64:  # bounded: a clause full of braces that never parse
            break
        try:
            value, _end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _explicit(prop: str, text: str) -> str | None:
    """A value the user spelled out for `prop`: `path "a.py"`, prop: `x`, prop = "x"."""
    pattern = rf"(?<![\w-]){re.escape(prop)}\s*(?:=|:|\bis\b)?\s*(?:`([^`]*)`|\"([^\"]*)\")"
    found = re.search(pattern, text)
    if found is None:
        return None
    return found.group(1) if found.group(1) is not None else found.group(2)


def _arguments(
    parameters: Mapping[str, Any], clause: str, task: str, *, broken: bool
) -> dict[str, Any]:
    block = _json_block(clause)
    if block is not None:
        return block
    args = tool_arguments(parameters, clause)
    props = parameters.get("properties") or {}
    for name, schema in props.items():
        kind = schema.get("type", "string") if isinstance(schema, dict) else "string"
        if kind != "string":
            continue
        explicit = _explicit(name, clause)
        if explicit is not None:
            args[name] = explicit
        elif name.lower() in CONTENT_PROPERTIES and FIZZBUZZ_RE.search(task):
            span = RANGE_RE.search(task)
            args[name] = fizzbuzz_program(int(span.group(1)) if span else 100, broken=broken)
    return args


# -- which calls ----------------------------------------------------------------------------


def _functions(tools: Sequence[Any]) -> list[Mapping[str, Any]]:
    found = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and function.get("name"):
            found.append(function)
    return found


def _mentions(text: str, functions: Sequence[Mapping[str, Any]]) -> list[tuple[Any, str]]:
    """(function, clause) per mention of a tool's exact name, in the order written."""
    spots: list[tuple[int, Mapping[str, Any]]] = []
    for function in functions:
        name = re.escape(str(function["name"]))
        spots += [(m.start(), function) for m in re.finditer(rf"(?<![\w-]){name}(?![\w-])", text)]
    if not spots:
        return []
    spots.sort(key=lambda spot: spot[0])
    ends = [start for start, _ in spots[1:]] + [len(text)]
    return [(function, text[start:end]) for (start, function), end in zip(spots, ends, strict=True)]


def _best_match(text: str, functions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    asked = _words(text)
    scored = [(len(asked & _tool_words(f)), -i, f) for i, f in enumerate(functions)]
    best, _, function = max(scored, key=lambda row: (row[0], row[1]))
    return function if best > 0 else None


def _task(messages: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index, message_text(messages[index].get("content"))
    return None


def _called_since(messages: Sequence[Mapping[str, Any]], start: int) -> Counter[str]:
    called: Counter[str] = Counter()
    for message in messages[start + 1 :]:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                called[str(function.get("name"))] += 1
    return called


def plan_tool_calls(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any],
    tool_choice: Any,
    *,
    broken_fizzbuzz: bool = False,
) -> list[ToolCall]:
    """The calls of this turn (none: the model answers in text)."""
    functions = _functions(tools)
    if not functions or tool_choice == "none" or not messages:
        return []
    if messages[-1].get("role") not in ("user", "tool"):
        return []
    task = _task(messages)
    index, text = task if task is not None else (-1, "")

    def call(function: Mapping[str, Any], clause: str) -> ToolCall:
        parameters = function.get("parameters")
        schema = parameters if isinstance(parameters, Mapping) else {}
        args = _arguments(schema, clause, text, broken=broken_fizzbuzz)
        return ToolCall(str(function["name"]), json.dumps(args, ensure_ascii=False))

    mentions = _mentions(text, functions)
    if isinstance(tool_choice, Mapping):
        wanted = (tool_choice.get("function") or {}).get("name")
        named = [(f, c) for f, c in mentions if f["name"] == wanted]
        if named:
            return [call(*named[0])]
        function = next((f for f in functions if f["name"] == wanted), None)
        return [] if function is None else [call(function, text)]
    if not mentions:
        best = _best_match(text, functions)
        mentions = [] if best is None else [(best, text)]
    done = _called_since(messages, index)
    remaining = []
    for function, clause in mentions:
        if done[function["name"]] > 0:
            done[function["name"]] -= 1
        else:
            remaining.append((function, clause))
    if not remaining:
        if tool_choice != "required":
            return []
        remaining = mentions[:1] or [(functions[0], text)]
    chosen = remaining if PARALLEL_RE.search(text) else remaining[:1]
    return [call(function, clause) for function, clause in chosen]


def followup(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The answer after a tool result: what the last result ends with."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    lines = [line for line in message_text(messages[-1].get("content")).splitlines() if line]
    last = lines[-1].strip() if lines else "(no output)"
    return f"Done. The last tool result ends with: {last}"


# -- break modes and wire formats -----------------------------------------------------------


def _rewrite(call: ToolCall, args: dict[str, Any]) -> ToolCall:
    return ToolCall(call.name, json.dumps(args, ensure_ascii=False), call.id, call.stream_id)


def break_calls(calls: list[ToolCall], modes: frozenset[str], *, stream: bool) -> list[ToolCall]:
    """The calls as a broken server would hand them over (breaks.py lists the modes)."""
    if "parallel" in modes and not stream:
        calls = calls[:1]
    out = []
    for call in calls:
        args = json.loads(call.arguments)
        if "nested" in modes:
            args = {
                k: json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v
                for k, v in args.items()
            }
        if "long-argument" in modes:
            args = {k: v[:LONG_ARGUMENT_CUT] if isinstance(v, str) else v for k, v in args.items()}
        out.append(_rewrite(call, args) if modes & {"nested", "long-argument"} else call)
    return out


def argument_fragments(arguments: str) -> list[str]:
    """The arguments as the deepseek_v4 parser streams them: a key's prefix, then a string value
    in pieces as it is generated (other values whole), then the closing brace."""
    args = json.loads(arguments)
    if not isinstance(args, dict) or not args:
        return ["{}"]
    out: list[str] = []
    for n, (key, value) in enumerate(args.items()):
        prefix = ("{" if n == 0 else ",") + json.dumps(key, ensure_ascii=False) + ":"
        if isinstance(value, str):
            out.append(prefix + '"')
            for start in range(0, len(value), STRING_PIECE):
                piece = value[start : start + STRING_PIECE]
                out.append(json.dumps(piece, ensure_ascii=False)[1:-1])
            out.append('"')
        else:
            out += [prefix, json.dumps(value, ensure_ascii=False)]
    out.append("}")
    return out


def dsml(calls: Sequence[ToolCall]) -> str:
    """The calls as the model writes them (the markup the parser turns into tool_calls)."""
    lines = [f"<{DSML}tool_calls>"]
    for call in calls:
        lines.append(f'<{DSML}invoke name="{call.name}">')
        for key, value in json.loads(call.arguments).items():
            is_string = isinstance(value, str)
            text = value if is_string else json.dumps(value, ensure_ascii=False)
            lines.append(
                f'<{DSML}parameter name="{key}" string="{str(is_string).lower()}">{text}'
                f"</{DSML}parameter>"
            )
        lines.append(f"</{DSML}invoke>")
    lines.append(f"</{DSML}tool_calls>")
    return "\n".join(lines)
