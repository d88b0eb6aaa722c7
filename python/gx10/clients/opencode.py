"""opencode: a provider through `@ai-sdk/openai-compatible` in `opencode.json`.

Format: https://opencode.ai/docs/providers (custom OpenAI-compatible provider: `npm`, `name`,
`options.baseURL`, `options.apiKey`, `models`) and https://opencode.ai/docs/config (variables
`{env:NAME}` and `{file:path}`); the model fields (`name`, `reasoning`, `tool_call`,
`temperature`, `limit.context`, `limit.output`) are the ones opencode's ModelsDev.Model declares
(anomalyco/opencode, packages/opencode/src/provider/models.ts). The JSON schema opencode
publishes is https://opencode.ai/config.json (named in the file's `$schema`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import json_text
from gx10.clients.model import PROVIDER_ID, AgentConfig, ClientFile, KeyRef, Settings

NAME = "opencode"
TITLE = "opencode"
FILE = Path("opencode") / "opencode.json"
SCHEMA = "https://opencode.ai/config.json"


def api_key(key: KeyRef) -> str:
    if key.inline:
        return key.inline
    if key.file is not None:
        return f"{{file:{key.file}}}"
    return f"{{env:{key.env}}}"


def document(s: Settings) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "model": f"{PROVIDER_ID}/{s.model}",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": f"{PROVIDER_ID} (vLLM)",
                "options": {"baseURL": s.base_url, "apiKey": api_key(s.key)},
                "models": {
                    s.model: {
                        "name": s.model,
                        "reasoning": True,
                        "tool_call": True,
                        "temperature": True,
                        "limit": {"context": s.context, "output": s.output},
                    }
                },
            }
        },
    }


def render(s: Settings) -> AgentConfig:
    path = s.out / FILE
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(ClientFile(FILE, json_text(document(s)), secret=bool(s.key.inline)),),
        command=(
            f"OPENCODE_CONFIG={shlex.quote(str(path))} opencode run "
            f'--model {shlex.quote(f"{PROVIDER_ID}/{s.model}")} "..."'
        ),
    )
