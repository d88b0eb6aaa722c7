"""Bring the lab up (two nodes on cables, or four on a switch), report on it, and take it down
without a trace.

Design choices, and why:

* Nodes are systemd containers, each running its **own nested Docker engine** with its data-root
  on a per-node volume. Images pulled on one node are then invisible on the other, as on real
  hardware, and removing the node and its volume removes everything it pulled.
* Where this machine's Docker may grant every capability, nodes run `--privileged`. In sandboxes
  whose bounding set lacks some (CAP_SYS_RESOURCE, typically), `--privileged` fails outright, so
  the node gets every capability the host has, unconfined seccomp/AppArmor/system paths, and the
  host cgroup tree: what systemd and a nested Docker need. Docker then mounts /sys read-only, so
  the node image remounts it read-write at boot (gx10-lab-sysfs-rw.service): `netplan apply`
  runs `udevadm trigger`, which writes to /sys, as on any real host.
* Each rail is one veth pair created directly inside the two nodes' network namespaces with the
  real GB10 netdev name on both ends: a cable, no bridge, no switch. Deleting a node deletes its
  namespace and with it the cable.
* A lab of more nodes (`gx10 lab up --nodes 4`) stands a switch in: a container of its own
  holding one Linux bridge per rail (its ports at MTU 9216, as a 200 GbE switch is set up), and one
  veth pair per node and rail from the node's real netdev to a port of that rail's bridge. The
  bridges live in the switch's network namespace, never on this machine, so removing the switch
  removes them; a port of the switch is the test equipment's handle on one node's link.
* Every object carries the label `gx10.lab=<name>`; `down` removes by that label, never by pattern.
* A real Prometheus (Debian's) scrapes the lab as a site's would: its config is the one
  `gx10 metrics config` writes from the lab inventory, its HTTP API is on this machine's loopback.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gx10.lab import _docker, checkpoint, engine, images, registry
from gx10.lab.config import LAB_LABEL, MAX_GENERATION, LabConfig, Rail, mac_generation
from gx10.lab.errors import LabError
from gx10.paths import project_home

Log = Callable[[str], None]

# Linux capability numbers (linux/capability.h) -> docker names, for the bounding-set check.
_CAP_NAMES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]


@dataclass(frozen=True, slots=True)
class RailStatus:
    netdev: str
    mac: str | None
    state: str | None
    peer_node: str | None


@dataclass(frozen=True, slots=True)
class NodeStatus:
    name: str
    state: str
    mgmt_address: str | None = None
    docker_engine: str | None = None
    rails: tuple[RailStatus, ...] = ()


@dataclass(frozen=True, slots=True)
class LabStatus:
    name: str
    nodes: tuple[NodeStatus, ...]
    registry: str
    registry_address: str
    problems: tuple[str, ...] = field(default_factory=tuple)
    prometheus: str = "absent"
    prometheus_url: str = ""

    @property
    def running(self) -> bool:
        return not self.problems and all(n.state == "running" for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["running"] = self.running
        return data

    def summary_lines(self) -> list[str]:
        lines = [f"lab {self.name}: {'running' if self.running else 'not ready'}"]
        for node in self.nodes:
            rails = ", ".join(
                f"{r.netdev} {r.mac or '-'} {r.state or 'missing'}"
                + (f" -> {r.peer_node}" if r.peer_node else "")
                for r in node.rails
            )
            lines.append(
                f"  {node.name}: {node.state}, mgmt {node.mgmt_address or '-'}, "
                f"docker {node.docker_engine or '-'}; rails: {rails or '-'}"
            )
        lines.append(f"  registry: {self.registry} ({self.registry_address} from the nodes)")
        if self.prometheus_url:
            lines.append(f"  prometheus: {self.prometheus} ({self.prometheus_url} on this machine)")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return lines


def _missing_caps() -> list[str]:
    """Capabilities docker's --privileged would ask for but this machine cannot grant."""
    bounding = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            bounding = int(line.split()[1], 16)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    return [
        _CAP_NAMES[i] for i in range(min(last, len(_CAP_NAMES) - 1) + 1) if not bounding & (1 << i)
    ]


