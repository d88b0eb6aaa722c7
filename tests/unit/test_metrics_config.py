"""gx10 metrics config: the Prometheus scrape config from an inventory (the lab's, the real
nodes', and variants), the API key by file reference only, bad input refused with nothing
written, and promtool's own check of what is written (where `make prometheus-tools` put it)."""

from __future__ import annotations

import json
import stat
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_tools import need

from gx10.cli import main

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab"
GX10 = ROOT / "inventories" / "gx10"
SECRET = "sk-gx10-metrics-never-inline"


def inventory(tmp_path: Path, hosts: dict[str, Any] | None = None, group_vars: str = "") -> Path:
    """A two-node ssh inventory: head spark-1 (10.0.0.11), worker spark-2 (10.0.0.12)."""
    head = {"ansible_host": "10.0.0.11", **(hosts or {}).get("spark-1", {})}
    worker = {"ansible_host": "10.0.0.12", **(hosts or {}).get("spark-2", {})}
    document = {
        "all": {
            "children": {
                "head": {"hosts": {"spark-1": head}},
                "workers": {"hosts": {"spark-2": worker}},
            }
        }
    }
    path = tmp_path / "inv"
    (path / "group_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump(document))
    (path / "group_vars" / "all.yml").write_text(
        "metrics_exporter_enabled: true\n" + textwrap.dedent(group_vars)
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["metrics", "config", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def scrape_configs(out: Path) -> dict[str, dict[str, Any]]:
    document = yaml.safe_load((out / "prometheus.yml").read_text())
    return {job["job_name"]: job for job in document["scrape_configs"]}


def targets(job: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    return [(c["targets"][0], c["labels"]) for c in job["static_configs"]]


# --- the repository's inventories -----------------------------------------------------------


def test_the_lab_inventory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, stdout, stderr = run(capsys, "-i", LAB, "--out", tmp_path / "out", "--json")
    assert code == 0, stderr
    document = json.loads(stdout)
    assert sorted(Path(p).name for p in document["files"]) == [
        "README.md",
        "gx10-dashboard.json",
        "prometheus.yml",
    ]
    jobs = scrape_configs(tmp_path / "out")
    assert list(jobs) == ["vllm", "node"]
    vllm = jobs["vllm"]
    # The head's API (gx10_api_host) only: the headless worker serves no /metrics.
    assert targets(vllm) == [
        ("172.31.240.10:8000", {"node": "gx10-a", "role": "head", "rank": "0"})
    ]
    assert vllm["metrics_path"] == "/metrics"
    assert vllm["scheme"] == "http"
    # The lab's gateway wants a key for /metrics too: the inventory's, by file reference only
    # (written beside the config with --write-key; never into prometheus.yml).
    assert vllm["authorization"] == {"type": "Bearer", "credentials_file": "vllm-api-key"}
    key = (ROOT / "inventories" / "lab" / ".secrets" / "service.key").read_text().strip()
    assert key not in (tmp_path / "out" / "prometheus.yml").read_text()
    # The lab's nodes are containers on its management network: reached by name.
    assert targets(jobs["node"]) == [
        ("gx10-a:9100", {"node": "gx10-a", "role": "head", "rank": "0"}),
        ("gx10-b:9100", {"node": "gx10-b", "role": "worker", "rank": "1"}),
    ]
    settings = yaml.safe_load((tmp_path / "out" / "prometheus.yml").read_text())["global"]
    assert settings["scrape_interval"] == "5s"
    assert document["jobs"]["node"][1] == {
        "target": "gx10-b:9100",
        "node": "gx10-b",
        "role": "worker",
        "rank": "1",
    }
    (note,) = document["notes"]
    assert note.startswith("The inventory sets vllm_serve_api_key: put the key in vllm-api-key")


def test_the_real_nodes_inventory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, stderr = run(capsys, "-i", GX10, "--out", tmp_path)
    assert code == 0, stderr
    jobs = scrape_configs(tmp_path)
    assert [t for t, _ in targets(jobs["vllm"])] == ["gx10-a.example.internal:8000"]
    assert [t for t, _ in targets(jobs["node"])] == [
        "gx10-a.example.internal:9100",
        "gx10-b.example.internal:9100",
    ]


def test_the_human_output_names_every_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, stdout, _ = run(capsys, "-i", LAB, "--out", tmp_path)
    assert code == 0
    assert f"wrote {tmp_path / 'prometheus.yml'}" in stdout
    assert "scrape vllm: http://172.31.240.10:8000/metrics (gx10-a, head)" in stdout
    assert "scrape node: http://gx10-b:9100/metrics (gx10-b, worker)" in stdout


# --- variants ---------------------------------------------------------------------------------


def test_exporter_port_and_listen_host_per_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(
        tmp_path,
        {
            "spark-1": {"metrics_exporter_listen_host": "fd00::11", "gx10_api_host": "10.1.0.11"},
            "spark-2": {"metrics_exporter_listen_host": "0.0.0.0"},
        },
        group_vars='metrics_exporter_port: "{{ 9000 + 200 }}"\ngx10_serve_port: 8080\n',
    )
    code, _, stderr = run(capsys, "-i", inv, "--out", tmp_path / "out")
    assert code == 0, stderr
    jobs = scrape_configs(tmp_path / "out")
    assert [t for t, _ in targets(jobs["vllm"])] == ["10.1.0.11:8080"]
    # A bound address is where Prometheus must scrape; "every address" falls back to ansible_host.
    assert [t for t, _ in targets(jobs["node"])] == ["[fd00::11]:9200", "10.0.0.12:9200"]


def test_a_node_without_the_exporter_is_left_out_and_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(tmp_path, {"spark-2": {"metrics_exporter_enabled": False}})
    code, stdout, stderr = run(capsys, "-i", inv, "--out", tmp_path / "out", "--json")
    assert code == 0, stderr
    jobs = scrape_configs(tmp_path / "out")
    assert [labels["node"] for _, labels in targets(jobs["node"])] == ["spark-1"]
    (note,) = json.loads(stdout)["notes"]
    assert "No node exporter on spark-2" in note
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "No node exporter on spark-2" in readme


def test_no_exporter_anywhere_leaves_only_the_engine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(tmp_path, group_vars="metrics_exporter_enabled: false\n")
    # group_vars wins over the helper's line above it in the same file (the last key).
    code, _, stderr = run(capsys, "-i", inv, "--out", tmp_path / "out")
    assert code == 0, stderr
    assert list(scrape_configs(tmp_path / "out")) == ["vllm"]


def test_the_endpoint_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, stderr = run(
        capsys, "-i", LAB, "--out", tmp_path, "--endpoint", "https://llm.example/v1/"
    )
    assert code == 0, stderr
    vllm = scrape_configs(tmp_path)["vllm"]
    assert vllm["scheme"] == "https"
    assert [t for t, _ in targets(vllm)] == ["llm.example:443"]


# --- the API key ------------------------------------------------------------------------------


def all_text(out: Path) -> str:
    return "".join(p.read_text() for p in sorted(out.iterdir()) if p.is_file())


def test_an_inventory_key_is_referenced_by_file_never_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "-i", inv, "--out", out)
    assert code == 0, stderr
    vllm = scrape_configs(out)["vllm"]
    assert vllm["authorization"] == {"type": "Bearer", "credentials_file": "vllm-api-key"}
    assert "authorization" not in scrape_configs(out)["node"]
    assert not (out / "vllm-api-key").exists()
    assert SECRET not in all_text(out) + stdout + stderr
    assert "put the key in vllm-api-key" in stdout


def test_write_key_writes_it_0600_beside_the_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "-i", inv, "--out", out, "--write-key")
    assert code == 0, stderr
    key = out / "vllm-api-key"
    assert key.read_text() == f"{SECRET}\n"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert SECRET not in (out / "prometheus.yml").read_text() + stdout + stderr
    assert stat.S_IMODE((out / "prometheus.yml").stat().st_mode) == 0o644


def test_key_file_names_the_file_and_needs_no_inventory_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A vault-encrypted key the controller cannot read does not matter with --key-file.
    inv = inventory(tmp_path, group_vars='vllm_serve_api_key: "{{ undefined_vault_key }}"\n')
    code, _, stderr = run(
        capsys, "-i", inv, "--out", tmp_path / "out", "--key-file", "/etc/prometheus/gx10.key"
    )
    assert code == 0, stderr
    vllm = scrape_configs(tmp_path / "out")["vllm"]
    assert vllm["authorization"]["credentials_file"] == "/etc/prometheus/gx10.key"


def test_write_key_without_an_inventory_key_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inv = inventory(tmp_path)
    code, _, stderr = run(capsys, "-i", inv, "--out", tmp_path / "out", "--write-key")
    assert code == 1
    assert "the inventory sets no vllm_serve_api_key" in stderr
    assert not (tmp_path / "out").exists()


# --- bad input: a clear error, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "group_vars", "said"),
    [
        (("--scrape-interval", "0"), "", "--scrape-interval 0: give seconds between 1 and 300"),
        (("--endpoint", "ftp://x"), "", "--endpoint 'ftp://x': the scheme must be http or https"),
        ((), 'metrics_exporter_enabled: "yes"\n', "metrics_exporter_enabled is 'yes' (str)"),
        ((), "metrics_exporter_port: 99999\n", "metrics_exporter_port is 99999; it must be"),
    ],
)
def test_bad_input_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
    group_vars: str,
    said: str,
) -> None:
    inv = inventory(tmp_path, group_vars=group_vars)
    code, _, stderr = run(capsys, "-i", inv, "--out", tmp_path / "out", *args)
    assert code == 1
    assert said in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_existing_files_are_kept_without_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "prometheus.yml").write_text("mine\n")
    code, _, stderr = run(capsys, "-i", LAB, "--out", out)
    assert code == 1
    assert "already there; give --force" in stderr
    assert (out / "prometheus.yml").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["prometheus.yml"]
    code, _, stderr = run(capsys, "-i", LAB, "--out", out, "--force")
    assert code == 0, stderr
    assert "job_name: vllm" in (out / "prometheus.yml").read_text()


