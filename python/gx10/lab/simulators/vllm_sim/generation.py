"""Text generation: deterministic prose, reasoning, and the tool call the model makes."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .deepseek_v4_encoding import message_text
from .tokenizer import token_pieces


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _split(
    "the model answers with plain words so that clients can read every token as it streams "
    "through the lab network between two nodes while the head keeps time for each request and "
    "reports usage counts that match what was sent in order to measure prefill decode and "
    "latency for every session under load with many users at once on rails of fast links "
    "where memory bandwidth bounds the decode rate and compute bounds the prefill rate so the "
    "numbers stay honest and repeatable from run to run"
)
REASONING_WORDS = _split(
    "let me think about this step by step first consider what the user asks then check the "
    "facts compare the options weigh each one and verify the result before answering clearly "
    "and briefly maybe there is a simpler way so I should double check the edge cases"
)


def word_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Sentences of random words, forever."""
    while True:
        length = rng.randint(6, 16)
        sentence = [rng.choice(words) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        yield " " + " ".join(sentence) + "."


def token_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Token pieces of generated prose, forever; the first piece has no leading space."""
    first = True
    for sentence in word_stream(rng, words):
        for piece in token_pieces(sentence):
            yield piece.lstrip() if first else piece
            first = False


@dataclass
class ToolCall:
    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")


STOPWORDS = frozenset(
    _split(
        "the a an and or of to for in on at by with from this that is are be can you your please "
        "what whats which when where how get set use using into about it its me my our"
    )
)


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def _tool_words(tool: Mapping[str, Any]) -> set[str]:
    function = tool.get("function") or {}
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


def pick_tool_call(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], tool_choice: Any
) -> ToolCall | None:
    """The call the model makes: forced, required, or when the user's words match a tool."""
    functions = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if not functions or tool_choice == "none" or not messages:
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    text = message_text(last.get("content"))
    chosen: dict[str, Any] | None = None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        chosen = next((t for t in functions if t["function"].get("name") == wanted), None)
    else:
        asked = _words(text)
        scored = [(len(asked & _tool_words(t)), i) for i, t in enumerate(functions)]
        best, index = max(scored, key=lambda pair: (pair[0], -pair[1]))
        if best > 0:
            chosen = functions[index]
        elif tool_choice == "required":
            chosen = functions[0]
    if chosen is None:
        return None
    function = chosen["function"]
    parameters = function.get("parameters") or {}
    arguments = tool_arguments(parameters if isinstance(parameters, dict) else {}, text)
    return ToolCall(str(function.get("name")), json.dumps(arguments, ensure_ascii=False))
