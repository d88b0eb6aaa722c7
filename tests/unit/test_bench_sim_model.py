"""The vLLM simulator's reference performance model (FIELD_NOTES section 5), its SM clock input
and its prefix cache: pure pieces, in-process."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from test_vllm_sim import sim


@pytest.fixture
def ref() -> object:
    return sim.ReferencePerfModel()


def test_reference_is_the_default() -> None:
    assert sim.SimEnv.from_env({}).perf_model == "reference"
    engine = sim.Engine(sim.SimEnv.from_env({}), 12, 0, sim.Log())
    assert isinstance(engine.perf, sim.ReferencePerfModel)


@pytest.mark.parametrize(
    ("prompt", "prefill", "ttft"),
    [(256, 1744, 0.147), (4096, 1933, 2.12), (16384, 1980, 8.27), (524288, 944, 555.4)],
)
def test_prefill_follows_the_context_sweep(prompt: int, prefill: float, ttft: float) -> None:
    model = sim.ReferencePerfModel()
    assert model.prefill_rate(prompt) == pytest.approx(prefill)
    assert model.prefill_seconds(prompt, 0, 1, 0, None) == pytest.approx(ttft, rel=0.01)


def test_decode_is_nearly_flat_in_context_and_scales_with_concurrency() -> None:
    model = sim.ReferencePerfModel()
    assert model.decode_rate(256, 1, None) == pytest.approx(56.1)
    assert model.decode_rate(524288, 1, None) == pytest.approx(45.9)
    assert 50 < model.decode_rate(32768, 1, None) < 56.1
    single = model.decode_rate(256, 1, None)
    assert model.decode_rate(256, 12, None) / single == pytest.approx(19.2 / 49.8)
    assert model.decode_rate(256, 6, None) / single == pytest.approx(25.1 / 49.8)
    # Beyond the table the aggregate stays flat.
    assert 24 * model.decode_rate(256, 24, None) == pytest.approx(
        12 * model.decode_rate(256, 12, None)
    )


def test_concurrency_prediction_matches_the_reference_shape() -> None:
    model = sim.ReferencePerfModel()
    aggregate = {}
    for streams in (1, 12):
        ends = sim.predict_case(model, 256, streams, 2048, max_num_seqs=12)
        aggregate[streams] = streams * 2048 / max(end for _first, end in ends)
    assert 4.3 < aggregate[12] / aggregate[1] < 4.8  # "aggregate x4.5 from 1 to 12 streams"
    queued = sim.predict_case(model, 256, 13, 64, max_num_seqs=12)
    firsts = sorted(first for first, _end in queued)
    assert firsts[-1] > min(end for _f, end in queued[:12])  # the 13th waits for a slot
    ttft = statistics.fmean(f for f, _e in sim.predict_case(model, 8192, 12, 2048, max_num_seqs=12))
    assert ttft == pytest.approx(32.07, rel=0.05)  # the reference's 8,192 x 12 case


def test_clock_cap_moves_prefill_more_than_decode(tmp_path: Path) -> None:
    model = sim.ReferencePerfModel()
    low_prefill, low_decode = model.clock_factors(2000)
    assert low_prefill == pytest.approx(2000 / 2400)
    assert model.clock_factors(2800) == model.clock_factors(None) == (1.0, 1.0)
    assert model.clock_factors(2400)[0] == 1.0  # prefill saturates at 2400 MHz
    # Decode: +5% for +40% clock.
    assert model.clock_factors(2800)[1] / low_decode == pytest.approx(1.05, abs=0.01)
    # The engine reads the nvidia-smi simulator's lock file first, then the env knob.
    env = sim.SimEnv.from_env(
        {"GX10_SIM_STATE_DIR": str(tmp_path), "GX10_SIM_SM_CLOCK_MHZ": "2200"}
    )
    engine = sim.Engine(env, 12, 0, sim.Log())
    assert engine.clock_cap() == 2200.0
    (tmp_path / "locked_clocks").write_text("2000,2000\n")
    assert engine.clock_cap() == 2000.0
    (tmp_path / "locked_clocks").unlink()
    assert (
        sim.Engine(
            sim.SimEnv.from_env({"GX10_SIM_STATE_DIR": str(tmp_path)}), 1, 0, sim.Log()
        ).clock_cap()
        is None
    )


def test_prefix_cache_matches_chained_blocks_and_evicts() -> None:
    pieces = [f"t{i}" for i in range(64)]
    hashes = sim.block_hashes(pieces, 16)
    assert len(hashes) == 4
    other = sim.block_hashes(["x", *pieces[1:]], 16)
    assert not set(hashes) & set(other)  # a different first token changes every block
    cache = sim.PrefixCache(capacity_blocks=6)
    assert cache.match(hashes) == 0
    cache.insert(hashes)
    assert cache.match(sim.block_hashes(pieces[:40], 16)) == 2
    cache.insert(other)  # 8 blocks into 6: the least recently used go
    assert cache.match(hashes) < 4
    assert sim.PrefixCache(0).match(hashes) == 0


def test_cached_prefill_is_nearly_free() -> None:
    model = sim.ReferencePerfModel()
    full = model.prefill_seconds(8192, 0, 1, 0, None)
    cached = model.prefill_seconds(8192, 8176, 1, 0, None)
    assert cached < full / 100