def _node_security_args() -> list[str]:
    missing = _missing_caps()
    if not missing:
        return ["--privileged"]
    args = ["--cap-add", "ALL"]
    for cap in missing:
        args += ["--cap-drop", cap]
    args += [
        "--security-opt", "seccomp=unconfined",
        "--security-opt", "apparmor=unconfined",
        "--security-opt", "systempaths=unconfined",
        "--device-cgroup-rule", "a *:* rwm",
        "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    ]  # fmt: skip
    return args


def _labels(cfg: LabConfig, role: str) -> list[str]:
    return ["--label", f"{LAB_LABEL}={cfg.name}", "--label", f"{LAB_LABEL}.role={role}"]


def _state(name: str) -> str:
    out = _docker.docker("inspect", "-f", "{{.State.Status}}", name, check=False, timeout=30)
    return out or "absent"


def _ensure_network(cfg: LabConfig, log: Log) -> None:
    if _docker.exists("network", cfg.mgmt_network):
        subnet = _docker.docker(
            "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
            cfg.mgmt_network,
        )  # fmt: skip
        if subnet == cfg.mgmt_subnet:
            return
        log(f"management network is {subnet or 'unset'}, not {cfg.mgmt_subnet}: rebuilding the lab")
        down(cfg, log)
    _docker.docker(
        "network", "create", *_labels(cfg, "mgmt"), "--subnet", cfg.mgmt_subnet, cfg.mgmt_network
    )


def _ensure_registry(cfg: LabConfig, log: Log) -> None:
    state = _state(cfg.registry_name)
    if state == "running":
        return
    if state != "absent":
        _docker.docker("rm", "-f", cfg.registry_name)
    tag = images.ensure(images.registry_spec(), log)
    log(f"starting registry {cfg.registry_name} ({cfg.registry_host_address} on this machine)")
    _docker.docker(
        "run", "-d", "--name", cfg.registry_name, *_labels(cfg, "registry"),
        "--network", cfg.mgmt_network, "--restart", "unless-stopped",
        "-p", f"{cfg.registry_host_address}:5000",
        "-v", f"{cfg.name}-registry-data:/var/lib/docker-registry",
        tag,
    )  # fmt: skip


# The NAS stand-in serves this directory of its volume: the synthetic checkpoint in checkpoint/,
# the real engine's tiny model in tiny-model/ (the inventories' gx10_model_source base URLs).
NAS_ROOT = "/srv/nas"
NAS_ROOT_LABEL = f"{LAB_LABEL}.nas-root"


def _ensure_nas(cfg: LabConfig, log: Log) -> None:
    """Fill the NAS volume with the synthetic checkpoint (once) and serve it read-only; with the
    real engine, its tiny model too (once per engine image)."""
    if cfg.engine == "vllm-cpu":
        _fill_tiny_model(cfg, log)
    if _state(cfg.nas_name) == "running" and _nas_root(cfg) == NAS_ROOT:
        return
    tag = images.ensure(images.vllm_sim_spec(), log)  # any lab image with python3
    if not _docker.exists("volume", cfg.nas_volume):
        _docker.docker("volume", "create", *_labels(cfg, "nas"), cfg.nas_volume)
    marker = "/data/.gx10-synthetic-complete"
    filled = _docker.run(
        ["docker", "run", "--rm", "--entrypoint", "test", "-v", f"{cfg.nas_volume}:/data:ro",
         tag, "-s", marker],
        check=False, timeout=60,
    )  # fmt: skip
    if filled.returncode != 0:
        log(f"writing the synthetic checkpoint into {cfg.nas_volume}")
        filler = f"{cfg.nas_name}-fill"
        _docker.docker("rm", "-f", filler, check=False)
        _docker.docker(
            "create", "--name", filler, *_labels(cfg, "nas-fill"), "--entrypoint", "python3",
            "-v", f"{cfg.nas_volume}:/data", tag,
            "/usr/local/bin/gx10-checkpoint.py", "/data/checkpoint", marker,
        )  # fmt: skip
        _docker.docker("cp", checkpoint.__file__, f"{filler}:/usr/local/bin/gx10-checkpoint.py")
        try:
            _docker.docker("start", "-a", filler, timeout=300)
        finally:
            _docker.docker("rm", "-f", filler, check=False)
    if _state(cfg.nas_name) != "absent":
        _docker.docker("rm", "-f", cfg.nas_name)
    log(f"starting the NAS stand-in {cfg.nas_name} (http://{cfg.nas_name}:{cfg.nas_port}/)")
    _docker.docker(
        "create", "--name", cfg.nas_name, *_labels(cfg, "nas"), "--network", cfg.mgmt_network,
        "--label", f"{NAS_ROOT_LABEL}={NAS_ROOT}",
        "--restart", "unless-stopped", "--entrypoint", "python3",
        "-v", f"{cfg.nas_volume}:{NAS_ROOT}:ro", tag,
        "/usr/local/bin/gx10_serve_dir.py", "--bind", "0.0.0.0",
        "--directory", NAS_ROOT, str(cfg.nas_port),
    )  # fmt: skip
    _docker.docker("cp", str(_serve_dir_script()), f"{cfg.nas_name}:/usr/local/bin/")
    _docker.docker("start", cfg.nas_name)


def _nas_root(cfg: LabConfig) -> str:
    """The directory a running NAS stand-in serves ("" for one started before it was labelled:
    it served the checkpoint's own directory, and is replaced)."""
    fmt = '{{index .Config.Labels "' + NAS_ROOT_LABEL + '"}}'
    return _docker.docker("inspect", "--format", fmt, cfg.nas_name, check=False).strip()


def _fill_tiny_model(cfg: LabConfig, log: Log) -> None:
    """Copy the real engine's tiny model from its image into the NAS volume, once per image
    (a marker names the image it came from); a half-written copy is never in place."""
    tag = engine.ensure_image(log)
    if not _docker.exists("volume", cfg.nas_volume):
        _docker.docker("volume", "create", *_labels(cfg, "nas"), cfg.nas_volume)
    marker = f"/data/.gx10-tiny-model-{tag.rpartition(':')[2]}"
    script = (
        f"test -e {marker} && exit 0; "
        "rm -rf /data/tiny-model.partial /data/.gx10-tiny-model-* && "
        f"cp -a {engine.TINY_MODEL} /data/tiny-model.partial && "
        "rm -rf /data/tiny-model && mv /data/tiny-model.partial /data/tiny-model && "
        f"touch {marker} && echo copied"
    )
    out = _docker.docker(
        "run", "--rm", "--entrypoint", "/bin/sh", "-v", f"{cfg.nas_volume}:/data",
        tag, "-c", script, timeout=300,
    )  # fmt: skip
    if out == "copied":
        log(f"copied the real engine's tiny model into {cfg.nas_volume}")


def _serve_dir_script() -> Path:
    """The read-only Range-capable file server the model_sync role runs on the head."""
    return project_home() / "roles" / "model_sync" / "files" / "gx10_serve_dir.py"


# The label that records which config (and image) the lab's Prometheus was started with.
PROMETHEUS_CONFIG_LABEL = f"{LAB_LABEL}.prometheus-config"


def prometheus_files(cfg: LabConfig) -> dict[str, tuple[str, int]]:
    """What the lab's Prometheus reads, as `gx10 metrics config` writes it from the lab's
    inventory: {file name: (text, mode)}, prometheus.yml and, where the inventory sets an API
    key, the key file (0600) that prometheus.yml references."""
    from gx10.bench.nodes import load_cluster  # noqa: PLC0415 - ansible is slow to import
    from gx10.metrics import config as metrics_config  # noqa: PLC0415

    cluster = load_cluster(
        [project_home() / cfg.metrics_inventory],
        node_extra=metrics_config.NODE_VARS,
        role_defaults=(metrics_config.ROLE,),
    )
    config = metrics_config.build(cluster, write_key=bool(cluster.api_key.strip()))
    wanted = {metrics_config.CONFIG_FILE, metrics_config.KEY_FILE}
    return {
        str(out.path): (out.text, out.mode)
        for out in metrics_config.files(config)
        if out.path in wanted
    }


def files_tar(files: Mapping[str, tuple[str, int]]) -> bytes:
    """Files as a tar stream for `docker cp - CONTAINER:DIR`: owned by root, each with its mode."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, (text, mode) in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(images.SOURCE_DATE_EPOCH)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def config_digest(tag: str, files: Mapping[str, tuple[str, int]]) -> str:
    digest = hashlib.sha256(tag.encode())
    for name, (text, mode) in sorted(files.items()):
        digest.update(f"\0{name}\0{mode:o}\0".encode() + text.encode())
    return digest.hexdigest()[:16]


def _ensure_prometheus(cfg: LabConfig, log: Log) -> None:
    """Run the lab's Prometheus with the config of `gx10 metrics config -i <the lab inventory>`.

    Recreated (its samples with it: test equipment, nothing kept) when that config or its image
    changed; left alone otherwise. Its HTTP API is published on this machine's loopback."""
    tag = images.ensure(images.prometheus_spec(), log)
    files = prometheus_files(cfg)
    digest = config_digest(tag, files)
    state = _state(cfg.prometheus_name)
    if state == "running":
        label = _docker.docker(
            "inspect", "-f", f'{{{{index .Config.Labels "{PROMETHEUS_CONFIG_LABEL}"}}}}',
            cfg.prometheus_name,
        )  # fmt: skip
        if label == digest:
            return
        log(f"{cfg.prometheus_name}: the scrape config or the image changed; recreating it")
    if state != "absent":
        _docker.docker("rm", "-f", cfg.prometheus_name)
    log(f"starting Prometheus {cfg.prometheus_name} ({cfg.prometheus_url} on this machine)")
    _docker.docker(
        "create", "--name", cfg.prometheus_name, *_labels(cfg, "prometheus"),
        "--label", f"{PROMETHEUS_CONFIG_LABEL}={digest}",
        "--network", cfg.mgmt_network, "--restart", "unless-stopped",
        "-p", f"127.0.0.1:{cfg.prometheus_port}:{images.PROMETHEUS_PORT}",
        tag,
    )  # fmt: skip
    _docker.docker(
        "cp", "-", f"{cfg.prometheus_name}:{images.PROMETHEUS_CONFIG_DIR}",
        input_bytes=files_tar(files),
    )  # fmt: skip
    _docker.docker("start", cfg.prometheus_name)
    _wait_prometheus(cfg)


def _wait_prometheus(cfg: LabConfig, timeout: float = 60.0) -> None:
    """Wait (bounded) until the lab's Prometheus answers its readiness endpoint."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{cfg.prometheus_url}/-/ready", timeout=5)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        if _state(cfg.prometheus_name) not in ("running", "created", "restarting"):
            break
        time.sleep(0.5)
    logs = _docker.docker("logs", "--tail", "20", cfg.prometheus_name, check=False)
    raise LabError(
        f"the lab's Prometheus did not get ready at {cfg.prometheus_url} within {timeout:.0f} s "
        f"({last or _state(cfg.prometheus_name)}); its log ends: {logs[-800:]}"
    )


def _ensure_node(cfg: LabConfig, node: str, tag: str, log: Log) -> bool:
    """Start a node if needed. Returns True when the node was (re)created."""
    state = _state(node)
    if state == "running":
        found = _docker.docker("inspect", "-f", "{{.Config.Image}} {{.HostConfig.ShmSize}}", node)
        image, _, shm = found.partition(" ")
        if image == tag and shm == str(cfg.node_shm_bytes):
            return False
        log(f"{node} runs an older image or shape ({image}, /dev/shm {shm} B); recreating it")
    if state != "absent":
        _docker.docker("rm", "-f", node)
    log(f"starting node {node}")
    _docker.docker(
        "run", "-d", "--name", node, "--hostname", node, *_labels(cfg, "node"),
        "--network", cfg.mgmt_network, "--ip", cfg.mgmt_address(node),
        *_node_security_args(),
        "--stop-signal", "SIGRTMIN+3", "--shm-size", str(cfg.node_shm_bytes),
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        "-v", f"{cfg.volume(node)}:/var/lib/docker",
        tag,
    )  # fmt: skip
    return True


def _wait_booted(cfg: LabConfig, node: str) -> None:
    """Wait (bounded) until systemd finished booting and the node's Docker engine answers."""
    deadline = time.monotonic() + cfg.boot_timeout
    last = ""
    while time.monotonic() < deadline:
        proc = _docker.run(
            ["docker", "exec", node, "systemctl", "is-system-running"], check=False, timeout=30
        )
        last = proc.stdout.strip()
        if last in ("running", "degraded"):
            engine = _docker.run(
                ["docker", "exec", node, "docker", "info", "--format", "{{.ServerVersion}}"],
                check=False,
                timeout=30,
            )
            if engine.returncode == 0:
                return
            last = f"systemd {last}, docker engine not answering yet"
        time.sleep(1)
    raise LabError(
        f"lab node {node} did not finish booting within {cfg.boot_timeout:.0f} s "
        f"(last state: {last or 'unknown'}); see `docker logs {node}`"
    )


def _links(node: str) -> dict[str, dict[str, Any]]:
    out = _docker.node_exec(node, "ip", "-j", "-d", "link", "show", check=False)
    if not out:
        return {}
    return {link["ifname"]: link for link in json.loads(out)}


def _pid(node: str) -> str:
    return _docker.docker("inspect", "-f", "{{.State.Pid}}", node)


Links = dict[str, dict[str, dict[str, Any]]]


def _veth(end: dict[str, Any] | None) -> bool:
    return bool(end) and (end or {}).get("linkinfo", {}).get("info_kind") == "veth"


def _port_ok(cfg: LabConfig, node: str, rail: Rail, links: Links) -> bool:
    """On a switch: the node's rail end is a veth whose far end is its port on the rail's bridge."""
    end = links.get(node, {}).get(rail.netdev)
    port = links.get(cfg.switch_name, {}).get(cfg.port(node, rail))
    if not _veth(end) or not _veth(port) or end is None or port is None:
        return False
    return port.get("master") == cfg.bridge(rail) and end.get("link_index") == port.get("ifindex")


def _unplugged(cfg: LabConfig, rail: Rail, links: Links) -> list[str]:
    """The nodes whose end of the rail is not connected as the topology says (to be replugged)."""
    if cfg.topology == "switch":
        return [node for node in cfg.nodes if not _port_ok(cfg, node, rail, links)]
    return [] if _cable_ok(cfg, rail, links) else list(cfg.nodes)


def _cable_ok(cfg: LabConfig, rail: Rail, links: Links) -> bool:
    """Direct: both ends exist and are veth peers of each other. Switch: every node is plugged."""
    if cfg.topology == "switch":
        return not _unplugged(cfg, rail, links)
    a, b = cfg.nodes
    end_a, end_b = links[a].get(rail.netdev), links[b].get(rail.netdev)
    if not end_a or not end_b:
        return False
    kind_ok = all(e.get("linkinfo", {}).get("info_kind") == "veth" for e in (end_a, end_b))
    return kind_ok and end_a.get("link_index") == end_b.get("ifindex")


def current_generation(macs: Iterable[str | None]) -> int | None:
    """A node's NIC generation from its rail MACs: the highest one found, None if none is a lab MAC.

    After a swap every rail of the node carries the new generation; a rail recabled by `up()` in
    between (a missing cable) takes the node's highest generation, so it never undoes a swap.
    """
    generations = []
    for mac in macs:
        if mac is None:
            continue
        try:
            generations.append(mac_generation(mac))
        except ValueError:
            continue
    return max(generations) if generations else None


def next_generation(macs: Iterable[str | None]) -> int:
    """The NIC generation a swap gives a node: one more than its current one."""
    current = current_generation(macs)
    if current is None:
        raise LabError(
            "the node's rails carry no lab MAC (02:9a:<generation>:...): run `gx10 lab up` to "
            "cable them first"
        )
    if current >= MAX_GENERATION:
        raise LabError(
            f"the node's NICs were swapped {current} times, the most a lab MAC can encode; "
            "recreate it with `gx10 lab replace NODE` (generation 0 again)"
        )
    return current + 1


def _node_macs(links: dict[str, dict[str, Any]], cfg: LabConfig) -> list[str | None]:
    return [links.get(rail.netdev, {}).get("address") for rail in cfg.rails]


def _plug(cfg: LabConfig, node: str, rail: Rail, mac: str, log: Log) -> None:
    """On a switch: a veth pair from the node's rail netdev (with the given MAC) to its port on the
    rail's bridge; the port at the switch's MTU, both ends up."""
    port = cfg.port(node, rail)
    log(f"plugging {node} {rail.netdev} {mac} into {cfg.switch_name} {cfg.bridge(rail)} ({port})")
    _docker.node_exec(node, "ip", "link", "del", rail.netdev, check=False)
    _docker.node_exec(cfg.switch_name, "ip", "link", "del", port, check=False)
    _docker.run([
        "ip", "link", "add", "name", rail.netdev,
        "address", mac, "netns", _pid(node),
        "type", "veth", "peer", "name", port, "netns", _pid(cfg.switch_name),
    ])  # fmt: skip
    _docker.node_exec(
        cfg.switch_name, "ip", "link", "set", port,
        "mtu", str(cfg.switch_mtu), "master", cfg.bridge(rail), "up",
    )  # fmt: skip
    _docker.node_exec(node, "ip", "link", "set", rail.netdev, "up")


def _replug(
    cfg: LabConfig, rail: Rail, nodes: Iterable[str], macs: dict[str, str], log: Log
) -> None:
    """Reconnect these nodes' ends of a rail with the given MACs (direct: the whole cable)."""
    nodes = list(nodes)
    if not nodes:
        return
    if cfg.topology == "switch":
        for node in nodes:
            _plug(cfg, node, rail, macs[node], log)
        return
    for node in cfg.nodes:
        _docker.node_exec(node, "ip", "link", "del", rail.netdev, check=False)
    _cable(cfg, rail, macs, log)


def _cable(cfg: LabConfig, rail: Rail, macs: dict[str, str], log: Log) -> None:
    """One veth pair straight into both nodes' namespaces, each end with the given MAC, links up."""
    a, b = cfg.nodes
    log(f"cabling {rail.netdev}: {a} {macs[a]} <-> {b} {macs[b]}")
    _docker.run([
        "ip", "link", "add", "name", rail.netdev,
        "address", macs[a], "netns", _pid(a),
        "type", "veth", "peer", "name", rail.netdev,
        "address", macs[b], "netns", _pid(b),
    ])  # fmt: skip
    # A NIC with its cable plugged in: the link is up, addressing is the roles' job.
    for node in cfg.nodes:
        _docker.node_exec(node, "ip", "link", "set", rail.netdev, "up")


def ensure_rails(cfg: LabConfig, log: Log, *, generation: int | None = None) -> None:
    """Make sure every rail cable exists between the two nodes (on a switch: every node's port).

    A healthy cable is left alone whatever its MACs (a swap gave one node new ones). A missing or
    broken cable is recreated with each node's MAC of `generation`, by default the node's current
    generation (read from its other rails; 0 for a fresh node).
    """
    links = _all_links(cfg)
    generations = {
        node: generation
        if generation is not None
        else current_generation(_node_macs(links[node], cfg)) or 0
        for node in cfg.nodes
    }
    cabled = False
    for rail in cfg.rails:
        unplugged = _unplugged(cfg, rail, links)
        if not unplugged:
            continue
        cabled = True
        macs = {node: cfg.mac(node, rail, generations[node]) for node in cfg.nodes}
        _replug(cfg, rail, unplugged, macs, log)
    if cabled:
        _wait_carrier(cfg)


def _all_links(cfg: LabConfig) -> Links:
    """Every node's links, and on a switch the switch's (its ports and bridges)."""
    links = {node: _links(node) for node in cfg.nodes}
    if cfg.topology == "switch":
        links[cfg.switch_name] = _links(cfg.switch_name)
    return links


def swap_nics(node: str, cfg: LabConfig | None = None, log: Log = print) -> LabStatus:
    """Replace a node's rail NICs (test equipment): both cables are recreated with new MACs.

    The node's rails get the next NIC generation's MACs; the peer keeps its MACs. Links come up
    and carrier is waited for, as when a technician plugs the cables back in. Addressing is the
    roles' job: whatever configuration referred to the old MACs is now stale.
    """
    cfg = cfg or current()
    if node not in cfg.nodes:
        raise LabError(f"no lab node {node!r}; the nodes are {', '.join(cfg.nodes)}")
    for name in cfg.nodes:
        if _state(name) != "running":
            raise LabError(f"lab node {name} is {_state(name)}: run `gx10 lab up` first")
    links = _all_links(cfg)
    broken = [rail.netdev for rail in cfg.rails if not _cable_ok(cfg, rail, links)]
    if broken:
        raise LabError(f"rails not cabled ({', '.join(broken)}): run `gx10 lab up` first")
    generation = next_generation(_node_macs(links[node], cfg))
    log(f"swapping the rail NICs of {node} (NIC generation {generation})")
    for rail in cfg.rails:
        macs = {name: str(links[name][rail.netdev]["address"]) for name in cfg.nodes}
        macs[node] = cfg.mac(node, rail, generation)
        # Deleting one end of a veth pair deletes the other: the cable is unplugged. On a switch
        # only this node's cable is; on direct cables the peer's end goes too and comes back
        # with its own MAC.
        _docker.node_exec(node, "ip", "link", "del", rail.netdev)
        _replug(cfg, rail, [node] if cfg.topology == "switch" else cfg.nodes, macs, log)
    _wait_carrier(cfg)
    return status(cfg)


def throttle(
    node: str,
    netdev: str,
    rate: str | None,
    cfg: LabConfig | None = None,
    log: Log = print,
) -> str:
    """Throttle a rail end's egress to `rate` (a tc rate, e.g. "300mbit"), or clear it (None).

    Test equipment for the fabric checks: a token bucket (`tc qdisc replace ... root tbf`) on one
    end stands in for the ConnectX-7 stuck state, a rail far slower than every status suggests.
    The burst (64 KiB) holds a 9000-byte frame, so jumbo pings still pass, as they do on the
    stuck hardware. Clearing removes the root qdisc (a missing one is not an error). Returns the
    qdisc line `tc qdisc show` reports afterwards.
    """
    cfg = cfg or current()
    if node not in cfg.nodes:
        raise LabError(f"no lab node {node!r}; the nodes are {', '.join(cfg.nodes)}")
    netdevs = [rail.netdev for rail in cfg.rails]
    if netdev not in netdevs:
        raise LabError(f"{netdev!r} is not a lab rail; the rails are {', '.join(netdevs)}")
    if _state(node) != "running":
        raise LabError(f"lab node {node} is {_state(node)}: run `gx10 lab up` first")
    if rate is None:
        log(f"clearing the throttle on {node} {netdev}")
        out = _docker.run(
            ["docker", "exec", node, "tc", "qdisc", "del", "dev", netdev, "root"],
            check=False,
            timeout=30,
        )
        # A device without a root qdisc of its own answers "Cannot delete qdisc with handle of
        # zero" (older iproute2: "No such file or directory"): already clear.
        if out.returncode != 0 and not any(
            text in out.stderr for text in ("handle of zero", "No such file or directory")
        ):
            raise LabError(
                f"`tc qdisc del dev {netdev} root` on {node} failed: {out.stderr.strip()}"
            )
    else:
        if not rate.strip() or any(c.isspace() for c in rate):
            raise LabError(f"rate {rate!r} is not a tc rate (e.g. 300mbit, 1gbit)")
        log(f"throttling {node} {netdev} to {rate} (tc tbf)")
        _docker.node_exec(
            node, "tc", "qdisc", "replace", "dev", netdev, "root",
            "tbf", "rate", rate, "burst", "64kb", "latency", "50ms",
            timeout=30,
        )  # fmt: skip
    return _docker.node_exec(node, "tc", "qdisc", "show", "dev", netdev, "root", timeout=30)


NVIDIA_SMI_STATE_DIR = "/var/lib/gx10-sim/nvidia-smi"  # the nvidia-smi simulator's, in a node
HEAT_FILES = ("ambient_offset_c", "thermal_tau_s")
# Writes each file whose value is given (atomically: temporary file, then rename), removes each
# whose value is empty, then prints NAME=VALUE for both ("" when absent).
_HEAT_SCRIPT = """
set -eu
dir=$1; shift
mkdir -p "$dir"
for name in ambient_offset_c thermal_tau_s; do
  value=$1; shift
  if [ -n "$value" ]; then
    printf '%s\\n' "$value" > "$dir/.$name.heat"
    mv -f "$dir/.$name.heat" "$dir/$name"
  else
    rm -f "$dir/$name"
  fi
done
for name in ambient_offset_c thermal_tau_s; do
  printf '%s=%s\\n' "$name" "$(cat "$dir/$name" 2>/dev/null || true)"
done
"""


def heat(
    node: str,
    offset_c: float | None,
    tau_s: float | None = None,
    cfg: LabConfig | None = None,
    log: Log = print,
) -> dict[str, float | None]:
    """Warm (or cool) a node's GPU for the thermal checks (test equipment), or clear it (None).

    Sets the nvidia-smi simulator's `ambient_offset_c` (degrees C added to its temperature model:
    +25 takes a loaded node past the 84 C abort limit and keeps an idle one above 70 C) and its
    `thermal_tau_s` (the thermal time constant, 0 for no lag) in the node's state directory; a
    None removes the file (offset 0, tau 30 s). The model follows from its next reading on, with
    its time constant. Returns both settings as the node now has them (None: the default).
    """
    cfg = cfg or current()
    if node not in cfg.nodes:
        raise LabError(f"no lab node {node!r}; the nodes are {', '.join(cfg.nodes)}")
    if offset_c is not None and not -100.0 <= offset_c <= 100.0:
        raise LabError(f"offset {offset_c} C is outside -100..100")
    if tau_s is not None and not 0.0 <= tau_s <= 86400.0:
        raise LabError(f"time constant {tau_s} s is outside 0..86400")
    if _state(node) != "running":
        raise LabError(f"lab node {node} is {_state(node)}: run `gx10 lab up` first")
    values = ["" if value is None else repr(float(value)) for value in (offset_c, tau_s)]
    tau = "default" if tau_s is None else f"{tau_s:g} s"
    if offset_c is None:
        log(
            f"clearing the GPU heat on {node}"
            + ("" if tau_s is None else f" (time constant {tau})")
        )
    else:
        log(f"heating {node}'s GPU by {offset_c:+g} C (time constant {tau})")
    out = _docker.node_exec(
        node, "sh", "-c", _HEAT_SCRIPT, "gx10-heat", NVIDIA_SMI_STATE_DIR, *values, timeout=30
    )
    return parse_heat(out)


def parse_heat(text: str) -> dict[str, float | None]:
    """`NAME=VALUE` lines (as heat's script prints them) -> {name: float or None}."""
    settings: dict[str, float | None] = dict.fromkeys(HEAT_FILES)
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name in settings and value.strip():
            try:
                settings[name] = float(value)
            except ValueError:
                settings[name] = None
    return settings


def replace_node(node: str, cfg: LabConfig | None = None, log: Log = print) -> LabStatus:
    """Replace a node by a fresh machine: remove its container and Docker volume, then `up()`.

    The new node boots from the image with nothing configured and generation-0 MACs; `up()`
    recables both rails (the old cables went with the old node's namespace).
    """
    cfg = cfg or current()
    if node not in cfg.nodes:
        raise LabError(f"no lab node {node!r}; the nodes are {', '.join(cfg.nodes)}")
    log(f"replacing {node} by a fresh machine")
    if _state(node) != "absent":
        _docker.docker("rm", "-f", "-v", node, timeout=180)
    if _docker.exists("volume", cfg.volume(node)):
        _docker.docker("volume", "rm", "-f", cfg.volume(node))
    return up(cfg, log)


def _wait_carrier(cfg: LabConfig, timeout: float = 15.0) -> None:
    """Wait (bounded) until every rail end reports carrier, as a cabled NIC would."""
    deadline = time.monotonic() + timeout
    down: list[str] = []
    while time.monotonic() < deadline:
        links = {node: _links(node) for node in cfg.nodes}
        down = [
            f"{node}:{rail.netdev}"
            for node in cfg.nodes
            for rail in cfg.rails
            if links[node].get(rail.netdev, {}).get("operstate") != "UP"
        ]
        if not down:
            return
        time.sleep(0.5)
    raise LabError(f"rails without carrier after {timeout:.0f} s: {', '.join(down)}")


def up(cfg: LabConfig | None = None, log: Log = print) -> LabStatus:
    """Build what is missing and bring the lab up. Idempotent, and fast when already up.

    Without a config, the default lab (two nodes on direct cables). A lab of another shape is
    reshaped: nodes it does not name are removed with their volumes, the switch is added or
    removed, and the rails recabled; nodes it keeps keep their state.
    """
    cfg = cfg or LabConfig()
    node_tag = images.ensure(images.node_spec(), log)
    _ensure_network(cfg, log)
    _ensure_registry(cfg, log)
    _ensure_nas(cfg, log)
    _remove_extra(cfg, log)
    for node in cfg.nodes:
        _ensure_node(cfg, node, node_tag, log)
    if cfg.topology == "switch":
        _ensure_switch(cfg, node_tag, log)
    for node in cfg.nodes:
        _wait_booted(cfg, node)
    ensure_rails(cfg, log)
    registry.publish(cfg, log)
    service_key(cfg, log)
    _ensure_prometheus(cfg, log)
    result = status(cfg)
    if not result.running:
        raise LabError("lab did not come up: " + "; ".join(result.problems))
    return result


def service_key(cfg: LabConfig, log: Log = print) -> Path:
    """The lab inventory's service key, made as a user makes theirs (`gx10 keys init`): the lab
    runs the gateway as real nodes do, and its inventory reads the key from that file."""
    from gx10 import keys  # noqa: PLC0415 - ansible-runner is slow to import

    made = keys.init_service_key(project_home() / cfg.metrics_inventory)
    if made.created:
        log(f"made {cfg.metrics_inventory}'s service key (gx10 keys init): {made.path}")
    return made.path


def down(cfg: LabConfig | None = None, log: Log = print) -> None:
    """Remove every lab object: containers, then their cables and volumes, then the network."""
    cfg = cfg or current()
    label = f"label={LAB_LABEL}={cfg.name}"
    nodes = list(dict.fromkeys([*cfg.nodes, *_node_containers(cfg)]))
    containers = _docker.docker("ps", "-aq", "--filter", label).split()
    if containers:
        log(f"removing {len(containers)} lab containers")
        _docker.docker("rm", "-f", "-v", *containers, timeout=180)
    volumes = [cfg.volume(n) for n in nodes] + [f"{cfg.name}-registry-data", cfg.nas_volume]
    volumes += _docker.docker("volume", "ls", "-q", "--filter", label).split()
    for volume in dict.fromkeys(volumes):
        if _docker.exists("volume", volume):
            _docker.docker("volume", "rm", "-f", volume)
    networks = _docker.docker("network", "ls", "-q", "--filter", label).split()
    for network in networks:
        _docker.docker("network", "rm", network)


def _node_containers(cfg: LabConfig) -> list[str]:
    """The names of the lab's node containers, in any state, sorted."""
    out = _docker.docker(
        "ps", "-a", "--format", "{{.Names}}",
        "--filter", f"label={LAB_LABEL}={cfg.name}", "--filter", f"label={LAB_LABEL}.role=node",
        check=False,
    )  # fmt: skip
    return sorted(out.split())


def current(name: str = LabConfig().name) -> LabConfig:
    """The shape of the lab as it stands (its node containers); the default lab if there is none.

    Every command but `up` works on the lab as it is: `gx10 lab up --nodes 4` once, then
    `gx10 lab status`, `reboot gx10-c`, ... act on four nodes."""
    default = LabConfig(name=name)
    count = len(_node_containers(default))
    if count <= len(default.nodes):
        return default
    try:
        return LabConfig.sized(count)
    except ValueError as error:
        raise LabError(
            f"the lab has {count} node containers: {error}; run `gx10 lab down`"
        ) from None


def _remove_extra(cfg: LabConfig, log: Log) -> None:
    """Reshape: remove node containers (and their volumes) the config does not name, and the
    switch when the config has none (its bridges and ports go with its namespace)."""
    for node in _node_containers(cfg):
        if node in cfg.nodes:
            continue
        log(f"removing node {node} (not in a lab of {len(cfg.nodes)})")
        _docker.docker("rm", "-f", "-v", node, timeout=180)
        if _docker.exists("volume", cfg.volume(node)):
            _docker.docker("volume", "rm", "-f", cfg.volume(node))
    if cfg.topology != "switch" and _state(cfg.switch_name) != "absent":
        log(f"removing the switch {cfg.switch_name} (direct cables now)")
        _docker.docker("rm", "-f", cfg.switch_name, timeout=60)


def _ensure_switch(cfg: LabConfig, tag: str, log: Log) -> None:
    """The switch stand-in: a container with no network of Docker's, one bridge per rail.

    It runs the node image's `sleep` (it needs `ip` and nothing else); a recreated switch has
    lost every port, and `ensure_rails` plugs every node in again."""
    if _state(cfg.switch_name) != "running":
        if _state(cfg.switch_name) != "absent":
            _docker.docker("rm", "-f", cfg.switch_name, timeout=60)
        log(f"starting the switch {cfg.switch_name} (a bridge per rail)")
        _docker.docker(
            "run", "-d", "--name", cfg.switch_name, *_labels(cfg, "switch"),
            "--network", "none", "--cap-add", "NET_ADMIN", "--restart", "unless-stopped",
            "--entrypoint", "sleep", tag, "infinity",
        )  # fmt: skip
    bridges = _links(cfg.switch_name)
    for rail in cfg.rails:
        bridge = cfg.bridge(rail)
        if bridges.get(bridge, {}).get("linkinfo", {}).get("info_kind") == "bridge":
            continue
        # No STP (each rail is one bridge, no loop), and frames forwarded as soon as a port is up.
        _docker.node_exec(
            cfg.switch_name, "ip", "link", "add", bridge, "mtu", str(cfg.switch_mtu),
            "type", "bridge", "stp_state", "0", "forward_delay", "0",
        )  # fmt: skip
        _docker.node_exec(cfg.switch_name, "ip", "link", "set", bridge, "up")


def _rails(cfg: LabConfig, node: str, links: Links) -> tuple[RailStatus, ...]:
    def peer(rail: Rail) -> str | None:
        if cfg.topology == "switch":
            plugged = _port_ok(cfg, node, rail, links)
            return f"{cfg.switch_name} {cfg.bridge(rail)}" if plugged else None
        return next(n for n in cfg.nodes if n != node) if _cable_ok(cfg, rail, links) else None

    return tuple(
        RailStatus(
            rail.netdev,
            links[node].get(rail.netdev, {}).get("address"),
            links[node].get(rail.netdev, {}).get("operstate"),
            peer(rail),
        )
        for rail in cfg.rails
    )


def status(cfg: LabConfig | None = None) -> LabStatus:
    """Report on the lab without changing it."""
    cfg = cfg or current()
    problems: list[str] = []
    nodes: list[NodeStatus] = []
    links: dict[str, dict[str, dict[str, Any]]] = {}
    for node in cfg.nodes:
        state = _state(node)
        if state != "running":
            problems.append(f"node {node} is {state} (run `gx10 lab up`)")
            nodes.append(NodeStatus(node, state))
            continue
        links[node] = _links(node)
        mgmt = _docker.docker(
            "inspect", "-f",
            f'{{{{(index .NetworkSettings.Networks "{cfg.mgmt_network}").IPAddress}}}}', node,
            check=False,
        )  # fmt: skip
        engine = _docker.node_exec(
            node, "docker", "info", "--format", "{{.ServerVersion}}", check=False, timeout=30
        )
        if not engine:
            problems.append(f"node {node}: its Docker engine does not answer")
        nodes.append(NodeStatus(node, state, mgmt or None, engine or None))
    if cfg.topology == "switch":
        switch_state = _state(cfg.switch_name)
        if switch_state != "running":
            problems.append(f"switch {cfg.switch_name} is {switch_state} (run `gx10 lab up`)")
        else:
            links[cfg.switch_name] = _links(cfg.switch_name)
    if len(links) == len(cfg.nodes) + (cfg.topology == "switch"):
        for rail in cfg.rails:
            if cfg.topology == "switch":
                problems.extend(
                    f"rail {rail.netdev}: {node} is not plugged into {cfg.switch_name} "
                    f"{cfg.bridge(rail)}"
                    for node in _unplugged(cfg, rail, links)
                )
            elif not _cable_ok(cfg, rail, links):
                a, b = cfg.nodes
                problems.append(f"rail {rail.netdev} is not cabled {a} <-> {b}")
        nodes = [
            NodeStatus(n.name, n.state, n.mgmt_address, n.docker_engine, _rails(cfg, n.name, links))
            for n in nodes
        ]
    registry_state = _state(cfg.registry_name)
    if registry_state != "running":
        problems.append(f"registry {cfg.registry_name} is {registry_state}")
    nas_state = _state(cfg.nas_name)
    if nas_state != "running":
        problems.append(f"NAS stand-in {cfg.nas_name} is {nas_state} (run `gx10 lab up`)")
    prometheus_state = _state(cfg.prometheus_name)
    if prometheus_state != "running":
        problems.append(
            f"Prometheus {cfg.prometheus_name} is {prometheus_state} (run `gx10 lab up`)"
        )
    return LabStatus(
        name=cfg.name,
        nodes=tuple(nodes),
        registry=registry_state,
        registry_address=cfg.registry_address,
        problems=tuple(problems),
        prometheus=prometheus_state,
        prometheus_url=cfg.prometheus_url,
    )


# --------------------------------------------------------------------------------------------
# Fault injectors (test equipment for the supervision tests): reboot, power cut, stall, crash
# --------------------------------------------------------------------------------------------

# How long a graceful reboot may take to bring the node down before the power is cut instead.
REBOOT_STOP_TIMEOUT = 60.0
# The serving container on every node (roles/vllm_serve: vllm_serve_container_name).
SERVE_CONTAINER = "gx10-vllm"
# The vLLM simulator's stall switch inside the serving container (vllm_sim DEFAULT_STALL_FILE).
STALL_FILE = "/run/gx10-vllm-sim/stall"
# Creates (on) or removes (off) the stall file $1, then prints whether it exists.
_STALL_SCRIPT = """
set -eu
file=$1
if [ "$2" = on ]; then mkdir -p "$(dirname "$file")"; : > "$file"; else rm -f "$file"; fi
if [ -e "$file" ]; then echo stalled; else echo clear; fi
"""


@dataclass(frozen=True, slots=True)
class PowerResult:
    """What a reboot or power cut did: per node how it went down and the systemd state after."""

    nodes: tuple[str, ...]
    method: dict[str, str]
    systemd: dict[str, str]
    status: LabStatus

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "method": dict(self.method),
            "systemd": dict(self.systemd),
            "status": self.status.to_dict(),
        }

    def summary_lines(self) -> list[str]:
        lines = [
            f"{node}: {self.method[node]}; back up, systemd {self.systemd[node]}"
            for node in self.nodes
        ]
        return lines + self.status.summary_lines()


