# SPDX-License-Identifier: Apache-2.0
"""A fake `docker` client for the overlay tests: images and containers as files in a JSON state.

``install(tmp_path, state)`` writes an executable ``docker`` into ``tmp_path/bin`` (put that
first on PATH) that answers, from ``state``, only what the overlay check runs: ``image inspect``,
``run ... --entrypoint sha256sum IMAGE -- PATHS``, ``exec [--user U] NAME sha256sum -- PATHS``
and ``inspect NAME``; anything else fails. Each call is appended to ``calls.jsonl`` beside it.

State: ``{"images": {IMAGE: {PATH: TEXT or null}}, "containers": {NAME: {"files": {PATH: TEXT},
"mounts": [HOST PATH, ...]}}}``; a path's hash is the sha256 of its text (UTF-8).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = r"""#!{python}
import hashlib, json, sys
STATE, CALLS = {state!r}, {calls!r}
argv = sys.argv[1:]
with open(CALLS, "a") as log:
    log.write(json.dumps(argv) + "\n")
state = json.load(open(STATE))

def hashes(files, paths):
    rc = 0
    for path in paths:
        text = files.get(path)
        if text is None:
            sys.stderr.write(f"sha256sum: {{path}}: No such file or directory\n")
            rc = 1
        elif text == "<dir>":
            sys.stderr.write(f"sha256sum: {{path}}: Is a directory\n")
            rc = 1
        else:
            print(hashlib.sha256(text.encode()).hexdigest() + "  " + path)
    return rc

if argv[:2] == ["image", "inspect"]:
    image = argv[-1]
    if image in state["images"]:
        print("sha256:" + hashlib.sha256(image.encode()).hexdigest())
        sys.exit(0)
    sys.stderr.write(f"Error response from daemon: No such image: {{image}}\n")
    sys.exit(1)
if argv[:1] == ["run"] and "--entrypoint" in argv:
    at = argv.index("--entrypoint")
    entry, image, rest = argv[at + 1], argv[at + 2], argv[at + 3:]
    if image not in state["images"]:
        sys.stderr.write(f"docker: Error response from daemon: No such image: {{image}}.\n")
        sys.exit(125)
    if entry != "sha256sum" or state.get("no_sha256sum"):
        sys.stderr.write('docker: Error response from daemon: failed to create task: exec: '
                         f'"{{entry}}": executable file not found in $PATH\n')
        sys.exit(127)
    sys.exit(hashes(state["images"][image], [p for p in rest if p != "--"]))
if argv[:1] == ["exec"]:
    rest = argv[1:]
    if rest[:1] == ["--user"]:
        rest = rest[2:]
    name, command = rest[0], rest[1:]
    container = state["containers"].get(name)
    if container is None:
        sys.stderr.write(f"Error response from daemon: No such container: {{name}}\n")
        sys.exit(1)
    sys.exit(hashes(container["files"], [p for p in command[1:] if p != "--"]))
if argv[:1] == ["inspect"]:
    container = state["containers"].get(argv[-1])
    if container is None:
        print("[]")
        sys.stderr.write(f"Error: No such object: {{argv[-1]}}\n")
        sys.exit(1)
    mounts = [{{"Type": "bind", "Source": source}} for source in container["mounts"]]
    print(json.dumps([{{"Mounts": mounts}}]))
    sys.exit(0)
sys.stderr.write(f"fake docker: unexpected call {{argv}}\n")
sys.exit(2)
"""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def install(tmp_path: Path, state: dict[str, Any]) -> Path:
    """The directory holding the fake ``docker`` (put it first on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    state_file = tmp_path / "docker-state.json"
    state_file.write_text(json.dumps({"images": {}, "containers": {}, **state}))
    script = bin_dir / "docker"
    script.write_text(
        SCRIPT.format(python=sys.executable, state=str(state_file), calls=str(calls_file(tmp_path)))
    )
    script.chmod(0o755)
    return bin_dir


def update(tmp_path: Path, **changes: Any) -> None:
    """Change the fake's state (images, containers) between runs."""
    state_file = tmp_path / "docker-state.json"
    state = json.loads(state_file.read_text())
    state.update(changes)
    state_file.write_text(json.dumps(state))


def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "bin" / "calls.jsonl"


def calls(tmp_path: Path) -> list[list[str]]:
    path = calls_file(tmp_path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
