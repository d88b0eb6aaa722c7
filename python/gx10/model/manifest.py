"""The manifest: one repository revision, every file's path, size and expected hash.

A manifest lives in the inventory (for example `inventories/<name>/files/manifest.yml`, named by
`gx10_model_manifest`) so a run is reproducible offline. It is built once, from the Hub
(`manifest_from_hub`) or from a directory you trust (`manifest_from_directory`), and checked
strictly on load (`load_manifest`): a malformed hash, a bad size or a path that could escape the
model directory stops the run with the field, the value and the fix.

Hashes are the ones the Hub reports: `sha256` of the content for LFS files (`lfs.sha256`), the git
blob sha1 for the rest (`blobId`, what `git hash-object` prints).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from ansible_collections.gx10.cluster.plugins.module_utils.model_files import (
    atomic_write_text,
    is_ignored,
    iter_tree,
    path_problems,
)
from gx10.model.errors import HubError, ManifestError
from gx10.model.hashing import Algo, HashJob, ProgressCallback, default_workers, hash_many

__all__ = ["atomic_write_text", "is_ignored", "iter_tree"]

SCHEMA = 1
Kind = Literal["lfs", "git"]

_DIGEST_KEY: dict[Kind, str] = {"lfs": "sha256", "git": "git_sha1"}
_DIGEST_LEN: dict[Kind, int] = {"lfs": 64, "git": 40}
_ALGO: dict[Kind, Algo] = {"lfs": "sha256", "git": "git-sha1"}
_HEX = re.compile(r"[0-9a-f]*")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_FIX_REBUILD = "rebuild the manifest with `gx10 model manifest`"
_MAX_LISTED = 20

# Files the Hub stores in LFS by default (its stock .gitattributes); a directory's own
# .gitattributes, when present, replaces this list.
DEFAULT_LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gguf", "*.gz", "*.h5",
    "*.joblib", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot",
    "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors",
    "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
    "*.zst", "*tfevents*",
)  # fmt: skip
# The Hub refuses non-LFS files above 10 MB, so anything that large was LFS there.
DEFAULT_LFS_THRESHOLD = 10 * 1000 * 1000


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
            raise ManifestError(_join(f"file {self.path!r}", problems))

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
        problems = [*_repo_problems(self.repo), *_revision_problems(self.revision)]
        problems += _set_problems([(f"files[{i}]", f.path) for i, f in enumerate(self.files)])
        if problems:
            raise ManifestError(_join("manifest", problems))
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


# --- load and save ---------------------------------------------------------------------------


def load_manifest(path: Path) -> Manifest:
    """Read and validate a manifest file; every problem is listed in one ManifestError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
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
    problems += _repo_problems(repo)
    problems += _revision_problems(revision)
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
        raise ManifestError(_join(source, problems))
    return Manifest(
        repo=str(repo),
        revision=str(revision),
        files=tuple(ManifestFile(p, s, k, d) for _, p, s, k, d in entries),
    )


def save_manifest(manifest: Manifest, path: Path, *, source: str) -> None:
    """Write the manifest as YAML, atomically (a reader never sees half a file)."""
    header = (
        f"# gx10 model manifest: {manifest.repo} at {manifest.revision}\n"
        f"# {len(manifest.files)} files, {manifest.total_size} bytes "
        f"({manifest.total_size / 1e9:.1f} GB); built from {source}.\n"
        "# Written by `gx10 model manifest`; edit by rebuilding, not by hand.\n"
    )
    body = yaml.dump(
        manifest.to_dict(), Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False
    )
    # A YAML document yamllint --strict accepts: an explicit start, indented sequences.
    atomic_write_text(path, header + "---\n" + body)


class _IndentedDumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


# --- from a trusted directory ----------------------------------------------------------------


