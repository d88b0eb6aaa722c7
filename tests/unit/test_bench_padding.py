"""Exact prompt padding against a real BPE tokenizer, and the lab simulator tokenizing with one.

The simulator pair runs with GX10_SIM_TOKENIZER set to a small byte-level BPE (vocab 600) trained
here from the corpus the vllm-sim image trains its own from. With it, the words the bench once
padded with cost about 1.8 tokens each, as with a real model's tokenizer (issue 16, item 1).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_helpers import SERVED, sim_pair
from openai import OpenAI
from tokenizers import Tokenizer

from gx10.bench import client as bench_client
from gx10.bench.client import Endpoint, PaddingFailed, PromptBuilder
from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.train_tokenizer import train

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "python" / "gx10" / "lab" / "image" / "vllm-sim" / "tokenizer-corpus.txt"
KWARGS = {"thinking": True}


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(CORPUS, tmp_path_factory.mktemp("bpe") / "tokenizer.json")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, tokenizer_json: Path) -> Iterator[str]:
    env = {"GX10_SIM_TOKENIZER": str(tokenizer_json)}
    with sim_pair(tmp_path_factory.mktemp("sim"), 0.0, env=env) as head:
        yield head


def post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}{path}", json={"model": SERVED, **body}, timeout=20)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def count(url: str, messages: list[dict[str, str]]) -> int:
    return int(
        post(url, "/tokenize", {"messages": messages, "chat_template_kwargs": KWARGS})["count"]
    )


# The padding as it was before issue 16 (words as fillers, a secant search, three nonces), kept
# here to show that a real BPE defeats it.
OLD_WORDS = (  # noqa: SIM905 - the text exactly as the old code had it
    "the of and to in is it you that he was for on are as with his they at be this have from or "
    "one had by word but not what all were we when your can said use an each she do how if will "
    "up out many then them so some her make like him into time has look two more go see way "
    "who oil its now find long down day did get come made may part over new take only work know "
    "year live me back give most very our just name good man say much line too mean old any "
    "same tell boy came want show also form set put end does well must big even such"
).split()


class OldPadding:
    def __init__(self, count: Callable[[list[dict[str, str]]], int]) -> None:
        self.count = count
        self.words: list[str] = []
        self.tokens_per_word = 1.0
        self.last_words: dict[int, int] = {}

    def messages(self, nonce: str, words: int) -> list[dict[str, str]]:
        while len(self.words) < words:
            rng = random.Random(len(self.words) // 4096)
            self.words += [rng.choice(OLD_WORDS) for _ in range(4096)]
        text = f"Benchmark request {nonce}. Read the notes and summarise them.\n"
        return [{"role": "user", "content": text + " ".join(self.words[:words])}]

    def build(self, target: int) -> bool:
        return any(self.fit(uuid.uuid4().hex, target) is not None for _ in range(3))

    def fit(self, nonce: str, target: int) -> int | None:
        base = self.count(self.messages(nonce, 0))
        words = self.last_words.get(target, round((target - base) / self.tokens_per_word))
        tried: dict[int, int] = {0: base}
        for _ in range(16):
            words = max(words, 0)
            have = tried.get(words)
            if have is None:
                have = tried[words] = self.count(self.messages(nonce, words))
            if have == target:
                self.last_words[target] = words
                if words:
                    self.tokens_per_word = (have - base) / words
                return words
            diff = target - have
            step = round(diff / max(self.tokens_per_word, 0.1)) if abs(diff) > 2 else 0
            step = step or (1 if diff > 0 else -1)
            if words + step in tried and (tried[words + step] > target) == (diff > 0):
                return None
            words += step
        return None


@pytest.fixture
def local_count(tokenizer_json: Path) -> Iterator[Callable[[list[dict[str, str]]], int]]:
    """The simulator's /tokenize count computed in this process (fast: no HTTP per count)."""
    vllm_sim.use_tokenizer(str(tokenizer_json))
    try:
        yield lambda messages: vllm_sim.count_tokens(
            vllm_sim.render_chat(messages, None, True, True)
        )
    finally:
        vllm_sim.use_tokenizer(None)


def test_the_old_word_padding_fails_with_a_real_bpe(
    url: str, local_count: Callable[[list[dict[str, str]]], int]
) -> None:
    old = OldPadding(local_count)
    sample = old.messages(uuid.uuid4().hex, 700)
    assert local_count(sample) == count(url, sample)  # the same count as the server's
    for target in (512, 1500):
        built = sum(old.build(target) for _ in range(25))
        assert built == 0, f"{built} of 25 old builds reached {target} tokens"


