# SPDX-License-Identifier: Apache-2.0
"""The runtime-fix overlay: validation on the controller, the mounts, and the hash checks inside
the image (before a start) and in the running ranks (after it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter.serve_overlay import (
    overlay_errors,
    overlay_volumes,
)
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import validate_cluster
from ansible_collections.gx10.cluster.plugins.module_utils.rank_container import docker_run_argv
from ansible_collections.gx10.cluster.plugins.module_utils.serve_overlay import (
    HashReadError,
    applied_errors,
    base_errors,
    check_overlay,
    parse_sha256sum,
    volumes,
)
from ansible_collections.gx10.cluster.plugins.modules import overlay_check
from ansible_collections.gx10.cluster.tests.unit import fake_docker
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
)

TARGET = "/usr/lib/python3/dist-packages/vllm/tokenizers/deepseek_v4_encoding.py"
IMAGE = "ghcr.io/anemll/dspark-vllm-gx10@sha256:" + "c" * 64
BASE_TEXT = "# the image's encoder (pre-0731)\n"
FIX_TEXT = "# the checkpoint's encoding_dsv4.py (0731)\n"
BASE = fake_docker.sha256(BASE_TEXT)
FIX = fake_docker.sha256(FIX_TEXT)
MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"
HOST_DIR = "/var/lib/gx10/vllm-overlay"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "files" / "overlay" / "encoding_dsv4.py"
    path.parent.mkdir(parents=True)
    path.write_text(FIX_TEXT)
    return path


def entry(source: Path | str, **changes: Any) -> dict[str, Any]:
    base = {
        "path": TARGET,
        "source": str(source),
        "base_sha256": BASE,
        "sha256": FIX,
        "why": "0731 effort prompts (taoofshawn/spark-recipes deepseek-v4-flash-aiden/README.md)",
    }
    return {**base, **changes}


def errors_of(overlay: Any) -> list[str]:
    return check_overlay(overlay, model_dir=MODEL_DIR)[1]


def one_error(overlay: Any) -> str:
    errors = errors_of(overlay)
    assert len(errors) == 1, errors
    return errors[0]


# --- validation ---------------------------------------------------------------------------------


def test_a_reviewed_overlay_passes_and_is_normalised(source: Path) -> None:
    entries, errors = check_overlay(
        [entry(source, sha256=FIX.upper()), entry(source, path="/opt/new.py", base_sha256=None)],
        model_dir=MODEL_DIR,
    )
    assert errors == []
    assert [e.sha256 for e in entries] == [FIX, FIX]
    assert entries[0].base_sha256 == BASE
    assert entries[1].base_sha256 is None  # null: a new file
    assert check_overlay([entry(source, base_sha256="absent")])[0][0].base_sha256 is None
    assert entries[0].host_name == f"{FIX}-deepseek_v4_encoding.py"
    assert check_overlay(None) == ([], [])
    assert check_overlay([]) == ([], [])


def test_not_a_list_or_not_a_mapping() -> None:
    message = one_error({"path": TARGET})
    assert message.startswith("vllm_serve_overlay is {'path':")
    assert "must be a list of files" in message
    assert "or [] for no overlay" in message
    message = one_error(["/usr/lib/x.py"])
    assert message.startswith("vllm_serve_overlay[0] is '/usr/lib/x.py': each file is a mapping")


def test_missing_and_unknown_keys_are_named(source: Path) -> None:
    raw = entry(source, sha_256="x")
    del raw["why"], raw["base_sha256"]
    errors = errors_of([raw])
    assert f"vllm_serve_overlay[0] (path {TARGET}) lacks base_sha256, why:" in errors[0]
    assert "base_sha256: absent for a file the image does not have" in errors[0]
    assert "has unknown key(s) sha_256: the keys are path, source, base_sha256" in errors[1]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("usr/lib/x.py", "path is 'usr/lib/x.py': write the absolute path of the file inside"),
        ("/usr//lib/x.py", "not a normalised path (no trailing or doubled '/', no '.' or '..'): "
                           "write /usr/lib/x.py"),
        ("/usr/lib/a:b.py", "Docker's SOURCE:TARGET:ro splits at ':'"),
        ("/usr/lib/a b.py", "only letters, digits and . _ + @ % = , ~ - / are allowed"),
        ("/proc/cpuinfo", "is under /proc, a tree Docker provides, not a file of the image"),
        (f"{MODEL_DIR}/encoding/encoding_dsv4.py",
         f"is under {MODEL_DIR}, the checkpoint's mount (gx10_model_dir"),
        ("/gx10-cache/vllm/x", "is under /gx10-cache, the compile caches' mount"),
        ("/etc/resolv.conf", "is a file Docker writes for the container (host network)"),
        (None, "path is None: write the absolute path"),
    ],
)  # fmt: skip
def test_bad_paths(source: Path, path: Any, expected: str) -> None:
    message = one_error([entry(source, path=path)])
    assert message.startswith("vllm_serve_overlay[0]"), message
    assert expected in message


def test_bad_hashes_name_the_key_the_value_and_the_fix(source: Path) -> None:
    short = one_error([entry(source, sha256="abc123")])
    assert short == (
        f"vllm_serve_overlay[0] (path {TARGET}).sha256 is 'abc123', not a sha256 (64 hex "
        "digits): write the replacement's sha256 (sha256sum FILE)"
    )
    base = one_error([entry(source, base_sha256="z" * 64)])
    assert ".base_sha256 is 'zzzz" in base
    assert "or absent when the image has no such file" in base
    same = one_error([entry(source, base_sha256=FIX)])
    assert f"sha256 and base_sha256 are both {FIX}" in same
    assert "the entry changes nothing; remove it" in same


def test_why_must_cite_a_reason(source: Path) -> None:
    message = one_error([entry(source, why="  ")])
    assert ".why is '  ': say why the image needs this file and cite the source" in message


def test_the_replacement_file_is_hashed_on_the_controller(source: Path, tmp_path: Path) -> None:
    source.write_text(FIX_TEXT + "# edited after the review\n")
    changed = fake_docker.sha256(FIX_TEXT + "# edited after the review\n")
    message = one_error([entry(source)])
    assert message == (
        f"vllm_serve_overlay[0] (path {TARGET}).source {source} has sha256 {changed}, but the "
        f"entry's sha256 is {FIX}: the file is not the one reviewed; restore the reviewed file, "
        f"or review this one and set sha256: {changed}"
    )
    missing = one_error([entry(tmp_path / "nowhere.py")])
    assert "cannot be read on the controller (No such file or directory)" in missing
    assert "directory: name the replacement file" in one_error([entry(tmp_path)])
    relative = one_error([entry("files/overlay/encoding_dsv4.py")])
    assert "'{{ inventory_dir }}/files/overlay/<name>'" in relative


def test_a_path_twice_is_refused(source: Path) -> None:
    message = one_error([entry(source), entry(source, path="/opt/x.py"), entry(source)])
    assert message == (
        f"vllm_serve_overlay[2] (path {TARGET}) is also vllm_serve_overlay[0]: one replacement "
        "per file; keep one of the two entries"
    )


def test_the_validate_stage_checks_it_cluster_wide(source: Path) -> None:
    groups = {"head": ["gx10-a"], "workers": ["gx10-b"]}
    good = [entry(source)]

    def both(overlay: Any) -> dict[str, Any]:
        return {
            "gx10-a": {"vllm_serve_overlay": overlay, "gx10_allow_unauthenticated": True},
            "gx10-b": {"vllm_serve_overlay": overlay},
        }

    assert validate_cluster(groups, both(good)) == []
    errors = validate_cluster(groups, both([entry(source, sha256="0" * 63)]))
    assert len(errors) == 1
    assert "not a sha256 (64 hex digits)" in errors[0]
    split = validate_cluster(
        groups,
        {"gx10-a": {"vllm_serve_overlay": good, "gx10_allow_unauthenticated": True}, "gx10-b": {}},
    )
    assert len(split) == 1
    assert split[0].startswith("vllm_serve_overlay on host gx10-b is undefined but on gx10-a")
    assert "every rank of the pair must run the same code" in split[0]


# --- the mounts ---------------------------------------------------------------------------------


def test_each_replacement_is_mounted_read_only_over_the_image_file(source: Path) -> None:
    overlay = [entry(source), entry(source, path="/opt/new.py", base_sha256="absent")]
    mounts = overlay_volumes(overlay, HOST_DIR)
    assert mounts == [
        f"{HOST_DIR}/{FIX}-deepseek_v4_encoding.py:{TARGET}:ro",
        f"{HOST_DIR}/{FIX}-new.py:/opt/new.py:ro",
    ]
    assert volumes(check_overlay(overlay)[0], HOST_DIR + "/") == mounts
    spec = {
        "name": "gx10-vllm",
        "image": IMAGE,
        "entrypoint": ["vllm"],
        "command": ["serve"],
        "volumes": [f"{MODEL_DIR}:{MODEL_DIR}:ro", *mounts],
    }
    argv = docker_run_argv(spec)
    assert argv[argv.index("--volume", argv.index("--volume") + 1) :][:4] == [
        "--volume", mounts[0], "--volume", mounts[1],
    ]  # fmt: skip


def test_the_volumes_filter_refuses_a_bad_overlay_or_directory(source: Path) -> None:
    with pytest.raises(AnsibleFilterError, match=r"\[0\] \(path /a:b\)\.path is '/a:b'"):
        overlay_volumes([entry(source, path="/a:b")], HOST_DIR)
    with pytest.raises(AnsibleFilterError, match="must be an absolute path without ':'"):
        overlay_volumes([entry(source)], "relative/dir")
    assert overlay_volumes([], HOST_DIR) == []
    assert overlay_errors([entry(source, path=f"{MODEL_DIR}/x.py")], MODEL_DIR)
    assert overlay_errors([entry(source)], MODEL_DIR) == []


# --- reading hashes -----------------------------------------------------------------------------


def test_sha256sum_output_is_read_per_path() -> None:
    stdout = f"{BASE}  /a.py\n{FIX} */b.py\n"
    stderr = "sha256sum: /c.py: No such file or directory\nsha256sum: /d: Is a directory\n"
    found = parse_sha256sum(stdout, stderr, ["/a.py", "/b.py", "/c.py", "/d"])
    assert found == {"/a.py": BASE, "/b.py": FIX, "/c.py": None, "/d": "error: Is a directory"}
    with pytest.raises(HashReadError, match=r'no hash for /a.py: .*"sha256sum": executable'):
        parse_sha256sum("", 'exec: "sha256sum": executable file not found in $PATH\n', ["/a.py"])


def test_base_and_applied_messages_name_node_path_and_hashes(source: Path) -> None:
    entries = check_overlay([entry(source), entry(source, path="/opt/new.py", base_sha256=None)])[0]
    ok = {TARGET: BASE, "/opt/new.py": None}
    assert base_errors(entries, ok, image=IMAGE, node="gx10-a") == []
    wrong = base_errors(entries, {TARGET: FIX, "/opt/new.py": BASE}, image=IMAGE, node="gx10-b")
    assert wrong[0].startswith(
        f"gx10-b: the image {IMAGE} has {TARGET} with sha256 {FIX}, but vllm_serve_overlay[0] "
        f"(path {TARGET}) was reviewed against base_sha256 {BASE}. Fix: this image is not the "
        "one the overlay was made for: review the overlay for this image"
    )
    assert f"has /opt/new.py with sha256 {BASE}, but" in wrong[1]
    assert "base_sha256 absent (a new file)" in wrong[1]
    gone = base_errors(entries[:1], {}, image=IMAGE, node="gx10-a")
    assert f"has {TARGET} with sha256 no such file, but" in gone[0]

    assert applied_errors(entries, {TARGET: FIX, "/opt/new.py": FIX}, container="c", node="n") == []
    stale = applied_errors(entries[:1], {TARGET: BASE}, container="gx10-vllm", node="gx10-b")
    assert stale == [
        f"gx10-b: the rank gx10-vllm sees {TARGET} with sha256 {BASE}, not the replacement's "
        f"{FIX} (vllm_serve_overlay[0] (path {TARGET})). Fix: the overlay is not in effect in "
        "this rank; compare its mounts (docker inspect gx10-vllm) with the plan and run the "
        "serve stage again, which restarts the pair"
    ]


# --- the module ---------------------------------------------------------------------------------


class FakeRun:
    """Answers the module's docker calls from a dict of image/container files."""

    def __init__(self, files: dict[str, str | None], *, image_present: bool = True) -> None:
        self.files, self.image_present = files, image_present
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: int) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if list(argv[:3]) == ["docker", "image", "inspect"]:
            return subprocess.CompletedProcess(argv, 0 if self.image_present else 1, "", "")
        paths = list(argv[argv.index("--") + 1 :])
        out = [f"{self.files[p]}  {p}" for p in paths if self.files.get(p)]
        err = [f"sha256sum: {p}: No such file or directory" for p in paths if not self.files.get(p)]
        return subprocess.CompletedProcess(argv, 1 if err else 0, "\n".join(out), "\n".join(err))


