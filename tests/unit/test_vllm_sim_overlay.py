"""The vLLM simulator's chat encoding, the file an overlay replaces (vllm_serve_overlay): every
rank reports the sha256 of the encoding it loaded, in its log and (the head) in /metrics."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from simulators import SIMULATORS
from test_vllm_sim import Launcher, healthy, http, wait_until

from gx10.lab import images
from gx10.lab.simulators.vllm_sim import deepseek_v4_encoding

ENCODING = images.VLLM_SIM_PACKAGE / "deepseek_v4_encoding.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_image_ships_the_encoding_the_simulator_reports() -> None:
    spec = images.vllm_sim_spec()
    assert spec.files[f"{images.SIM_LIB}/vllm_sim/deepseek_v4_encoding.py"] == ENCODING
    assert str(ENCODING) == deepseek_v4_encoding.LOADED_FILE
    assert sha256(ENCODING) == deepseek_v4_encoding.LOADED_SHA256


def test_each_rank_reports_the_encoding_it_runs(tmp_path: Path) -> None:
    """A copy of the simulator whose encoding carries one more line (as a mounted replacement
    does): both ranks log the replacement's path and sha256, and the head exports it."""
    package = tmp_path / "lib"
    shutil.copytree(SIMULATORS / "vllm_sim", package / "vllm_sim",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    replaced = package / "vllm_sim" / "deepseek_v4_encoding.py"
    replaced.write_text(ENCODING.read_text() + "# the checkpoint's fix (a test overlay)\n")
    fixed = sha256(replaced)
    assert fixed != sha256(ENCODING)
    lab = Launcher(tmp_path / "run")
    try:
        env = {"PYTHONPATH": str(package)}
        head, worker, url = lab.pair(head_env=env, worker_env=env)
        wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
        assert head.alive(), head.output()
        for rank in (head, worker):
            assert f"DeepSeek V4 encoding {replaced} (sha256 {fixed})" in rank.output()
        status, text = http("GET", f"{url}/metrics")
        assert status == 200
        info = re.search(r"^gx10_sim_info\{(.*)\} 1\.0$", text, re.MULTILINE)
        assert info, text
        assert f'encoding_sha256="{fixed}"' in info.group(1)
    finally:
        lab.close()
