"""Hashing progress: how often the callback runs, and the bar only on a terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import tiny_repo
from cli_helpers import invoke
from rich.console import Console

from gx10._collection import load
from gx10.model import manifest_from_directory, save_manifest
from gx10.progress import ByteProgress

model_files = load("model_files")
HashJob = model_files.HashJob
hash_many = model_files.hash_many

READ = 4096


@pytest.fixture
def jobs(tmp_path: Path) -> list[HashJob]:
    tiny_repo.write(tmp_path)
    return [
        HashJob(name, tmp_path / name, "sha256", len(data))
        for name, data in tiny_repo.FILES.items()
    ]


def _reads(jobs: list[HashJob]) -> int:
    return sum(-(-job.size // READ) for job in jobs)


def test_progress_is_throttled_and_ends_on_the_total(jobs: list[HashJob]) -> None:
    calls: list[tuple[int, int]] = []
    hash_many(jobs, workers=2, read_size=READ, progress=lambda d, t: calls.append((d, t)))
    total = sum(job.size for job in jobs)
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    # A call per read would be one per 4 KiB; the tiny repo hashes in far less than 0.1 s.
    assert len(calls) < _reads(jobs) / 4
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_without_the_interval_every_read_is_reported(
    jobs: list[HashJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_files, "PROGRESS_INTERVAL_S", 0.0)
    calls: list[tuple[int, int]] = []
    hash_many(jobs, workers=2, read_size=READ, progress=lambda d, t: calls.append((d, t)))
    assert len(calls) == _reads(jobs) + 1


def test_final_count_is_reported_when_files_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10_000)
    jobs = [
        HashJob("a", tmp_path / "a", "sha256", 10_000),
        HashJob("gone", tmp_path / "gone", "sha256", 5_000),
    ]
    calls: list[tuple[int, int]] = []
    outcomes = hash_many(
        jobs, workers=1, read_size=READ, progress=lambda d, t: calls.append((d, t))
    )
    assert outcomes[1].error is not None
    assert calls[-1] == (10_000, 15_000)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_byte_progress_draws_on_a_terminal() -> None:
    screen = _Tty()
    console = Console(file=screen, force_terminal=True, force_interactive=True, width=100)
    with ByteProgress(console, "verifying") as bar:
        assert bar.live
        bar(0, 4 * 2**20)
        bar(2 * 2**20, 4 * 2**20)
    drawn = screen.getvalue()
    assert "verifying" in drawn
    assert "2.0/4.0 MiB" in drawn


@pytest.mark.parametrize("forced", [True, False])
def test_byte_progress_prints_nothing_off_a_terminal(forced: bool) -> None:
    """FORCE_COLOR-style forcing makes rich think a pipe is a terminal; still no bar."""
    pipe = io.StringIO()
    with ByteProgress(Console(file=pipe, force_terminal=forced), "verifying") as bar:
        assert not bar.live
        bar(0, 10)
        bar(10, 10)
    assert pipe.getvalue() == ""


def test_model_verify_off_a_terminal_leaves_stderr_empty(tmp_path: Path) -> None:
    model = tmp_path / "model"
    tiny_repo.write(model)
    manifest = tmp_path / "manifest.yml"
    save_manifest(
        manifest_from_directory(model, repo=tiny_repo.REPO, revision=tiny_repo.REVISION),
        manifest,
        source="a test",
    )
    run = invoke(["model", "verify", "--manifest", str(manifest), str(model), "--reverify"])
    assert run.code == 0
    assert run.stderr == ""
    assert "OK: 8 files match" in run.stdout
