# SPDX-License-Identifier: Apache-2.0
"""Runtime fixes as a checked overlay: files placed over the vLLM image's own at every start.

Pure Python (standard library only), shared by the inventory validation (``cluster_plan``), the
``gx10.cluster.overlay_errors`` and ``gx10.cluster.overlay_volumes`` filters and the
``gx10.cluster.overlay_check`` module, and unit tested.

``vllm_serve_overlay`` lists files, each ``{path, source, base_sha256, sha256, why}``:

- ``path``: the absolute path of the file inside the image (the rank's container);
- ``source``: the replacement, a file on the controller (absolute; an inventory writes
  ``"{{ inventory_dir }}/files/overlay/<name>"``), copied to every node under a name made of
  its sha256 (content-addressed: a new replacement is a new host file, never an edit in place);
- ``base_sha256``: the sha256 of the image's own file at ``path``, the file that was reviewed
  when the replacement was made, or ``absent`` (or null) when the file is new;
- ``sha256``: the sha256 of the replacement;
- ``why``: free text citing the fix's source (the upstream issue or commit).

Each is bind-mounted read-only over ``path`` in every rank. Before any rank starts, every node
hashes the image's own files (``base_sha256``): an image that is not the one the overlay was
reviewed for refuses the start. After the start, every rank hashes the files it sees
(``sha256``): a rank that does not run the replacement fails the serve stage.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OVERLAY_VAR = "vllm_serve_overlay"
KEYS = ("path", "source", "base_sha256", "sha256", "why")
# base_sha256 of a file the image does not have (null means the same).
ABSENT = "absent"
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
# Characters a path may hold: a Docker volume SOURCE:TARGET:ro splits at ':', and sha256sum
# escapes names holding a backslash or a newline; image files need none of these.
_PATH = re.compile(r"^/[A-Za-z0-9._+@%=,~/-]+$")
# Container paths Docker itself provides (the kernel's views, the network files of host mode).
RESERVED_TREES = ("/proc", "/sys", "/dev")
RESERVED_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
# Where the serve role mounts the compile caches (roles/vllm_serve/vars/main.yml).
CACHE_MOUNT = "/gx10-cache"
_EXAMPLE = (
    "{path: /usr/lib/python3/dist-packages/vllm/tokenizers/deepseek_v4_encoding.py, "
    "source: '{{ inventory_dir }}/files/overlay/encoding_dsv4.py', base_sha256: <64 hex>, "
    "sha256: <64 hex>, why: <the upstream issue or commit>}"
)
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class OverlayFile:
    """One checked entry: hashes in lower case, base_sha256 None for a new file."""

    index: int
    path: str
    source: str
    base_sha256: str | None
    sha256: str
    why: str

    @property
    def label(self) -> str:
        return f"{OVERLAY_VAR}[{self.index}] (path {self.path})"

    @property
    def host_name(self) -> str:
        """The replacement's file name on the node: its content, then the image file's name."""
        return f"{self.sha256}-{posixpath.basename(self.path)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": self.source,
            "base_sha256": self.base_sha256,
            "sha256": self.sha256,
            "why": self.why,
            "host_name": self.host_name,
        }


def file_sha256(path: str) -> str:
    """The sha256 of a file's content (read in chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_READ_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_overlay(
    value: Any,
    *,
    model_dir: str | None = None,
    hash_source: Callable[[str], str] | None = file_sha256,
) -> tuple[list[OverlayFile], list[str]]:
    """(the checked entries, every problem found); an undefined (None) overlay is empty.

    ``hash_source`` reads a source's sha256 on the controller (raising OSError when it cannot);
    None skips the sources (the shape and the hashes as written are still checked).
    """
    if value is None:
        return [], []
    errors: list[str] = []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        errors.append(
            f"{OVERLAY_VAR} is {_show(value)}: it must be a list of files, each {_EXAMPLE}; "
            f"or [] for no overlay"
        )
        return [], errors
    entries: list[OverlayFile] = []
    first_at: dict[str, int] = {}
    for index, raw in enumerate(value):
        entry = _check_entry(index, raw, model_dir, hash_source, errors)
        if entry is None:
            continue
        if entry.path in first_at:
            errors.append(
                f"{entry.label} is also {OVERLAY_VAR}[{first_at[entry.path]}]: one replacement "
                "per file; keep one of the two entries"
            )
            continue
        first_at[entry.path] = index
        entries.append(entry)
    return entries, errors


