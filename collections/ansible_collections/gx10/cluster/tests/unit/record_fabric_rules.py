# SPDX-License-Identifier: Apache-2.0
# ruff: noqa: PLR0917  (fixture builders: many positional facts per scenario)
"""Record what the fabric role's former Jinja computed, as the fixture fabric_rules.py must match.

The role's judgments used to be Jinja in roles/fabric/vars/main.yml and in set_fact vars of
tasks/bandwidth.yml and tasks/measure.yml. This script reads those files at a git revision (the
last one with the Jinja), renders them with ansible-playbook over the scenarios below (fixture
facts as host variables: probes, ping and route results, measurements) and writes what they gave
to fixtures/fabric_rules/recorded.json. test_fabric_rules.py checks the Python against it.

    .venv/bin/python \
        collections/ansible_collections/gx10/cluster/tests/unit/record_fabric_rules.py --rev 9f3d11c
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[4]))

from ansible_collections.gx10.cluster.plugins.module_utils import rail_ping  # noqa: E402
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    REPO_ROOT,
    run_ansible_playbook,
)

OUT = HERE / "fixtures" / "fabric_rules" / "recorded.json"
NETDEVS = ("enp1s0f0np0", "enP2p1s0f0np0")
OUTPUTS = (
    "__fabric_gid_rails",
    "__fabric_runs",
    "__fabric_bandwidth",
    "__fabric_not_checked",
    "__fabric_link_checks",
    "__fabric_bandwidth_checks",
)
# A worker's: its own rails (the bandwidth runs and checks are the head's).
WORKER_OUTPUTS = (
    "__fabric_gid_rails",
    "__fabric_not_checked",
    "__fabric_link_checks",
)


def _git_show(rev: str, path: str) -> str:
    if rev == "WORKTREE":
        return (REPO_ROOT / path).read_text(encoding="utf-8")
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout


def _plan(
    hosts: list[str], rails: int, mtu: int = 9000, rdma: dict[str, str] | None = None
) -> dict[str, Any]:
    """As cluster_plan builds it (rdma_dev from gx10_rdma_devices, ``rdma``, on every host)."""
    plan_hosts: dict[str, Any] = {}
    for i, host in enumerate(hosts):
        plan_hosts[host] = {
            "rails": [
                {
                    "name": f"rail{r}",
                    "netdev": NETDEVS[r],
                    "address": f"192.168.{100 + r}.{10 + i}",
                    "cidr": f"192.168.{100 + r}.{10 + i}/24",
                    "peers": {
                        other: f"192.168.{100 + r}.{10 + j}"
                        for j, other in enumerate(hosts)
                        if other != host
                    },
                    "rdma_dev": (rdma or {}).get(NETDEVS[r]),
                    "ping_payload": mtu - 28,
                }
                for r in range(rails)
            ]
        }
    return {"head": hosts[0], "workers": hosts[1:], "mtu": mtu, "hosts": plan_hosts}


def _link(
    *,
    present: bool = True,
    carrier: bool | None = True,
    mtu: int | None = 9000,
    speed: int | None = 200000,
    width: int | None = 4,
    pcie_speed: str | None = "32.0 GT/s PCIe",
) -> dict[str, Any]:
    if not present:
        return {
            "present": False,
            "carrier": None,
            "mtu": None,
            "speed_mbps": None,
            "pcie_width": None,
            "pcie_speed": None,
        }
    return {
        "present": True,
        "carrier": carrier,
        "mtu": mtu,
        "speed_mbps": speed,
        "pcie_width": width,
        "pcie_speed": pcie_speed,
    }


def _rail_ping_result(rail: dict[str, Any], peer: str, said: dict[str, Any]) -> dict[str, Any]:
    """The same ping as gx10.cluster.rail_ping reports it (the role's probe since the Jinja's
    looped `ping` command): each recorded result carries both forms, so the Jinja revision and the
    worktree read the same outcome."""
    rc = int(said["rc"])
    message = rail_ping.said(
        rc, "\n".join(said.get("stdout_lines") or []), said.get("stderr") or ""
    )
    return {
        **rail_ping.targets([rail], [peer])[0],
        "ok": rc == 0,
        "rc": rc,
        "attempts": 1,
        "message": message,
    }


def _probes(
    plan: dict[str, Any],
    host: str,
    ping_fail: dict[tuple[str, str], Any] | None = None,
    route_dev: dict[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    ping_fail = ping_fail or {}
    route_dev = route_dev or {}
    rails = plan["hosts"][host]["rails"]
    pings, routes = [], []
    for rail in rails:
        for peer in rail["peers"]:
            key = (rail["netdev"], peer)
            fail = ping_fail.get(key) or {
                "rc": 0,
                "stderr": "",
                "stdout_lines": ["PING x", "", "rtt min/avg/max/mdev = 0.1/0.1/0.1/0.0 ms"],
            }
            pings.append({"item": [rail, peer], **fail, **_rail_ping_result(rail, peer, fail)})
            dev = route_dev.get(key, rail["netdev"])
            if isinstance(dev, dict):
                routes.append({"item": [rail, peer], **dev})
            else:
                routes.append(
                    {
                        "item": [rail, peer],
                        "rc": 0,
                        "stderr": "",
                        "stdout": json.dumps([{"dst": rail["peers"][peer], "dev": dev}]),
                    }
                )
    return {"__fabric_ping": {"results": pings}, "__fabric_route": {"results": routes}}


def _m(
    worker: str,
    mode: str,
    reverse: bool,
    rail: int,
    gbps: float | None,
    ok: bool = True,
    error: str = "",
) -> dict[str, Any]:
    return {
        "worker": worker,
        "mode": mode,
        "reverse": reverse,
        "rail": f"rail{rail}",
        "netdev": NETDEVS[rail],
        "client_ip": f"192.168.{100 + rail}.10",
        "server_ip": f"192.168.{100 + rail}.11",
        "ok": ok,
        "gbps": gbps,
        "error": error,
    }


def _full(
    worker: str,
    single: list[list[float | None]],
    both: list[list[float | None]],
    errors: dict[tuple[str, bool, int], str] | None = None,
) -> list[dict[str, Any]]:
    """single[rail][direction], both[direction][rail]; None: a failed run."""
    errors = errors or {}
    out = []
    for rail, figures in enumerate(single):
        for d, gbps in enumerate(figures):
            out.append(
                _m(
                    worker,
                    "single",
                    bool(d),
                    rail,
                    gbps,
                    gbps is not None,
                    errors.get(
                        ("single", bool(d), rail), "" if gbps is not None else "iperf3 failed: x"
                    ),
                )
            )
    for d, figures in enumerate(both):
        for rail, gbps in enumerate(figures):
            out.append(
                _m(
                    worker,
                    "both",
                    bool(d),
                    rail,
                    gbps,
                    gbps is not None,
                    errors.get(
                        ("both", bool(d), rail), "" if gbps is not None else "iperf3 failed: y"
                    ),
                )
            )
    return out


def _scenario(
    name: str,
    hosts: list[str],
    rails: int = 2,
    mtu: int = 9000,
    links: dict[str, dict[str, Any]] | None = None,
    host_vars: dict[str, Any] | None = None,
    per_host: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    hosts = [f"{name}-{h}" for h in hosts]
    plan = _plan(hosts, rails, mtu, (host_vars or {}).get("gx10_rdma_devices"))
    links = links or {}
    per_host = per_host or {}
    inv: dict[str, Any] = {}
    for short_host in [h.split("-", 1)[1] for h in hosts]:
        host = f"{name}-{short_host}"
        netdevs = links.get(short_host, {n: _link() for n in NETDEVS[:rails]})
        extra = copy.deepcopy(per_host.get(short_host, {}))
        probes = _probes(plan, host, extra.pop("ping_fail", None), extra.pop("route_dev", None))
        inv[host] = {
            "gx10_plan": plan,
            "__fabric_links": {"netdevs": netdevs},
            "__fabric_tool": {"rc": 0},
            **probes,
            **(host_vars or {}),
            **extra,
        }
    return inv


def scenarios() -> dict[str, Any]:
    w = "healthy-b"
    healthy_meas = _full(w, [[95.1234, 94.9876], [96.5, 97.25]], [[93.0, 92.5], [91.0, 95.0]])
    iperf = {"fabric_bandwidth_tool": "iperf3"}
    inv: dict[str, Any] = {}
    inv.update(
        _scenario(
            "healthy",
            ["a", "b"],
            host_vars=iperf,
            per_host={"a": {"__fabric_measurements": healthy_meas}},
        )
    )
    inv.update(
        _scenario(
            "degraded",
            ["a", "b"],
            host_vars=iperf,
            per_host={
                "a": {
                    "__fabric_measurements": _full(
                        "degraded-b", [[95.0, 94.0], [13.2, 12.8]], [[93.0, 13.0], [92.0, 12.9]]
                    )
                }
            },
        )
    )
    inv.update(
        _scenario(
            "low",
            ["a", "b"],
            host_vars={**iperf, "fabric_iperf3_reverse": False},
            per_host={
                "a": {"__fabric_measurements": _full("low-b", [[50.0], [79.999]], [[40.0, 60.0]])}
            },
        )
    )
    # ib_write_bw with GID info, a narrow PCIe link and a slow link speed on the worker.
    gid = {
        "a": {
            "__fabric_gid": {
                "rails": [
                    {"netdev": NETDEVS[0], "rdma_dev": "rocep1s0f0", "gid_index": 3},
                    {"netdev": NETDEVS[1], "rdma_dev": "roceP2p1s0f0", "gid_index": 5},
                ]
            },
            "__fabric_measurements": _full("pcie-b", [[91.0], [45.0]], [[90.0, 45.0]]),
        },
        "b": {
            "__fabric_gid": {
                "rails": [{"netdev": NETDEVS[0], "rdma_dev": "rocep1s0f0", "gid_index": 3}]
            }
        },
    }
    inv.update(
        _scenario(
            "pcie",
            ["a", "b"],
            links={
                "b": {
                    NETDEVS[0]: _link(),
                    NETDEVS[1]: _link(width=2, pcie_speed=None, speed=100000),
                }
            },
            host_vars={"fabric_rdma_devices": {NETDEVS[0]: "rocep1s0f0"}},
            per_host=gid,
        )
    )
    inv.update(
        _scenario(
            "mtu",
            ["a", "b"],
            host_vars=iperf,
            links={
                "a": {NETDEVS[0]: _link(mtu=1500), NETDEVS[1]: _link()},
                "b": {NETDEVS[0]: _link(), NETDEVS[1]: _link(mtu=1500)},
            },
            per_host={
                "a": {
                    "fabric_bandwidth": False,
                    "ping_fail": {
                        (NETDEVS[0], "mtu-b"): {
                            "rc": 1,
                            "stderr": "ping: local error: message too long, mtu=1500",
                            "stdout_lines": ["PING x"],
                        }
                    },
                }
            },
        )
    )
    inv.update(
        _scenario(
            "nocarrier",
            ["a", "b"],
            host_vars=iperf,
            links={
                "a": {NETDEVS[0]: _link(carrier=False, speed=None, width=None)},
                "b": {NETDEVS[0]: _link(carrier=None), NETDEVS[1]: _link()},
            },
            per_host={
                "a": {
                    "__fabric_measurements": _full(
                        "nocarrier-b",
                        [[None, 90.0], [95.0, 96.0]],
                        [[None, 80.0], [None, 90.0]],
                        {("single", False, 0): "iperf3 failed: unable to connect"},
                    ),
                    "ping_fail": {
                        (NETDEVS[0], "nocarrier-b"): {"rc": 1, "stderr": "", "stdout_lines": []},
                        (NETDEVS[1], "nocarrier-b"): {
                            "rc": 2,
                            "stderr": "",
                            "stdout_lines": ["PING x", "2 packets transmitted, 0 received"],
                        },
                    },
                    "route_dev": {
                        (NETDEVS[0], "nocarrier-b"): "eth0",
                        (NETDEVS[1], "nocarrier-b"): {
                            "rc": 2,
                            "stdout": "",
                            "stderr": "RTNETLINK answers: Network is unreachable",
                        },
                    },
                }
            },
        )
    )
    multi_a = _full("multi-b", [[95.0, 96.0], [94.0, 93.0]], [[90.0, 91.0], [92.0, 93.0]]) + _full(
        "multi-c", [[20.0, 96.0], [94.0, 93.0]], [[90.0, 91.0], [92.0, 93.0]]
    )
    inv.update(
        _scenario(
            "multi",
            ["a", "b", "c"],
            host_vars=iperf,
            per_host={"a": {"__fabric_measurements": multi_a}},
        )
    )
    inv.update(
        _scenario(
            "notool",
            ["a", "b", "c"],
            per_host={"b": {"__fabric_tool": {"rc": 127}}, "a": {"__fabric_tool": {"rc": 1}}},
        )
    )
    inv.update(
        _scenario(
            "notool2", ["a", "b"], host_vars=iperf, per_host={"b": {"__fabric_tool": {"rc": 1}}}
        )
    )
    # The lab: veth (no speed, no PCIe link), one rail, lab thresholds, nothing measured yet.
    veth = {NETDEVS[0]: _link(speed=None, width=None, pcie_speed=None)}
    inv.update(
        _scenario(
            "veth",
            ["a", "b"],
            rails=1,
            links={"a": veth, "b": veth},
            host_vars={
                **iperf,
                "fabric_min_rail_gbps": 1,
                "fabric_min_total_gbps": 1.5,
                "fabric_degraded_band_gbps": [0.1, 0.5],
            },
            per_host={"a": {"__fabric_measurements": _full("veth-b", [[0.3, 4.0]], [])}},
        )
    )
    # gx10_rdma_devices: the plan's rails carry it (the Jinja read it through fabric_rdma_devices).
    inv.update(
        _scenario(
            "plandev",
            ["a", "b"],
            host_vars={"gx10_rdma_devices": {NETDEVS[0]: "rocep1s0f0"}},
            per_host={"a": {"__fabric_tool": {"rc": 0}}},
        )
    )
    inv.update(_scenario("nomeas", ["a", "b"], host_vars=iperf, links={"a": {}}))
    return inv


# measure.yml's set_fact and bandwidth.yml's retry selection, over fixture runs.
def measure_cases() -> list[dict[str, Any]]:
    pair0 = {
        "rail": "rail0",
        "netdev": NETDEVS[0],
        "worker": "w",
        "server_ip": "192.168.100.11",
        "client_ip": "192.168.100.10",
        "port": 18515,
    }
    pair1 = {
        "rail": "rail1",
        "netdev": NETDEVS[1],
        "worker": "w",
        "server_ip": "192.168.101.11",
        "client_ip": "192.168.101.10",
        "port": 18516,
    }
    iperf_ok = json.dumps(
        {
            "start": {"test_start": {"num_streams": 1, "reverse": 0}},
            "end": {
                "sum_received": {"bits_per_second": 94.5e9, "seconds": 5.0, "bytes": 1},
                "sum_sent": {"retransmits": 0},
            },
        }
    )
    iperf_err = json.dumps({"error": "unable to connect to server: Connection refused"})
    ib_text = (HERE / "fixtures" / "ib_write_bw" / "rail0_rocep1s0f0.txt").read_text()
    single = {"worker": "w", "mode": "single", "label": "rail0", "reverse": False, "pairs": [pair0]}
    both = {
        "worker": "w",
        "mode": "both",
        "label": "all rails at once",
        "reverse": True,
        "pairs": [pair0, pair1],
    }
    earlier = [
        _m("w", "single", False, 0, None, False, "iperf3 failed: x"),
        _m("w", "single", True, 0, 90.0),
        _m("w", "both", True, 0, 80.0),
        _m("w", "both", True, 1, None, False, "empty"),
        _m("v", "single", False, 0, None, False, "e"),
    ]
    return [
        {
            "name": "first",
            "tool": "iperf3",
            "run": single,
            "measurements": [],
            "done": [{"item": {"item": pair0}, "finished": True, "stdout": iperf_ok, "stderr": ""}],
        },
        {
            "name": "replace",
            "tool": "iperf3",
            "run": single,
            "measurements": earlier,
            "done": [
                {
                    "item": {"item": pair0},
                    "finished": True,
                    "stdout": iperf_err,
                    "stderr": "warning: x",
                }
            ],
        },
        {
            "name": "both",
            "tool": "iperf3",
            "run": both,
            "measurements": earlier,
            "done": [
                {"item": {"item": pair0}, "finished": True, "stdout": iperf_ok, "stderr": ""},
                {"item": {"item": pair1}, "finished": False, "msg": "timed out", "stdout": ""},
            ],
        },
        {
            "name": "unfinished",
            "tool": "iperf3",
            "run": both,
            "measurements": [],
            "done": [
                {"item": {"item": pair0}},
                {"item": {"item": pair1}, "finished": True, "stdout": "", "stderr": ""},
            ],
        },
        {
            "name": "ib",
            "tool": "ib_write_bw",
            "run": single,
            "measurements": [],
            "done": [
                {"item": {"item": pair0}, "finished": True, "stdout": ib_text, "stderr": ""},
            ],
        },
        {
            "name": "ib_fail",
            "tool": "ib_write_bw",
            "run": single,
            "measurements": [],
            "done": [
                {
                    "item": {"item": pair0},
                    "finished": True,
                    "stdout": "Couldn't connect",
                    "stderr": " Failed to modify QP ",
                }
            ],
        },
    ], [single, both, {**single, "worker": "v"}, {**single, "reverse": True}]


def record(rev: str, out: Path) -> dict[str, Any]:
    """Render the role's files at ``rev`` (WORKTREE: as checked out) over the scenarios."""
    defaults = yaml.safe_load(_git_show(rev, "roles/fabric/defaults/main.yml"))
    role_vars = yaml.safe_load(_git_show(rev, "roles/fabric/vars/main.yml"))
    bandwidth = yaml.safe_load(_git_show(rev, "roles/fabric/tasks/bandwidth.yml"))
    measure = yaml.safe_load(_git_show(rev, "roles/fabric/tasks/measure.yml"))
    again_task = next(t for t in bandwidth if t["name"].startswith("Repeat once"))
    keep = next(t for t in measure if t["name"] == "Keep the measurements of this run")
    # The expressions as the tasks write them, with the tasks' own vars.
    again = {**again_task.get("vars", {}), "__result": again_task["loop"]}
    keep_vars = {
        **keep.get("vars", {}),
        "__result": keep["ansible.builtin.set_fact"]["__fabric_measurements"],
    }
    cases, runs = measure_cases()
    inv = scenarios()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        hosts = {"localhost": {"measure_cases": cases, "retry_runs": runs}}
        inventory = {
            "all": {
                "hosts": hosts,
                "children": {"scenario": {"hosts": inv}},
                "vars": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    **defaults,
                },
            }
        }
        (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
        (tmp_path / "role_vars.yml").write_text(json.dumps(role_vars))
        outputs = {name: f"{{{{ {name} }}}}" for name in OUTPUTS}
        worker_outputs = {name: f"{{{{ {name} }}}}" for name in WORKER_OUTPUTS}
        measure_vars = {
            **{k: v for k, v in keep_vars.items()},
            "fabric_bandwidth_tool": "{{ case.tool }}",
            "__fabric_run": "{{ case.run }}",
            "__fabric_measurements": "{{ case.measurements }}",
            "__fabric_done": {"results": "{{ case.done }}"},  # the role before the module
            "__fabric_clients": "{{ case.done }}",  # with gx10.cluster.fabric_bandwidth_run
        }
        # Each expression is rendered by set_fact (on the controller, no module run per host
        # or case), and the one copy at the end writes them all.
        playbook = [
            {
                "hosts": "scenario",
                "gather_facts": False,
                "vars_files": [str(tmp_path / "role_vars.yml")],
                "tasks": [
                    {
                        "ansible.builtin.set_fact": {"__recorded": "{{ __out }}"},
                        "vars": {
                            "__out": (
                                "{{ __head if inventory_hostname == gx10_plan.head else __worker }}"
                            ),
                            "__head": outputs,
                            "__worker": worker_outputs,
                        },
                    }
                ],
            },
            {
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [
                    {
                        "ansible.builtin.set_fact": {"__case_result": "{{ __result }}"},
                        "loop": "{{ measure_cases }}",
                        "loop_control": {"loop_var": "case"},
                        "vars": measure_vars,
                        "register": "__measure",
                    },
                    {
                        "ansible.builtin.set_fact": {"__case_result": "{{ __result }}"},
                        "loop": "{{ measure_cases }}",
                        "loop_control": {"loop_var": "case"},
                        "vars": {
                            **again,
                            "__fabric_runs": "{{ retry_runs }}",
                            "__fabric_measurements": "{{ case.measurements }}",
                        },
                        "register": "__again",
                    },
                    {
                        "ansible.builtin.copy": {
                            "content": "{{ __all | to_json }}",
                            "dest": f"{out_dir}/all.json",
                        },
                        "vars": {
                            "__all": {
                                "scenarios": (
                                    "{{ dict(groups.scenario | zip(groups.scenario"
                                    " | map('extract', hostvars, '__recorded'))) }}"
                                ),
                                "measure": "{{ __measure.results | map(attribute='ansible_facts')"
                                " | map(attribute='__case_result') }}",
                                "again": "{{ __again.results | map(attribute='ansible_facts')"
                                " | map(attribute='__case_result') }}",
                            }
                        },
                    },
                ],
            },
        ]
        (tmp_path / "record.yml").write_text(json.dumps(playbook))
        result = run_ansible_playbook(
            tmp_path, tmp_path / "inventory.yml", tmp_path / "record.yml", timeout=600
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"ansible-playbook failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
            )
        rendered = json.loads((out_dir / "all.json").read_text())
        recorded: dict[str, Any] = {
            "rev": rev,
            "defaults": defaults,
            "scenarios": {},
            "measure": {},
            "again": {},
        }
        for host in sorted(inv):
            recorded["scenarios"][host] = {
                "hostvars": inv[host],
                "outputs": rendered["scenarios"][host],
            }
        for index, case in enumerate(cases):
            recorded["measure"][case["name"]] = {
                "case": case,
                "result": rendered["measure"][index],
            }
            recorded["again"][case["name"]] = rendered["again"][index]
        recorded["retry_runs"] = runs
    out.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return recorded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="git revision with the role's Jinja")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    record(args.rev, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
