"""The lab itself: faithful cabling, per-node engines, the registry, up/down/status."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time

from labtools import node_sh

from gx10 import lab
from gx10.lab.config import LAB_LABEL

RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")


def _docker(*args: str, input_bytes: bytes | None = None) -> str:
    proc = subprocess.run(
        ["docker", *args], input=input_bytes, capture_output=True, timeout=300, check=True
    )
    return proc.stdout.decode().strip()


def _lab_objects() -> dict[str, list[str]]:
    label = f"label={LAB_LABEL}=gx10"
    return {
        "containers": _docker("ps", "-aq", "--filter", label).split(),
        "volumes": [v for v in _docker("volume", "ls", "-q").split() if v.startswith("gx10-")],
        "networks": _docker("network", "ls", "-q", "--filter", label).split(),
    }


def _links(node: str) -> dict[str, dict]:
    return {link["ifname"]: link for link in json.loads(node_sh(node, "ip -j -d link show"))}


def test_down_leaves_nothing_and_up_is_idempotent(lab_up: lab.LabStatus) -> None:
    lab.down(log=lambda _: None)
    assert _lab_objects() == {"containers": [], "volumes": [], "networks": []}
    host_links = subprocess.run(
        ["ip", "-br", "link"], capture_output=True, text=True, check=True
    ).stdout
    assert not any(rail in host_links for rail in RAILS), host_links

    first = lab.up(log=lambda _: None)
    assert first.running
    started = time.monotonic()
    again = lab.up(log=lambda line: (_ for _ in ()).throw(AssertionError(f"redid: {line}")))
    warm = time.monotonic() - started
    assert again.running
    # Warm `up` only inspects; on this 2-core machine it takes about a second.
    assert warm < 15, f"warm lab up took {warm:.1f} s"


def test_rails_are_direct_cables_between_the_nodes(lab_up: lab.LabStatus) -> None:
    a, b = _links("gx10-a"), _links("gx10-b")
    macs = set()
    for rail in RAILS:
        assert rail in a, f"{rail} missing on gx10-a: {sorted(a)}"
        assert rail in b, f"{rail} missing on gx10-b: {sorted(b)}"
        assert a[rail]["linkinfo"]["info_kind"] == "veth"
        # Each end's peer index is the other end's ifindex, in the other node's namespace.
        assert a[rail]["link_index"] == b[rail]["ifindex"]
        assert b[rail]["link_index"] == a[rail]["ifindex"]
        assert a[rail]["operstate"] == "UP"
        assert b[rail]["operstate"] == "UP"
        macs |= {a[rail]["address"], b[rail]["address"]}
    # Distinct, locally administered (second-lowest bit of the first octet set).
    assert len(macs) == 4
    assert all(int(mac.split(":")[0], 16) & 0x02 for mac in macs)
    # No bridge or switch in between: the nodes hold no bridge carrying a rail.
    for links in (a, b):
        assert not any(link.get("master") for name, link in links.items() if name in RAILS)


def test_management_network_is_separate_from_the_rails(lab_up: lab.LabStatus) -> None:
    for node in ("gx10-a", "gx10-b"):
        route = node_sh(node, "ip -o route show default")
        assert " dev eth0 " in route, route


def test_each_node_has_its_own_engine_and_the_registry_serves_both(lab_up: lab.LabStatus) -> None:
    # A one-file image, pushed to the lab registry from this machine.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"probe {time.time_ns()}\n".encode()
        info = tarfile.TarInfo("probe.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = "127.0.0.1:5000/gx10/probe:e2e"
    _docker("import", "-", tag, input_bytes=buf.getvalue())
    _docker("push", tag)
    node_sh("gx10-a", "docker pull -q gx10-registry:5000/gx10/probe:e2e")
    assert node_sh("gx10-a", "docker images -q gx10-registry:5000/gx10/probe:e2e").strip()
    # The other node's engine has not seen it: engines are not shared.
    assert not node_sh("gx10-b", "docker images -q gx10-registry:5000/gx10/probe:e2e").strip()
    node_sh("gx10-a", "docker rmi -f gx10-registry:5000/gx10/probe:e2e >/dev/null")
    _docker("rmi", tag)


def test_gpu_simulator_answers_like_a_gb10(lab_up: lab.LabStatus) -> None:
    for node in ("gx10-a", "gx10-b"):
        out = node_sh(
            node, "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
        )
        assert out.strip() == "NVIDIA GB10, [N/A]"


def test_node_python_caches_the_bytecode_of_zip_imports(lab_up: lab.LabStatus) -> None:
    """The node image's hook (docs/LAB.md, "Module bytecode on the nodes") is what every
    python3 on a node loads: zipimport compiles through it."""
    probe = "python3 -c 'import zipimport; print(zipimport._compile_source.__module__)'"
    for node in ("gx10-a", "gx10-b"):
        assert node_sh(node, probe).strip() == "gx10_lab_zipimport_cache", node


def test_status_reports_a_missing_cable(lab_up: lab.LabStatus) -> None:
    node_sh("gx10-b", "ip link del enp1s0f0np0")
    broken = lab.status()
    assert not broken.running
    assert any("enp1s0f0np0" in p for p in broken.problems), broken.problems
    repaired = lab.up(log=lambda _: None)
    assert repaired.running


def test_node_sysfs_is_writable_so_netplan_apply_can_trigger_udev(lab_up: lab.LabStatus) -> None:
    """As on a real node: `netplan apply` runs `udevadm trigger`, which writes to /sys."""
    for node in ("gx10-a", "gx10-b"):
        assert node_sh(node, "findmnt -n -o OPTIONS /sys").startswith("rw"), node
        node_sh(node, "udevadm trigger --attr-match=subsystem=net")
