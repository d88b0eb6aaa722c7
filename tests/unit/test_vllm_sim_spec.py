"""The vLLM simulator's speculative-decoding counters: vLLM's names and types, and the rate the
knob GX10_SIM_SPEC_ACCEPTANCE sets, which is what the counters show (accepted over proposed draft
tokens), read back with the doctor's own parser and extraction.

In-process through the API logic (the engine and the request path the HTTP server runs) for
several rates, and once through a served pair's /metrics on loopback, scraped as `gx10 doctor`
scrapes it. Generation is seeded by the prompt, so every figure here is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from test_vllm_sim import API_KEY, SERVE_FLAGS, SERVED, Launcher, healthy, wait_until

from gx10.doctor import engine_metrics, prometheus
from gx10.lab.simulators import vllm_sim as sim
from gx10.lab.simulators.vllm_sim.api import Server, ServerConfig
from gx10.lab.simulators.vllm_sim.engine import position_acceptance
from gx10.lab.simulators.vllm_sim.metrics import render_metrics
from gx10.lab.simulators.vllm_sim.model import ModelInfo

K = 5  # the field's DSpark k (FIELD_NOTES section 4)
TOLERANCE = 0.03  # a few thousand draft tokens: the rate's spread is about 0.01


def test_position_acceptance_makes_the_rate_the_knob() -> None:
    for k in (1, 2, 5, 8):
        for rate in (0.05, 0.3, 0.58, 0.85, 0.97):
            q = position_acceptance(rate, k)
            assert rate <= q <= 1.0
            assert sum(q**i for i in range(1, k + 1)) / k == pytest.approx(rate, abs=1e-9)
    assert position_acceptance(0.85, 1) == 0.85  # one position: the rate itself
    assert position_acceptance(0.0, 5) == 0.0
    assert position_acceptance(1.0, 5) == 1.0
    assert position_acceptance(1.7, 5) == 1.0  # clamped, as SimEnv clamps the knob
    assert position_acceptance(0.3, 5) < position_acceptance(0.6, 5) < position_acceptance(0.9, 5)


def test_the_knob_is_clamped_and_defaults_to_the_field_figure() -> None:
    assert sim.SimEnv.from_env({}).spec_acceptance == 0.85
    assert sim.SimEnv.from_env({"GX10_SIM_SPEC_ACCEPTANCE": "0.4"}).spec_acceptance == 0.4
    assert sim.SimEnv.from_env({"GX10_SIM_SPEC_ACCEPTANCE": "-1"}).spec_acceptance == 0.0
    assert sim.SimEnv.from_env({"GX10_SIM_SPEC_ACCEPTANCE": "nope"}).spec_acceptance == 0.85


def serve_requests(rate: float, requests: int, max_tokens: int, k: int = K) -> sim.Engine:
    """`requests` completions of `max_tokens` each through the head's API logic, instantly."""
    engine = sim.Engine(
        sim.SimEnv(spec_acceptance=rate, time_scale=0.0), 12, k, sim.Log(out=_Discard())
    )
    config = ServerConfig(
        served_names=(SERVED,),
        model=ModelInfo("/model", "DeepseekV4ForCausalLM", 4096, None),
        max_model_len=4096,
        api_keys=(),
        reasoning_parser=None,
        tool_parser=None,
        auto_tools=False,
        default_kwargs={},
        seed=0,
    )
    server = Server(config, engine)
    for n in range(requests):
        body = {"prompt": f"request {n}: count on", "max_tokens": max_tokens, "ignore_eos": True}
        plan = server.plan_completion(body)
        produced = sum(len(step) for step in server.generate(plan))
        assert produced == max_tokens
        server.finished(plan, produced, "length", 0.0, 0.0)
    return engine


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("rate", [0.85, 0.58, 0.2])
def test_the_counters_show_the_knobs_rate(rate: float) -> None:
    engine = serve_requests(rate, requests=20, max_tokens=300)
    exposition = prometheus.parse(render_metrics(engine, SERVED))
    counters = engine_metrics.spec_decode_counters(exposition)
    assert counters is not None
    assert counters.draft_tokens >= 1000  # enough for the doctor to judge
    assert counters.acceptance == pytest.approx(rate, abs=TOLERANCE)
    # vLLM's bookkeeping: k draft tokens per draft, the accepted ones counted per position.
    assert counters.draft_tokens == K * counters.drafts
    assert sum(counters.accepted_per_position) == counters.accepted_tokens
    assert len(counters.accepted_per_position) == K
    rates = counters.position_rates()
    assert list(rates) == sorted(rates, reverse=True)  # the first rejection ends a draft
    assert rates[0] == pytest.approx(position_acceptance(rate, K), abs=TOLERANCE)


