"""aider: `.aider.conf.yml` (options), `.aider.model.settings.yml` (how to talk to the model) and
`.aider.model.metadata.json` (its context window and costs, litellm's model-info format).

Format: https://aider.chat/docs/config/aider_conf.html (the options; JSON schema
https://json.schemastore.org/aider-0.82.json), https://aider.chat/docs/config/adv-model-settings.html
(model settings: `name`, `edit_format`, `use_repo_map`, `use_temperature`, `streaming`,
`extra_params`; model metadata: `max_input_tokens`, `max_output_tokens`, `litellm_provider`,
`mode`, costs). aider talks to an OpenAI-compatible server through litellm as
`openai/<served name>` with `openai-api-base`; the key comes from OPENAI_API_KEY (or
`openai-api-key` in the file, only with --inline-key). `extra_params` go into every request:
`max_tokens` and the server's thinking mode (`extra_body.chat_template_kwargs.thinking`), sent
explicitly as FIELD_NOTES section 4 asks.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import json_text, yaml_text
from gx10.clients.model import AgentConfig, ClientFile, Settings

NAME = "aider"
TITLE = "aider"
DIR = Path("aider")
CONF = DIR / ".aider.conf.yml"
SETTINGS = DIR / ".aider.model.settings.yml"
METADATA = DIR / ".aider.model.metadata.json"
HEADER = "# aider: the gx10 service (gx10 clients)\n"


def model_name(s: Settings) -> str:
    return f"openai/{s.model}"


def conf(s: Settings) -> dict[str, Any]:
    document: dict[str, Any] = {
        "model": model_name(s),
        "openai-api-base": s.base_url,
        "model-settings-file": str(s.out / SETTINGS),
        "model-metadata-file": str(s.out / METADATA),
    }
    if s.key.inline:
        document["openai-api-key"] = s.key.inline
    return document


def model_settings(s: Settings) -> list[dict[str, Any]]:
    extra: dict[str, Any] = {"max_tokens": s.output}
    if s.thinking is not None:
        extra["extra_body"] = {"chat_template_kwargs": {"thinking": s.thinking}}
    return [
        {
            "name": model_name(s),
            "edit_format": "diff",
            "use_repo_map": True,
            "use_temperature": True,
            "streaming": True,
            "extra_params": extra,
        }
    ]


def metadata(s: Settings) -> dict[str, Any]:
    return {
        model_name(s): {
            "max_tokens": s.output,
            "max_input_tokens": s.context,
            "max_output_tokens": s.output,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
            "supports_function_calling": True,
            "supports_tool_choice": True,
            "supports_reasoning": True,
        }
    }


def render(s: Settings) -> AgentConfig:
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(
            ClientFile(CONF, yaml_text(conf(s), HEADER), secret=bool(s.key.inline)),
            ClientFile(SETTINGS, yaml_text(model_settings(s), HEADER)),
            ClientFile(METADATA, json_text(metadata(s))),
        ),
        command=(
            f"{s.key.env_prefix('OPENAI_API_KEY')}aider --config {shlex.quote(str(s.out / CONF))}"
        ),
    )
