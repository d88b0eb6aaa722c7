# SPDX-License-Identifier: Apache-2.0
"""The files module: its read-only planning in process, and the module itself run by a real
ansible-playbook on localhost in a tmp dir, as the current user (its own owner and group, so no
root is needed). The module's cases share one playbook run (a run is about a second)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.modules.files import path_errors, plan
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_tasks

MODULE = "gx10.cluster.files"
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


pytestmark = pytest.mark.heavy  # a real ansible-playbook: make unit hands this file out first


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files(*entries: dict[str, Any], mode: str | None = "0640", **extra: Any) -> dict[str, Any]:
    # 0640 is no umask's default, so a file left at its default shows.
    return {"files": list(entries), "owner": USER, "group": GROUP, "mode": mode, **extra}


# --- planning, in process ------------------------------------------------------------------------


def test_plan_refuses_what_cannot_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    ok = str(tmp_path / "new.conf")
    paths, errors = plan(
        [
            {"dest": ok},
            {"dest": str(tmp_path / "dir")},
            {"dest": str(tmp_path / "link")},
            {"dest": str(tmp_path / "missing" / "x.conf")},
            {"dest": "relative.conf"},
            {"dest": ok + "/./"[:0]},  # the same file again
        ]
    )
    assert paths[0] == ok
    assert errors == [
        f"{tmp_path / 'dir'} exists and is a directory, not a regular file",
        f"{tmp_path / 'link'} exists and is a symlink, not a regular file",
        f"{tmp_path / 'missing' / 'x.conf'} cannot be written: its directory "
        f"{tmp_path / 'missing'} does not exist",
        "dest must be absolute, got 'relative.conf'",
        f"{ok} is given twice",
    ]
    assert path_errors(ok) == []


# --- the module, through a real ansible-playbook ------------------------------------------------


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """Every case in one playbook run: the results r0.. and the directory they ran in."""
    tmp_path = tmp_path_factory.mktemp("files")
    same, loose = tmp_path / "same", tmp_path / "loose"
    same.write_text("kept\n")
    os.chmod(same, 0o640)
    loose.write_text("kept too\n")
    os.chmod(loose, 0o666)
    wanted = files(
        {"dest": str(tmp_path / "new.conf"), "content": "a = 1\n"},
        {"dest": str(same), "content": "kept\n"},
        {"dest": str(loose), "content": "kept too\n"},
        {"dest": str(tmp_path / "tool"), "content": "#!/bin/sh\necho hi\n", "mode": "0750"},
    )
    check_dir = tmp_path / "check"
    check_dir.mkdir()
    (check_dir / "old").write_text("before\n")
    checked = files(
        {"dest": str(check_dir / "old"), "content": "after\n"},
        {"dest": str(check_dir / "fresh"), "content": "x\n"},
        # A directory an earlier task would create: check mode reports the file, no error.
        {"dest": str(check_dir / "later" / "unit.conf"), "content": "y\n"},
    )
    (tmp_path / "bad").write_text("untouched\n")
    refused = files(
        {"dest": str(tmp_path / "bad"), "content": "changed\n"},
        {"dest": str(tmp_path / "no-dir" / "f"), "content": "x\n"},
        mode="rwxr-xr-x",
    )
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / "old.map").write_text("k v\n")
    (gone / "link").symlink_to(gone / "nowhere")
    (gone / "kept-dir").mkdir()
    removals = {"absent": [str(gone / n) for n in ("old.map", "link", "never-there")]}
    results = run_tasks(
        tmp_path,
        [
            {MODULE: wanted, "diff": True},
            {MODULE: wanted},
            {MODULE: checked, "check_mode": True, "diff": True},
            {MODULE: refused},
            {MODULE: removals, "check_mode": True},
            {MODULE: removals, "diff": True},
            {MODULE: removals},
            {MODULE: {"absent": [str(gone / "kept-dir"), str(gone / "x")]}},
        ],
    )
    return results, tmp_path


def test_writes_new_files_fixes_modes_and_leaves_the_same_alone(
    ran: tuple[dict[str, Any], Path],
) -> None:
    r, base = ran
    new, loose, tool = base / "new.conf", base / "loose", base / "tool"
    first = r["r0"]
    assert not first.get("failed"), first
    assert first["changed"] is True
    assert first["written"] == [str(new), str(tool)]
    assert first["changed_paths"] == [str(new), str(loose), str(tool)]
    assert new.read_text() == "a = 1\n"
    assert (mode_of(new), mode_of(loose), mode_of(tool)) == (0o640, 0o640, 0o750)
    assert tool.read_text() == "#!/bin/sh\necho hi\n"
    assert new.stat().st_uid == os.getuid()
    assert not list(base.glob(".gx10-*"))  # no temporary file left
    diffs = first["diff"]
    assert {"before_header": str(new), "after_header": str(new), "before": "",
            "after": "a = 1\n"} in diffs  # fmt: skip
    assert {"before": {"path": str(loose), "mode": "0666"},
            "after": {"path": str(loose), "mode": "0640"}} in diffs  # fmt: skip
    # The second run changes nothing.
    assert r["r1"]["changed"] is False
    assert r["r1"]["changed_paths"] == []


def test_check_mode_reports_the_change_and_writes_nothing(
    ran: tuple[dict[str, Any], Path],
) -> None:
    r, base = ran
    check = r["r2"]
    assert check["changed"] is True
    assert check["written"] == [
        str(base / "check" / "old"),
        str(base / "check" / "fresh"),
        str(base / "check" / "later" / "unit.conf"),
    ]
    assert (base / "check" / "old").read_text() == "before\n"
    assert not (base / "check" / "fresh").exists()
    assert not (base / "check" / "later").exists()
    assert check["diff"][0]["before"] == "before\n"
    assert check["diff"][0]["after"] == "after\n"


def test_a_bad_mode_and_a_missing_directory_are_refused_before_any_write(
    ran: tuple[dict[str, Any], Path],
) -> None:
    r, base = ran
    failed = r["r3"]
    assert failed["failed"] is True
    assert "mode 'rwxr-xr-x' is neither octal" in failed["msg"]
    assert f"its directory {base / 'no-dir'} does not exist" in failed["msg"]
    assert failed["msg"].endswith("nothing was written")
    assert (base / "bad").read_text() == "untouched\n"


def test_absent_removes_files_and_symlinks_and_refuses_a_directory(
    ran: tuple[dict[str, Any], Path],
) -> None:
    r, base = ran
    gone = base / "gone"
    assert r["r4"]["removed"] == [str(gone / "old.map"), str(gone / "link")]  # check mode
    assert r["r5"]["changed"] is True
    assert r["r5"]["removed"] == r["r5"]["changed_paths"] == r["r4"]["removed"]
    assert r["r5"]["diff"][0] == {
        "before": {"path": str(gone / "old.map"), "state": "file"},
        "after": {"path": str(gone / "old.map"), "state": "absent"},
    }
    assert not (gone / "old.map").exists()
    assert not (gone / "link").is_symlink()
    assert r["r6"]["changed"] is False
    assert r["r7"]["failed"] is True
    assert f"{gone / 'kept-dir'} is a directory: only files are removed" in r["r7"]["msg"]
    assert (gone / "kept-dir").is_dir()
