"""GID drift on the lab: a fast delete/add/re-add on a rail moves its RoCE v2 GID, as on a node.

The kernel's RoCE GID cache handles each address change in order: an address removed frees its
slots, the next address added takes them, and the first one re-added goes to the next free ones.
The lab's RDMA sysfs simulator follows `ip -o monitor` events the same way, so even one `sh -c`
of the three steps moves gx10-b's rail0 entry (3 -> 5), and the nccl stage refuses the node whose
rails now disagree. The test puts the rail back (address and GID order) before it ends.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
from labtools import LAB_INVENTORY, node_sh

from gx10 import ProvisionResult, provision

pytestmark = pytest.mark.lab

NODE, RAIL0, DEV0 = "gx10-b", "enp1s0f0np0", "rocep1s0f0"
EXTRA = "198.18.0.11/32"  # a benchmarking-range address no role or route uses
PORT = f"/run/gx10-sim/sys/class/infiniband/{DEV0}/ports/1"
WAIT_S = 120.0  # generous: the machine is shared and loaded


def _rail0_address() -> str:
    """gx10-b rail0's own IPv4 address with its prefix, as the network stage configured it."""
    (link,) = json.loads(node_sh(NODE, f"ip -j -4 addr show dev {RAIL0}"))
    (info,) = [i for i in link["addr_info"] if i.get("family") == "inet"]
    return f"{info['local']}/{info['prefixlen']}"


def _v2_index(address: str) -> int | None:
    """The slot of ``address``'s RoCE v2 entry in the simulated table (None: no entry)."""
    mapped = "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
        *(int(part) for part in address.partition("/")[0].split("."))
    )
    script = (
        f"cd {PORT} && for f in $(grep -lx {mapped} gids/*); do i=${{f#gids/}}; "
        'echo "$i $(cat gid_attrs/types/$i 2>/dev/null)"; done; true'
    )
    for row in node_sh(NODE, script).splitlines():
        index, _, gid_type = row.partition(" ")
        if gid_type == "RoCE v2":
            return int(index)
    return None


def _wait_for(address: str, index: int | None) -> None:
    deadline = time.monotonic() + WAIT_S
    while (found := _v2_index(address)) != index:
        assert time.monotonic() < deadline, f"{address}: RoCE v2 GID at {found}, not {index}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def rails_up(serving_lab: ProvisionResult) -> str:
    """The rails as the session's shared converge addressed them; rail0's address."""
    address = _rail0_address()
    _wait_for(address, 3)
    return address


@pytest.fixture
def drifted(rails_up: str) -> Iterator[str]:
    """Delete, add another, re-add: all in one `sh -c`, faster than any poll."""
    address = rails_up
    node_sh(
        NODE,
        f"ip addr del {address} dev {RAIL0}; ip addr add {EXTRA} dev {RAIL0}; "
        f"ip addr add {address} dev {RAIL0}",
    )
    try:
        yield address
    finally:
        # Put the rail back as it was: the extra address gone, rail0's own entry at 2,3 again.
        node_sh(
            NODE,
            f"ip addr del {address} dev {RAIL0}; ip addr del {EXTRA} dev {RAIL0}; "
            f"ip addr add {address} dev {RAIL0}",
        )
        _wait_for(EXTRA, None)
        _wait_for(address, 3)


def test_a_fast_readd_moves_the_gid_and_the_nccl_stage_refuses(drifted: str) -> None:
    _wait_for(EXTRA, 3)  # the new address took the slots rail0's own address freed
    _wait_for(drifted, 5)
    result = provision(LAB_INVENTORY, "nccl.yml")
    assert not result.ok
    failed = {t.host: t.message for t in result.failed_tasks}
    assert NODE in failed, failed
    assert "rails disagree on the RoCE v2 GID index" in failed[NODE]
    assert re.search(rf"{DEV0} \({RAIL0}, [0-9.]+(/\d+)?\) at 5", failed[NODE]), failed[NODE]


def test_the_restored_rail_passes_the_nccl_stage_again(rails_up: str) -> None:
    """Runs after the drift test (file order): the rail is back and nothing else is off."""
    assert _rail0_address() == rails_up
    assert _v2_index(EXTRA) is None
    assert _v2_index(rails_up) == 3
    result = provision(LAB_INVENTORY, "nccl.yml")
    assert result.ok, result.failed_tasks
