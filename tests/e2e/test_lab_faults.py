"""The lab's fault injectors on the real lab: a node reboot and a power cut, rails and all.

The network stage is applied first, so each node has its netplan: after the fault, each rail
must have carrier again, carry the node's netplan address (re-applied by the node's own
networkd, nothing re-run from here) and pass a full-size ping (9000-byte MTU, do not
fragment) to the peer. Waits are bounded and generous: the machine is shared.

The stall mode and kill-rank are tried on a single-rank head started here by hand in gx10-a's
engine as `gx10-vllm` (the serve role's container name), from the simulator image the lab
publishes: the serving stage (a pair over the rails) is too slow for this file's budget. The
pair's side is covered at unit level (tests/unit/test_vllm_sim_stall.py runs the simulator
locally; tests/unit/test_lab_faults.py mocks the docker calls).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import ProvisionResult, lab, provision

pytestmark = pytest.mark.lab

A, B = "gx10-a", "gx10-b"
RAILS = {"enp1s0f0np0": "192.168.100", "enP2p1s0f0np0": "192.168.101"}
HOST_NUMBER = {A: 10, B: 11}
RAIL_TIMEOUT = 180.0  # seconds for networkd to re-apply both rails after a boot
IMAGE = "gx10-registry:5000/anemll/dspark-vllm-gx10:0.1.1"  # the lab's simulator image
PORT = 18000


@pytest.fixture(scope="module")
def networked(serving_lab: ProvisionResult) -> Iterator[None]:
    """The session's shared converge; the reboots and the power cut stop the unsupervised pair
    (its ranks do not restart with their engines) and the stall test replaces the head's rank:
    the file ends by launching the pair again."""
    yield
    again = provision(LAB_INVENTORY, "serve.yml")
    assert again.ok, again.failed_tasks


def _rail_problems(node: str) -> list[str]:
    """What keeps the node's rails from being as its netplan says (empty: all well)."""
    problems = []
    links = {
        link["ifname"]: link
        for link in json.loads(node_sh(node, "ip -j addr show", check=False) or "[]")
    }
    for netdev, prefix in RAILS.items():
        link = links.get(netdev)
        if link is None:
            problems.append(f"{node} {netdev}: missing")
            continue
        if link.get("operstate") != "UP":
            problems.append(f"{node} {netdev}: {link.get('operstate')}")
        want = f"{prefix}.{HOST_NUMBER[node]}"
        have = [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]
        if want not in have:
            problems.append(f"{node} {netdev}: addresses {have}, not {want}")
        if link.get("mtu") != 9000:
            problems.append(f"{node} {netdev}: MTU {link.get('mtu')}")
    return problems


def _wait_rails(nodes: tuple[str, ...]) -> None:
    deadline = time.monotonic() + RAIL_TIMEOUT
    problems: list[str] = ["not checked"]
    for _ in range(int(RAIL_TIMEOUT)):  # bounded in count and in time
        problems = [p for node in nodes for p in _rail_problems(node)]
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert problems == [], f"rails not back within {RAIL_TIMEOUT:.0f} s"


def _jumbo_pings(source: str, target: str) -> None:
    for netdev, prefix in RAILS.items():
        address = f"{prefix}.{HOST_NUMBER[target]}"
        # 8972 bytes of payload + 28 of headers = a full 9000-byte frame, not fragmented.
        out = node_sh(source, f"ping -c 3 -W 5 -M do -s 8972 -I {netdev} {address}", check=False)
        assert " 0% packet loss" in out, f"{source} -> {address} on {netdev}: {out}"


def _engine(node: str, script: str, *, check: bool = True) -> str:
    return node_sh(node, script, check=check).strip()


def _pull(node: str) -> None:
    _engine(node, f"docker image inspect {IMAGE} >/dev/null 2>&1 || docker pull -q {IMAGE}")


