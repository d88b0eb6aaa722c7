"""Write the agents' configs and the README: everything is checked first (the output directory
writable, no file there already unless --force), so a refused run writes nothing. Each file is
written to a temporary name beside it and renamed into place with its final mode: 0600 when it
holds the key itself (--inline-key), 0644 otherwise."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gx10.clients.model import DEFAULT_KEY_ENV, AgentConfig, ClientFile, ClientsError, Settings

README = Path("README.md")


@dataclass(frozen=True, slots=True)
class Written:
    agent: str  # "" for the README
    path: Path  # absolute
    mode: int


def readme(settings: Settings, configs: Sequence[AgentConfig]) -> str:
    key = settings.key
    lines = [
        "# Coding agents on the gx10 service",
        "",
        "Written by `gx10 clients`. The service:",
        "",
        f"- endpoint {settings.base_url} (Anthropic Messages: {settings.root}/v1/messages)",
        f"- model `{settings.model}`, context window {settings.context} tokens, "
        f"output limit {settings.output} tokens per response",
        f"- API key: {key.describe()}",
        "",
    ]
    if key.kind == "env":
        lines += [f"Set the key first: `export {key.env}=<your key>`.", ""]
    lines += ["| agent | files | start it |", "|---|---|---|"]
    for config in configs:
        files = "<br>".join(f"`{f.path}`" for f in config.files)
        lines.append(f"| {config.title} | {files} | `{config.command}` |")
    extras = [c for c in configs if c.install or c.note]
    if extras:
        lines += ["", "Agents that read their file from a fixed place, and other notes:", ""]
        for config in extras:
            if config.install:
                lines.append(f"- {config.title}: `{config.install}`")
            if config.note:
                lines.append(f"- {config.title}: {config.note}")
    if key.kind == "file":
        lines += [
            "",
            f"Agents without a key-file setting get the key through {DEFAULT_KEY_ENV} or "
            "OPENAI_API_KEY on their command line, as shown.",
        ]
    return "\n".join(lines) + "\n"


def _not_a_directory(out: Path) -> None:
    """No part of `out` that exists is a file."""
    for probe in (out, *out.parents):
        if probe.exists():
            if not probe.is_dir():
                raise ClientsError(
                    f"--out {out}: {probe} is not a directory; give a directory for the configs"
                )
            return


def _probe_writable(out: Path) -> None:
    """Create `out` (if need be) and a scratch file in it; on failure leave nothing behind."""
    created = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out, prefix=".gx10-clients-probe."):
            pass
    except OSError as exc:
        for path in created:  # innermost first
            with contextlib.suppress(OSError):
                path.rmdir()
        raise ClientsError(
            f"--out {out} is not writable ({exc.strerror or exc}); give a directory you can "
            "write, e.g. --out ./gx10-clients"
        ) from exc


def plan(settings: Settings, configs: Sequence[AgentConfig], *, force: bool) -> list[ClientFile]:
    """Every file to write (the README last), after checking they can all be written."""
    files = [f for c in configs for f in c.files]
    files.append(ClientFile(README, readme(settings, configs)))
    out = settings.out
    _not_a_directory(out)
    existing = [str(out / f.path) for f in files if (out / f.path).exists()]
    if existing and not force:
        raise ClientsError(
            f"--out {out}: {len(existing)} file(s) already there ({', '.join(existing[:3])}"
            f"{', ...' if len(existing) > 3 else ''}); give --force to overwrite them, or "
            "another --out"
        )
    for f in files:
        target = out / f.path
        if target.exists() and not target.is_file():
            raise ClientsError(f"--out {out}: {target} exists and is not a file; remove it")
    _probe_writable(out)
    return files


def _write_one(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)  # mkstemp creates 0600; the final mode before any byte is written
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(
    settings: Settings, configs: Sequence[AgentConfig], *, force: bool = False
) -> list[Written]:
    files = plan(settings, configs, force=force)
    owner = {id(f): c.agent for c in configs for f in c.files}
    written: list[Written] = []
    for f in files:
        path = settings.out / f.path
        try:
            _write_one(path, f.text, f.mode)
        except OSError as exc:
            raise ClientsError(
                f"--out {settings.out}: cannot write {path}: {exc.strerror or exc}"
            ) from exc
        written.append(Written(owner.get(id(f), ""), path, f.mode))
    return written