def params(source: Path, **kw: Any) -> dict[str, Any]:
    return {"overlay": [entry(source)], "image": None, "container": None, "node": "gx10-a", **kw}


def test_the_module_hashes_the_image_files_in_a_throwaway_container(source: Path) -> None:
    run = FakeRun({TARGET: BASE})
    result = overlay_check.check(params(source, image=IMAGE), False, run)
    assert result == {
        "changed": False,
        "checked": True,
        "files": [{"path": TARGET, "expected": BASE, "found": BASE}],
        "msg": f"gx10-a: 1 file(s) of the image {IMAGE} are the reviewed bases",
    }
    assert run.calls[1] == [
        "docker", "run", "--rm", "--pull", "never", "--network", "none", "--user", "0:0",
        "--env", "NVIDIA_VISIBLE_DEVICES=void", "--entrypoint", "sha256sum", IMAGE, "--", TARGET,
    ]  # fmt: skip


def test_the_module_refuses_an_image_it_was_not_reviewed_for(source: Path) -> None:
    result = overlay_check.check(params(source, image=IMAGE), False, FakeRun({TARGET: FIX}))
    assert result["failed"] is True
    assert result["changed"] is False
    assert f"gx10-a: the image {IMAGE} has {TARGET} with sha256 {FIX}" in result["msg"]
    assert f"reviewed against base_sha256 {BASE}" in result["msg"]


