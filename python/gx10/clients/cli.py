"""`gx10 clients -i INV [--agent NAME ...] [--out DIR] [--key-file F | --key-env VAR]
[--endpoint URL] [--max-output-tokens N] [--codex-wire-api API] [--inline-key] [--force]
[--json]`.

Exit codes: 0 written; 1 bad option or inventory value (nothing written)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gx10.clients import AGENTS, render
from gx10.clients.model import DEFAULT_KEY_ENV, DEFAULT_OUTPUT_LIMIT, load_settings
from gx10.clients.write import write

DEFAULT_OUT = Path("gx10-clients")


def add_parser(commands: Any, json_option: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "clients",
        parents=[json_option],
        help="write ready configs for coding agents (pi, opencode, Codex, aider, Continue, "
        "Claude Code)",
        description=(
            "Write each agent's config for the service the inventory deploys: its endpoint, "
            "served model name, context window (vllm_serve_max_model_len), an output limit, "
            "tool calling and reasoning as the agent spells them, and the API key by reference "
            f"(the environment variable {DEFAULT_KEY_ENV} unless --key-env or --key-file say "
            "otherwise; the key itself only with --inline-key, in files of mode 0600). A "
            "README.md in the output directory gives the command that starts each agent."
        ),
    )
    p.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INV",
        required=True,
        help="the inventory the service was deployed from (repeatable, as ansible)",
    )
    p.add_argument(
        "--agent",
        action="append",
        metavar="NAME",
        help=f"an agent to write for (repeatable; default all): {', '.join(AGENTS)}",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"output directory (default ./{DEFAULT_OUT}/)",
    )
    key = p.add_mutually_exclusive_group()
    key.add_argument("--key-file", type=Path, metavar="F", help="the agents read the key from F")
    key.add_argument(
        "--key-env",
        metavar="VAR",
        help=f"the agents read the key from the environment variable VAR (default "
        f"{DEFAULT_KEY_ENV})",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="the server the agents use, e.g. https://llm.example:443 (default: the head's API, "
        "as playbooks/smoke.yml computes it)",
    )
    p.add_argument(
        "--max-output-tokens",
        type=int,
        metavar="N",
        help=f"output limit per response (default {DEFAULT_OUTPUT_LIMIT}, or half the context "
        "window if that is smaller; never above the context window)",
    )
    p.add_argument(
        "--inline-key",
        action="store_true",
        help="write the key itself into the configs (from --key-file, --key-env, or the "
        "inventory's vllm_serve_api_key); those files are mode 0600",
    )
    p.add_argument(
        "--codex-wire-api",
        choices=("responses", "chat"),
        default="responses",
        help="the API Codex CLI speaks: responses (default; Codex 0.122 and later accept only "
        "this) or chat (Chat Completions, for an older Codex)",
    )
    p.add_argument("--force", action="store_true", help="overwrite files already in --out")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gx10.clients import select  # noqa: PLC0415

    names = select(args.agent)  # an unknown agent fails before the inventory is read
    settings = load_settings(
        args.inventory,
        out=args.out,
        endpoint=args.endpoint,
        key_file=args.key_file,
        key_env=args.key_env,
        inline=args.inline_key,
        max_output_tokens=args.max_output_tokens,
        codex_wire_api=args.codex_wire_api,
    )
    configs = render(settings, names)
    written = write(settings, configs, force=args.force)
    if args.json:
        document = {
            "out": str(settings.out),
            "endpoint": settings.base_url,
            "model": settings.model,
            "context_window": settings.context,
            "output_limit": settings.output,
            "key": settings.key.kind,
            "agents": [
                {
                    "agent": c.agent,
                    "command": c.command,
                    "files": [
                        {"path": str(w.path), "mode": f"{w.mode:04o}"}
                        for w in written
                        if w.agent == c.agent
                    ],
                }
                for c in configs
            ],
            "readme": next(str(w.path) for w in written if not w.agent),
        }
        print(json.dumps(document, indent=2))
        return 0
    for config in configs:
        print(f"{config.title:<12} {config.command}")
    print(f"wrote {len(written)} files to {settings.out} (README.md: how to start each agent)")
    return 0