def _known_node(cfg: LabConfig, node: str) -> None:
    if node not in cfg.nodes:
        raise LabError(f"no lab node {node!r}; the nodes are {', '.join(cfg.nodes)}")


def _require_lab(cfg: LabConfig) -> Links:
    """Every node running (else the lab is not up); returns their links (and the switch's)."""
    for name in cfg.nodes:
        state = _state(name)
        if state != "running":
            raise LabError(f"lab node {name} is {state}: run `gx10 lab up` first")
    return _all_links(cfg)


def _cable_macs(
    cfg: LabConfig, links: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, dict[str, str]]:
    """Per rail, each node's end MAC as cabled now (a missing end: its node's generation's MAC).

    Recorded before a node goes down: its cable ends vanish with its network namespace, and a
    veth pair dies whole, so the peer's end goes too. Both are recreated with these MACs.
    """
    generations = {
        node: current_generation(_node_macs(links[node], cfg)) or 0 for node in cfg.nodes
    }
    return {
        rail.netdev: {
            node: str(
                links[node].get(rail.netdev, {}).get("address")
                or cfg.mac(node, rail, generations[node])
            )
            for node in cfg.nodes
        }
        for rail in cfg.rails
    }


def _recable(cfg: LabConfig, macs: dict[str, dict[str, str]], log: Log) -> None:
    """Recreate every broken rail with the recorded MACs (names as before); wait for carrier."""
    links = _all_links(cfg)
    for rail in cfg.rails:
        _replug(cfg, rail, _unplugged(cfg, rail, links), macs[rail.netdev], log)
    _wait_carrier(cfg)


