"""bench/converge_nodes.py without a lab: the runs it makes, its table and its verdict."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bench_scripts import load_bench

from gx10 import lab

converge_nodes = load_bench("converge_nodes")


class FakeLab:
    """Records what the benchmark asks of the lab and of provision()."""

    def __init__(self, changed_again: int = 0) -> None:
        self.calls: list[str] = []
        self.changed_again = changed_again
        self.runs: dict[str, int] = {}

    def down(self, log: Any = None) -> None:
        self.calls.append("down")

    def up(self, cfg: lab.LabConfig, log: Any = None) -> None:
        self.calls.append(f"up {len(cfg.nodes)}")

    def provision(
        self, inventory: Path, playbook: str, extravars: dict[str, Any] | None = None
    ) -> Any:
        assert extravars == {"vllm_supervisor_enabled": True}  # both counts supervised
        name = inventory.name
        self.runs[name] = self.runs.get(name, 0) + 1
        first = self.runs[name] % 2 == 1
        self.calls.append(f"{playbook} {name}")
        changed = 30 if first else self.changed_again
        return SimpleNamespace(ok=True, changed_total=changed, failed_tasks=())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLab:
    fake = FakeLab()
    monkeypatch.setattr(lab, "down", fake.down)
    monkeypatch.setattr(lab, "up", fake.up)
    monkeypatch.setattr("gx10.provision", fake.provision)
    return fake


def test_each_count_is_brought_up_bare_then_converged_and_reapplied(
    fake: FakeLab, capsys: pytest.CaptureFixture[str]
) -> None:
    assert converge_nodes.main(["--nodes", "2", "4", "--yes"]) == 0
    assert fake.calls == [
        "down", "up 2", "site.yml lab", "site.yml lab",
        "down", "up 4", "site.yml lab4", "site.yml lab4",
    ]  # fmt: skip
    out = capsys.readouterr().out
    assert "changed again" in out.splitlines()[0]
    assert "2 nodes: converge from bare" in out
    assert "4 nodes: converge from bare" in out
    assert "x 2 nodes" in out


def test_a_reapply_that_changes_something_fails_the_run(
    fake: FakeLab, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.changed_again = 1
    assert converge_nodes.main(["--nodes", "2", "--yes"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_without_yes_nothing_is_touched(fake: FakeLab) -> None:
    with pytest.raises(SystemExit) as exited:
        converge_nodes.main(["--nodes", "2"])
    assert exited.value.code == 2
    assert fake.calls == []