def test_an_out_that_is_a_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    code, _, stderr = run(capsys, "-i", LAB, "--out", tmp_path / "file" / "out")
    assert code == 1
    assert "is not a directory" in stderr


# --- Prometheus' own check ------------------------------------------------------------------


@pytest.mark.parametrize("with_key", [False, True])
def test_promtool_checks_the_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, with_key: bool
) -> None:
    promtool = need("promtool")
    out = tmp_path / "out"
    if with_key:
        inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
        code, _, stderr = run(capsys, "-i", inv, "--out", out, "--write-key")
    else:
        code, _, stderr = run(capsys, "-i", inventory(tmp_path), "--out", out)
    assert code == 0, stderr
    check = subprocess.run(
        [str(promtool), "check", "config", str(out / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout + check.stderr


def test_promtool_refuses_the_config_until_the_key_file_is_there(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The check above can fail: without --write-key the key file is the user's to provide, and
    promtool refuses the config until it exists (what the README says to do)."""
    promtool = need("promtool")
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
    out = tmp_path / "out"
    code, _, stderr = run(capsys, "-i", inv, "--out", out)
    assert code == 0, stderr

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(promtool), "check", "config", str(out / "prometheus.yml")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    refused = check()
    assert refused.returncode != 0, refused.stdout
    assert "vllm-api-key" in refused.stdout + refused.stderr
    (out / "vllm-api-key").write_text("the key\n")
    assert check().returncode == 0
