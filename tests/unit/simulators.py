"""The lab's simulators (python/gx10/lab/simulators) as the unit tests use them.

The scripts run standalone in the lab containers (as /usr/bin/nvidia-smi, ...), so tests load them
from their files (the vLLM simulator is a package, gx10.lab.simulators.vllm_sim, imported as such);
the node sysfs trees come from the RDMA sysfs simulator fed the recorded `ip -j addr show` of
tests/fixtures/ip-addr.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import stat
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.rdma_sysfs import sync
from gx10.lab.simulators.vllm_sim.api import Server, ServerConfig
from gx10.lab.simulators.vllm_sim.http_server import ApiServer
from gx10.lab.simulators.vllm_sim.model import ModelInfo

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


@dataclass(frozen=True)
class InProcessHead:
    """A vLLM simulator head served from this process: its URL, model, key and break file."""

    url: str
    model: str
    api_key: str
    break_file: Path
    log: io.StringIO


@contextlib.contextmanager
def vllm_sim_head(
    workdir: Path,
    *,
    model: str = "deepseek-v4-flash",
    api_key: str = "battery-secret",
    max_model_len: int = 65536,
    breaks: tuple[str, ...] = (),
    time_scale: float = 0.0,
    default_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[InProcessHead]:
    """The simulator's API server (the head's, without the rendezvous and boot) on a loopback
    ephemeral port, serving as the reference flags do (deepseek_v4 tool and reasoning parsers,
    auto tool choice, thinking off by default, --api-key); instant at time scale 0 (the
    default), timed as the lab's head at 1. Shut down and closed when the block ends."""
    env = vllm_sim.SimEnv(
        time_scale=time_scale,
        state_dir=workdir / "nvidia-smi",
        stall_file=workdir / "stall",
        breaks=breaks,
        break_file=workdir / "break",
    )
    out = io.StringIO()
    log = vllm_sim.Log(out=out)
    engine = vllm_sim.Engine(env, 12, 0, log)
    config = ServerConfig(
        served_names=(model,),
        model=ModelInfo(str(workdir / "model"), "DeepseekV4ForCausalLM", 1048576, None),
        max_model_len=max_model_len,
        api_keys=(api_key,),
        reasoning_parser="deepseek_v4",
        tool_parser="deepseek_v4",
        auto_tools=True,
        default_kwargs=dict(default_kwargs or {"thinking": False}),
        seed=0,
    )
    httpd = ApiServer(("127.0.0.1", 0), Server(config, engine), log)
    httpd.server_bind()
    httpd.server_activate()
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        port = httpd.server_address[1]
        yield InProcessHead(f"http://127.0.0.1:{port}", model, api_key, env.break_file, out)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