def _check_entry(
    index: int,
    raw: Any,
    model_dir: str | None,
    hash_source: Callable[[str], str] | None,
    errors: list[str],
) -> OverlayFile | None:
    label = f"{OVERLAY_VAR}[{index}]"
    if not isinstance(raw, Mapping):
        errors.append(f"{label} is {_show(raw)}: each file is a mapping, e.g. {_EXAMPLE}")
        return None
    path = raw.get("path")
    if isinstance(path, str) and path:
        label += f" (path {path})"
    count = len(errors)
    missing = [key for key in KEYS if key not in raw]
    if missing:
        errors.append(
            f"{label} lacks {', '.join(missing)}: every file needs {', '.join(KEYS)} "
            f"(base_sha256: {ABSENT} for a file the image does not have), e.g. {_EXAMPLE}"
        )
    unknown = sorted(str(key) for key in raw if key not in KEYS)
    if unknown:
        errors.append(
            f"{label} has unknown key(s) {', '.join(unknown)}: the keys are {', '.join(KEYS)}; "
            "fix the spelling or remove them"
        )
    good_path = _check_path(label, path, model_dir, errors) if "path" in raw else None
    sha256 = None
    if "sha256" in raw:
        what = "the replacement's sha256 (sha256sum FILE)"
        sha256 = _hex(label, "sha256", raw["sha256"], errors, what)
    base = _check_base(label, raw.get("base_sha256"), errors) if "base_sha256" in raw else None
    why = raw.get("why")
    if "why" in raw and (not isinstance(why, str) or not why.strip()):
        errors.append(
            f"{label}.why is {_show(why)}: say why the image needs this file and cite the "
            "source (the upstream issue, commit or recipe), so the next image's review knows "
            "what to compare"
        )
    if sha256 is not None and base is not None and base == sha256:
        errors.append(
            f"{label}: sha256 and base_sha256 are both {sha256}: the replacement is the image's "
            "own file, so the entry changes nothing; remove it"
        )
    source = raw.get("source")
    if "source" in raw:
        source = _check_source(label, source, sha256, hash_source, errors)
    if len(errors) > count or good_path is None or sha256 is None or source is None:
        return None
    return OverlayFile(
        index=index,
        path=good_path,
        source=str(source),
        base_sha256=None if base == ABSENT else base,
        sha256=sha256,
        why=str(why).strip(),
    )


def _check_path(label: str, path: Any, model_dir: str | None, errors: list[str]) -> str | None:
    if not isinstance(path, str) or not path.startswith("/"):
        errors.append(
            f"{label}.path is {_show(path)}: write the absolute path of the file inside the "
            "image, e.g. /usr/lib/python3/dist-packages/vllm/tokenizers/deepseek_v4_encoding.py"
        )
        return None
    normal = posixpath.normpath("/" + path.lstrip("/"))
    if normal != path:
        errors.append(
            f"{label}.path is {_show(path)}, not a normalised path (no trailing or doubled '/', "
            f"no '.' or '..'): write {normal}"
        )
        return None
    if not _PATH.match(path):
        errors.append(
            f"{label}.path is {_show(path)}: only letters, digits and . _ + @ % = , ~ - / are "
            "allowed (Docker's SOURCE:TARGET:ro splits at ':', sha256sum escapes other "
            "characters); an image file with such a name cannot be overlaid"
        )
        return None
    trees = [*RESERVED_TREES, CACHE_MOUNT] + ([model_dir] if model_dir else [])
    for tree in trees:
        if path == tree or path.startswith(tree.rstrip("/") + "/"):
            what = {
                CACHE_MOUNT: "the compile caches' mount",
                model_dir: "the checkpoint's mount (gx10_model_dir, verified by its manifest)",
            }.get(tree, "a tree Docker provides")
            errors.append(
                f"{label}.path {path} is under {tree}, {what}, not a file of the image: "
                "overlay files of the image only"
            )
            return None
    if path in RESERVED_FILES:
        errors.append(
            f"{label}.path {path} is a file Docker writes for the container (host network); "
            "it cannot be overlaid: remove the entry"
        )
        return None
    return path


def _hex(label: str, key: str, value: Any, errors: list[str], what: str) -> str | None:
    if isinstance(value, str) and _HEX.match(value.strip()):
        return value.strip().lower()
    errors.append(f"{label}.{key} is {_show(value)}, not a sha256 (64 hex digits): write {what}")
    return None


def _check_base(label: str, value: Any, errors: list[str]) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == ABSENT):
        return ABSENT
    what = (
        "the sha256 of the image's own file at path (what the replacement was reviewed "
        f"against), or {ABSENT} when the image has no such file"
    )
    return _hex(label, "base_sha256", value, errors, what)