def test_an_image_not_pulled_yet_is_not_checked_in_check_mode_only(source: Path) -> None:
    absent = FakeRun({}, image_present=False)
    skipped = overlay_check.check(params(source, image=IMAGE), True, absent)
    assert skipped["checked"] is False
    assert "failed" not in skipped
    assert "not checked: the image" in skipped["msg"]
    assert len(absent.calls) == 1  # never `docker run`, which would pull
    refused = overlay_check.check(params(source, image=IMAGE), False, absent)
    assert refused["failed"] is True
    assert "run the image stage first" in refused["msg"]


def test_the_module_checks_a_running_rank(source: Path) -> None:
    run = FakeRun({TARGET: FIX})
    result = overlay_check.check(params(source, container="gx10-vllm"), False, run)
    assert result["files"] == [{"path": TARGET, "expected": FIX, "found": FIX}]
    assert run.calls == [
        ["docker", "exec", "--user", "0:0", "gx10-vllm", "sha256sum", "--", TARGET]
    ]
    stale = overlay_check.check(params(source, container="gx10-vllm"), False, FakeRun({}))
    assert stale["failed"] is True
    assert f"gx10-a: the rank gx10-vllm sees {TARGET} with sha256 no such file" in stale["msg"]


def test_the_module_names_a_read_failure_and_a_bad_overlay(source: Path) -> None:
    def broken(argv: Sequence[str], timeout: int) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "Error: No such container: gx10-vllm\n")

    result = overlay_check.check(params(source, container="gx10-vllm"), False, broken)
    assert result["failed"] is True
    assert "cannot hash the overlay's files inside the rank gx10-vllm" in result["msg"]
    assert "No such container: gx10-vllm" in result["msg"]
    bad = overlay_check.check(params(source, image=IMAGE, overlay=[{"path": "x"}]), False, broken)
    assert bad["failed"] is True
    assert bad["msg"].startswith("gx10-a: vllm_serve_overlay[0] (path x) lacks source")