def _wait_stopped(node: str, timeout: float) -> bool:
    """Wait (bounded) until the node's container is no longer running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(node) != "running":
            return True
        time.sleep(1)
    return _state(node) != "running"


def _system_state(node: str) -> str:
    out = _docker.run(
        ["docker", "exec", node, "systemctl", "is-system-running"], check=False, timeout=30
    )
    return out.stdout.strip() or "unknown"


def _power_on(cfg: LabConfig, nodes: Iterable[str], log: Log) -> dict[str, str]:
    """Start the nodes, wait (bounded) until each has booted; returns each one's systemd state."""
    nodes = list(nodes)
    for node in nodes:
        log(f"powering {node} on")
        _docker.docker("start", node, timeout=120)
    for node in nodes:
        _wait_booted(cfg, node)
    return {node: _system_state(node) for node in nodes}


def reboot(
    node: str,
    cfg: LabConfig | None = None,
    log: Log = print,
    *,
    stop_timeout: float = REBOOT_STOP_TIMEOUT,
) -> PowerResult:
    """Reboot a node as on hardware (test equipment): `systemctl reboot` inside, then boot again.

    The graceful path: systemd stops its units in order and exits, and the node's container
    stops. If it is still running after `stop_timeout` seconds, the reboot is forced (`docker
    kill`, a reset button). The container is then started again: its own systemd boots, and its
    enabled units (the Docker engine, the RDMA sysfs simulator, gx10 units) come back by
    themselves, as do containers in its engine whose restart policy says so. Its rail cables
    vanished with its network namespace (both ends: a veth pair dies whole), so they are
    recreated with the same names and MACs on both ends; the peer's NetworkManager re-applies
    its profile to the re-appearing device, as to a NIC whose cable is plugged back in.
    """
    cfg = cfg or current()
    _known_node(cfg, node)
    macs = _cable_macs(cfg, _require_lab(cfg))
    log(f"rebooting {node} (systemctl reboot)")
    try:  # systemctl queues the reboot and returns; the exec may end with the node
        _docker.run(["docker", "exec", node, "systemctl", "reboot"], check=False, timeout=60)
    except LabError as error:
        log(f"`systemctl reboot` in {node} did not return ({error}); waiting for it to stop")
    method = "rebooted (systemctl reboot)"
    if not _wait_stopped(node, stop_timeout):
        log(f"{node} still running {stop_timeout:.0f} s after `systemctl reboot`: forcing it")
        _docker.docker("kill", node, check=False, timeout=60)
        if not _wait_stopped(node, 30):
            raise LabError(f"lab node {node} did not stop, even after `docker kill {node}`")
        method = f"forced (docker kill) after {stop_timeout:.0f} s without a clean stop"
    systemd = _power_on(cfg, [node], log)
    _recable(cfg, macs, log)
    return PowerResult((node,), {node: method}, systemd, status(cfg))


