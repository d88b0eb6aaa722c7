"""The manifest: strict validation, YAML round trip, git blob sha1, from a directory, from the Hub.

The Hub is never contacted: huggingface_hub's HTTP client is swapped for one whose transport
answers from tests/fixtures/hub/ (see the README there).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fake_hub
import httpx2
import pytest
import tiny_repo
from fake_hub import FakeHub

from gx10.model import (
    HubAccessError,
    HubError,
    HubRepoNotFoundError,
    HubRevisionNotFoundError,
    Manifest,
    ManifestError,
    ManifestFile,
    load_manifest,
    manifest_from_directory,
    manifest_from_hub,
    parse_manifest,
    resolve_token,
    save_manifest,
)
from gx10.model.verify import model_files

SHA = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
SHARD_SHA256 = "07f700e293baeaf3cd4240c3df1a948c4403f16961ea7979e86c8d6a9f8fd466"
CONFIG_SHA1 = "2414184f64bda500ff7d0997c6a5e1a5bf69f84f"


def valid_doc() -> dict[str, Any]:
    return {
        "schema": 1,
        "repo": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "revision": SHA,
        "files": [
            {"path": "config.json", "size": 1686, "kind": "git", "git_sha1": CONFIG_SHA1},
            {
                "path": "model-00001-of-00048.safetensors",
                "size": 3_477_000_000,
                "kind": "lfs",
                "sha256": SHARD_SHA256,
            },
        ],
    }


# --- validation ------------------------------------------------------------------------------


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def _append_file(entry: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["files"].append(entry)


BAD_INPUTS = [
    pytest.param(
        _set(("files", 1, "sha256"), "abc"),
        [
            "files[1] (model-00001-of-00048.safetensors): sha256: 'abc'",
            "64 lowercase hex",
            "got 3 chars",
            "lfs.sha256",
        ],
        id="sha256-too-short",
    ),
    pytest.param(
        _set(("files", 1, "sha256"), "g" * 64),
        ["sha256: 'gggg", "is not a sha256"],
        id="sha256-not-hex",
    ),
    pytest.param(
        _set(("files", 1, "sha256"), SHARD_SHA256.upper()),
        ["got uppercase letters"],
        id="sha256-uppercase",
    ),
    pytest.param(
        _set(("files", 0, "git_sha1"), CONFIG_SHA1 + "00"),
        [
            "files[0] (config.json): git_sha1:",
            "not a git blob sha1 (40 lowercase hex",
            "got 42 chars",
            "blobId",
        ],
        id="git-sha1-too-long",
    ),
    pytest.param(
        _set(("files", 1, "sha256"), 12345),
        ["sha256: 12345 is a int, not a string; quote it"],
        id="digest-not-a-string",
    ),
    pytest.param(
        _set(("files", 0, "size"), -1),
        ["files[0] (config.json): size: -1 is negative"],
        id="size-negative",
    ),
    pytest.param(
        _set(("files", 0, "size"), "1686"),
        ["size: '1686' is not a whole number of bytes"],
        id="size-string",
    ),
    pytest.param(
        _set(("files", 0, "size"), 16.5),
        ["size: 16.5 is not a whole number"],
        id="size-float",
    ),
    pytest.param(
        _set(("files", 0, "size"), True),
        ["size: True is not a whole number"],
        id="size-bool",
    ),
    pytest.param(
        _append_file({"path": "config.json", "size": 1, "kind": "git", "git_sha1": CONFIG_SHA1}),
        ["files[2]: path 'config.json' is listed twice (also files[0])"],
        id="duplicate-path",
    ),
    pytest.param(
        _set(("files", 0, "path"), "/etc/passwd"),
        ["path: '/etc/passwd' is absolute"],
        id="absolute-path",
    ),
    pytest.param(
        _set(("files", 0, "path"), "../../etc/cron.d/x"),
        ["path: '../../etc/cron.d/x' has a '..' component"],
        id="dotdot-leading",
    ),
    pytest.param(
        _set(("files", 0, "path"), "inference/../../x"),
        ["has a '..' component, which could escape the model directory"],
        id="dotdot-inside",
    ),
    pytest.param(
        _set(("files", 0, "path"), "..\\..\\x"),
        ["has a backslash"],
        id="backslash",
    ),
    pytest.param(
        _set(("files", 0, "path"), "a//b"),
        ["path: 'a//b' has an empty or '.' component"],
        id="empty-component",
    ),
    pytest.param(
        _set(("files", 0, "path"), ""),
        ["path: '' is not a non-empty string"],
        id="empty-path",
    ),
    pytest.param(
        _set(("files", 0, "path"), ".gx10-verify-cache.json"),
        ["never treats as a model file"],
        id="reserved-path",
    ),
    pytest.param(
        _set(("files", 0, "path"), "model-00001.safetensors.partial"),
        ["ends in .partial, the name gx10 gives a file while it is fetched"],
        id="partial-name",
    ),
    pytest.param(
        _append_file({"path": "config.json/x", "size": 1, "kind": "git", "git_sha1": CONFIG_SHA1}),
        ["path 'config.json/x' is inside 'config.json', which is listed as a file"],
        id="file-and-directory",
    ),
    pytest.param(
        _set(("revision",), "9e165c30"),
        ["revision: '9e165c30' is not a full commit sha (40 lowercase hex", "pin the exact commit"],
        id="revision-short",
    ),
    pytest.param(
        _set(("revision",), SHA.upper()),
        ["revision: '9E165C30"],
        id="revision-uppercase",
    ),
    pytest.param(
        _set(("revision",), "main"),
        ["revision: 'main' is not a full commit sha"],
        id="revision-branch",
    ),
    pytest.param(_set(("repo",), ""), ["repo: '' is not a repository id"], id="repo-empty"),
    pytest.param(_set(("repo",), "a/b/c"), ["repo: 'a/b/c'"], id="repo-three-parts"),
    pytest.param(
        _set(("files", 0, "kind"), "xet"),
        ["kind: 'xet' is not 'lfs' (sha256) or 'git' (git blob sha1)"],
        id="kind-unknown",
    ),
    pytest.param(
        _set(("files", 0, "kind"), "lfs"),
        ["sha256 is missing: kind lfs needs the sha256", "git_sha1 does not go with kind 'lfs'"],
        id="kind-and-digest-disagree",
    ),
    pytest.param(
        _set(("files", 0, "sha1"), CONFIG_SHA1),
        ["unknown key 'sha1'"],
        id="unknown-file-key",
    ),
    pytest.param(_set(("total",), 1), ["unknown key(s) total"], id="unknown-top-key"),
    pytest.param(_set(("schema",), 2), ["schema: 2 is not supported"], id="schema"),
    pytest.param(_set(("files",), {}), ["files: {} is not a list"], id="files-not-a-list"),
    pytest.param(_set(("files",), ["x"]), ["files[0]: 'x' is not a mapping"], id="file-not-map"),
]


@pytest.mark.parametrize(("mutate", "fragments"), BAD_INPUTS)
def test_bad_manifest_is_refused_naming_field_value_and_fix(
    mutate: Callable[[dict[str, Any]], None], fragments: list[str]
) -> None:
    doc = valid_doc()
    mutate(doc)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(doc, source="inventories/lab/files/manifest.yml")
    message = str(caught.value)
    assert message.startswith("inventories/lab/files/manifest.yml: ")
    for fragment in fragments:
        assert fragment in message


def test_the_valid_document_parses() -> None:
    manifest = parse_manifest(valid_doc())
    assert manifest.revision == SHA
    assert [f.path for f in manifest.files] == ["config.json", "model-00001-of-00048.safetensors"]
    assert manifest.files[1].algo == "sha256"
    assert manifest.files[0].algo == "git-sha1"
    assert manifest.total_size == 3_477_001_686


def test_every_problem_is_reported_at_once() -> None:
    doc = valid_doc()
    doc["revision"] = "main"
    doc["files"][0]["size"] = -5
    doc["files"][1]["path"] = "../x"
    with pytest.raises(ManifestError, match="3 problems") as caught:
        parse_manifest(doc)
    assert "revision" in str(caught.value)
    assert "size: -5" in str(caught.value)
    assert "'../x'" in str(caught.value)


def test_dataclasses_validate_too() -> None:
    with pytest.raises(ManifestError, match=r"'\.\.' component"):
        ManifestFile("../x", 1, "git", CONFIG_SHA1)
    with pytest.raises(ManifestError, match="listed twice"):
        Manifest("o/n", SHA, (ManifestFile("a", 1, "git", CONFIG_SHA1),) * 2)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("schema: 1\nrepo: o/n\nrepo: o/m\n", "duplicate key 'repo'"),
        ("[1, 2]\n", "expected a mapping"),
        ("schema: [1\n", "is not valid YAML"),
        # An unquoted all-digit sha is read as a number by YAML: say so instead of "not hex".
        (
            f"schema: 1\nrepo: o/n\nrevision: {SHA}\nfiles:\n"
            "- {path: a, size: 1, kind: git, git_sha1: 1234567890123456789012345678901234567890}\n",
            "is a int, not a string; quote it",
        ),
    ],
)
def test_bad_yaml(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=r"manifest\.yml") as caught:
        load_manifest(path)
    assert fragment in str(caught.value)


def test_missing_manifest_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"cannot read manifest .*nope.yml"):
        load_manifest(tmp_path / "nope.yml")


def test_yaml_round_trip_keeps_digit_only_hashes_as_strings(tmp_path: Path) -> None:
    digits = "1234567890" * 4
    manifest = Manifest(
        "o/n",
        SHA,
        (ManifestFile("b.json", 3, "git", digits), ManifestFile("a.bin", 0, "lfs", "0" * 64)),
    )
    path = tmp_path / "inv" / "files" / "manifest.yml"
    save_manifest(manifest, path, source="a test")
    assert load_manifest(path) == manifest
    text = path.read_text()
    assert text.startswith("# gx10 model manifest: o/n at " + SHA)
    assert "kind: git" in text
    assert [f.path for f in manifest.files] == ["a.bin", "b.json"]  # sorted
    assert path.stat().st_mode & 0o777 == 0o644  # readable like any inventory file
    assert [p.name for p in path.parent.iterdir()] == ["manifest.yml"]  # no temp file left


# --- git blob sha1 ---------------------------------------------------------------------------


GIT_SAMPLES = {
    "empty": b"",
    "text.json": b'{"a": 1}\n',
    "binary.bin": bytes(range(256)) * 3 + b"\0\0\0",
    "one-mib.bin": tiny_repo._noise("git", 1 << 20),
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")
def test_git_blob_sha1_equals_git_hash_object(tmp_path: Path) -> None:
    for name, data in GIT_SAMPLES.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name in GIT_SAMPLES]
    git = subprocess.run(
        ["git", "hash-object", "--no-filters", *paths],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert len(git) == len(GIT_SAMPLES)
    for (name, data), expected in zip(GIT_SAMPLES.items(), git, strict=True):
        assert model_files.git_blob_sha1(data) == expected, name
        # Small read size: the header must hold the whole size, not the first chunk's.
        assert (
            model_files.hash_file(tmp_path / name, "git-sha1", read_size=4096).hexdigest == expected
        )
    manifest = manifest_from_directory(
        tmp_path, repo="o/n", revision=SHA, lfs_threshold=1 << 30, lfs_patterns=()
    )
    assert [f.digest for f in manifest.files] == [
        expected for _, expected in sorted(zip(GIT_SAMPLES, git, strict=True))
    ]


# --- from a directory ------------------------------------------------------------------------


def test_from_directory_matches_the_hub_listing(tmp_path: Path, hub: FakeHub) -> None:
    tiny_repo.write(tmp_path)
    local = manifest_from_directory(tmp_path, repo=tiny_repo.REPO, revision=tiny_repo.REVISION)
    remote = manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)
    # Same kinds (the .gitattributes patterns), same sizes, same hashes, for every file.
    assert local == remote
    assert {f.path for f in local.files if f.kind == "lfs"} == tiny_repo.LFS


def test_from_directory_lfs_by_threshold_and_default_patterns(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"x" * 2048)
    (tmp_path / "small.txt").write_bytes(b"x" * 10)
    (tmp_path / "w.safetensors").write_bytes(b"x" * 10)
    manifest = manifest_from_directory(tmp_path, repo="o/n", revision=SHA, lfs_threshold=2048)
    kinds = {f.path: f.kind for f in manifest.files}
    assert kinds == {"big.txt": "lfs", "small.txt": "git", "w.safetensors": "lfs"}


def test_from_directory_skips_tool_state(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    for junk in (".git/HEAD", ".cache/huggingface/download/x.metadata", ".gx10-verify-cache.json"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("junk")
    manifest = manifest_from_directory(tmp_path, repo="o/n", revision=SHA)
    assert [f.path for f in manifest.files] == ["config.json"]


def test_from_directory_refuses_a_branch_before_hashing(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    (tmp_path / "a").write_text("a")
    with pytest.raises(ManifestError, match="revision: 'main'"):
        manifest_from_directory(
            tmp_path, repo="o/n", revision="main", progress=lambda d, t: seen.append((d, t))
        )
    assert seen == []


def test_from_directory_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="is not a directory"):
        manifest_from_directory(tmp_path / "nope", repo="o/n", revision=SHA)


# --- from the Hub ----------------------------------------------------------------------------


MODEL_PATH = fake_hub.MODEL_PATH


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with fake_hub.serving() as fake:
        yield fake


def test_hub_manifest_from_recorded_answer(hub: FakeHub) -> None:
    manifest = manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)
    assert manifest.repo == tiny_repo.REPO
    assert manifest.revision == tiny_repo.REVISION
    by_path = manifest.by_path()
    assert len(by_path) == len(tiny_repo.FILES)
    shard = by_path["model-00001-of-00002.safetensors"]
    sibling = next(s for s in hub.model_info["siblings"] if s["rfilename"] == shard.path)
    # LFS: the content sha256, not blobId (which is the pointer's sha1).
    assert (shard.kind, shard.digest, shard.size) == ("lfs", sibling["lfs"]["sha256"], 65_536)
    config = by_path["config.json"]
    assert config.kind == "git"
    assert config.digest == model_files.git_blob_sha1(tiny_repo.FILES["config.json"])
    (request,) = hub.requests
    assert request.method == "GET"
    assert request.url.path == MODEL_PATH + tiny_repo.REVISION
    assert request.url.params["blobs"] == "true"


def test_hub_branch_is_pinned_to_its_commit(hub: FakeHub) -> None:
    assert manifest_from_hub(tiny_repo.REPO, "main").revision == tiny_repo.REVISION


def test_hub_unknown_revision_is_a_clear_error(hub: FakeHub) -> None:
    with pytest.raises(HubRevisionNotFoundError) as caught:
        manifest_from_hub(tiny_repo.REPO, SHA)
    message = str(caught.value)
    assert f"revision '{SHA}' not found in {tiny_repo.REPO} on https://huggingface.co" in message
    assert f"HTTP 404: Invalid rev id: {SHA}" in message
    assert "pass a commit sha, branch or tag that exists" in message


def test_hub_unknown_repo_is_a_clear_error(hub: FakeHub) -> None:
    with pytest.raises(HubRepoNotFoundError) as caught:
        manifest_from_hub("gx10-fixtures/no-such-model", SHA)
    message = str(caught.value)
    assert "model repository gx10-fixtures/no-such-model on https://huggingface.co" in message
    assert "HTTP 401: Repository not found" in message
    assert "HF_TOKEN or --token-file" in message


def test_hub_gated_repo(hub: FakeHub) -> None:
    hub.gated = True
    with pytest.raises(HubAccessError, match=r"is gated .*HTTP 403"):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def test_hub_unreachable(hub: FakeHub) -> None:
    hub.fail_with = httpx2.ConnectError("Name or service not known")
    with pytest.raises(HubError, match=r"cannot reach https://huggingface.co: ConnectError"):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def test_hub_token_is_sent_but_never_shown(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hf_gx10TestTokenNotReal0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    token = resolve_token(token_file)
    assert token == secret
    with pytest.raises(HubRevisionNotFoundError) as caught:
        manifest_from_hub(tiny_repo.REPO, SHA, token=token)
    assert hub.requests[-1].headers["authorization"] == f"Bearer {secret}"
    assert secret not in str(caught.value)
    assert secret not in repr(caught.value)
    assert caught.value.__cause__ is None  # huggingface_hub's error (with headers) is dropped
    assert caught.value.__suppress_context__

    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert resolve_token(None) == "hf_from_env"
    token_file.write_text("\n")
    with pytest.raises(HubError, match="is empty"):
        resolve_token(token_file)


def test_hub_full_sha_must_come_back_unchanged(hub: FakeHub) -> None:
    hub.model_info["sha"] = SHA  # a Hub (or mirror) answering for another commit
    with pytest.raises(HubError, match=f"answered for {SHA}"):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def _edit_sibling(hub: FakeHub, name: str, **changes: Any) -> None:
    siblings = copy.deepcopy(hub.model_info["siblings"])
    for sibling in siblings:
        if sibling["rfilename"] == name:
            sibling.update(changes)
    hub.model_info["siblings"] = siblings


def test_hub_listing_with_path_traversal_is_refused(hub: FakeHub) -> None:
    _edit_sibling(hub, "config.json", rfilename="../../.bashrc")
    with pytest.raises(
        ManifestError, match=r"the Hub's listing .* is unusable: .*'\.\.' component"
    ):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def test_hub_listing_with_two_sizes_is_refused(hub: FakeHub) -> None:
    name = "model-00002-of-00002.safetensors"
    sibling = next(s for s in hub.model_info["siblings"] if s["rfilename"] == name)
    _edit_sibling(hub, name, lfs={**sibling["lfs"], "size": 1})
    with pytest.raises(HubError, match=f"two sizes for {name}"):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def test_hub_listing_without_file_metadata_is_refused(hub: FakeHub) -> None:
    hub.model_info["siblings"] = [{"rfilename": "config.json"}]  # what list_models returns
    with pytest.raises(HubError, match=r"no size for config\.json"):
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)


def test_recorded_answer_is_the_one_tiny_repo_generates() -> None:
    """The fixture's hashes are real hashes of tiny_repo.FILES (regenerate if this fails)."""
    recorded = json.loads(tiny_repo.MODEL_INFO.read_text())
    assert recorded == tiny_repo.hub_response()
