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


def test_writes_fixes_diffs_refuses_and_checks(tmp_path: Path) -> None:
    new, same, loose, bad_mode = (tmp_path / n for n in ("new.conf", "same", "loose", "bad"))
    same.write_text("kept\n")
    os.chmod(same, 0o640)
    loose.write_text("kept too\n")
    os.chmod(loose, 0o666)
    tool = {"dest": str(tmp_path / "tool"), "content": "#!/bin/sh\necho hi\n", "mode": "0750"}
    wanted = files(
        {"dest": str(new), "content": "a = 1\n"},
        {"dest": str(same), "content": "kept\n"},
        {"dest": str(loose), "content": "kept too\n"},
        tool,
    )
    check_dir = tmp_path / "check"
    check_dir.mkdir()
    (check_dir / "old").write_text("before\n")
    checked = files(
        {"dest": str(check_dir / "old"), "content": "after\n"},
        {"dest": str(check_dir / "fresh"), "content": "x\n"},
    )
    bad_mode.write_text("untouched\n")
    refused = files(
        {"dest": str(bad_mode), "content": "changed\n"},
        {"dest": str(tmp_path / "no-dir" / "f"), "content": "x\n"},
        mode="rwxr-xr-x",
    )
    r = run_tasks(
        tmp_path,
        [
            {MODULE: wanted, "diff": True},
            {MODULE: wanted},
            {MODULE: checked, "check_mode": True, "diff": True},
            {MODULE: refused},
        ],
    )

    # The first run writes the new file and the tool, fixes loose's mode, leaves same alone.
    first = r["r0"]
    assert not first.get("failed"), first
    assert first["changed"] is True
    assert first["written"] == [str(new), tool["dest"]]
    assert first["changed_paths"] == [str(new), str(loose), tool["dest"]]
    assert new.read_text() == "a = 1\n"
    assert (mode_of(new), mode_of(loose), mode_of(Path(tool["dest"]))) == (0o640, 0o640, 0o750)
    assert Path(tool["dest"]).read_text() == tool["content"]
    assert new.stat().st_uid == os.getuid()
    assert not list(tmp_path.glob(".gx10-*"))  # no temporary file left
    diffs = first["diff"]
    assert {"before_header": str(new), "after_header": str(new), "before": "",
            "after": "a = 1\n"} in diffs  # fmt: skip
    assert {"before": {"path": str(loose), "mode": "0666"},
            "after": {"path": str(loose), "mode": "0640"}} in diffs  # fmt: skip

    # The second run changes nothing.
    assert r["r1"]["changed"] is False
    assert r["r1"]["changed_paths"] == []

    # Check mode: reports the change and the diff, writes nothing.
    check = r["r2"]
    assert check["changed"] is True
    assert check["written"] == [str(check_dir / "old"), str(check_dir / "fresh")]
    assert (check_dir / "old").read_text() == "before\n"
    assert not (check_dir / "fresh").exists()
    assert check["diff"][0]["before"] == "before\n"
    assert check["diff"][0]["after"] == "after\n"

    # A bad mode and a missing directory: refused, naming both, nothing written.
    failed = r["r3"]
    assert failed["failed"] is True
    assert "mode 'rwxr-xr-x' is neither octal" in failed["msg"]
    assert f"its directory {tmp_path / 'no-dir'} does not exist" in failed["msg"]
    assert failed["msg"].endswith("nothing was written")
    assert bad_mode.read_text() == "untouched\n"
