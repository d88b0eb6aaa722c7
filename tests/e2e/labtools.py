"""Helpers for the end-to-end tests: run commands in lab nodes; the lab's state as a snapshot."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gx10 import ProvisionResult

ROOT = Path(__file__).resolve().parents[2]
LAB_INVENTORY = ROOT / "inventories" / "lab"
NODES = ("gx10-a", "gx10-b")
RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")
RAIL_PREFIX = {"enp1s0f0np0": "192.168.100", "enP2p1s0f0np0": "192.168.101"}
HOST_NUMBER = {"gx10-a": 10, "gx10-b": 11}
RAIL_TIMEOUT = 180.0  # seconds for networkd to re-apply both rails after a boot
MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"


def service_key(inventory: Path = LAB_INVENTORY) -> str:
    """The lab inventory's service key (`gx10 lab up` made it with `gx10 keys init`): the key
    the pipeline's own checks send through the lab's gateway, as real nodes' do."""
    return (inventory / ".secrets" / "service.key").read_text(encoding="utf-8").strip()


def auth(inventory: Path = LAB_INVENTORY) -> dict[str, str]:
    """The header a request to the lab's API sends: the gateway refuses any without a key."""
    return {"authorization": f"Bearer {service_key(inventory)}"}


def node_sh(node: str, script: str, *, check: bool = True) -> str:
    """Run a shell snippet inside a lab node and return its stdout."""
    proc = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{node}: `{script}` failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def task_results(run: ProvisionResult, task: str) -> dict[str, dict[str, Any]]:
    """host -> the module result of `task` in this run (ok or failed), from its job events."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run.artifact_dir / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("task") == task:
            found[data["host"]] = data["res"]
    return found


def rank_container(node: str, container: str = "gx10-vllm") -> dict[str, str]:
    """The rank container's id and start time in a node ({} when none runs)."""
    out = node_sh(
        node,
        f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' {container} 2>/dev/null",
        check=False,
    ).split()
    return {"id": out[0], "started": out[1]} if len(out) == 2 else {}


# The checkpoint's bytes on a node: a digest of every file's sha256 (gx10's own records left out).
CHECKPOINT_DIGEST = (
    f"[ -d {MODEL_DIR} ] && cd {MODEL_DIR} && find . -type f ! -name '.gx10*' "
    "-exec sha256sum {} + | sort -k2 | sha256sum | cut -c1-16 || echo absent"
)
# A rank's bind mount keeps a deleted checkpoint directory: after a copy was removed and fetched
# again the rank must be restarted to see it (the serve stage restarts the pair for that).
RANK_SEES_CHECKPOINT = f"""if [ -n "$(docker ps -q --filter name=^gx10-vllm$)" ]; then
  seen=$(docker exec gx10-vllm stat -c %i {MODEL_DIR} 2>&1); here=$(stat -c %i {MODEL_DIR} 2>&1)
  echo "rank sees this node's checkpoint: $([ "$seen" = "$here" ] && echo yes || echo no)"
fi"""


# What a file may change on a node and must put back: the rails (addresses, link state, MTU,
# shaping), every file gx10 writes, the units and containers it runs, packet filters, the
# checkpoint's bytes, and whether the head serves. Identities that a restart legitimately
# renews (container ids, start times, pids) are left out: a restore restarts things. So is the
# rank's config hash in the rank file (its `gx10.config` label): it includes the checkpoint
# directory's identity, which a refetched copy renews (test_model, test_network's new node).
_STATE_SCRIPT = rf"""
for dev in {" ".join(RAILS)}; do
  addr=$(ip -br addr show dev $dev 2>&1 | sed 's/@if[0-9]*//' | tr -s ' ')
  echo "rail $addr mtu=$(cat /sys/class/net/$dev/mtu 2>&1)"
  echo "qdisc $dev $(tc qdisc show dev $dev root 2>&1 | awk '{{print $2}}')"
done
for f in /etc/netplan/* /etc/gx10/* /etc/systemd/system/gx10-* /etc/default/earlyoom \
    /etc/default/prometheus-node-exporter /etc/haproxy/haproxy.cfg /etc/haproxy/gx10-keys.map; do
  [ -f "$f" ] && echo "file $f $(sed 's/gx10[.]config=[0-9a-f]*/gx10.config=/' "$f" \
    | sha256sum | cut -c1-16)"
done
# A oneshot unit (the clock policy) is active after a boot and inactive after a converge that
# ran its tool directly: for those only whether it is enabled counts.
for unit in $(systemctl list-units 'gx10-*' earlyoom.service haproxy.service \
    prometheus-node-exporter.service --all --no-legend --plain | awk '{{print $1}}'); do
  eval "$(systemctl show -p Type -p ActiveState -p UnitFileState "$unit" | sed 's/=\(.*\)/="\1"/')"
  if [ "$Type" = oneshot ]; then echo "unit $unit oneshot $UnitFileState"
  else echo "unit $unit $ActiveState $UnitFileState"; fi
done
docker ps -a --format 'container {{{{.Names}}}} {{{{.Image}}}} {{{{.State}}}}' | sort
# Docker's own chains (their DNS ports change with every engine start) are not ours.
iptables-save 2>/dev/null | grep '^-A' | grep -v DOCKER | sed 's/^/iptables /'
echo "model $({CHECKPOINT_DIGEST})"
{RANK_SEES_CHECKPOINT}
"""
_HEALTH = "curl -s -o /dev/null -m 5 -w '%{http_code}' http://127.0.0.1:8000/health"


