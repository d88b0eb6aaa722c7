"""Claude Code through vLLM's Anthropic-compatible Messages endpoint (`/v1/messages`): a
settings file (`claude --settings FILE`, or ~/.claude/settings.json).

Format: https://code.claude.com/docs/en/settings (`apiKeyHelper`, `env`) and
https://code.claude.com/docs/en/env-vars; JSON schema
https://json.schemastore.org/claude-code-settings.json (SchemaStore/schemastore,
src/schemas/json/claude-code-settings.json). ANTHROPIC_BASE_URL is the server root (Claude Code
adds /v1/messages); every model role (ANTHROPIC_MODEL, ANTHROPIC_SMALL_FAST_MODEL and the
DEFAULT_*_MODEL pins) names the one served model; `apiKeyHelper` is a shell command whose output
is the key, so the key stays in its file or variable (ANTHROPIC_AUTH_TOKEN holds it only with
--inline-key). Tool use is native to the Messages API; the thinking mode is the server's default
(`vllm_serve_default_chat_template_kwargs`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import json_text
from gx10.clients.model import AgentConfig, ClientFile, KeyRef, Settings

NAME = "claude-code"
TITLE = "Claude Code"
FILE = Path("claude-code") / "settings.json"
SCHEMA = "https://json.schemastore.org/claude-code-settings.json"


def key_helper(key: KeyRef) -> str:
    if key.file is not None:
        return f"cat {shlex.quote(str(key.file))}"
    return f"printf '%s' \"${key.env}\""


def document(s: Settings) -> dict[str, Any]:
    env: dict[str, str] = {
        "ANTHROPIC_BASE_URL": s.root,
        "ANTHROPIC_MODEL": s.model,
        "ANTHROPIC_SMALL_FAST_MODEL": s.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": s.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": s.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": s.model,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(s.output),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(s.context),
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(s.context),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    document: dict[str, Any] = {"$schema": SCHEMA}
    if s.key.inline:
        env["ANTHROPIC_AUTH_TOKEN"] = s.key.inline
    else:
        document["apiKeyHelper"] = key_helper(s.key)
    document["env"] = env
    return document


def render(s: Settings) -> AgentConfig:
    path = s.out / FILE
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(ClientFile(FILE, json_text(document(s)), secret=bool(s.key.inline)),),
        command=f'claude --settings {shlex.quote(str(path))} -p "..."',
    )
