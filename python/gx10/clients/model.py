"""What every agent's config is made of: the service as the inventory describes it (`Settings`),
the API key by reference (`KeyRef`), and the files one agent needs (`AgentConfig`).

The settings come from the inventory through `gx10.bench.nodes.load_cluster` (Ansible's own
inventory and variable code, with `roles/vllm_serve/defaults/main.yml` beneath the inventory's
values), so a config shows the service exactly as the playbooks deploy it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gx10 import _collection
from gx10.bench.nodes import plain
from gx10.endpoint import parse_endpoint
from gx10.errors import Gx10Error

PROVIDER_ID = "gx10"  # the provider name every config registers (`pi --provider gx10`)
DEFAULT_KEY_ENV = "GX10_API_KEY"  # the variable the key is read from unless told otherwise
# The output limit per response unless --max-output-tokens says otherwise: long enough for an
# agent's file edits and its reasoning, short enough that a runaway generation ends (FIELD_NOTES
# section 4: an unbounded request once ran for hours). Never above the context window: a context
# smaller than twice this gets half of it.
DEFAULT_OUTPUT_LIMIT = 32768
CONTEXT_VAR = "vllm_serve_max_model_len"
TEMPLATE_KWARGS_VAR = "vllm_serve_default_chat_template_kwargs"
# The serving profile gives both unless the inventory sets them (roles/vllm_serve).
PROFILE_VAR = "vllm_serve_profile"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClientsError(Gx10Error):
    """`gx10 clients` cannot write the configs asked for (bad option or inventory value)."""


@dataclass(frozen=True, slots=True)
class KeyRef:
    """Where an agent finds the API key: an environment variable, a file, or (only when asked)
    the key itself. Exactly one of the three is set."""

    env: str = ""
    file: Path | None = None
    inline: str = field(default="", repr=False)

    @property
    def kind(self) -> str:
        if self.inline:
            return "inline"
        return "file" if self.file is not None else "env"

    def shell(self) -> str:
        """A shell word that expands to the key (for a command line); empty for an inline key."""
        if self.inline:
            return ""
        if self.file is not None:
            return f'"$(cat {shlex.quote(str(self.file))})"'
        return f'"${self.env}"'

    def env_prefix(self, variable: str) -> str:
        """`VARIABLE=<the key> ` for a command line, or "" when VARIABLE already holds it."""
        if self.inline or (self.file is None and self.env == variable):
            return ""
        return f"{variable}={self.shell()} "

    def describe(self) -> str:
        if self.inline:
            return "inline in the generated files (mode 0600)"
        if self.file is not None:
            return f"read from the file {self.file}"
        return f"read from the environment variable {self.env}"


@dataclass(frozen=True, slots=True)
class Settings:
    """The service one config describes."""

    root: str  # http://head:port, the server's own routes (Anthropic Messages: {root}/v1/messages)
    model: str  # the served model name
    context: int  # the context window (vllm_serve_max_model_len)
    output: int  # the output limit per response
    thinking: Any  # the server's default chat_template_kwargs.thinking, or None
    key: KeyRef
    out: Path  # the output directory, absolute
    codex_wire_api: str = "responses"  # Codex's API: "responses" (current) or "chat" (< 0.122)

    @property
    def base_url(self) -> str:
        """The OpenAI API base (`http://head:port/v1`)."""
        return f"{self.root}/v1"


@dataclass(frozen=True, slots=True)
class ClientFile:
    """One file of an agent's config, `path` relative to the output directory."""

    path: Path
    text: str = field(repr=False)
    secret: bool = False  # holds the key itself: written 0600

    @property
    def mode(self) -> int:
        return 0o600 if self.secret else 0o644


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything `gx10 clients` writes for one agent, and how to start it."""

    agent: str
    title: str
    files: tuple[ClientFile, ...]
    command: str  # one command that starts the agent on the service
    install: str = ""  # where to put the files, when the agent reads them from a fixed place
    note: str = ""


def key_ref(
    *,
    key_file: Path | None,
    key_env: str | None,
    inline: bool,
    inventory_key: str = "",
) -> KeyRef:
    """The key reference the options ask for (default: the variable GX10_API_KEY)."""
    if key_file is not None and key_env is not None:
        raise ClientsError(
            f"--key-file {key_file} and --key-env {key_env}: give one of them, not both"
        )
    if key_env is not None and not _ENV_NAME.match(key_env):
        raise ClientsError(
            f"--key-env {key_env!r} is not an environment variable name; "
            f"use letters, digits and underscores, e.g. --key-env {DEFAULT_KEY_ENV}"
        )
    path = Path(key_file).expanduser().absolute() if key_file is not None else None
    if not inline:
        return KeyRef(env=key_env or DEFAULT_KEY_ENV) if path is None else KeyRef(file=path)
    if path is not None:
        try:
            key = path.read_text().strip()
        except OSError as exc:
            raise ClientsError(
                f"--inline-key: cannot read --key-file {path}: {exc.strerror or exc}; give a "
                "readable file holding the API key"
            ) from exc
        source = f"--key-file {path} is empty"
    elif key_env is not None:
        key = os.environ.get(key_env, "").strip()
        source = f"--key-env {key_env} is not set (or empty)"
    else:
        key = inventory_key.strip()
        source = "the inventory sets no vllm_serve_api_key"
    if not key:
        raise ClientsError(
            f"--inline-key: no key to write: {source}; give --key-file F or --key-env VAR "
            "holding the key, or drop --inline-key to reference the key instead"
        )
    return KeyRef(inline=key)


def output_limit(requested: int | None, context: int) -> int:
    """The output limit: the one asked for (checked against the context), else the default."""
    if requested is None:
        return min(DEFAULT_OUTPUT_LIMIT, max(1, context // 2))
    if requested <= 0:
        raise ClientsError(
            f"--max-output-tokens {requested}: the output limit must be a positive number of "
            f"tokens (default {DEFAULT_OUTPUT_LIMIT})"
        )
    if requested > context:
        raise ClientsError(
            f"--max-output-tokens {requested} is above the context window {context} "
            f"({CONTEXT_VAR}); give at most {context}, or raise {CONTEXT_VAR} in the inventory"
        )
    return requested


def profiled(settings: Mapping[str, Any], variable: str) -> Any:
    """The inventory's value of a profile setting, else the serving profile's (as the serve role
    renders it: module_utils/serve_profiles.py)."""
    if settings.get(variable) is not None:
        return settings[variable]
    profiles = _collection.load("serve_profiles")
    try:
        return profiles.profile_value(
            settings.get(PROFILE_VAR) or profiles.DEFAULT_PROFILE,
            variable.removeprefix(profiles.PREFIX),
        )
    except profiles.ProfileError as exc:
        raise ClientsError("; ".join(exc.errors)) from exc


def context_window(value: Any, source: str) -> int:
    """`vllm_serve_max_model_len` as a positive int, or an error naming it."""
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise ClientsError(
            f"{source}: {CONTEXT_VAR} is {value!r}; it must be the served context window, a "
            "positive number of tokens (the role's default is 1048576)"
        )
    return number


def load_settings(
    inventories: Sequence[str | Path],
    *,
    out: Path,
    endpoint: str | None = None,
    key_file: Path | None = None,
    key_env: str | None = None,
    inline: bool = False,
    max_output_tokens: int | None = None,
    codex_wire_api: str = "responses",
) -> Settings:
    """The service as the inventory (and the options) describe it."""
    from gx10.bench.nodes import load_cluster  # noqa: PLC0415 - ansible is slow to import

    if not inventories:
        raise ClientsError("gx10 clients needs -i INV: the inventory the service was deployed from")
    # Check the options that need no inventory first: a typo fails fast.
    key_ref(key_file=key_file, key_env=key_env, inline=False)
    if max_output_tokens is not None and max_output_tokens <= 0:
        output_limit(max_output_tokens, 1)
    need_key = inline and key_file is None and key_env is None
    cluster = load_cluster(
        inventories,
        need_api_key=need_key,
        extra=(PROFILE_VAR, CONTEXT_VAR, TEMPLATE_KWARGS_VAR),
        role_defaults=("vllm_serve",),
    )
    head = cluster.head.name
    url = (
        parse_endpoint(endpoint)
        if endpoint
        else parse_endpoint(cluster.endpoint, f"host {head}'s API (gx10_api_host, gx10_serve_port)")
    )
    settings = plain(dict(cluster.settings))
    context = context_window(profiled(settings, CONTEXT_VAR), f"host {head}")
    kwargs = profiled(settings, TEMPLATE_KWARGS_VAR) or {}
    thinking = kwargs.get("thinking") if isinstance(kwargs, Mapping) else None
    return Settings(
        root=url.root,
        model=str(cluster.model),
        context=context,
        output=output_limit(max_output_tokens, context),
        thinking=thinking,
        key=key_ref(
            key_file=key_file, key_env=key_env, inline=inline, inventory_key=cluster.api_key
        ),
        out=Path(out).expanduser().absolute(),
        codex_wire_api=codex_wire_api,
    )
