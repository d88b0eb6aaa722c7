"""`gx10 lab`: the lab's commands, plugged into the product CLI through an entry point."""

from __future__ import annotations

import ast
import json
import subprocess
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

import gx10.lab
from gx10 import cli
from gx10.lab import images, manager
from gx10.lab.errors import LabError

PACKAGE = Path(cli.__file__).resolve().parent


def test_the_lab_command_comes_from_its_entry_point() -> None:
    names = [entry.value for entry in cli.importlib.metadata.entry_points(group=cli.PLUGIN_GROUP)]
    assert names == ["gx10.lab.cli:add_parser"]
    assert "lab" in cli.build_parser().format_help()


def test_without_the_lab_installed_there_is_no_lab_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli.importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(SystemExit) as info:
        invoke(["lab", "status"])
    assert info.value.code == 1


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_product_module_imports_the_lab() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in _imports(path) if name == "gx10.lab" or name.startswith("gx10.lab.")
        )
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ("lab", "_dev")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_no_product_module_knows_the_simulators_knobs() -> None:
    """Issue 12: the product measures any vLLM server; the simulators' settings (GX10_SIM_*, the
    gx10_sim_info metric, its time scale) are for the lab and its tests only."""
    knobs = ("GX10_SIM_", "gx10_sim", "time_scale", "time-scale")
    offenders = {
        str(path.relative_to(PACKAGE)): [k for k in knobs if k in path.read_text()]
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ("lab", "_dev")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


@dataclass(frozen=True)
class FakeLabStatus:
    running: bool
    nodes: tuple[str, ...] = ("gx10-a", "gx10-b")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}

    def summary_lines(self) -> list[str]:
        return [f"lab: {'running' if self.running else 'stopped'}", *self.nodes]


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Stand in for the lab's API (it needs docker); records the calls."""
    state = types.SimpleNamespace(running=False, calls=[])
    state.patch = lambda name, fn: monkeypatch.setattr(gx10.lab, name, fn)

    def up(cfg: gx10.lab.LabConfig | None = None) -> FakeLabStatus:
        print("starting containers")  # the real up() logs progress with print
        state.calls.append("up" if cfg is None or len(cfg.nodes) == 2 else f"up {len(cfg.nodes)}")
        state.running = True
        return FakeLabStatus(running=True)

    def down() -> None:
        state.calls.append("down")
        state.running = False

    def status() -> FakeLabStatus:
        state.calls.append("status")
        return FakeLabStatus(running=state.running)

    for name, fn in (("up", up), ("down", down), ("status", status)):
        state.patch(name, fn)
    return state


def test_lab_status_exit_code_follows_running(lab: types.SimpleNamespace) -> None:
    stopped = invoke(["lab", "status"])
    assert (stopped.code, stopped.stdout) == (3, "lab: stopped\ngx10-a\ngx10-b\n")
    lab.running = True
    assert invoke(["lab", "status"]).code == 0


def test_lab_up_json_keeps_logs_off_stdout(lab: types.SimpleNamespace) -> None:
    run = invoke(["lab", "up", "--json"])
    assert run.code == 0
    assert json.loads(run.stdout) == {"running": True, "nodes": ["gx10-a", "gx10-b"]}
    assert run.stderr == "starting containers\n"
    assert lab.calls == ["up"]


def test_lab_down(lab: types.SimpleNamespace) -> None:
    lab.running = True
    run = invoke(["lab", "down"])
    assert (run.code, run.stdout) == (0, "lab is down\n")
    assert lab.calls == ["down"]
    assert json.loads(invoke(["lab", "down", "--json"]).stdout) == {"ok": True}