def test_every_generated_token_after_the_first_comes_from_a_counted_step() -> None:
    engine = serve_requests(0.5, requests=3, max_tokens=200)
    c = engine.counters
    # Each decode step yields 1 + its accepted drafts; the last step of a request is cut at
    # max_tokens, so the steps cover at least the 199 decoded tokens of each request.
    assert c.generation_tokens == 600
    assert c.spec_drafts + c.spec_accepted >= 3 * 199


def test_the_counters_are_vllms_names_and_types() -> None:
    engine = serve_requests(0.85, requests=1, max_tokens=50)
    families = prometheus.parse(render_metrics(engine, SERVED)).families
    for name in engine_metrics.SPEC_COUNTERS:
        assert families[name].type == "counter", name
        created = name.removesuffix("_total") + "_created"
        assert families[created].type == "gauge", created  # prometheus_client's _created
        for sample in families[name].samples:
            assert sample.labels["engine"] == "0"
            assert sample.labels["model_name"] == SERVED
    positions = [
        s.labels["position"] for s in families[engine_metrics.ACCEPTED_PER_POSITION].samples
    ]
    assert positions == ["0", "1", "2", "3", "4"]
    assert families[engine_metrics.DRAFTS].help == "Number of spec decoding drafts."
    # Every family of the exposition parses strictly, the histograms with their buckets too.
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"


def test_no_speculative_config_exports_no_counters() -> None:
    engine = serve_requests(0.85, requests=1, max_tokens=20, k=0)
    exposition = prometheus.parse(render_metrics(engine, SERVED))
    assert engine_metrics.spec_decode_counters(exposition) is None
    assert engine.counters.generation_tokens == 20


def test_a_low_rate_slows_decode_as_tokens_per_step_do() -> None:
    calibrated = sim.Engine(sim.SimEnv(), 12, K, sim.Log())
    assert calibrated.spec_speed == 1.0
    broken = sim.Engine(sim.SimEnv(spec_acceptance=0.4), 12, K, sim.Log())
    assert broken.spec_speed == pytest.approx((1 + K * 0.4) / (1 + K * 0.85))
    assert sim.Engine(sim.SimEnv(spec_acceptance=0.4), 12, 0, sim.Log()).spec_speed == 1.0


# --------------------------------------------------------------------------------------------
# Through a served pair's /metrics, as gx10 doctor reads it
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def low_acceptance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head + worker pair with the reference flags (DSpark k=5) and a draft accepted at 0.4."""
    launcher = Launcher(tmp_path_factory.mktemp("spec"))
    try:
        head, _worker, url = launcher.pair(
            *SERVE_FLAGS, head_env={"GX10_SIM_SPEC_ACCEPTANCE": "0.4"}
        )
        wait_until(lambda: healthy(url) or not head.alive(), 15, "the head's /health")
        assert head.alive(), head.output()
        yield url
    finally:
        launcher.close()


def test_a_served_pairs_metrics_show_the_knobs_rate(low_acceptance: str) -> None:
    before = engine_metrics.scrape(f"{low_acceptance}/v1")
    assert before.problem is None, before.problem
    assert before.spec is not None
    assert before.spec.draft_tokens == 0  # the counters exist from the start, at zero
    with httpx.Client(timeout=30.0) as client:
        for n in range(12):
            answer = client.post(
                f"{low_acceptance}/v1/completions",
                headers={"authorization": f"Bearer {API_KEY}"},
                json={
                    "model": SERVED,
                    "prompt": f"draft badly {n}",
                    "max_tokens": 300,
                    "ignore_eos": True,
                },
            )
            assert answer.status_code == 200, answer.text
    after = engine_metrics.scrape(f"{low_acceptance}/v1")  # /metrics needs no key, as in vLLM
    assert after.problem is None, after.problem
    assert after.url == f"{low_acceptance}/metrics"
    assert after.spec is not None
    assert after.spec.draft_tokens >= engine_metrics.MIN_DRAFT_TOKENS
    assert after.spec.acceptance == pytest.approx(0.4, abs=TOLERANCE)
    assert after.spec.tokens_per_draft == K
