#!/usr/bin/env python3
"""Make the lab engine's tiny model: a Llama-shaped checkpoint with random weights and a BPE
tokenizer trained on the corpus the project ships. Nothing comes from a model hub.

Runs while the vllm-cpu image is built (test equipment), in the image's vLLM environment:
`make_tiny_model.py CORPUS OUT_DIR`. The same inputs give the same files, byte for byte (a fixed
seed, the tokenizer trained deterministically, safetensors written in key order), so the lab's
model manifest can pin them (inventories/lab-vllm/files/model-manifest.yml).

Shape: what tensor parallel 2 over the lab's two nodes needs (heads and KV heads split in two)
and the serving profile's 1M-token context (max_position_embeddings): 2 layers of width 128, 4
attention heads over 2 KV heads of 32, so the KV cache is 256 bytes a token on each rank in
bfloat16 and a 1M-token request fits in 256 MiB of a node's KV cache space.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 10_0731
CONTEXT = 1 << 20
VOCAB = 600  # the BPE's own vocabulary, as the simulator's (train_tokenizer.py)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML, with the tools a request declares listed in the system turn.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:\n{%- for tool in tools %}\n{{ tool | tojson }}"
    "{%- endfor %}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string %}{{ message['content'] }}"
    "{%- elif message['content'] %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{ part['text'] }}{%- endif %}{%- endfor %}{%- endif %}"
    "<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def make(corpus: Path, out: Path) -> None:
    import torch  # noqa: PLC0415 - the image's environment, not the project's
    from tokenizers import AddedToken, Tokenizer  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_tokenizer import train  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    tokenizer_file = train(corpus, out / "tokenizer.json", VOCAB)
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tokenizer.save(str(tokenizer_file))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL}
    vocab = -(-tokenizer.get_vocab_size() // 64) * 64  # rows padded to a multiple of 64

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=CONTEXT,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": CONTEXT,
                "bos_token": "<|im_start|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "add_bos_token": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
        encoding="utf-8",
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
            indent=2,
            sort_keys=True,
        )
        + "\n",
        encoding="utf-8",
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: make_tiny_model.py CORPUS OUT_DIR\n")
        return 2
    make(Path(argv[0]), Path(argv[1]))
    for path in sorted(Path(argv[1]).iterdir()):
        print(f"{path.name} {path.stat().st_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
