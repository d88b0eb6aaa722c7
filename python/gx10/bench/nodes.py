"""The cluster a bench run measures, read from an Ansible inventory: its nodes (groups `head`
and `workers`, in that order), how to run a command on each, and the head's API endpoint.

Ansible's own inventory and variable code reads the inventory (group_vars, host_vars, vars
plugins, templated values), so `gx10 bench -i INV` sees the cluster exactly as a playbook does.
A node's command transport follows its connection variables:

- `community.docker.docker` / `docker`: `docker exec -i [-u ansible_user] <ansible_host or name>`
- `ssh` (the default) / `paramiko`: `ssh -T -o BatchMode=yes [-p port] [-i key] [user@]host CMD`
  (the command as one shell string, as ssh passes it to the remote shell)
- `local`: the command itself
- `ansible_become: true` adds `sudo -n` (never a password prompt) to the commands that need root
  (the node's gx10-gpu-clock tool); telemetry (nvidia-smi) runs unprivileged.

The endpoint is the cluster plan's (module_utils/cluster_plan.py `endpoint`, which the smoke stage
and gx10 doctor read from the validated plan): `gx10_api_host | ansible_host | name`, port
`gx10_serve_port` (8000), https behind an API gateway with TLS (`gx10_gateway_enabled`,
`gx10_gateway_tls_cert`; the inventory's key is one the gateway accepts); the model
`vllm_serve_served_model_name` (deepseek-v4-flash); the API key `vllm_serve_api_key` (kept out
of every repr, log line and results file). Other commands (`gx10 clients`) ask for more of the
head's variables (`extra`), with the named roles' `defaults/main.yml` beneath the inventory's
values, as Ansible ranks role defaults.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gx10 import _collection
from gx10.errors import Gx10Error, InventoryNotFoundError
from gx10.paths import ansible_cfg, project_home

DEFAULT_TOOL = "/usr/local/sbin/gx10-gpu-clock"
DEFAULT_MODEL = "deepseek-v4-flash"
DOCKER_CONNECTIONS = frozenset(
    {"docker", "community.docker.docker", "community.docker.docker_api", "docker_api"}
)
SSH_CONNECTIONS = frozenset(
    {
        "ssh",
        "ansible.builtin.ssh",
        "smart",
        "paramiko",
        "paramiko_ssh",
        "ansible.builtin.paramiko_ssh",
    }
)
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
# A lost connection must end the ssh client (and so the node's session, by EOF) within seconds,
# not after the kernel's TCP timeout.
SSH_KEEPALIVE = ("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")


class InventoryError(Gx10Error):
    """The inventory does not describe a cluster `gx10 bench -i` can drive."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node and how to run a command on it."""

    name: str
    group: str  # "head" or "workers"
    transport: tuple[str, ...] = ()  # argv prefix; () runs the command locally
    remote_shell: bool = False  # ssh: the command is passed as one shell string
    become: tuple[str, ...] = ()  # ("sudo", "-n"): for the commands that need root
    tool: tuple[str, ...] = (DEFAULT_TOOL,)  # the node's gx10-gpu-clock
    nvidia_smi: str = "nvidia-smi"
    # The node's `node_extra` variables, templated (role defaults beneath the inventory's values).
    settings: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def argv(self, command: Sequence[str], *, privileged: bool = False) -> list[str]:
        """The controller-side argv that runs `command` on this node."""
        cmd = [*(self.become if privileged else ()), *command]
        if self.remote_shell:
            return [*self.transport, shlex.join(cmd)]
        return [*self.transport, *cmd]

    def tool_argv(self, *args: str) -> list[str]:
        """gx10-gpu-clock ARGS on this node, as root."""
        return self.argv([*self.tool, *args], privileged=True)

    def describe(self) -> str:
        via = shlex.join(self.transport) if self.transport else "local"
        return f"{self.name} ({via}{', sudo' if self.become else ''})"


@dataclass(frozen=True, slots=True)
class Cluster:
    """What `gx10 bench -i` needs from the inventory."""

    sources: tuple[str, ...]
    nodes: tuple[Node, ...]
    endpoint: str  # http://host:port
    model: str
    api_key: str = field(default="", repr=False)
    # The head's `extra` variables, templated (role defaults beneath the inventory's values).
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def head(self) -> Node:
        return self.nodes[0]


