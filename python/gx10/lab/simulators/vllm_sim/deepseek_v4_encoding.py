"""The chat encoding: messages to the prompt text, as vLLM's deepseek_v4_encoding.py does.

The real image's `vllm/tokenizers/deepseek_v4_encoding.py` is the file the DeepSeek V4 Flash 0731
checkpoint ships a newer version of (`encoding/encoding_dsv4.py`), which deployments place over
the image's own (the serve role's vllm_serve_overlay). This module stands in for it: every rank
reads it at start and logs, and the head's /metrics exports (gx10_sim_info{encoding_sha256}),
the sha256 of the file it loaded, so a test sees which encoding a rank runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .tokenizer import ASSISTANT, BOS, END_THINK, END_TOOL_OUT, EOS, THINK, TOOL_OUT, USER


def _own_sha256() -> str:
    with open(__file__, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# The encoding this process runs: the file it was imported from, hashed when it was imported.
LOADED_FILE = __file__
LOADED_SHA256 = _own_sha256()


def message_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None,
    thinking: bool,
    add_generation_prompt: bool = True,
) -> str:
    """A DeepSeek-style template: what the prompt token count is computed from."""
    system = "".join(message_text(m.get("content")) for m in messages if m.get("role") == "system")
    if tools:
        system += "\n\n## Tools\n" + json.dumps(list(tools), ensure_ascii=False)
    out = [BOS, system]
    for message in messages:
        role = message.get("role")
        text = message_text(message.get("content"))
        if role == "user":
            out.append(USER + text)
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            out.append(ASSISTANT + END_THINK + text + json.dumps(calls) * bool(calls) + EOS)
        elif role == "tool":
            out.append(TOOL_OUT + text + END_TOOL_OUT)
    if add_generation_prompt:
        out.append(ASSISTANT + (THINK if thinking else END_THINK))
    return "".join(out)


def thinking_enabled(kwargs: Mapping[str, Any] | None, reasoning_effort: Any = None) -> str | None:
    """The thinking mode asked for, or None: `thinking`/`enable_thinking` kwargs or effort."""
    kwargs = kwargs or {}
    for key in ("thinking", "enable_thinking", "thinking_mode"):
        if key in kwargs:
            value = kwargs[key]
            if value in (False, None, "off", "none", "false", "disabled", 0):
                return None
            return "on" if value is True else str(value)
    if reasoning_effort not in (None, "none"):
        return str(reasoning_effort)
    return None
