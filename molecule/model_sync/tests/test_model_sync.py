"""Every node's checkpoint after converge, checked with the nodes' own tools, not gx10's code.

LFS files by `sha256sum`, the others by git's blob hash (a python3 one-liner on the node: the
nodes have no git); the expected values are the committed lab manifest's.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = yaml.safe_load((ROOT / "inventories/lab/files/model-manifest.yml").read_text())
MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"
GIT_SHA1 = (
    "import hashlib,sys\n"
    "for p in sys.argv[1:]:\n"
    "    d=open(p,'rb').read()\n"
    "    print(hashlib.sha1(b'blob %d\\0' % len(d) + d).hexdigest(), p)\n"
)


def _digests(node, command: str) -> dict[str, str]:
    out = node.check_output(f"cd {MODEL_DIR} && {command}")
    pairs = (line.split(None, 1) for line in out.splitlines() if line.strip())
    return {path.strip(): digest for digest, path in pairs}


def test_every_lfs_file_has_the_manifest_sha256(nodes) -> None:
    expected = {f["path"]: f["sha256"] for f in MANIFEST["files"] if f["kind"] == "lfs"}
    assert len(expected) == 48
    for node in nodes:
        found = _digests(node, "sha256sum " + " ".join(sorted(expected)))
        assert found == expected, node.backend.get_hostname()


def test_every_other_file_has_the_manifest_git_blob_sha1(nodes) -> None:
    expected = {f["path"]: f["git_sha1"] for f in MANIFEST["files"] if f["kind"] == "git"}
    assert len(expected) == 26
    for node in nodes:
        script = GIT_SHA1.replace("'", "'\"'\"'")
        found = _digests(node, f"python3 -c '{script}' " + " ".join(sorted(expected)))
        assert found == expected, node.backend.get_hostname()


def test_no_partial_file_is_left(nodes) -> None:
    for node in nodes:
        out = node.check_output(f"find {MODEL_DIR} -name '*.partial'")
        assert out == "", (node.backend.get_hostname(), out)


def test_the_peer_server_is_stopped(head) -> None:
    state = head.run("systemctl is-active gx10-model-peer.service").stdout.strip()
    assert state in ("inactive", "unknown", "failed") or state == "", state
    assert not head.socket("tcp://192.168.100.10:8090").is_listening
