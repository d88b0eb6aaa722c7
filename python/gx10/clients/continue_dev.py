"""Continue: a model in `config.yaml` (schema v1; ~/.continue/config.yaml, or `cn --config`).

Format: https://docs.continue.dev/reference (config.yaml reference: `name`, `version`,
`schema: v1`, `models` with `name`, `provider: openai`, `model`, `apiBase`, `apiKey`, `roles`,
`capabilities`, `defaultCompletionOptions.contextLength/maxTokens`,
`requestOptions.extraBodyProperties`); JSON schema continuedev/continue,
packages/config-yaml/schema/config-yaml-schema.json. The key is a secret reference
(`${{ secrets.NAME }}`, which Continue resolves from `.continue/.env` files, in the home or the
workspace: continuedev/continue issue 5902 asks for the process environment too);
`capabilities: [tool_use]` turns tool calling on, and the thinking mode goes in every request's
body (`chat_template_kwargs.thinking`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import yaml_text
from gx10.clients.model import DEFAULT_KEY_ENV, PROVIDER_ID, AgentConfig, ClientFile, Settings

NAME = "continue"
TITLE = "Continue"
FILE = Path("continue") / "config.yaml"


def secret_name(s: Settings) -> str:
    return s.key.env if s.key.file is None and s.key.env else DEFAULT_KEY_ENV


def document(s: Settings) -> dict[str, Any]:
    model: dict[str, Any] = {
        "name": f"{s.model} ({PROVIDER_ID})",
        "provider": "openai",
        "model": s.model,
        "apiBase": s.base_url,
        "apiKey": s.key.inline or f"${{{{ secrets.{secret_name(s)} }}}}",
        "roles": ["chat", "edit", "apply"],
        "capabilities": ["tool_use"],
        "defaultCompletionOptions": {"contextLength": s.context, "maxTokens": s.output},
    }
    if s.thinking is not None:
        model["requestOptions"] = {
            "extraBodyProperties": {"chat_template_kwargs": {"thinking": s.thinking}}
        }
    return {"name": PROVIDER_ID, "version": "1.0.0", "schema": "v1", "models": [model]}


def render(s: Settings) -> AgentConfig:
    path = s.out / FILE
    note = ""
    if not s.key.inline:
        name = secret_name(s)
        note = (
            f"reads secrets.{name} from ~/.continue/.env (or the workspace's "
            f".continue/.env): `echo {name}={s.key.shell()} >> ~/.continue/.env` (that file "
            "then holds the key: keep it mode 0600)"
        )
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(ClientFile(FILE, yaml_text(document(s)), secret=bool(s.key.inline)),),
        install=f"cp {shlex.quote(str(path))} ~/.continue/config.yaml",
        command=(
            f"{s.key.env_prefix(DEFAULT_KEY_ENV) if s.key.file is not None else ''}"
            f'cn --config {shlex.quote(str(path))} -p "..."'
        ),
        note=note,
    )
