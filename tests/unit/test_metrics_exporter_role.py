"""The metrics_exporter role's inputs and files through real ansible-playbook on localhost: its
checks refuse bad values naming them, its templates render with its defaults and vars, and what
they render works: Debian's node exporter takes the flags file's ARGS as systemd splits them, the
unit's ExecStart is the tool's own command line, and the verify step's checks match what a real
node exporter serves (and do not match a failed GPU query)."""

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
    tmp_path: Path, tasks: list[dict[str, Any]], **role_vars: Any
) -> subprocess.CompletedProcess[str]:
    # The role's defaults beneath the given values (as Ansible ranks role defaults), its vars
    # above them (vars_files, as role vars rank).
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    inventory = {
        "all": {
            "hosts": {"localhost": {**defaults, **role_vars}},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            },
        }
    }
    playbook = [
        {
            "name": "The metrics_exporter role's files, rendered here",
            "hosts": "localhost",
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


def render(tmp_path: Path, **role_vars: Any) -> dict[str, str]:
    """The flags file, the unit and the verify URL, rendered with `role_vars` over the defaults."""
    out = tmp_path / "out"
    out.mkdir()
    tasks = [
        {
            "name": f"Render {name}",
            "ansible.builtin.template": {
                "src": str(ROLE / "templates" / name),
                "dest": str(out / name),
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
                "dest": str(out / "values.json"),
            },
        }
    )
    proc = play(tmp_path, tasks, **role_vars)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "default": (out / "prometheus-node-exporter.default.j2").read_text(),
        "unit": (out / "gx10-gpu-metrics.service.j2").read_text(),
        **json.loads((out / "values.json").read_text()),
    }


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


def test_the_defaults_render_debians_paths(tmp_path: Path) -> None:
    files = render(tmp_path)
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


@pytest.mark.parametrize(
    ("host", "listen", "url"),
    [
        ("10.0.0.21", "10.0.0.21:9300", "http://10.0.0.21:9300/metrics"),
        ("fd00::21", "[fd00::21]:9300", "http://[fd00::21]:9300/metrics"),
        ("0.0.0.0", "0.0.0.0:9300", "http://127.0.0.1:9300/metrics"),
    ],
)
def test_a_listen_host_is_where_the_role_checks(
    tmp_path: Path, host: str, listen: str, url: str
) -> None:
    files = render(tmp_path, metrics_exporter_listen_host=host, metrics_exporter_port=9300)
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


@pytest.mark.parametrize(
    ("name", "value", "fix"),
    [
        ("metrics_exporter_port", 0, "a TCP port (1-65535)"),
        ("metrics_exporter_port", "ninety", "a TCP port (1-65535)"),
        ("metrics_exporter_gpu_interval", 0, "from 1 to 3600"),
        ("metrics_exporter_textfile_dir", "relative/dir", "an absolute path"),
        ("metrics_exporter_textfile_dir", "/var/lib/my dir", "without blanks"),
        ("metrics_exporter_listen_host", "10.0.0.1 10.0.0.2", "one address"),
        ("metrics_exporter_extra_args", ["--collector.textfile.directory=/a b"], "without blanks"),
        ("metrics_exporter_extra_args", "--collector.meminfo", "a list of node exporter flags"),
        ("metrics_exporter_packages", [], "at least prometheus-node-exporter"),
    ],
)
def test_bad_values_are_refused_naming_them(
    tmp_path: Path, name: str, value: Any, fix: str
) -> None:
    tasks = [
        {
            "name": "Check the variables",
            "ansible.builtin.include_tasks": str(ROLE / "tasks" / "validate.yml"),
        }
    ]
    proc = play(tmp_path, tasks, **{name: value})
    assert proc.returncode != 0, proc.stdout
    said = " ".join(proc.stdout.split())
    assert f"metrics_exporter on localhost: {name} is {json.dumps(value)}:" in said, said
    assert fix in said, said


def test_good_values_pass_the_checks(tmp_path: Path) -> None:
    tasks = [
        {
            "name": "Check the variables",
            "ansible.builtin.include_tasks": str(ROLE / "tasks" / "validate.yml"),
        }
    ]
    proc = play(
        tmp_path,
        tasks,
        metrics_exporter_port="9101",
        metrics_exporter_listen_host="fd00::1",
        metrics_exporter_extra_args=["--collector.disable-defaults"],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
