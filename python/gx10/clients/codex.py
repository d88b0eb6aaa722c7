"""Codex CLI: a model provider in `config.toml` (read from `$CODEX_HOME`, default ~/.codex).

Format: https://developers.openai.com/codex/config-reference and the sample configuration
https://developers.openai.com/codex/config-sample (`model`, `model_provider`,
`model_context_window`, `model_max_output_tokens`, `show_raw_agent_reasoning`,
`model_supports_reasoning_summaries`; `[model_providers.<id>]` with `name`, `base_url`,
`env_key`, `wire_api`, and `experimental_bearer_token` for a key written in the file).
`wire_api` is "responses" by default: Codex deprecated "chat" (Chat Completions) in December 2025
and removed it in February 2026 (openai/codex discussion 7782, pull request 7897; 0.122 and
later refuse it), and vLLM serves the Responses API at /v1/responses. `--codex-wire-api chat`
writes "chat" for an older Codex. `show_raw_agent_reasoning` shows the reasoning vLLM returns
apart from the answer.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gx10.clients.formats import toml_text
from gx10.clients.model import DEFAULT_KEY_ENV, PROVIDER_ID, AgentConfig, ClientFile, Settings

NAME = "codex"
TITLE = "Codex CLI"
FILE = Path("codex") / "config.toml"


def document(s: Settings) -> dict[str, Any]:
    provider: dict[str, Any] = {
        "name": f"{PROVIDER_ID} (vLLM)",
        "base_url": s.base_url,
        "wire_api": s.codex_wire_api,
    }
    if s.key.inline:
        provider["experimental_bearer_token"] = s.key.inline
    else:
        # A key file has no field of its own: the command line reads it into the variable.
        provider["env_key"] = s.key.env if s.key.file is None else DEFAULT_KEY_ENV
    return {
        "model": s.model,
        "model_provider": PROVIDER_ID,
        "model_context_window": s.context,
        "model_max_output_tokens": s.output,
        "model_supports_reasoning_summaries": False,
        "show_raw_agent_reasoning": True,
        "model_providers": {PROVIDER_ID: provider},
    }


def render(s: Settings) -> AgentConfig:
    home = s.out / FILE.parent
    prefix = s.key.env_prefix(DEFAULT_KEY_ENV) if s.key.file is not None else ""
    return AgentConfig(
        agent=NAME,
        title=TITLE,
        files=(
            ClientFile(
                FILE,
                toml_text(document(s), header="# Codex CLI: the gx10 service (gx10 clients)\n"),
                secret=bool(s.key.inline),
            ),
        ),
        command=f'{prefix}CODEX_HOME={shlex.quote(str(home))} codex exec "..."',
    )
