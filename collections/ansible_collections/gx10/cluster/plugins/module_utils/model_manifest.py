# SPDX-License-Identifier: Apache-2.0
"""The model manifest: one repository revision, every file's path, size and expected hash.

A manifest lives in the inventory (for example ``inventories/<name>/files/manifest.yml``, named by
``gx10_model_manifest``) so a run is reproducible offline, and is checked strictly on load
(``load_manifest``): a malformed hash, a bad size or a path that could escape the model directory
stops the run with the field, the value and the fix, every problem in one ``ManifestError``.

Hashes are the ones the Hub reports: ``sha256`` of the content for LFS files (``lfs.sha256``), the
git blob sha1 for the rest (``blobId``, what ``git hash-object`` prints).

Standard library only at import. ``load_manifest`` reads YAML with PyYAML, imported when called:
it runs on the controller (the model_plan action, ``gx10 model ...``), where ansible-core itself
needs PyYAML; ``parse_manifest`` takes a document already parsed. The gx10 package builds
manifests (from a directory or the Hub) and saves them; the model is this module's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ansible_collections.gx10.cluster.plugins.module_utils.model_errors import ManifestError
from ansible_collections.gx10.cluster.plugins.module_utils.model_files import Algo, path_problems

SCHEMA = 1
Kind = Literal["lfs", "git"]

_DIGEST_KEY: dict[Kind, str] = {"lfs": "sha256", "git": "git_sha1"}
_DIGEST_LEN: dict[Kind, int] = {"lfs": 64, "git": 40}
_ALGO: dict[Kind, Algo] = {"lfs": "sha256", "git": "git-sha1"}
_HEX = re.compile(r"[0-9a-f]*")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_FIX_REBUILD = "rebuild the manifest with `gx10 model manifest`"
_MAX_LISTED = 20


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """One file: `digest` is the sha256 for kind "lfs", the git blob sha1 for kind "git"."""

    path: str
    size: int
    kind: Kind
    digest: str

    def __post_init__(self) -> None:
        problems = list(_file_problems(self.path, self.size, self.kind, self.digest))
        if problems:
            raise ManifestError(join_problems(f"file {self.path!r}", problems))

    @property
    def algo(self) -> Algo:
        return _ALGO[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "kind": self.kind,
            _DIGEST_KEY[self.kind]: self.digest,
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """A pinned repository revision and its files, sorted by path."""

    repo: str
    revision: str
    files: tuple[ManifestFile, ...]

    def __post_init__(self) -> None:
        problems = [*repo_problems(self.repo), *revision_problems(self.revision)]
        problems += _set_problems([(f"files[{i}]", f.path) for i, f in enumerate(self.files)])
        if problems:
            raise ManifestError(join_problems("manifest", problems))
        object.__setattr__(self, "files", tuple(sorted(self.files, key=lambda f: f.path)))

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def by_path(self) -> dict[str, ManifestFile]:
        return {f.path: f for f in self.files}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "repo": self.repo,
            "revision": self.revision,
            "files": [f.to_dict() for f in self.files],
        }


# --- load -----------------------------------------------------------------------------------


def load_manifest(path: Path) -> Manifest:
    """Read and validate a manifest file; every problem is listed in one ManifestError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from exc
    import yaml  # noqa: PLC0415  (see the module docstring)

    try:
        data = _strict_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from exc
    return parse_manifest(data, source=str(path))


def parse_manifest(data: object, *, source: str = "manifest") -> Manifest:
    """Validate a manifest document (the YAML, already parsed) and build the Manifest."""
    if not isinstance(data, Mapping):
        raise ManifestError(
            f"{source}: expected a mapping with schema, repo, revision and files, "
            f"got {type(data).__name__}; {_FIX_REBUILD}"
        )
    problems: list[str] = []
    unknown = sorted(str(k) for k in data if k not in ("schema", "repo", "revision", "files"))
    if unknown:
        problems.append(
            f"unknown key(s) {', '.join(unknown)}; allowed: schema, repo, revision, files"
        )
    schema = data.get("schema")
    if schema != SCHEMA:
        problems.append(f"schema: {_show(schema)} is not supported; gx10 reads schema {SCHEMA}")
    repo, revision, files = data.get("repo"), data.get("revision"), data.get("files")
    problems += repo_problems(repo)
    problems += revision_problems(revision)
    entries: list[tuple[str, Any, Any, Any, Any]] = []
    if not isinstance(files, list):
        problems.append(f"files: {_show(files)} is not a list of files; {_FIX_REBUILD}")
    else:
        for index, item in enumerate(files):
            where = f"files[{index}]"
            if not isinstance(item, Mapping):
                problems.append(f"{where}: {_show(item)} is not a mapping with path, size, kind")
                continue
            problems += [f"{where}: {p}" for p in _item_shape_problems(item)]
            kind = item.get("kind")
            digest = item.get(_DIGEST_KEY[kind]) if kind in _DIGEST_KEY else None
            path = item.get("path")
            label = f"{where} ({path})" if isinstance(path, str) else where
            item_problems = list(_file_problems(path, item.get("size"), kind, digest))
            problems += [f"{label}: {p}" for p in item_problems]
            entries.append((where, path, item.get("size"), kind, digest))
        problems += _set_problems([(w, p) for w, p, *_ in entries if isinstance(p, str)])
    if problems:
        raise ManifestError(join_problems(source, problems))
    return Manifest(
        repo=str(repo),
        revision=str(revision),
        files=tuple(ManifestFile(p, s, k, d) for _, p, s, k, d in entries),
    )