def test_lab_swap_nics_and_replace_name_the_node(lab: types.SimpleNamespace) -> None:
    def swap_nics(node: str) -> FakeLabStatus:
        print(f"swapping the rail NICs of {node}")
        lab.calls.append(("swap_nics", node))
        return FakeLabStatus(running=True)

    def replace_node(node: str) -> FakeLabStatus:
        lab.calls.append(("replace_node", node))
        return FakeLabStatus(running=True)

    lab.patch("swap_nics", swap_nics)
    lab.patch("replace_node", replace_node)
    swapped = invoke(["lab", "swap-nics", "gx10-b", "--json"])
    assert swapped.code == 0
    assert json.loads(swapped.stdout)["running"] is True
    assert swapped.stderr == "swapping the rail NICs of gx10-b\n"
    assert invoke(["lab", "replace", "gx10-a"]).code == 0
    assert lab.calls == [("swap_nics", "gx10-b"), ("replace_node", "gx10-a")]
    with pytest.raises(SystemExit) as info:  # NODE is required
        invoke(["lab", "replace"])
    assert info.value.code == 1


def test_lab_throttle_sets_and_clears_a_rate(lab: types.SimpleNamespace) -> None:
    def throttle(node: str, netdev: str, rate: str | None) -> str:
        print(f"throttling {node} {netdev}")
        lab.calls.append(("throttle", node, netdev, rate))
        return "qdisc tbf 8001: root rate 300Mbit" if rate else "qdisc noqueue 0: root"

    lab.patch("throttle", throttle)
    run = invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0", "--rate", "300mbit"])
    assert run.code == 0
    assert run.stdout.endswith("gx10-b enP2p1s0f0np0: qdisc tbf 8001: root rate 300Mbit\n")
    cleared = invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0", "--clear", "--json"])
    assert json.loads(cleared.stdout) == {
        "node": "gx10-b",
        "netdev": "enP2p1s0f0np0",
        "rate": None,
        "qdisc": "qdisc noqueue 0: root",
    }
    assert cleared.stderr == "throttling gx10-b enP2p1s0f0np0\n"
    assert lab.calls == [
        ("throttle", "gx10-b", "enP2p1s0f0np0", "300mbit"),
        ("throttle", "gx10-b", "enP2p1s0f0np0", None),
    ]
    with pytest.raises(SystemExit) as info:  # --rate or --clear is required
        invoke(["lab", "throttle", "gx10-b", "enP2p1s0f0np0"])
    assert info.value.code == 1


def test_lab_heat_sets_and_clears_the_gpu_offset(lab: types.SimpleNamespace) -> None:
    def heat(node: str, offset_c: float | None, tau_s: float | None = None) -> dict[str, Any]:
        print(f"heating {node}")
        lab.calls.append(("heat", node, offset_c, tau_s))
        return {"ambient_offset_c": offset_c, "thermal_tau_s": tau_s}

    lab.patch("heat", heat)
    run = invoke(["lab", "heat", "gx10-b", "--offset", "25"])
    assert run.code == 0
    assert run.stdout == (
        "heating gx10-b\ngx10-b: GPU ambient offset +25 C, thermal time constant 30 s (default)\n"
    )
    run = invoke(["lab", "heat", "gx10-a", "--offset=-5.5", "--tau", "0"])
    assert run.stdout.endswith("gx10-a: GPU ambient offset -5.5 C, thermal time constant 0 s\n")
    cleared = invoke(["lab", "heat", "gx10-b", "--clear", "--json"])
    assert json.loads(cleared.stdout) == {
        "node": "gx10-b",
        "ambient_offset_c": None,
        "thermal_tau_s": None,
    }
    assert cleared.stderr == "heating gx10-b\n"
    assert lab.calls == [
        ("heat", "gx10-b", 25.0, None),
        ("heat", "gx10-a", -5.5, 0.0),
        ("heat", "gx10-b", None, None),
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["gx10-b"],  # --offset or --clear is required
        ["gx10-b", "--offset", "25", "--clear"],
        ["gx10-b", "--offset", "hot"],
        ["gx10-b", "--offset", "nan"],
        ["gx10-b", "--offset", "150"],
        ["gx10-b", "--offset", "20", "--tau", "-1"],
        ["gx10-b", "--clear", "--tau", "inf"],
        ["--offset", "20"],  # NODE is required
    ],
)
def test_lab_heat_refuses_bad_arguments(lab: types.SimpleNamespace, args: list[str]) -> None:
    lab.patch("heat", lambda *a: lab.calls.append(a))
    with pytest.raises(SystemExit) as info:
        invoke(["lab", "heat", *args])
    assert info.value.code == 1
    assert lab.calls == []


