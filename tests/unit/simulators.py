"""The lab's simulators (python/gx10/lab/simulators) as the unit tests use them.

The scripts run standalone in the lab containers (as /usr/bin/nvidia-smi, ...), so tests load them
from their files (the vLLM simulator is a package, gx10.lab.simulators.vllm_sim, imported as such);
the node sysfs trees come from the RDMA sysfs simulator fed the recorded `ip -j addr show` of
tests/fixtures/ip-addr.
"""

from __future__ import annotations

import ast
import importlib.util
import stat
import sys
from pathlib import Path
from types import ModuleType

from gx10.lab.simulators.rdma_sysfs import sync

ROOT = Path(__file__).resolve().parents[2]
SIMULATORS = ROOT / "python" / "gx10" / "lab" / "simulators"
RECORDING = ROOT / "tests" / "fixtures" / "ip-addr" / "1-rail-ipv4.json"


def simulator_path(name: str) -> Path:
    """The script of simulator `name` (e.g. "nvidia_smi", "rdma_sysfs")."""
    return SIMULATORS / f"{name}.py"


def load_simulator(name: str, module_name: str | None = None) -> ModuleType:
    """A fresh module executed from the simulator's file, registered as `module_name`."""
    spec = importlib.util.spec_from_file_location(
        module_name or f"gx10_{name}", simulator_path(name)
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def assert_standalone_script(path: Path) -> None:
    """The script runs as /usr/bin/python3 on its own: shebang, executable, stdlib imports only."""
    source = path.read_text(encoding="utf-8")
    # Not a test module, so pytest does not rewrite these asserts: the messages say what failed.
    assert source.startswith("#!/usr/bin/python3\n"), source[:40]
    assert path.stat().st_mode & stat.S_IXUSR, f"{path}: installed by symlink, must be executable"
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def node_gid_tables(root: Path, host_octet: str, shift: int = 0, *, reset: bool = False) -> None:
    """The node's sysfs GID tables, from the recording with its own rail addresses."""
    recorded = RECORDING.read_text(encoding="utf-8")
    sync(
        str(root),
        recorded.replace('"192.168.100.10"', f'"192.168.100.{host_octet}"').replace(
            '"192.168.101.10"', f'"192.168.101.{host_octet}"'
        ),
        shift=shift,
        reset=reset,
    )
