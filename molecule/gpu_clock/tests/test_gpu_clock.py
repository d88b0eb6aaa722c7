"""The GPU clock policy after converge: the tool, the policy file, the boot unit, and the cap the
GPU holds (the nvidia-smi simulator's lock, its stand-in for the driver's state). A simulated
reboot (the driver forgets its lock, /run is emptied) must get the cap back from the unit."""

from __future__ import annotations

import json

LOCK = "/var/lib/gx10-sim/nvidia-smi/locked_clocks"


def shown(node) -> dict:
    return json.loads(node.check_output("gx10-gpu-clock show"))


def test_tool_policy_and_unit_installed(nodes) -> None:
    for node in nodes:
        tool = node.file("/usr/local/sbin/gx10-gpu-clock")
        assert (tool.user, tool.mode) == ("root", 0o755)
        conf = node.file("/etc/gx10/gpu-clock.conf")
        assert (conf.user, conf.mode) == ("root", 0o644)
        assert "GX10_SM_CLOCK_MHZ=2000\n" in conf.content_string
        assert "GX10_SM_CLOCK_MIN_MHZ=208\n" in conf.content_string
        assert node.service("gx10-gpu-clock").is_enabled


def test_the_gpu_holds_the_cap(nodes) -> None:
    for node in nodes:
        assert node.file(LOCK).content_string.strip() == "208,2000"
        state = shown(node)
        assert state["policy"] == 2000
        assert state["applied"] == 2000
        assert state["session"] is None


def test_the_cap_bounds_the_clock_under_load(nodes) -> None:
    node = nodes[0]
    load = "/var/lib/gx10-sim/nvidia-smi/load"
    node.check_output(f"echo 1.0 > {load}")
    try:
        query = "nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits"
        clock = int(node.check_output(query))
    finally:
        node.check_output(f"echo 0 > {load}")
    assert 1990 <= clock <= 2000, clock


def test_a_reboot_gets_the_cap_back_from_the_unit(nodes) -> None:
    for node in nodes:
        node.check_output("nvidia-smi -rgc && rm -f /run/gx10/gpu-clock.applied")
        assert not node.file(LOCK).exists
        node.check_output("systemctl restart gx10-gpu-clock.service")
        assert node.file(LOCK).content_string.strip() == "208,2000"
        assert shown(node)["applied"] == 2000