def power_cut(
    nodes: Iterable[str] = (),
    cfg: LabConfig | None = None,
    log: Log = print,
) -> PowerResult:
    """Cut the power of nodes (default: all) at once, then power them on (test equipment).

    `docker kill` (SIGKILL to the node's systemd): no unit is stopped, nothing flushed, as after
    an AC power cut. Then every node boots again (`docker start`) and the rails are recabled with
    their MACs as before.
    """
    cfg = cfg or current()
    chosen = list(dict.fromkeys(nodes)) or list(cfg.nodes)
    for node in chosen:
        _known_node(cfg, node)
    macs = _cable_macs(cfg, _require_lab(cfg))
    log(f"cutting the power of {', '.join(chosen)}")
    _docker.docker("kill", *chosen, timeout=60)
    for node in chosen:
        if not _wait_stopped(node, 30):
            raise LabError(f"lab node {node} still runs after `docker kill {node}`")
    systemd = _power_on(cfg, chosen, log)
    _recable(cfg, macs, log)
    method = dict.fromkeys(chosen, "power cut (docker kill)")
    return PowerResult(tuple(chosen), method, systemd, status(cfg))


def _serving(node: str, container: str) -> dict[str, str]:
    """The serving container in a node: its state, rank role and main PID (inside the node)."""
    proc = _docker.run(
        [
            "docker", "exec", node, "docker", "inspect", "-f",
            '{{.State.Status}}|{{index .Config.Labels "gx10.role"}}|{{.State.Pid}}'
            "|{{.State.ExitCode}}|{{.RestartCount}}",
            container,
        ],
        check=False, timeout=30,
    )  # fmt: skip
    if proc.returncode != 0:
        raise LabError(
            f"no serving container {container} on {node}: start the serving stage first "
            "(playbooks/serve.yml)"
        )
    state, role, pid, code, restarts = (proc.stdout.strip().split("|") + [""] * 5)[:5]
    return {"state": state, "role": role, "pid": pid, "exit_code": code, "restarts": restarts}


