"""pi (the reference deployment's agent): a custom provider in `~/.pi/agent/models.json`.

Format: badlogic/pi-mono, packages/coding-agent/docs/models.md ("Custom Models"): a `providers`
map; each provider has `baseUrl`, `api` (`openai-completions` for a Chat Completions server),
`apiKey` (an environment variable's name, `!command` whose stdout is the key, or the key),
`compat` and `models` (`id`, `name`, `reasoning`, `input`, `contextWindow`, `maxTokens`, `cost`).
pi sends its tools on every request (tool calling needs no switch); `reasoning: true` makes it
show and keep the reasoning the server returns apart from the answer.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import json_text
from gx10.clients.model import PROVIDER_ID, AgentConfig, ClientFile, KeyRef, Settings

NAME = "pi"
TITLE = "pi"
FILE = Path("pi") / "models.json"


def api_key(key: KeyRef) -> str:
    if key.inline:
        return key.inline
    if key.file is not None:
        return "!cat " + shlex.quote(str(key.file))
    return key.env


def document(s: Settings) -> dict[str, Any]:
    return {
        "providers": {
            PROVIDER_ID: {
                "baseUrl": s.base_url,
                "api": "openai-completions",
                "apiKey": api_key(s.key),
                # vLLM's Chat Completions: `system` role, no `store`, `max_tokens`.
                "compat": {
                    "supportsDeveloperRole": False,
                    "supportsStore": False,
                    "maxTokensField": "max_tokens",
                },
                "models": [
                    {
                        "id": s.model,
                        "name": f"{s.model} ({PROVIDER_ID})",
                        "reasoning": True,
                        "input": ["text"],
                        "contextWindow": s.context,
                        "maxTokens": s.output,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


def render(s: Settings) -> AgentConfig:
    path = s.out / FILE
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(ClientFile(FILE, json_text(document(s)), secret=bool(s.key.inline)),),
        install=f"mkdir -p ~/.pi/agent && cp {shlex.quote(str(path))} ~/.pi/agent/models.json",
        note=f"an existing ~/.pi/agent/models.json: merge providers.{PROVIDER_ID} into it",
        command=f'pi --provider {PROVIDER_ID} --model {shlex.quote(s.model)} -p "..."',
    )
