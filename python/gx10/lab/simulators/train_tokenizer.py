#!/usr/bin/python3
"""Train the lab vLLM simulator's small byte-level BPE tokenizer from a text file.

Runs while the vllm-sim image is built (`train_tokenizer.py CORPUS OUT.json [VOCAB]`), and in
unit tests. The vocabulary is small (600), so the commonest words are one token and most others
several (about 1.8 tokens a common English word), as with a real model's tokenizer on text it was
not trained for: a client that assumes "one word, one token" finds out in the lab. Standalone:
the standard library and `tokenizers` only.
"""

from __future__ import annotations

import sys
from pathlib import Path

VOCAB_SIZE = 600


def train(corpus: Path, out: Path, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train from `corpus` and save tokenizer.json to `out`; deterministic for one input."""
    # Imported here: the module's constants are read without the package.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    tokenizer.train_from_iterator(lines, trainer=trainer, length=len(lines))
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out))
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        sys.stderr.write("usage: train_tokenizer.py CORPUS OUT.json [VOCAB_SIZE]\n")
        return 2
    vocab = int(argv[2]) if len(argv) == 3 else VOCAB_SIZE
    path = train(Path(argv[0]), Path(argv[1]), vocab)
    print(f"trained {path} (vocab {vocab})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
