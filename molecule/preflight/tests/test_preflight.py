"""What preflight relies on, as the nodes show it after a converge (which must change nothing)."""

from __future__ import annotations

import re

RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")


def test_gpu_listed(nodes):
    for node in nodes:
        out = node.check_output("nvidia-smi -L")
        assert re.match(r"^GPU 0: NVIDIA GB10 \(UUID: GPU-[0-9a-f-]{36}\)$", out), out


def test_docker_engine_running(nodes):
    for node in nodes:
        assert node.service("docker").is_running
        assert node.run("docker version --format '{{.Server.Version}}'").rc == 0


def test_rails_present_with_carrier(nodes):
    for node in nodes:
        for rail in RAILS:
            assert node.interface(rail).exists
            assert node.file(f"/sys/class/net/{rail}/carrier").content_string.strip() == "1"


def test_management_link_is_not_a_rail(nodes):
    for node in nodes:
        default_dev = node.check_output("ip -o route show default").split(" dev ")[1].split()[0]
        assert default_dev not in RAILS


def test_preflight_left_no_trace(nodes):
    """Read-only: every file and directory a stage could write is as prepare.yml recorded it."""
    for node in nodes:
        before = node.file("/root/.gx10-preflight-before").content_string
        after = node.check_output("/root/.gx10-preflight-listing.sh")
        assert before.strip(), "prepare recorded nothing"
        changed = sorted(set(before.splitlines()) ^ set(after.splitlines()))
        assert not changed, f"{node.backend.hostname}: preflight changed {changed[:10]}"
