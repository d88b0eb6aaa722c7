"""A tiny Hub model repository, byte for byte, and the Hub's answer about it.

`FILES` is the content of `gx10-fixtures/tiny-fp8` at commit `REVISION`: the shape of a real
checkpoint repo (.gitattributes, card, configs, two safetensors shards in LFS, an index, a nested
file). `hub_response()` is what `GET /api/models/{repo}/revision/{rev}?blobs=true` returns for it;
tests/fixtures/hub/model_info_tiny-fp8.json holds that answer as recorded, and
test_model_manifest.py checks the two agree, so the fixture's hashes are real hashes of these bytes.

Regenerate the fixture after changing FILES: `python tests/unit/tiny_repo.py`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

REPO = "gx10-fixtures/tiny-fp8"
REVISION = hashlib.sha1(b"gx10-fixtures/tiny-fp8 commit 1", usedforsecurity=False).hexdigest()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
MODEL_INFO = FIXTURES / "model_info_tiny-fp8.json"

_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in ("*.bin", "*.pt", "*.safetensors", "*.model", "*tfevents*")
)


def _noise(seed: str, size: int) -> bytes:
    """Deterministic bytes that do not compress (a stand-in for FP8 weights)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


FILES: dict[str, bytes] = {
    ".gitattributes": _GITATTRIBUTES.encode(),
    "README.md": b"---\nlicense: mit\nlibrary_name: transformers\n---\n\n# tiny-fp8\n",
    "config.json": json.dumps(
        {"architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 2, "vocab_size": 256},
        indent=2,
    ).encode(),
    "generation_config.json": b'{\n  "do_sample": true,\n  "temperature": 0.6\n}\n',
    "inference/requirements.txt": b"torch\nsafetensors\n",
    "model-00001-of-00002.safetensors": _noise("shard-1", 65_536),
    "model-00002-of-00002.safetensors": _noise("shard-2", 40_000),
    "model.safetensors.index.json": json.dumps(
        {
            "metadata": {"total_size": 105_536},
            "weight_map": {
                "embed.weight": "model-00001-of-00002.safetensors",
                "head.weight": "model-00002-of-00002.safetensors",
            },
        },
        indent=2,
    ).encode(),
}

LFS = frozenset(path for path in FILES if path.endswith(".safetensors"))


def write(directory: Path) -> None:
    for path, data in FILES.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _sibling(path: str, data: bytes) -> dict[str, Any]:
    if path not in LFS:
        return {"rfilename": path, "blobId": _git_sha1(data), "size": len(data)}
    sha256 = hashlib.sha256(data).hexdigest()
    # In git the file is an LFS pointer: blobId is the pointer's blob sha1, size the real size.
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
    return {
        "rfilename": path,
        "blobId": _git_sha1(pointer.encode()),
        "size": len(data),
        "lfs": {"sha256": sha256, "size": len(data), "pointerSize": len(pointer)},
    }


def hub_response() -> dict[str, Any]:
    """The Hub's JSON for this repository at REVISION with `?blobs=true`."""
    return {
        "_id": "66aa0f3c9d2e4b0012c0ffee",
        "id": REPO,
        "modelId": REPO,
        "author": "gx10-fixtures",
        "sha": REVISION,
        "lastModified": "2026-07-31T09:12:44.000Z",
        "createdAt": "2026-07-30T17:01:02.000Z",
        "private": False,
        "gated": False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["transformers", "safetensors", "text-generation", "license:mit", "region:us"],
        "config": {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"},
        "cardData": {"license": "mit", "library_name": "transformers"},
        "siblings": [_sibling(path, FILES[path]) for path in sorted(FILES)],
        "spaces": [],
        "usedStorage": sum(len(data) for data in FILES.values()),
    }


if __name__ == "__main__":
    MODEL_INFO.write_text(json.dumps(hub_response(), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {MODEL_INFO}")