def lab_state(nodes: tuple[str, ...] = NODES) -> dict[str, list[str]]:
    """{node: sorted facts}; the head also says whether its API answers /health."""
    state = {node: sorted(node_sh(node, _STATE_SCRIPT).splitlines()) for node in nodes}
    state[nodes[0]].append(f"serving /health {node_sh(nodes[0], _HEALTH, check=False) or '-'}")
    return state


def state_diff(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """What differs, a line per fact: `node: - was` / `node: + is now`."""
    lines = []
    for node in sorted(set(before) | set(after)):
        was, now = set(before.get(node, [])), set(after.get(node, []))
        lines += [f"{node}: - {fact}" for fact in sorted(was - now)]
        lines += [f"{node}: + {fact}" for fact in sorted(now - was)]
    return lines


# --- the supervised pair (test_supervise.py, test_engine.py) ---------------------------------

AGENT = "/usr/local/lib/gx10/pair/gx10-pair"


def agent_status(node: str) -> dict[str, object]:
    """The node's gx10-pair agent's `status --json` ({} when it does not answer)."""
    out = node_sh(node, f"python3 {AGENT} status --json", check=False)
    try:
        status: dict[str, object] = json.loads(out)
    except ValueError:
        return {}
    return status


def until(
    what: str,
    test: Callable[[], bool],
    timeout: float,
    *,
    poll: float = 1.0,
    nodes: tuple[str, ...] = NODES,
) -> None:
    """Poll `test` until it holds (bounded); else fail naming each node's agent state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if test():
            return
        time.sleep(poll)
    states = {node: agent_status(node).get("state") for node in nodes}
    raise AssertionError(f"not {what} within {timeout:.0f} s; agents: {states}")


class LoneWatch(threading.Thread):
    """Samples the nodes' rank containers every `interval` seconds; the longest stretch in
    which exactly one of them ran. A node that is down (its exec fails) counts as no rank."""

    def __init__(self, interval: float = 1.0, nodes: tuple[str, ...] = NODES) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.longest = 0.0
        self.samples = 0
        self.interval = interval
        self.nodes = nodes

    def run(self) -> None:
        since: float | None = None
        deadline = time.monotonic() + 1200  # bounded, whatever the test does
        while not self.done.is_set() and time.monotonic() < deadline:
            running = [bool(rank_container(node)) for node in self.nodes]
            now = time.monotonic()
            self.samples += 1
            if sum(running) == 1:
                since = now if since is None else since
                self.longest = max(self.longest, now - since)
            else:
                since = None
            self.done.wait(self.interval)


def rail_problems(node: str) -> list[str]:
    """What keeps the node's rails from being as its netplan says (empty: all well)."""
    problems = []
    links = {
        link["ifname"]: link
        for link in json.loads(node_sh(node, "ip -j addr show", check=False) or "[]")
    }
    for netdev, prefix in RAIL_PREFIX.items():
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


def wait_rails(nodes: tuple[str, ...] = NODES) -> None:
    """Both rails of every node up with their netplan address and MTU, within RAIL_TIMEOUT."""
    deadline = time.monotonic() + RAIL_TIMEOUT
    problems: list[str] = ["not checked"]
    for _ in range(int(RAIL_TIMEOUT)):  # bounded in count and in time
        problems = [p for node in nodes for p in rail_problems(node)]
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert problems == [], f"rails not back within {RAIL_TIMEOUT:.0f} s: {problems}"


def jumbo_pings(source: str, target: str) -> None:
    """A full 9000-byte frame (8972 bytes of payload, not fragmented) over each rail."""
    for netdev, prefix in RAIL_PREFIX.items():
        address = f"{prefix}.{HOST_NUMBER[target]}"
        out = node_sh(
            source, f"ping -c 3 -i 0.2 -W 5 -M do -s 8972 -I {netdev} {address}", check=False
        )
        assert " 0% packet loss" in out, f"{source} -> {address} on {netdev}: {out}"