def plain(value: Any) -> Any:
    """Ansible's tagged values (str, int, float, bool, and mappings and lists of them) as plain
    Python values, so every serializer (PyYAML's safe dumper included) takes them."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def transport_for(name: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """Node fields (transport, remote_shell, become) from a host's templated connection vars."""
    connection = str(hostvars.get("ansible_connection") or "ssh")
    host = str(hostvars.get("ansible_host") or name)
    user = hostvars.get("ansible_user")
    transport: list[str]
    remote_shell = False
    if connection in DOCKER_CONNECTIONS:
        transport = ["docker", "exec", "-i"]
        if user:
            transport += ["-u", str(user)]
        transport.append(host)
    elif connection in SSH_CONNECTIONS:
        transport = ["ssh", "-T", "-o", "BatchMode=yes", *SSH_KEEPALIVE]
        port = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port")
        if port:
            transport += ["-p", str(port)]
        key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get(
            "ansible_private_key_file"
        )
        if key:
            transport += ["-i", str(Path(str(key)).expanduser())]
        for extra in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
            if hostvars.get(extra):
                transport += shlex.split(str(hostvars[extra]))
        user = user or hostvars.get("ansible_ssh_user")
        transport += [f"{user}@{host}" if user else host, "--"]
        remote_shell = True
    elif connection in LOCAL_CONNECTIONS:
        transport = []
    else:
        raise InventoryError(
            f"{name}: ansible_connection {connection!r} is not one gx10 bench can use "
            "(ssh, community.docker.docker or local)"
        )
    become: tuple[str, ...] = ()
    if _truthy(hostvars.get("ansible_become", False)):
        method = str(hostvars.get("ansible_become_method") or "sudo")
        if method not in ("sudo", "ansible.builtin.sudo"):
            raise InventoryError(
                f"{name}: ansible_become_method {method!r}: gx10 bench runs the node's clock "
                "tool through `sudo -n` only"
            )
        become = ("sudo", "-n")
        become_user = hostvars.get("ansible_become_user")
        if become_user and str(become_user) != "root":
            become += ("-u", str(become_user))
    return {"transport": tuple(transport), "remote_shell": remote_shell, "become": become}


# The host variables read for each node (templated one by one: a variable the bench does not use
# cannot break it).
_NODE_VARS = (
    "ansible_connection",
    "ansible_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_user",
    "ansible_ssh_user",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_become",
    "ansible_become_method",
    "ansible_become_user",
    "gpu_clock_tool",
    "gx10_nvidia_smi",
)
# What cluster_plan.endpoint reads (API_HOST_VARS, and the gateway's variables but its service key,
# which bench reads only when it needs it), and the served model's name.
_HEAD_VARS = (
    "gx10_api_host",
    "ansible_host",
    "gx10_serve_port",
    "gx10_gateway_enabled",
    "gx10_gateway_address",
    "gx10_gateway_engine_port",
    "gx10_gateway_tls_cert",
    "gx10_gateway_tls_key",
    "vllm_serve_served_model_name",
)


def resolve_sources(inventories: Sequence[str | Path]) -> list[str]:
    """Each inventory as given (absolute or from the current directory), else under the project."""
    from gx10.provision import resolve_inventory  # noqa: PLC0415

    out: list[str] = []
    for inventory in inventories:
        given = Path(inventory).expanduser()
        if given.exists():
            out.append(str(given.resolve()))
            continue
        try:
            home = project_home()
        except Gx10Error:
            raise InventoryNotFoundError(f"inventory {str(inventory)!r} not found") from None
        out.append(str(resolve_inventory(inventory, home)))
    return out


