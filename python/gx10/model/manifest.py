"""Build and save model manifests; the manifest itself is the gx10.cluster collection's.

A manifest is built once, from the Hub (`manifest_from_hub`) or from a directory you trust
(`manifest_from_directory`), and saved in the inventory (`save_manifest`). The model (`Manifest`,
`ManifestFile`) and its strict loader (`load_manifest`, `parse_manifest`) are the collection's
`model_manifest` module_utils, loaded through `gx10._collection`: the model_plan action checks a
manifest with the very code `gx10 model verify` runs, and these names are those objects.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gx10._collection import load

if TYPE_CHECKING:
    from ansible_collections.gx10.cluster.plugins.module_utils import (
        model_errors,
        model_files,
        model_manifest,
    )
else:
    model_errors = load("model_errors")
    model_files = load("model_files")
    model_manifest = load("model_manifest")

SCHEMA = model_manifest.SCHEMA
Kind = model_manifest.Kind
Manifest = model_manifest.Manifest
ManifestFile = model_manifest.ManifestFile
load_manifest = model_manifest.load_manifest
parse_manifest = model_manifest.parse_manifest
is_full_sha = model_manifest.is_full_sha
ManifestError = model_errors.ManifestError
HubError = model_errors.HubError

__all__ = [
    "DEFAULT_LFS_PATTERNS",
    "DEFAULT_LFS_THRESHOLD",
    "SCHEMA",
    "Kind",
    "Manifest",
    "ManifestFile",
    "is_full_sha",
    "load_manifest",
    "manifest_from_directory",
    "manifest_from_hub",
    "parse_manifest",
    "resolve_token",
    "save_manifest",
]

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


# --- save ------------------------------------------------------------------------------------


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
    model_files.atomic_write_text(path, header + "---\n" + body)


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
    progress: model_files.ProgressCallback | None = None,
) -> Manifest:
    """Hash every file under `directory` (a copy you trust) into a manifest.

    LFS files (sha256) are those matching the directory's `.gitattributes` `filter=lfs` patterns
    (or `DEFAULT_LFS_PATTERNS` without one, or `lfs_patterns` when given) or at least
    `lfs_threshold` bytes; the rest get a git blob sha1. `.git/`, `.cache/huggingface/` (what
    `hf download --local-dir` leaves) and gx10's own cache files are skipped.
    """
    # Check the cheap inputs before hashing gigabytes.
    problems = [*model_manifest.repo_problems(repo), *model_manifest.revision_problems(revision)]
    if problems:
        raise ManifestError(model_manifest.join_problems("manifest", problems))
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory; give the checkpoint directory")
    patterns = tuple(lfs_patterns) if lfs_patterns is not None else _lfs_patterns(directory)
    relpaths = sorted(model_files.iter_tree(directory))
    hash_jobs: list[model_files.HashJob] = []
    for rel in relpaths:
        try:
            size = (directory / rel).stat().st_size
        except OSError as exc:
            raise ManifestError(f"cannot stat {directory / rel}: {exc.strerror or exc}") from exc
        lfs = size >= lfs_threshold or _matches(rel, patterns)
        hash_jobs.append(
            model_files.HashJob(rel, directory / rel, "sha256" if lfs else "git-sha1", size)
        )
    outcomes = model_files.hash_many(
        hash_jobs, workers=jobs or model_files.default_workers(), progress=progress
    )
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
