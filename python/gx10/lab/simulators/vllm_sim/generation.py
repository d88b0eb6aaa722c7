"""Text generation: deterministic prose and reasoning (tool calls: tool_calls.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from .tokenizer import token_pieces


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _split(
    "the model answers with plain words so that clients can read every token as it streams "
    "through the lab network between two nodes while the head keeps time for each request and "
    "reports usage counts that match what was sent in order to measure prefill decode and "
    "latency for every session under load with many users at once on rails of fast links "
    "where memory bandwidth bounds the decode rate and compute bounds the prefill rate so the "
    "numbers stay honest and repeatable from run to run"
)
REASONING_WORDS = _split(
    "let me think about this step by step first consider what the user asks then check the "
    "facts compare the options weigh each one and verify the result before answering clearly "
    "and briefly maybe there is a simpler way so I should double check the edge cases"
)


def word_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Sentences of random words, forever."""
    while True:
        length = rng.randint(6, 16)
        sentence = [rng.choice(words) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        yield " " + " ".join(sentence) + "."


def token_stream(rng: random.Random, words: Sequence[str]) -> Iterator[str]:
    """Token pieces of generated prose, forever; the first piece has no leading space."""
    first = True
    for sentence in word_stream(rng, words):
        for piece in token_pieces(sentence):
            yield piece.lstrip() if first else piece
            first = False
