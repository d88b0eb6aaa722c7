"""The lab's Prometheus without Docker: its image recipe, the config it is given (what
`gx10 metrics config` writes from the lab inventory, checked by promtool where installed), the
files copied in, and when `lab up` creates, keeps or recreates it (Docker calls recorded)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_tools import need

from gx10.lab import images, manager
from gx10.lab.config import LAB_LABEL, LabConfig
from gx10.lab.manager import LabStatus

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-lab-prometheus-key"


def test_the_image_is_debians_prometheus_serving_on_9090() -> None:
    spec = images.prometheus_spec()
    assert spec.packages() == ["prometheus"]
    assert spec.variant == "minbase"
    (cmd,) = [c for c in spec.changes if c.startswith("CMD ")]
    assert '"/usr/bin/prometheus"' in cmd
    assert '"--config.file=/etc/prometheus/prometheus.yml"' in cmd
    assert '"--web.listen-address=:9090"' in cmd
    assert f"LABEL {LAB_LABEL}.image=prometheus" in spec.changes
    assert spec.tag == images.prometheus_spec().tag  # stable


def test_the_lab_config_is_gx10_metrics_config_of_the_lab_inventory() -> None:
    files = manager.prometheus_files(LabConfig())
    # The lab's gateway wants a key for /metrics: the lab inventory's, in a file of its own.
    assert sorted(files) == ["prometheus.yml", "vllm-api-key"]
    text, mode = files["prometheus.yml"]
    assert mode == 0o644
    key = (ROOT / "inventories" / "lab" / ".secrets" / "service.key").read_text().strip()
    assert files["vllm-api-key"] == (key + "\n", 0o600)
    assert key not in text
    jobs = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}
    assert [c["targets"] for c in jobs["vllm"]["static_configs"]] == [["172.31.240.10:8000"]]
    assert [c["targets"] for c in jobs["node"]["static_configs"]] == [
        ["gx10-a:9100"],
        ["gx10-b:9100"],
    ]


def key_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        textwrap.dedent(
            """
            all:
              children:
                head: {hosts: {gx10-a: {gx10_api_host: 172.31.240.10}}}
                workers: {hosts: {gx10-b: {}}}
            """
        )
    )
    (inv / "group_vars" / "all.yml").write_text(
        f"metrics_exporter_enabled: true\nvllm_serve_api_key: {SECRET}\n"
    )
    return inv


def test_an_inventory_key_goes_in_as_a_root_only_file(tmp_path: Path) -> None:
    files = manager.prometheus_files(LabConfig(metrics_inventory=str(key_inventory(tmp_path))))
    assert sorted(files) == ["prometheus.yml", "vllm-api-key"]
    assert files["vllm-api-key"] == (f"{SECRET}\n", 0o600)
    assert SECRET not in files["prometheus.yml"][0]
    with tarfile.open(fileobj=io.BytesIO(manager.files_tar(files))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}
        assert members["vllm-api-key"].mode == 0o600
        assert members["prometheus.yml"].mode == 0o644
        key = tar.extractfile(members["vllm-api-key"])
        assert key is not None
        assert key.read().decode() == f"{SECRET}\n"


@pytest.mark.parametrize("with_key", [False, True])
def test_promtool_accepts_what_the_lab_copies_in(tmp_path: Path, with_key: bool) -> None:
    promtool = need("promtool")
    cfg = LabConfig(metrics_inventory=str(key_inventory(tmp_path))) if with_key else LabConfig()
    target = tmp_path / "etc-prometheus"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(manager.files_tar(manager.prometheus_files(cfg)))) as tar:
        # Member by member (tarfile's extraction filters need Python 3.11.4; Debian 12 has 3.11.2).
        for member in tar.getmembers():
            assert member.isfile(), member.name
            assert "/" not in member.name, member.name
            assert member.name not in ("", ".", ".."), member.name
            data = tar.extractfile(member)
            assert data is not None
            (target / member.name).write_bytes(data.read())
    check = subprocess.run(
        [str(promtool), "check", "config", str(target / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_digest_follows_the_config_and_the_image() -> None:
    files = {"prometheus.yml": ("a: 1\n", 0o644)}
    digest = manager.config_digest("img:1", files)
    assert digest == manager.config_digest("img:1", dict(files))
    assert digest != manager.config_digest("img:2", files)
    assert digest != manager.config_digest("img:1", {"prometheus.yml": ("a: 2\n", 0o644)})


class FakeDocker:
    """Records docker calls; answers `inspect` with the container's state and label."""

    def __init__(self, state: str, label: str = "") -> None:
        self.state, self.label = state, label
        self.calls: list[tuple[str, ...]] = []
        self.copied: bytes = b""

    def docker(self, *args: str, input_bytes: bytes | None = None, **_: Any) -> str:
        self.calls.append(args)
        if args[0] == "cp":
            self.copied = input_bytes or b""
        if args[0] == "inspect":
            return self.label
        return ""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    docker = FakeDocker("absent")
    monkeypatch.setattr(manager._docker, "docker", docker.docker)
    monkeypatch.setattr(manager, "_state", lambda name: docker.state)
    monkeypatch.setattr(manager.images, "ensure", lambda spec, log: "gx10-lab-prometheus:t")
    monkeypatch.setattr(manager, "_wait_prometheus", lambda cfg: None)
    monkeypatch.setattr(
        manager, "prometheus_files", lambda cfg: {"prometheus.yml": ("global: {}\n", 0o644)}
    )
    return docker


