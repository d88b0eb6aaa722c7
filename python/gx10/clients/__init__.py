"""`gx10 clients`: ready configs for the coding agents people use with the service.

One module per agent (`pi`, `opencode`, `codex`, `aider`, `continue_dev`, `claude_code`), each a
`render(Settings) -> AgentConfig`; `gx10.clients.model` holds what they share and reads the
service's settings from the inventory; `gx10.clients.write` checks and writes the files and the
README that says how to start each agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gx10.clients import aider, claude_code, codex, continue_dev, opencode, pi
from gx10.clients.model import AgentConfig, ClientsError, Settings

Render = Callable[[Settings], AgentConfig]

# In the order the README lists them: the reference deployment's agent first.
AGENTS: dict[str, Render] = {
    pi.NAME: pi.render,
    opencode.NAME: opencode.render,
    codex.NAME: codex.render,
    aider.NAME: aider.render,
    continue_dev.NAME: continue_dev.render,
    claude_code.NAME: claude_code.render,
}


def select(names: Sequence[str] | None) -> list[str]:
    """The agents asked for (all of them by default), each once, in the given order."""
    if not names:
        return list(AGENTS)
    unknown = [name for name in names if name not in AGENTS]
    if unknown:
        raise ClientsError(
            f"--agent {unknown[0]!r} is not an agent gx10 clients knows; choose from "
            f"{', '.join(AGENTS)}"
        )
    return list(dict.fromkeys(names))


def render(settings: Settings, names: Sequence[str] | None = None) -> list[AgentConfig]:
    return [AGENTS[name](settings) for name in select(names)]


__all__ = ["AGENTS", "AgentConfig", "ClientsError", "Settings", "render", "select"]