def _running_serving(cfg: LabConfig, node: str, container: str) -> dict[str, str]:
    """The serving container of a running lab node, running (LabError naming what is not)."""
    _known_node(cfg, node)
    state = _state(node)
    if state != "running":
        raise LabError(f"lab node {node} is {state}: run `gx10 lab up` first")
    serving = _serving(node, container)
    if serving["state"] != "running" or serving["pid"] in ("", "0"):
        raise LabError(
            f"serving container {container} on {node} is {serving['state']}, not running"
        )
    return serving


def stall(
    node: str,
    stalled: bool = True,
    cfg: LabConfig | None = None,
    log: Log = print,
    *,
    container: str = SERVE_CONTAINER,
) -> dict[str, Any]:
    """Switch the vLLM simulator's stall mode in the node's serving container (test equipment).

    Stalled, the head's HTTP stays up (/health, /v1/models) but generation makes no token; the
    switch is a file the simulator reads at every step (STALL_FILE), so no restart is needed.
    Only the head serves HTTP: on a worker's node this is refused. A restarted head starts
    without a stall.
    """
    serving = _running_serving(cfg or current(), node, container)
    if serving["role"] not in ("head", ""):
        raise LabError(
            f"{container} on {node} is the {serving['role']} rank; the stall mode is the head's "
            "(its HTTP API): stall the head's node"
        )
    log(f"{'stalling' if stalled else 'clearing the stall of'} {container} on {node}")
    out = _docker.node_exec(
        node, "docker", "exec", container, "sh", "-c", _STALL_SCRIPT, "gx10-stall",
        STALL_FILE, "on" if stalled else "off",
        timeout=30,
    )  # fmt: skip
    now = out.strip().splitlines()[-1] if out.strip() else ""
    if now != ("stalled" if stalled else "clear"):
        raise LabError(f"could not {'set' if stalled else 'clear'} {STALL_FILE} in {container}")
    return {"node": node, "container": container, "stalled": stalled, "file": STALL_FILE}