def load_cluster(
    inventories: Sequence[str | Path],
    *,
    need_api_key: bool = True,
    extra: Sequence[str] = (),
    node_extra: Sequence[str] = (),
    role_defaults: Sequence[str] = (),
) -> Cluster:
    """Read the inventory (one or more sources, as `ansible-playbook -i` takes them).

    `need_api_key=False` skips `vllm_serve_api_key` (given some other way): a value that cannot
    be read (a vault without its password) then does not stop the run. `extra` names more head
    variables to template into `Cluster.settings`, `node_extra` every node's into its
    `Node.settings` (`gx10 metrics config`: each node's exporter address); `role_defaults` names
    roles whose `defaults/main.yml` (read by Ansible's loader) supply the values the inventory
    does not set.
    """
    # The project's ansible.cfg (inventory ignore patterns, collections), as provision() uses it.
    os.environ.setdefault("ANSIBLE_CONFIG", str(ansible_cfg(project_home())))
    # Imported here: ansible takes a second to import and patches stdout/stderr on import.
    from ansible.errors import AnsibleError  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.inventory.manager import (  # type: ignore[import-untyped]  # noqa: PLC0415
        InventoryManager,
    )
    from ansible.parsing.dataloader import (  # type: ignore[import-untyped]  # noqa: PLC0415
        DataLoader,
    )
    from ansible.template import Templar  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.vars.manager import (  # type: ignore[import-untyped]  # noqa: PLC0415
        VariableManager,
    )

    sources = resolve_sources(inventories)
    try:
        loader = DataLoader()
        inventory = InventoryManager(loader=loader, sources=sources)
        manager = VariableManager(loader=loader, inventory=inventory)
        defaults: dict[str, Any] = {}
        for role in role_defaults:
            path = project_home() / "roles" / role / "defaults" / "main.yml"
            # Trusted as templates, as Ansible trusts a role's own files.
            defaults.update(loader.load_from_file(str(path), trusted_as_template=True) or {})
        hosts: list[tuple[str, Any]] = []
        for group in ("head", "workers"):
            for host in inventory.get_hosts(group):
                if host.name not in [h.name for _, h in hosts]:
                    hosts.append((group, host))
    except AnsibleError as exc:
        raise InventoryError(f"cannot read inventory {', '.join(sources)}: {exc}") from exc
    if not hosts or hosts[0][0] != "head":
        raise InventoryError(
            f"inventory {', '.join(sources)} has no host in group 'head': gx10 bench -i, "
            "gx10 clients -i and gx10 smoke -i reach the API on the head; add the head node to "
            "group 'head'"
        )

    def read(host: Any, names: Sequence[str]) -> dict[str, Any]:
        variables = {**defaults, **manager.get_vars(host=host, include_hostvars=True)}
        templar = Templar(loader=loader, variables=variables)
        values: dict[str, Any] = {}
        for key in names:
            if key not in variables:
                continue
            try:
                values[key] = plain(templar.template(variables[key]))
            except AnsibleError as exc:
                raise InventoryError(f"{host.name}: cannot template {key}: {exc}") from exc
        return values

    nodes: list[Node] = []
    head_vars: dict[str, Any] = {}
    for group, host in hosts:
        values = read(host, _NODE_VARS)
        if not nodes:
            head_vars = {**values, **read(host, _HEAD_VARS)}
        tool = values.get("gpu_clock_tool") or DEFAULT_TOOL
        nodes.append(
            Node(
                name=host.name,
                group=group,
                tool=tuple(shlex.split(str(tool))),
                nvidia_smi=str(values.get("gx10_nvidia_smi") or "nvidia-smi"),
                settings=read(host, node_extra) if node_extra else {},
                **transport_for(host.name, values),
            )
        )
    head = nodes[0]
    model = head_vars.get("vllm_serve_served_model_name") or DEFAULT_MODEL
    settings = read(hosts[0][1], extra) if extra else {}
    api_key = ""
    if need_api_key:
        api_key = str(read(hosts[0][1], ("vllm_serve_api_key",)).get("vllm_serve_api_key") or "")
    return Cluster(
        sources=tuple(sources),
        nodes=tuple(nodes),
        endpoint=str(_collection.load("cluster_plan").endpoint(head.name, head_vars)["base"]),
        model=str(model),
        api_key=api_key,
        settings=settings,
    )


def spawn_piped(argv: Sequence[str]) -> subprocess.Popen[str]:
    """Start a long-lived node command (a clock session, a telemetry query) with piped, line-
    buffered text stdio, outside the controller's process group: Ctrl-C in the terminal reaches
    the controller, which then stops it in order. Closing its stdin ends it on the node."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