# --- the module through ansible-playbook, with a fake docker client -----------------------------


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook")
def test_the_module_in_a_playbook(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_docker.install(tmp_path, {"images": {IMAGE: {TARGET: BASE_TEXT}}})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("docker") == str(bin_dir / "docker")  # never the real client
    overlay = [entry(source)]
    play = tmp_path / "play.yml"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost: {}\n")

    def run(**args: Any) -> subprocess.CompletedProcess[str]:
        task = {"gx10.cluster.overlay_check": {"overlay": overlay, "node": "gx10-a", **args}}
        plays = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                  "tasks": [task]}]  # fmt: skip
        play.write_text(yaml.safe_dump(plays))
        return run_ansible_playbook(tmp_path, inventory, play, "-e",
                                    "ansible_python_interpreter=" + sys.executable,
                                    timeout=120)  # fmt: skip

    good = run(image=IMAGE)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "changed=0" in good.stdout
    fake_docker.update(tmp_path, images={IMAGE: {TARGET: FIX_TEXT}})
    refused = run(image=IMAGE)
    assert refused.returncode != 0
    assert f"gx10-a: the image {IMAGE} has {TARGET} with sha256 {FIX}" in refused.stdout
    assert fake_docker.calls(tmp_path)[1][:4] == ["run", "--rm", "--pull", "never"]