def kill_rank(
    node: str,
    cfg: LabConfig | None = None,
    log: Log = print,
    *,
    container: str = SERVE_CONTAINER,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Kill the rank's main process in the node's serving container with SIGKILL (test equipment).

    The process is killed from the node by its PID, as a crash (the OOM killer, a segfault) ends
    it: Docker sees the container's main process die (exit 137), not a `docker stop` or `docker
    kill`, so its restart policy applies. Waits (bounded) until the container no longer runs
    that process. Returns what was killed and the container's state after.
    """
    before = _running_serving(cfg or current(), node, container)
    pid = before["pid"]
    cmdline = _docker.node_exec(
        node, "sh", "-c", f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False, timeout=30
    ).strip()
    log(f"killing {container}'s main process on {node}: pid {pid} ({cmdline or '?'}), SIGKILL")
    _docker.node_exec(node, "kill", "-KILL", pid, timeout=30)
    deadline = time.monotonic() + timeout
    after = before
    while time.monotonic() < deadline:
        try:
            after = _serving(node, container)
        except LabError:  # removed at once (`docker run --rm`, a supervised rank): it is gone
            after = {"state": "removed", "role": before["role"], "pid": "", "exit_code": "",
                     "restarts": ""}  # fmt: skip
            break
        if after["state"] != "running" or after["pid"] != pid:
            break
        time.sleep(0.5)
    else:
        raise LabError(f"{container} on {node} still runs pid {pid} {timeout:.0f} s after SIGKILL")
    return {
        "node": node,
        "container": container,
        "role": before["role"] or None,
        "pid": int(pid),
        "command": cmdline or None,
        "signal": "SIGKILL",
        "state": after["state"],
        "exit_code": int(after["exit_code"]) if after["exit_code"].lstrip("-").isdigit() else None,
        "restarts": int(after["restarts"]) if after["restarts"].isdigit() else None,
    }