def test_reboot_of_gx10_b_brings_its_rails_back(networked: None) -> None:
    _wait_rails((A, B))
    # Two containers in its engine: one Docker restarts after a boot, one it does not.
    _pull(B)
    for name, policy in (("gx10-faults-kept", "unless-stopped"), ("gx10-faults-once", "no")):
        _engine(
            B,
            f"docker rm -f {name} >/dev/null 2>&1; docker run -d --name {name} "
            f"--restart {policy} --entrypoint sleep {IMAGE} infinity",
        )
    started = node_sh(B, "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    result = lab.reboot(B, log=lambda line: print(f"lab: {line}"))
    assert result.method[B] == "rebooted (systemctl reboot)", result.method
    assert result.systemd[B] in ("running", "degraded")
    assert result.status.running, result.status.problems
    # It booted again: its units started again (monotonic stamps are the shared kernel's).
    assert node_sh(B, "systemctl is-active docker.service gx10-sim-rdma.service").split() == [
        "active",
        "active",
    ]
    assert started != node_sh(B, "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    state = "{{.State.Status}}"
    assert _engine(B, f"docker inspect -f '{state}' gx10-faults-kept") == "running"
    assert _engine(B, f"docker inspect -f '{state}' gx10-faults-once") == "exited"
    _engine(B, "docker rm -f gx10-faults-kept gx10-faults-once")
    _wait_rails((A, B))
    _jumbo_pings(B, A)


def test_power_cut_of_both_nodes_brings_both_back(networked: None) -> None:
    _wait_rails((A, B))
    result = lab.power_cut(log=lambda line: print(f"lab: {line}"))
    assert result.nodes == (A, B)
    assert all(result.systemd[node] in ("running", "degraded") for node in (A, B)), result.systemd
    assert result.status.running, result.status.problems
    _wait_rails((A, B))
    _jumbo_pings(A, B)
    _jumbo_pings(B, A)


PROBE = """
import json, sys, urllib.error, urllib.request
path, timeout = sys.argv[1], float(sys.argv[2])
body = None
if path.endswith("completions"):
    body = json.dumps({"model": "/model", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
request = urllib.request.Request("http://127.0.0.1:%d" + path, data=body,
                                 headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        print(reply.status)
except TimeoutError:
    print("timeout")
except urllib.error.URLError as error:
    print("timeout" if isinstance(error.reason, TimeoutError) else f"error {error.reason}")
"""


def _probe(path: str, timeout: float) -> str:
    script = PROBE % PORT
    return _engine(A, f"docker exec gx10-vllm python3 -c '{script}' {path} {timeout}")


@pytest.fixture
def head_rank(lab_up: lab.LabStatus) -> Iterator[None]:
    """A single-rank simulator head as gx10-vllm in gx10-a's engine; removed afterwards."""
    _pull(A)
    _engine(
        A,
        "docker rm -f gx10-vllm >/dev/null 2>&1; mkdir -p /tmp/gx10-faults-model && "
        'echo \'{"architectures": ["DeepseekV4ForCausalLM"]}\' '
        "> /tmp/gx10-faults-model/config.json",
    )
    _engine(
        A,
        "docker run -d --name gx10-vllm --label gx10.role=head --network host "
        "-e GX10_SIM_BOOT_SECONDS=0 -v /tmp/gx10-faults-model:/model:ro "
        f"--entrypoint vllm {IMAGE} serve /model --host 127.0.0.1 --port {PORT}",
    )
    try:
        for _ in range(120):  # bounded: the head boots in a second or two
            if (
                _engine(
                    A,
                    "docker exec gx10-vllm python3 -c 'import socket; "
                    f'socket.create_connection(("127.0.0.1", {PORT}), 1)\' '
                    "2>/dev/null && echo up",
                    check=False,
                )
                == "up"
            ):
                break
            time.sleep(1)
        assert _probe("/health", 10) == "200"
        yield
    finally:
        _engine(A, "docker rm -f gx10-vllm; rm -rf /tmp/gx10-faults-model", check=False)


def test_stall_then_kill_rank_on_a_head_in_the_lab(head_rank: None) -> None:
    assert _probe("/v1/chat/completions", 30) == "200"
    assert lab.stall(A)["stalled"] is True
    assert _probe("/health", 10) == "200"
    assert _probe("/v1/models", 10) == "200"
    assert _probe("/v1/chat/completions", 3) == "timeout"  # no token, no answer
    assert lab.stall(A, False)["stalled"] is False
    assert _probe("/v1/chat/completions", 30) == "200"
    killed = lab.kill_rank(A)
    assert killed["role"] == "head"
    assert "vllm" in (killed["command"] or "")
    assert (killed["state"], killed["exit_code"]) == ("exited", 137)
    with pytest.raises(lab.LabError, match="gx10-vllm on gx10-a is exited, not running"):
        lab.stall(A)