def manifest_from_directory(
    directory: Path,
    *,
    repo: str,
    revision: str,
    lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
    lfs_patterns: Sequence[str] | None = None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
) -> Manifest:
    """Hash every file under `directory` (a copy you trust) into a manifest.

    LFS files (sha256) are those matching the directory's `.gitattributes` `filter=lfs` patterns
    (or `DEFAULT_LFS_PATTERNS` without one, or `lfs_patterns` when given) or at least
    `lfs_threshold` bytes; the rest get a git blob sha1. `.git/`, `.cache/huggingface/` (what
    `hf download --local-dir` leaves) and gx10's own cache files are skipped.
    """
    # Check the cheap inputs before hashing gigabytes.
    problems = [*_repo_problems(repo), *_revision_problems(revision)]
    if problems:
        raise ManifestError(_join("manifest", problems))
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory; give the checkpoint directory")
    patterns = tuple(lfs_patterns) if lfs_patterns is not None else _lfs_patterns(directory)
    relpaths = sorted(iter_tree(directory))
    hash_jobs: list[HashJob] = []
    for rel in relpaths:
        try:
            size = (directory / rel).stat().st_size
        except OSError as exc:
            raise ManifestError(f"cannot stat {directory / rel}: {exc.strerror or exc}") from exc
        lfs = size >= lfs_threshold or _matches(rel, patterns)
        hash_jobs.append(HashJob(rel, directory / rel, "sha256" if lfs else "git-sha1", size))
    outcomes = hash_many(hash_jobs, workers=jobs or default_workers(), progress=progress)
    files: list[ManifestFile] = []
    for outcome in outcomes:
        digest = outcome.digest
        if digest is None or digest.changed:
            why = outcome.error or "it changed while it was being hashed"
            raise ManifestError(f"cannot hash {outcome.job.path}: {why}")
        kind: Kind = "lfs" if digest.algo == "sha256" else "git"
        files.append(ManifestFile(outcome.job.key, digest.stamp.size, kind, digest.hexdigest))
    return Manifest(repo=repo, revision=revision, files=tuple(files))


def _lfs_patterns(directory: Path) -> tuple[str, ...]:
    attributes = directory / ".gitattributes"
    try:
        lines = attributes.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return DEFAULT_LFS_PATTERNS
    patterns = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "filter=lfs" in fields[1:]:
            patterns.append(fields[0])
    return tuple(patterns)


def _matches(relpath: str, patterns: Iterable[str]) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    for pattern in patterns:
        # gitattributes: a pattern without a slash matches the name at any depth.
        target = relpath if "/" in pattern else name
        if fnmatch.fnmatchcase(target, pattern.lstrip("/")):
            return True
    return False


# --- from the Hub ----------------------------------------------------------------------------


def resolve_token(token_file: Path | None = None) -> str | None:
    """The Hub token: from `token_file` if given, else `HF_TOKEN`, else None (huggingface_hub
    then uses a token saved by `hf auth login`, if any). Never printed, never stored."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise HubError(f"cannot read token file {token_file}: {exc.strerror}") from exc
        if not token:
            raise HubError(f"token file {token_file} is empty; put the Hub token in it")
        return token
    return os.environ.get("HF_TOKEN", "").strip() or None


def manifest_from_hub(
    repo: str,
    revision: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
) -> Manifest:
    """Ask the Hub for every file of `repo` at `revision` with its size and hash.

    One request: `GET /api/models/{repo}/revision/{revision}?blobs=true`. `revision` may be a
    branch or tag; the manifest pins the commit sha the Hub resolved it to. Raises a `HubError`
    subclass for an unknown repository or revision, a gated repository or an unreachable Hub.
    """
    # huggingface_hub costs ~0.3 s to import; only this path needs it, so not at the top.
    from gx10.model import hub  # noqa: PLC0415

    return hub.fetch_manifest(repo, revision, token=token, endpoint=endpoint)


# --- validation ------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
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


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


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
    yield from _path_problems(path)
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


def _path_problems(path: object) -> Iterator[str]:
    yield from path_problems(path)


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


def _repo_problems(repo: object) -> list[str]:
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        return [f"repo: {_show(repo)} is not a repository id like owner/name"]
    return []


def _revision_problems(revision: object) -> list[str]:
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


def _join(source: str, problems: Sequence[str]) -> str:
    shown = list(problems[:_MAX_LISTED])
    if len(problems) > _MAX_LISTED:
        shown.append(f"... and {len(problems) - _MAX_LISTED} more")
    if len(shown) == 1:
        return f"{source}: {shown[0]}"
    return f"{source}: {len(problems)} problems:\n  " + "\n  ".join(shown)
