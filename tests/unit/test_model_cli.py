"""`gx10 model manifest` and `gx10 model verify`: exit codes, output, --json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import fake_hub
import pytest
import tiny_repo
from cli_helpers import invoke

from gx10.model import load_manifest

SHARD = "model-00002-of-00002.safetensors"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_hub.FakeHub]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with fake_hub.serving() as fake:
        yield fake


@pytest.fixture
def model(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    tiny_repo.write(directory)
    return directory


def test_manifest_from_hub_writes_the_inventory_file(hub: fake_hub.FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "inventories" / "lab" / "files" / "manifest.yml"
    run = invoke(
        ["model", "manifest", "--from-hub", tiny_repo.REPO, "--revision", "main", "-o", str(out)]
    )
    assert run.code == 0, run.stderr
    assert f"revision main is commit {tiny_repo.REVISION}" in run.stderr
    assert f"wrote {out}: {tiny_repo.REPO} at {tiny_repo.REVISION}, 8 files" in run.stdout
    assert "(2 LFS by sha256, 6 by git blob sha1)" in run.stdout
    manifest = load_manifest(out)
    assert manifest.revision == tiny_repo.REVISION
    assert len(manifest.files) == len(tiny_repo.FILES)


def test_manifest_from_hub_unknown_revision_exits_1(hub: fake_hub.FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "manifest.yml"
    run = invoke(
        ["model", "manifest", "--from-hub", tiny_repo.REPO, "--revision", "v9", "-o", str(out)]
    )
    assert run.code == 1
    assert "gx10: error: revision 'v9' not found in gx10-fixtures/tiny-fp8" in run.stderr
    assert not out.exists()


def test_manifest_from_hub_json(hub: fake_hub.FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "m.yml"
    run = invoke(
        [
            "model",
            "manifest",
            "--from-hub",
            tiny_repo.REPO,
            "--revision",
            tiny_repo.REVISION,
            "-o",
            str(out),
            "--json",
        ]
    )
    assert run.code == 0
    document = json.loads(run.stdout)
    assert document["files"] == 8
    assert document["lfs_files"] == 2
    assert document["total_bytes"] == sum(len(d) for d in tiny_repo.FILES.values())


def test_manifest_from_dir_then_verify(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifest.yml"
    run = invoke(
        [
            "model",
            "manifest",
            "--from-dir",
            str(model),
            "--repo",
            tiny_repo.REPO,
            "--revision",
            tiny_repo.REVISION,
            "-o",
            str(out),
            "--jobs",
            "2",
        ]
    )
    assert run.code == 0, run.stderr
    verified = invoke(["model", "verify", "--manifest", str(out), str(model)])
    assert verified.code == 0, verified.stderr
    assert "OK: 8 files match" in verified.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--revision", tiny_repo.REVISION], "--from-dir needs --repo NAME"),
        (["--repo", "o/n", "--revision", "main"], "must be a full commit sha"),
    ],
)
def test_manifest_from_dir_setup_errors_exit_1(
    model: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    run = invoke(
        ["model", "manifest", "--from-dir", str(model), "-o", str(tmp_path / "m.yml"), *extra]
    )
    assert run.code == 1
    assert message in run.stderr


def test_jobs_must_be_positive(model: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        invoke(["model", "verify", "--manifest", "m.yml", str(model), "--jobs", "0"])
    assert caught.value.code == 1


@pytest.fixture
def manifest_file(model: Path, tmp_path: Path) -> Path:
    out = tmp_path / "manifest.yml"
    code = invoke(
        [
            "model",
            "manifest",
            "--from-dir",
            str(model),
            "--repo",
            tiny_repo.REPO,
            "--revision",
            tiny_repo.REVISION,
            "-o",
            str(out),
        ]
    ).code
    assert code == 0
    return out


def test_verify_mismatch_exits_2_naming_the_files(model: Path, manifest_file: Path) -> None:
    data = bytearray((model / SHARD).read_bytes())
    data[5] ^= 1
    (model / SHARD).write_bytes(data)
    (model / "config.json").unlink()
    (model / "stray.bin").write_bytes(b"x")
    run = invoke(["model", "verify", "--manifest", str(manifest_file), str(model)])
    assert run.code == 2
    lines = run.stdout.splitlines()
    assert any("hash_mismatch" in line and SHARD in line for line in lines)
    assert any("missing" in line and "config.json" in line for line in lines)
    assert any("extra" in line and "stray.bin" in line for line in lines)
    assert "FAILED: 2 of 8 files (1 missing, 1 hash mismatch" in run.stdout
    assert (model / "stray.bin").exists()


def test_verify_json_and_reverify(model: Path, manifest_file: Path) -> None:
    first = invoke(["model", "verify", "--manifest", str(manifest_file), str(model), "--json"])
    assert first.code == 0
    assert json.loads(first.stdout)["hashed_bytes"] > 0
    warm = json.loads(
        invoke(["model", "verify", "--manifest", str(manifest_file), str(model), "--json"]).stdout
    )
    assert warm["hashed_bytes"] == 0
    assert warm["cached_bytes"] == warm["total_bytes"]
    full = json.loads(
        invoke(
            [
                "model",
                "verify",
                "--manifest",
                str(manifest_file),
                str(model),
                "--json",
                "--reverify",
            ]
        ).stdout
    )
    assert full["hashed_bytes"] == full["total_bytes"]
    (model / SHARD).write_bytes(b"")
    broken = invoke(["model", "verify", "--manifest", str(manifest_file), str(model), "--json"])
    assert broken.code == 2
    document = json.loads(broken.stdout)  # stdout holds only the document
    assert [f["path"] for f in document["failures"]] == [SHARD]
    assert SHARD in broken.stderr  # the human report went to stderr


def test_verify_bad_manifest_exits_1(model: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        f"schema: 1\nrepo: o/n\nrevision: {tiny_repo.REVISION}\nfiles:\n"
        "- {path: ../../etc/passwd, size: 1, kind: git, git_sha1: " + "a" * 40 + "}\n"
    )
    run = invoke(["model", "verify", "--manifest", str(bad), str(model)])
    assert run.code == 1
    assert "'..' component" in run.stderr