def test_lab_heat_writes_the_simulator_state_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gx10.lab.heat's script, run here with sh instead of in a node with docker exec."""
    state_dir = tmp_path / "nvidia-smi"
    commands: list[tuple[str, ...]] = []

    def node_exec(node: str, *args: str, timeout: float = 60, check: bool = True) -> str:
        commands.append((node, *args))
        assert args[:2] == ("sh", "-c")
        assert args[4] == manager.NVIDIA_SMI_STATE_DIR
        local = [*args[:4], str(state_dir), *args[5:]]
        done = subprocess.run(local, capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.strip()

    monkeypatch.setattr(manager, "_state", lambda name: "running")
    monkeypatch.setattr(manager._docker, "node_exec", node_exec)
    # The two-node lab, whatever this machine runs (current() would ask its docker).
    monkeypatch.setattr(manager, "current", gx10.lab.LabConfig)
    logs: list[str] = []
    assert manager.heat("gx10-b", 25.0, 10.0, log=logs.append) == {
        "ambient_offset_c": 25.0,
        "thermal_tau_s": 10.0,
    }
    assert (state_dir / "ambient_offset_c").read_text() == "25.0\n"
    assert (state_dir / "thermal_tau_s").read_text() == "10.0\n"
    assert manager.heat("gx10-b", -3.0, log=logs.append) == {
        "ambient_offset_c": -3.0,
        "thermal_tau_s": None,  # no --tau: back to the default
    }
    assert not (state_dir / "thermal_tau_s").exists()
    assert manager.heat("gx10-b", None, log=logs.append) == {
        "ambient_offset_c": None,
        "thermal_tau_s": None,
    }
    assert sorted(p.name for p in state_dir.iterdir()) == []
    assert [c[0] for c in commands] == ["gx10-b"] * 3
    assert logs[0] == "heating gx10-b's GPU by +25 C (time constant 10 s)"
    assert logs[-1] == "clearing the GPU heat on gx10-b"
    with pytest.raises(LabError, match="no lab node 'gx10-c'"):
        manager.heat("gx10-c", 5.0)
    with pytest.raises(LabError, match="outside"):
        manager.heat("gx10-a", float("nan"))
    monkeypatch.setattr(manager, "_state", lambda name: "exited")
    with pytest.raises(LabError, match="run `gx10 lab up` first"):
        manager.heat("gx10-a", 5.0)
    assert len(commands) == 3


def test_lab_up_nodes_four_builds_the_switch_lab(lab: types.SimpleNamespace) -> None:
    assert invoke(["lab", "up", "--nodes", "4"]).code == 0
    assert lab.calls == ["up 4"]
    with pytest.raises(SystemExit) as info:
        invoke(["lab", "up", "--nodes", "3"])
    assert info.value.code != 0  # argparse's usage error: 3 is not a lab size


def test_lab_images_builds_every_lab_image_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def ensure(spec: images.ImageSpec, log: Callable[[str], None]) -> str:
        log(f"building {spec.tag}")
        return spec.tag

    def no_docker(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"docker called: {args}")

    monkeypatch.setattr(images, "ensure", ensure)
    monkeypatch.setattr(manager._docker, "run", no_docker)
    tags = [spec().tag for spec in images.LAB_IMAGES]

    run = invoke(["lab", "images", "--json"])
    assert run.code == 0
    assert json.loads(run.stdout) == {"images": tags}
    assert run.stderr == "".join(f"building {tag}\n" for tag in tags)
    run = invoke(["lab", "images"])
    assert (run.code, run.stderr) == (0, "")
    assert run.stdout == "".join(f"building {tag}\n" for tag in tags) + "\n".join(tags) + "\n"