def _check_source(
    label: str,
    source: Any,
    sha256: str | None,
    hash_source: Callable[[str], str] | None,
    errors: list[str],
) -> str | None:
    if not isinstance(source, str) or not source.startswith("/"):
        errors.append(
            f"{label}.source is {_show(source)}: write the replacement's absolute path on the "
            "controller, e.g. '{{ inventory_dir }}/files/overlay/<name>' (a file kept with the "
            "inventory)"
        )
        return None
    if hash_source is None:
        return source
    try:
        found = hash_source(source)
    except IsADirectoryError:
        errors.append(f"{label}.source {source} is a directory: name the replacement file")
        return None
    except OSError as exc:
        errors.append(
            f"{label}.source {source} cannot be read on the controller "
            f"({exc.strerror or exc}): put the reviewed replacement there, or correct the path"
        )
        return None
    if sha256 is not None and found != sha256:
        errors.append(
            f"{label}.source {source} has sha256 {found}, but the entry's sha256 is {sha256}: "
            "the file is not the one reviewed; restore the reviewed file, or review this one "
            f"and set sha256: {found}"
        )
        return None
    return source


def volumes(entries: Iterable[OverlayFile], host_dir: str) -> list[str]:
    """Docker volumes ``HOST:PATH:ro`` mounting each replacement from ``host_dir``."""
    base = host_dir.rstrip("/")
    return [f"{base}/{entry.host_name}:{entry.path}:ro" for entry in entries]


# --- reading hashes inside the image or a rank ----------------------------------------------


def sha256sum_argv(paths: Sequence[str]) -> list[str]:
    """The command run inside the image or the rank (coreutils, in every vLLM image)."""
    return ["sha256sum", "--", *paths]


# A found hash: 64 hex digits, None (no such file), or the error sha256sum gave.
Found = dict[str, str | None]
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](/.*)$")


class HashReadError(RuntimeError):
    """sha256sum's output does not account for every path (it did not run, or failed)."""


def parse_sha256sum(stdout: str, stderr: str, paths: Sequence[str]) -> Found:
    """Each path's hash from ``sha256sum -- PATHS`` (exit 0 or 1): hex, None for a missing
    file, ``error: <reason>`` for one it could not read; HashReadError if a path is unaccounted
    for (the command did not run: no sha256sum, a dead container, Docker's error)."""
    found: Found = {}
    for line in stdout.splitlines():
        match = _LINE.match(line.strip())
        if match and match.group(2) in paths:
            found[match.group(2)] = match.group(1)
    for line in stderr.splitlines():
        for path in paths:
            prefix = f"sha256sum: {path}: "
            if path not in found and line.startswith(prefix):
                reason = line[len(prefix) :].strip()
                found[path] = None if reason == "No such file or directory" else f"error: {reason}"
    missing = [path for path in paths if path not in found]
    if missing:
        detail = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        raise HashReadError(f"no hash for {', '.join(missing)}: {detail}")
    return found


def _shown(found: str | None) -> str:
    return "no such file" if found is None else found


def base_errors(
    entries: Iterable[OverlayFile], found: Found, *, image: str, node: str
) -> list[str]:
    """Where the image's own files are not the reviewed bases: one line per file."""
    errors: list[str] = []
    for entry in entries:
        got = found.get(entry.path)
        if got == entry.base_sha256:
            continue
        expected = entry.base_sha256 or f"{ABSENT} (a new file)"
        errors.append(
            f"{node}: the image {image} has {entry.path} with sha256 {_shown(got)}, but "
            f"{entry.label} was reviewed against base_sha256 {expected}. Fix: this image is not "
            "the one the overlay was made for: review the overlay for this image (compare its "
            "file with the replacement, then set base_sha256, and sha256 if the replacement "
            "changes), or drop the entry if the image already carries the fix; or pin the "
            "image the overlay was reviewed for (vllm_image_digest)"
        )
    return errors


def applied_errors(
    entries: Iterable[OverlayFile], found: Found, *, container: str, node: str
) -> list[str]:
    """Where a running rank does not see the replacement: one line per file."""
    errors: list[str] = []
    for entry in entries:
        got = found.get(entry.path)
        if got == entry.sha256:
            continue
        errors.append(
            f"{node}: the rank {container} sees {entry.path} with sha256 {_shown(got)}, not the "
            f"replacement's {entry.sha256} ({entry.label}). Fix: the overlay is not in effect in "
            f"this rank; compare its mounts (docker inspect {container}) with the plan and run "
            "the serve stage again, which restarts the pair"
        )
    return errors


def _plain(value: Any) -> Any:
    """Plain containers and strings (Ansible hands over subclasses), so repr() reads well."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def _show(value: Any, limit: int = 120) -> str:
    text = repr(_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
