"""The metrics_exporter role's inputs and files through real ansible-playbook on localhost: its
checks refuse bad values naming them, its templates render with its defaults and vars, and what
they render works: Debian's node exporter takes the flags file's ARGS as systemd splits them, the
unit's ExecStart is the tool's own command line, and the verify step's checks match what a real
node exporter serves (and do not match a failed GPU query).

Cases that only render or only check share one run, an inventory host per case (connection
local, each with its own variables): one ansible-playbook, not one per case."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_tools import free_port, need

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))  # the shared localhost playbook runner

from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import (  # noqa: E402
    ANSIBLE_PLAYBOOK,
    run_ansible_playbook,
)

ROLE = ROOT / "roles" / "metrics_exporter"
TOOL = ROLE / "files" / "gx10-gpu-metrics"
SIM = ROOT / "python" / "gx10" / "lab" / "simulators" / "nvidia_smi.py"

pytestmark = [
    pytest.mark.heavy,  # long tests: make unit hands this file out first
    pytest.mark.skipif(
        not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
    ),
]


def play(
    tmp_path: Path, tasks: list[dict[str, Any]], hosts: dict[str, dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """`tasks` on every host of `hosts` (name -> its role variables), all on this machine."""
    # The role's defaults beneath the given values (as Ansible ranks role defaults), its vars
    # above them (vars_files, as role vars rank).
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    inventory = {
        "all": {
            "hosts": {host: {**defaults, **role_vars} for host, role_vars in hosts.items()},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            },
        }
    }
    playbook = [
        {
            "name": "The metrics_exporter role's files, rendered here",
            "hosts": "all",
            "gather_facts": False,
            "vars_files": [str(ROLE / "vars" / "main.yml")],
            "tasks": tasks,
        }
    ]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook), encoding="utf-8")
    return run_ansible_playbook(
        tmp_path, tmp_path / "hosts.yml", tmp_path / "play.yml", timeout=300
    )


def render_each(tmp_path: Path, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """For each case (a host: its role variables over the defaults), the flags file, the unit
    and the verify URL as rendered, in one run."""
    out = tmp_path / "out"
    for case in cases:
        (out / case).mkdir(parents=True)
    tasks = [
        {
            "name": f"Render {name}",
            "ansible.builtin.template": {
                "src": str(ROLE / "templates" / name),
                "dest": f"{out}/{{{{ inventory_hostname }}}}/{name}",
            },
        }
        for name in ("prometheus-node-exporter.default.j2", "gx10-gpu-metrics.service.j2")
    ]
    tasks.append(
        {
            "name": "Write the computed values",
            "ansible.builtin.copy": {
                "content": "{{ {'url': __metrics_exporter_url, 'listen': __metrics_exporter_listen,"
                " 'file': __metrics_exporter_gpu_file} | to_json }}",
                "dest": f"{out}/{{{{ inventory_hostname }}}}/values.json",
            },
        }
    )
    proc = play(tmp_path, tasks, cases)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        case: {
            "default": (out / case / "prometheus-node-exporter.default.j2").read_text(),
            "unit": (out / case / "gx10-gpu-metrics.service.j2").read_text(),
            **json.loads((out / case / "values.json").read_text()),
        }
        for case in cases
    }


def render(tmp_path: Path, **role_vars: Any) -> dict[str, str]:
    """The flags file, the unit and the verify URL, rendered with `role_vars` over the defaults."""
    return render_each(tmp_path, {"localhost": role_vars})["localhost"]


# (the host: its listen address, where node exporter listens, the URL verify reads)
LISTEN = [
    ("10.0.0.21", "10.0.0.21:9300", "http://10.0.0.21:9300/metrics"),
    ("fd00::21", "[fd00::21]:9300", "http://[fd00::21]:9300/metrics"),
    ("0.0.0.0", "0.0.0.0:9300", "http://127.0.0.1:9300/metrics"),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The defaults' files (case `defaults`) and each LISTEN host's (`listen0`, ...)."""
    cases: dict[str, dict[str, Any]] = {"defaults": {}}
    for index, (host, _listen, _url) in enumerate(LISTEN):
        cases[f"listen{index}"] = {
            "metrics_exporter_listen_host": host,
            "metrics_exporter_port": 9300,
        }
    return render_each(tmp_path_factory.mktemp("rendered"), cases)