def test_up_creates_it_on_the_management_network_published_on_loopback(
    fake: FakeDocker,
) -> None:
    cfg = LabConfig(prometheus_port=19090)
    manager._ensure_prometheus(cfg, log=lambda _line: None)
    verbs = [call[0] for call in fake.calls]
    assert verbs == ["create", "cp", "start"]
    create = fake.calls[0]
    assert create[create.index("--network") + 1] == cfg.mgmt_network
    assert create[create.index("-p") + 1] == "127.0.0.1:19090:9090"
    assert f"{LAB_LABEL}={cfg.name}" in create  # `lab down` removes it by this label
    digest = manager.config_digest(
        "gx10-lab-prometheus:t", {"prometheus.yml": ("global: {}\n", 0o644)}
    )
    assert f"{manager.PROMETHEUS_CONFIG_LABEL}={digest}" in create
    assert fake.calls[1][-1] == "gx10-prometheus:/etc/prometheus"
    with tarfile.open(fileobj=io.BytesIO(fake.copied)) as tar:
        assert tar.getnames() == ["prometheus.yml"]


def test_up_keeps_a_running_one_with_the_same_config(fake: FakeDocker) -> None:
    fake.state = "running"
    fake.label = manager.config_digest(
        "gx10-lab-prometheus:t", {"prometheus.yml": ("global: {}\n", 0o644)}
    )
    manager._ensure_prometheus(LabConfig(), log=lambda _line: None)
    assert [call[0] for call in fake.calls] == ["inspect"]


@pytest.mark.parametrize(("state", "label"), [("running", "old-digest"), ("exited", "")])
def test_up_recreates_a_stale_or_stopped_one(fake: FakeDocker, state: str, label: str) -> None:
    fake.state, fake.label = state, label
    manager._ensure_prometheus(LabConfig(), log=lambda _line: None)
    verbs = [call[0] for call in fake.calls if call[0] != "inspect"]
    assert verbs == ["rm", "create", "cp", "start"]


def test_status_shows_where_prometheus_answers() -> None:
    status = LabStatus(
        "gx10",
        (),
        "running",
        "gx10-registry:5000",
        ("Prometheus gx10-prometheus is absent (run `gx10 lab up`)",),
        prometheus="absent",
        prometheus_url="http://127.0.0.1:9090",
    )
    assert "  prometheus: absent (http://127.0.0.1:9090 on this machine)" in status.summary_lines()
    assert status.to_dict()["prometheus_url"] == "http://127.0.0.1:9090"
    assert not status.running
