# SPDX-License-Identifier: Apache-2.0
"""The directories module: its read-only planning in process, and the module itself run by a real
ansible-playbook on localhost in a tmp dir, as the current user (its own owner and group, so no
root is needed)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.modules.directories import (
    attribute_errors,
    missing_directories,
)
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_tasks

MODULE = "gx10.cluster.directories"
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def args(*paths: Path, mode: str = "0750", **extra: Any) -> dict[str, Any]:
    # 0750 is no umask's default (0755 or 0775), so a directory left at its default shows.
    return {"paths": [str(p) for p in paths], "owner": USER, "group": GROUP, "mode": mode, **extra}


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- planning, in process ------------------------------------------------------------------------


def test_missing_directories_parents_first_each_once(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    paths = [str(tmp_path / "a/b/c"), str(tmp_path / "a/d"), str(tmp_path / "there")]
    missing, errors = missing_directories(paths)
    assert missing == [str(tmp_path / p) for p in ("a", "a/b", "a/b/c", "a/d")]
    assert errors == []


def test_missing_directories_name_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    (tmp_path / "to-dir").symlink_to(tmp_path)
    paths = [
        str(tmp_path / p) for p in ("file", "file/sub", "dangling", "to-file", "to-dir", "new")
    ]
    missing, errors = missing_directories(paths)
    assert missing == [str(tmp_path / "new")]  # a symlink to a directory is that directory
    assert errors == [
        f"{tmp_path}/file exists and is a file, not a directory",
        f"{tmp_path}/file/sub cannot be created: {tmp_path}/file is a file, not a directory",
        f"{tmp_path}/dangling exists and is a symlink to nothing, not a directory",
        f"{tmp_path}/to-file exists and is a symlink to a file, not a directory",
    ]


def test_attribute_errors_before_any_change() -> None:
    ok = {"owner": USER, "group": GROUP, "mode": "0755"}
    assert attribute_errors(ok) == []
    assert attribute_errors({**ok, "mode": "u=rwx,g=rx,o="}) == []
    assert attribute_errors({"owner": "0", "group": "0", "mode": None}) == []
    assert attribute_errors({**ok, "owner": "gx10-no-such-user"}) == [
        "owner 'gx10-no-such-user' is not a user on this node"
    ]
    assert attribute_errors({**ok, "group": "gx10-no-such-group"}) == [
        "group 'gx10-no-such-group' is not a group on this node"
    ]
    for bad in ("0789", "rwxr-xr-x", "017777"):
        assert attribute_errors({**ok, "mode": bad}) == [
            f"mode {bad!r} is neither octal (such as '0755') nor symbolic"
        ]


# --- the module, through a real ansible-playbook ------------------------------------------------


def test_creates_missing_directories_with_parents_then_changes_nothing(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    os.chmod(base, 0o711)
    root = base / "cache"
    wanted = [root / "sha256-0123/triton", root / "sha256-0123/vllm", root / "other"]
    r = run_tasks(tmp_path, [{MODULE: args(*wanted)}, {MODULE: args(*wanted)}])
    created = [root, root / "sha256-0123", *wanted[:2], root / "other"]
    assert not r["r0"].get("failed"), r["r0"]
    assert r["r0"]["changed"] is True
    assert r["r0"]["created"] == [str(p) for p in created]
    assert r["r0"]["changed_paths"] == [str(p) for p in created]
    for path in created:  # the mode on the parents it created too, as file does
        assert path.is_dir()
        assert mode_of(path) == 0o750, path
        assert path.stat().st_uid == os.getuid()
        assert path.stat().st_gid == os.getgid()
    assert mode_of(base) == 0o711  # an existing parent is left as it is
    assert r["r1"]["changed"] is False
    assert r["r1"]["created"] == []
    assert r["r1"]["changed_paths"] == []


def test_fixes_the_mode_of_an_existing_directory_and_shows_the_diff(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.mkdir()
    os.chmod(there, 0o700)
    fine = tmp_path / "fine"
    fine.mkdir()
    os.chmod(fine, 0o750)
    r = run_tasks(tmp_path, [{MODULE: args(there, fine), "diff": True}])
    assert not r["r0"].get("failed"), r["r0"]
    assert r["r0"]["changed"] is True
    assert r["r0"]["created"] == []
    assert r["r0"]["changed_paths"] == [str(there)]
    assert mode_of(there) == 0o750
    assert r["r0"]["diff"] == [
        {
            "before": {"path": str(there), "mode": "0700"},
            "after": {"path": str(there), "mode": "0750"},
        }
    ]


def test_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.mkdir()
    os.chmod(there, 0o700)
    new = tmp_path / "new" / "sub"
    r = run_tasks(tmp_path, [{MODULE: args(new, there), "check_mode": True, "diff": True}])
    assert not r["r0"].get("failed"), r["r0"]
    assert r["r0"]["changed"] is True
    assert r["r0"]["created"] == [str(tmp_path / "new"), str(new)]
    assert r["r0"]["changed_paths"] == [str(tmp_path / "new"), str(new), str(there)]
    assert not (tmp_path / "new").exists()
    assert mode_of(there) == 0o700
    assert r["r0"]["diff"] == [
        {
            "before": {"path": str(tmp_path / "new"), "state": "absent"},
            "after": {"path": str(tmp_path / "new"), "state": "directory"},
        },
        {
            "before": {"path": str(new), "state": "absent"},
            "after": {"path": str(new), "state": "directory"},
        },
        {
            "before": {"path": str(there), "mode": "0700"},
            "after": {"path": str(there), "mode": "0750"},
        },
    ]


@pytest.mark.parametrize(
    ("blocked", "message"),
    [
        ("file", "{t}/file exists and is a file, not a directory"),
        ("file/sub", "{t}/file/sub cannot be created: {t}/file is a file, not a directory"),
    ],
)
def test_a_file_in_the_way_fails_before_any_directory_is_created(
    tmp_path: Path, blocked: str, message: str
) -> None:
    (tmp_path / "file").write_text("kept\n")
    first, last = tmp_path / "first" / "sub", tmp_path / "last"
    r = run_tasks(tmp_path, [{MODULE: args(first, tmp_path / blocked, last)}])
    assert r["r0"]["failed"] is True
    assert r["r0"]["changed"] is False
    assert r["r0"]["msg"] == message.format(t=tmp_path) + "; nothing was changed"
    assert not (tmp_path / "first").exists()
    assert not last.exists()
    assert (tmp_path / "file").read_text() == "kept\n"


def test_an_unknown_owner_or_a_relative_path_fails_before_any_directory_is_created(
    tmp_path: Path,
) -> None:
    new = tmp_path / "new"
    r = run_tasks(
        tmp_path,
        [
            {MODULE: args(new, owner="gx10-no-such-user")},
            {MODULE: {**args(new), "paths": [str(new), "relative/dir"]}},
        ],
    )
    assert r["r0"]["failed"] is True
    assert (
        r["r0"]["msg"]
        == "owner 'gx10-no-such-user' is not a user on this node; nothing was changed"
    )
    assert r["r1"]["failed"] is True
    assert "paths must be absolute, got 'relative/dir'" in r["r1"]["msg"]
    assert not new.exists()
