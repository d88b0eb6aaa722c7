"""The lab's stall mode and kill-rank, on a single-rank head started here by hand in gx10-a's
engine as `gx10-vllm` (the serve role's container name), from the simulator image the lab
publishes: the serving stage (a pair over the rails) is too slow for this file's budget. The
pair's side is covered at unit level (tests/unit/test_vllm_sim_stall.py runs the simulator
locally; tests/unit/test_lab_faults.py mocks the docker calls) and on the lab by
tests/e2e/test_supervise.py, whose node reboot and power cut also check what the lab's fault
injectors leave: the rails back with their netplan addresses (re-applied by the node's own
networkd), full-size pings over each, and Docker's restart policies honoured after the boot.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import ProvisionResult, lab, provision

pytestmark = pytest.mark.lab

A = "gx10-a"
IMAGE = "gx10-registry:5000/anemll/dspark-vllm-gx10:0.1.1"  # the lab's simulator image
PORT = 18000


@pytest.fixture(scope="module")
def relaunched(serving_lab: ProvisionResult) -> Iterator[None]:
    """The session's shared converge; the test replaces the head's rank, so the file ends by
    launching the pair again."""
    yield
    again = provision(LAB_INVENTORY, "serve.yml")
    assert again.ok, again.failed_tasks


def _engine(node: str, script: str, *, check: bool = True) -> str:
    return node_sh(node, script, check=check).strip()


def _pull(node: str) -> None:
    _engine(node, f"docker image inspect {IMAGE} >/dev/null 2>&1 || docker pull -q {IMAGE}")


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
def head_rank(relaunched: None) -> Iterator[None]:
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