def systemd_args(default_file: str) -> list[str]:
    """ARGS of the flags file as systemd hands `$ARGS` to ExecStart: split at whitespace."""
    (line,) = [ln for ln in default_file.splitlines() if ln.startswith("ARGS=")]
    value = line.removeprefix("ARGS=")
    assert value.startswith('"'), line
    assert value.endswith('"'), line
    return value[1:-1].split()


def unit_key(unit: str, key: str) -> str:
    (line,) = [ln for ln in unit.splitlines() if ln.startswith(f"{key}=")]
    return line.partition("=")[2]


def test_the_defaults_render_debians_paths(rendered: dict[str, dict[str, str]]) -> None:
    files = rendered["defaults"]
    assert systemd_args(files["default"]) == [
        "--web.listen-address=:9100",
        "--collector.textfile.directory=/var/lib/prometheus/node-exporter",
    ]
    assert files["url"] == "http://127.0.0.1:9100/metrics"
    assert files["file"] == "/var/lib/prometheus/node-exporter/gx10_gpu.prom"
    assert unit_key(files["unit"], "ExecStart") == (
        "/usr/local/sbin/gx10-gpu-metrics --out /var/lib/prometheus/node-exporter/gx10_gpu.prom "
        "--interval 5 --nvidia-smi nvidia-smi"
    )
    assert unit_key(files["unit"], "ExecStopPost") == (
        "/bin/rm -f /var/lib/prometheus/node-exporter/gx10_gpu.prom"
    )
    assert unit_key(files["unit"], "Restart") == "always"
    assert unit_key(files["unit"], "WantedBy") == "multi-user.target"


@pytest.mark.parametrize(("host", "listen", "url"), LISTEN)
def test_a_listen_host_is_where_the_role_checks(
    rendered: dict[str, dict[str, str]], host: str, listen: str, url: str
) -> None:
    files = rendered[f"listen{LISTEN.index((host, listen, url))}"]
    assert f"--web.listen-address={listen}" in systemd_args(files["default"])
    assert files["listen"] == listen
    assert files["url"] == url