# --- validation ------------------------------------------------------------------------------


def _strict_load(text: str) -> Any:
    """PyYAML's safe load, refusing duplicate keys (PyYAML silently keeps the last one)."""
    import yaml  # noqa: PLC0415  (the controller has it; importing this module does not need it)

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys."""

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str | int | float | bool | None):
                continue  # complex keys: construct_mapping reports them
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return loader.construct_mapping(node)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return yaml.load(text, Loader=StrictLoader)


def _item_shape_problems(item: Mapping[Any, Any]) -> Iterator[str]:
    kind = item.get("kind")
    allowed = {"path", "size", "kind"}
    if kind in _DIGEST_KEY:
        allowed.add(_DIGEST_KEY[kind])
    for key in sorted(str(k) for k in item if k not in allowed):
        if key in _DIGEST_KEY.values():
            yield f"{key} does not go with kind {kind!r} (lfs has sha256, git has git_sha1)"
        else:
            yield f"unknown key {key!r}; a file has path, size, kind and sha256 or git_sha1"


def _file_problems(path: object, size: object, kind: object, digest: object) -> Iterator[str]:
    yield from path_problems(path)
    if isinstance(size, bool) or not isinstance(size, int):
        yield f"size: {_show(size)} is not a whole number of bytes; {_FIX_REBUILD}"
    elif size < 0:
        yield f"size: {size} is negative; {_FIX_REBUILD}"
    if kind not in _DIGEST_KEY:
        yield f"kind: {_show(kind)} is not 'lfs' (sha256) or 'git' (git blob sha1)"
        return
    key, length = _DIGEST_KEY[kind], _DIGEST_LEN[kind]
    what = "sha256" if kind == "lfs" else "git blob sha1"
    source = "lfs.sha256" if kind == "lfs" else "blobId"
    if digest is None:
        yield f"{key} is missing: kind {kind} needs the {what} (the Hub's {source})"
    elif not isinstance(digest, str):
        yield (
            f"{key}: {_show(digest)} is a {type(digest).__name__}, not a string; "
            "quote it in the YAML"
        )
    elif not _is_hex(digest, length):
        got = "uppercase letters" if _is_hex(digest.lower(), length) else f"{len(digest)} chars"
        yield (
            f"{key}: {_show(digest)} is not a {what} ({length} lowercase hex characters, got "
            f"{got}); copy the Hub's {source} or {_FIX_REBUILD}"
        )


def _set_problems(paths: Sequence[tuple[str, str]]) -> list[str]:
    """Duplicates, and a path that is both a file and a directory ("a" and "a/b")."""
    problems: list[str] = []
    first: dict[str, str] = {}
    for where, path in paths:
        if path in first:
            problems.append(f"{where}: path {path!r} is listed twice (also {first[path]})")
        else:
            first[path] = where
    for where, path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in first:
                problems.append(
                    f"{where}: path {path!r} is inside {parent!r}, which is listed as a file"
                )
                break
    return problems


def repo_problems(repo: object) -> list[str]:
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        return [f"repo: {_show(repo)} is not a repository id like owner/name"]
    return []


def revision_problems(revision: object) -> list[str]:
    if isinstance(revision, str) and _is_hex(revision, 40):
        return []
    return [
        f"revision: {_show(revision)} is not a full commit sha (40 lowercase hex characters); "
        "pin the exact commit (`gx10 model manifest --from-hub` resolves a branch or tag to it)"
    ]


def is_full_sha(value: str) -> bool:
    """A full git commit sha: 40 lowercase hex characters."""
    return _is_hex(value, 40)


def _is_hex(value: str, length: int) -> bool:
    return len(value) == length and _HEX.fullmatch(value) is not None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def join_problems(source: str, problems: Sequence[str]) -> str:
    shown = list(problems[:_MAX_LISTED])
    if len(problems) > _MAX_LISTED:
        shown.append(f"... and {len(problems) - _MAX_LISTED} more")
    if len(shown) == 1:
        return f"{source}: {shown[0]}"
    return f"{source}: {len(problems)} problems:\n  " + "\n  ".join(shown)