async def _build_all(url: str, targets: list[int]) -> list[tuple[list[dict[str, str]], str]]:
    async with httpx.AsyncClient(timeout=20) as client:
        builder = PromptBuilder(client, Endpoint.parse(url), SERVED, KWARGS)
        return [await builder.build(t) for t in targets]


def test_one_token_units_reach_every_exact_length(url: str) -> None:
    base = count(url, [{"role": "user", "content": "Benchmark request "}])
    # The shortest prompt is the template and the nonce (about 60 tokens; a random nonce takes a
    # few tokens more or less): lengths just above it in steps of one, and the bench's usual
    # lengths, several times each.
    shortest = count(url, OldPadding(lambda m: 0).messages(uuid.uuid4().hex, 0))
    assert base < shortest
    targets = [shortest + 8, shortest + 9, shortest + 10, 255, 256, 257, 511, 1499]
    targets += [512] * 5 + [1500] * 5 + [4096]
    built = asyncio.run(_build_all(url, targets))
    for target, (messages, _nonce) in zip(targets, built, strict=True):
        assert count(url, messages) == target
    nonces = [nonce for _, nonce in built]
    assert len(set(nonces)) == len(nonces)  # still unique: a fresh nonce opens every prompt
    assert all(m[0]["content"].count(n) == 1 for m, n in built)


def test_a_prompt_shorter_than_the_template_fails_naming_model_and_lengths(url: str) -> None:
    with pytest.raises(PaddingFailed, match=rf"prompt length 1 is shorter .*{SERVED}"):
        asyncio.run(_build_all(url, [1]))


def test_padding_that_cannot_converge_names_the_tokenizer_target_and_lengths(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tokenizer that merges the units in pairs (here: /tokenize counting two per token)."""
    real_count = PromptBuilder.count

    async def halved(self: PromptBuilder, messages: list[dict[str, str]]) -> int:
        have = await real_count(self, messages)
        return have if "UNIT" in messages[0]["content"] else have // 2 * 2

    monkeypatch.setattr(bench_client, "FILLER_CANDIDATES", (" the",))
    monkeypatch.setattr(PromptBuilder, "count", halved)
    bench_client._UNITS.clear()
    try:
        with pytest.raises(PaddingFailed) as info:
            asyncio.run(_build_all(url, [301]))
    finally:
        bench_client._UNITS.clear()
    text = str(info.value)
    assert "exactly 301 tokens" in text
    assert SERVED in text
    assert url in text
    assert "->" in text  # the unit counts and the lengths they gave


# --------------------------------------------------------------------------------------------
# The simulator with the BPE: one tokenizer for /tokenize, /detokenize, usage and prefix cache
# --------------------------------------------------------------------------------------------


def test_tokenize_detokenize_and_usage_agree_with_the_bpe(url: str, tokenizer_json: Path) -> None:
    bpe = Tokenizer.from_file(str(tokenizer_json))
    text = "The oil boy said the morning was cold, and counted 12345 tokens."
    data = post(url, "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert data["tokens"] == bpe.encode(text, add_special_tokens=False).ids
    assert data["count"] > len(text.split())  # rare words are several tokens, as in a real BPE
    assert post(url, "/detokenize", {"tokens": data["tokens"]})["prompt"] == text
    messages = [{"role": "user", "content": text}]
    client = OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=20)
    reply = client.chat.completions.create(
        model=SERVED, messages=messages, max_tokens=4, extra_body={"chat_template_kwargs": KWARGS}
    )
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count(url, messages)


def hits(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=20).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("vllm:prefix_cache_hits_total")
    )


def test_the_prefix_cache_counts_bpe_blocks(url: str) -> None:
    messages = [
        {"role": "user", "content": f"A cached prompt {uuid.uuid4().hex}. " + "the of " * 99}
    ]
    prompt = count(url, messages)
    client = OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=20)
    seen = []
    for _ in range(2):
        before = hits(url)
        reply = client.chat.completions.create(
            model=SERVED,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=2,
            extra_body={"chat_template_kwargs": KWARGS},
        )
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == prompt
        seen.append(hits(url) - before)
    # The second time every full block of 16 BPE tokens is a hit (at most all tokens but the
    # last, which vLLM always computes).
    assert seen == [0, min(prompt // 16 * 16, prompt - 1)]
