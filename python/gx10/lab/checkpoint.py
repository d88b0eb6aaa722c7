"""The lab's synthetic checkpoint: the reference checkpoint's shape in tens of MiB.

48 safetensors-named shards of seeded pseudo-random bytes plus 26 small files (config.json with
`model_type` and no `auto_map`, tokenizer files, an index, code), deterministic byte for byte, so
the manifest committed as `inventories/lab/files/model-manifest.yml` stays valid (a unit test
regenerates it in a temporary directory and compares). Standard library only: `gx10 lab up` runs
this file inside a container to fill the NAS stand-in's volume.

    python3 checkpoint.py DIR MARKER
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SHARDS = 48
SHARD_BYTES = 1024 * 1024
REPO = "gx10-lab/synthetic-deepseek-v4-flash"
REVISION = "5e1f0c0ffee0000000000000000000000000da7a"


def shard_name(index: int) -> str:
    return f"model-{index:05d}-of-{SHARDS:05d}.safetensors"


def shard_bytes(index: int) -> bytes:
    """Shard `index` (1-based): a few KiB more per shard so sizes differ, seeded by its name."""
    return random.Random(f"gx10-lab-shard-{index}").randbytes(SHARD_BYTES + 4096 * index)


def small_files() -> dict[str, str]:
    """The 26 small files, path -> text."""
    config = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "num_hidden_layers": 43,
        "n_routed_experts": 256,
        "num_experts_per_tok": 6,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    index = {
        "metadata": {"total_size": sum(SHARD_BYTES + 4096 * i for i in range(1, SHARDS + 1))},
        "weight_map": {f"model.layers.{i - 1}.weight": shard_name(i) for i in range(1, SHARDS + 1)},
    }
    files = {
        "config.json": json.dumps(config, indent=2) + "\n",
        "generation_config.json": json.dumps({"temperature": 0.6, "top_p": 0.95}) + "\n",
        "model.safetensors.index.json": json.dumps(index, indent=2) + "\n",
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}) + "\n",
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n",
        "special_tokens_map.json": json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}) + "\n",
        "README.md": "# Synthetic checkpoint\n\nLab test equipment: random bytes, not a model.\n",
        "LICENSE": "Synthetic data for the gx10 lab; no rights reserved.\n",
        ".gitattributes": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
    }
    for number in range(17):
        files[f"inference/kernel_{number:02d}.py"] = (
            f"# synthetic module {number}\nVALUE = {number}\n"
        )
    return files


def generate(directory: Path) -> int:
    """Write the checkpoint into `directory` (created); returns its size in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for path, text in small_files().items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        total += len(text.encode())
    for index in range(1, SHARDS + 1):
        data = shard_bytes(index)
        (directory / shard_name(index)).write_bytes(data)
        total += len(data)
    return total


if __name__ == "__main__":
    # DIR, then the marker written last (outside DIR: it is no file of the checkpoint), so a
    # volume filled halfway is filled again.
    size = generate(Path(sys.argv[1]))
    Path(sys.argv[2]).write_text(f"{size}\n", encoding="utf-8")
    print(size)