def test_debians_node_exporter_takes_the_rendered_flags(tmp_path: Path) -> None:
    """The flags file as rendered (loopback, a free port, a scratch textfile directory, an extra
    flag) started as the unit starts it; the unit's own ExecStart fills that directory."""
    binary = need("node-exporter")
    port = free_port()
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    files = render(
        tmp_path,
        metrics_exporter_listen_host="127.0.0.1",
        metrics_exporter_port=port,
        metrics_exporter_textfile_dir=str(textfile),
        metrics_exporter_extra_args=["--collector.disable-defaults", "--collector.textfile"],
        metrics_exporter_gpu_tool=str(TOOL),
        metrics_exporter_nvidia_smi=str(SIM),
    )
    # The unit's command line, once: the tool accepts every flag the unit gives it.
    argv = shlex.split(unit_key(files["unit"], "ExecStart"))
    sim_env = {"GX10_SIM_STATE_DIR": str(tmp_path / "sim"), "PATH": "/usr/bin:/bin"}
    once = subprocess.run(
        [sys.executable, *argv, "--once"], env=sim_env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert once.returncode == 0, once.stderr
    assert (textfile / "gx10_gpu.prom").is_file()
    proc = subprocess.Popen(
        [str(binary), *systemd_args(files["default"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        served = ""
        for _attempt in range(150):  # 15 s at most
            if proc.poll() is not None:
                pytest.fail(f"node exporter refused the flags: {proc.communicate()[1]}")
            try:
                served = httpx.get(files["url"], timeout=2).text
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert "gx10_gpu_query_success 1" in served
        assert "node_cpu_seconds_total" not in served  # --collector.disable-defaults applied
        checks = verify_checks()
        assert all(re.search(pattern, served) for pattern in checks), checks
        failed = served.replace("gx10_gpu_query_success 1", "gx10_gpu_query_success 0")
        assert not all(re.search(pattern, failed) for pattern in checks)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def verify_checks() -> list[str]:
    """The regular expressions verify.yml's assert requires of node exporter's answer."""
    tasks = yaml.safe_load((ROLE / "tasks" / "verify.yml").read_text())
    (check,) = [t for t in tasks if "ansible.builtin.assert" in t]
    patterns = []
    for condition in check["ansible.builtin.assert"]["that"]:
        found = re.search(r"is search\('(.*)'\)$", condition)
        if found:
            patterns.append(found.group(1))
    assert len(patterns) == 2, patterns
    return patterns


# (the variable, a bad value, the fix its message names)
BAD = [
    ("metrics_exporter_port", 0, "a TCP port (1-65535)"),
    ("metrics_exporter_port", "ninety", "a TCP port (1-65535)"),
    ("metrics_exporter_gpu_interval", 0, "from 1 to 3600"),
    ("metrics_exporter_textfile_dir", "relative/dir", "an absolute path"),
    ("metrics_exporter_textfile_dir", "/var/lib/my dir", "without blanks"),
    ("metrics_exporter_listen_host", "10.0.0.1 10.0.0.2", "one address"),
    ("metrics_exporter_extra_args", ["--collector.textfile.directory=/a b"], "without blanks"),
    ("metrics_exporter_extra_args", "--collector.meminfo", "a list of node exporter flags"),
    ("metrics_exporter_packages", [], "at least prometheus-node-exporter"),
]
GOOD = {
    "metrics_exporter_port": "9101",
    "metrics_exporter_listen_host": "fd00::1",
    "metrics_exporter_extra_args": ["--collector.disable-defaults"],
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tasks/validate.yml, once, over a host per BAD value (`bad0`, ...) and one with GOOD
    values (`good`): each host's result and its recap, from Ansible's JSON callback."""
    tmp_path = tmp_path_factory.mktemp("checked")
    tasks = [
        {
            "name": "Check the variables",
            "ansible.builtin.include_tasks": str(ROLE / "tasks" / "validate.yml"),
        }
    ]
    hosts = {f"bad{index}": {name: value} for index, (name, value, _fix) in enumerate(BAD)}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.posix.json")
        proc = play(tmp_path, tasks, {**hosts, "good": GOOD})
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the bad hosts failed
    run = json.loads(proc.stdout)
    (check,) = [
        task
        for task in run["plays"][0]["tasks"]
        if task["task"]["name"] == "Check the metrics_exporter variables"
    ]
    return {"results": check["hosts"], "stats": run["stats"]}


@pytest.mark.parametrize(("name", "value", "fix"), BAD)
def test_bad_values_are_refused_naming_them(
    checked: dict[str, Any], name: str, value: Any, fix: str
) -> None:
    host = f"bad{BAD.index((name, value, fix))}"
    assert checked["stats"][host]["failures"] == 1
    refused = [item["msg"] for item in checked["results"][host]["results"] if item.get("failed")]
    assert len(refused) == 1, refused
    said = " ".join(refused[0].split())
    assert said.startswith(f"metrics_exporter on {host}: {name} is {json.dumps(value)}:"), said
    assert fix in said, said


def test_good_values_pass_the_checks(checked: dict[str, Any]) -> None:
    assert checked["stats"]["good"]["failures"] == 0
    assert checked["stats"]["good"]["ok"] > 0
    assert not checked["results"]["good"].get("failed")
