"""The doctor's engine metrics: the strict Prometheus text parser, vLLM's speculative-decoding
counters, the scrape of a head's /metrics (loopback servers only), the acceptance bands and the
verdict, and the model catalog's expected range they come from."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, ClassVar

import httpx
import pytest

from gx10._collection import load as module_utils
from gx10.doctor import engine_metrics as em
from gx10.doctor.prometheus import PrometheusParseError, parse, total

# What vLLM V1 serves with DSpark k=5, as prometheus_client writes it (labels sorted, counters
# with _total and a _created gauge, a histogram with its buckets), trimmed to a few families.
VLLM_METRICS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="deepseek-v4-flash"} 2.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="deepseek-v4-flash"} 2000.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="deepseek-v4-flash"} 1.7563e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="deepseek-v4-flash"} 10000.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="deepseek-v4-flash"} 1.7563e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="deepseek-v4-flash"} 8500.0
# HELP vllm:spec_decode_num_accepted_tokens_created Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_created gauge
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="deepseek-v4-flash"} 1.7563e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
{per_position}# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="deepseek-v4-flash"} 3.5
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="deepseek-v4-flash"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="deepseek-v4-flash"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="deepseek-v4-flash"} 4.0
""".replace(
    "{per_position}",
    "".join(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        f'{{engine="0",model_name="deepseek-v4-flash",position="{i}"}} {n}\n'
        for i, n in enumerate((1900.0, 1800.0, 1700.0, 1600.0, 1500.0))
    ),
)


# --- the parser ------------------------------------------------------------------------------


def test_vllms_exposition_parses_into_typed_families() -> None:
    exposition = parse(VLLM_METRICS)
    drafts = exposition.family(em.DRAFT_TOKENS)
    assert drafts is not None
    assert (drafts.type, drafts.help) == ("counter", "Number of draft tokens.")
    (sample,) = drafts.samples
    assert sample.labels == {"engine": "0", "model_name": "deepseek-v4-flash"}
    assert sample.value == 10000.0
    created = exposition.family("vllm:spec_decode_num_draft_tokens_created")
    assert created is not None
    assert created.type == "gauge"
    assert created.samples[0].value == 1.7563e9
    ttft = exposition.family("vllm:time_to_first_token_seconds")
    assert ttft is not None
    assert ttft.type == "histogram"
    assert [s.name.rsplit("_", 1)[1] for s in ttft.samples] == ["sum", "bucket", "bucket", "count"]
    assert ttft.samples[2].labels["le"] == "+Inf"
    per_pos = exposition.family(em.ACCEPTED_PER_POSITION)
    assert per_pos is not None
    assert [s.labels["position"] for s in per_pos.samples] == ["0", "1", "2", "3", "4"]
    assert total(per_pos) == 8500.0
    assert total(per_pos, position="2") == 1700.0
    assert [f.name for f in exposition][:2] == [
        "python_gc_objects_collected_total",
        "vllm:num_requests_running",
    ]


def test_labels_escapes_blanks_timestamps_and_special_values() -> None:
    text = (
        "# a comment, and a blank line next\n"
        "\n"
        "# HELP odd A help with a \\\\ backslash\\nand a newline.\n"
        "# TYPE odd untyped\n"
        'odd{path="C:\\\\x",quote="say \\"hi\\"",nl="a\\nb",brace="}",comma=","} NaN\n'
        'odd { a = "1" , b="2", } +Inf 1700000000000\n'
        '\todd{a="3"}\t-Inf\t-5\n'
        "odd{} 1e-3\n"
        "bare .5\n"
    )
    odd = parse(text).families["odd"]
    assert odd.help == "A help with a \\ backslash\nand a newline."
    first, second, third, fourth = odd.samples
    assert first.labels == {
        "path": "C:\\x",
        "quote": 'say "hi"',
        "nl": "a\nb",
        "brace": "}",
        "comma": ",",
    }
    assert first.value != first.value  # NaN
    assert (second.labels, second.value, second.timestamp_ms) == (
        {"a": "1", "b": "2"},
        float("inf"),
        1700000000000,
    )
    assert (third.value, third.timestamp_ms) == (float("-inf"), -5)
    assert (fourth.labels, fourth.value) == ({}, 0.001)
    assert parse(text).families["bare"].samples[0].value == 0.5
    assert parse(text).families["bare"].type == "untyped"


def test_a_summary_owns_its_quantiles_sum_and_count() -> None:
    text = (
        "# TYPE rpc summary\n"
        'rpc{quantile="0.5"} 0.2\n'
        'rpc{quantile="0.99"} 1.5\n'
        "rpc_sum 12\n"
        "rpc_count 30\n"
    )
    rpc = parse(text).families["rpc"]
    assert [s.name for s in rpc.samples] == ["rpc", "rpc", "rpc_sum", "rpc_count"]


MALFORMED = {
    "no value": "vllm:x_total\n",
    "value glued to the labels": 'x{a="1"}1\n',
    "not a number": "x one\n",
    "go-only float syntax": "x 1_000\n",
    "three tokens": "x 1 2 3\n",
    "timestamp not an integer": "x 1 2.5\n",
    "name starts with a digit": "1x 1\n",
    "unquoted label value": "x{a=1} 1\n",
    "unterminated label value": 'x{a="1} 1\n',
    "unterminated label set": 'x{a="1" 1\n',
    "bad escape": 'x{a="\\t"} 1\n',
    "label repeated": 'x{a="1",a="2"} 1\n',
    "bad label name": 'x{1a="1"} 1\n',
    "series twice": 'x{a="1"} 1\nx{a="1"} 2\n',
    "family split": 'x 1\ny 2\nx{a="1"} 3\n',
    "TYPE after samples": "x 1\n# TYPE x gauge\n",
    "TYPE twice": "# TYPE x gauge\n# TYPE x gauge\n",
    "unknown TYPE": "# TYPE x countr\n",
    "HELP twice": "# HELP x a\n# HELP x b\n",
    "HELP without a name": "# HELP\n",
    "negative counter": "# TYPE x_total counter\nx_total -1\n",
    "histogram bucket without le": "# TYPE h histogram\nh_bucket 1\n",
    "bare histogram sample": "# TYPE h histogram\nh 1\n",
    "summary sample without quantile": "# TYPE s summary\ns 1\n",
    "carriage return": "x 1\r\n",
}


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_lines_are_refused_with_the_line(text: str) -> None:
    with pytest.raises(PrometheusParseError) as refused:
        parse(VLLM_METRICS + text)
    bad_line = VLLM_METRICS.count("\n") + len(text.rstrip("\n").split("\n"))
    assert refused.value.lineno == bad_line, refused.value
    assert str(refused.value).startswith(f"line {bad_line}: ")


def test_an_ordinary_comment_that_starts_like_a_keyword_is_a_comment() -> None:
    assert list(parse("# HELPER says hi\n# TYPEs of things\nx 1\n").families) == ["x"]


# --- the counters ----------------------------------------------------------------------------


def test_the_spec_decode_counters_and_what_follows_from_them() -> None:
    counters = em.spec_decode_counters(parse(VLLM_METRICS))
    assert counters == em.SpecDecodeCounters(
        2000.0, 10000.0, 8500.0, (1900.0, 1800.0, 1700.0, 1600.0, 1500.0)
    )
    assert counters.acceptance == 0.85
    assert counters.mean_acceptance_length == 1 + 8500 / 2000
    assert counters.tokens_per_draft == 5
    assert counters.position_rates() == (0.95, 0.9, 0.85, 0.8, 0.75)
    assert counters.to_dict()["acceptance"] == 0.85


def test_engines_are_summed() -> None:
    one = 'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="deepseek-v4-flash"} '
    two = one.replace('engine="0"', 'engine="1"')
    text = VLLM_METRICS.replace(f"{one}10000.0\n", f"{one}10000.0\n{two}5000.0\n")
    counters = em.spec_decode_counters(parse(text))
    assert counters is not None
    assert counters.draft_tokens == 15000.0


def test_no_spec_counters_is_no_speculative_decoding() -> None:
    text = "\n".join(line for line in VLLM_METRICS.splitlines() if "spec_decode" not in line)
    assert em.spec_decode_counters(parse(text)) is None


def test_counters_of_another_shape_are_refused() -> None:
    as_gauge = VLLM_METRICS.replace(
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        "# TYPE vllm:spec_decode_num_draft_tokens_total gauge",
    )
    with pytest.raises(em.EngineMetricsError, match="is a gauge, vLLM exports it as a counter"):
        em.spec_decode_counters(parse(as_gauge))
    without = "\n".join(
        line
        for line in VLLM_METRICS.splitlines()
        if "num_accepted_tokens_total" not in line and "num_accepted_tokens_created" not in line
    )
    with pytest.raises(em.EngineMetricsError, match="but not vllm:spec_decode_num_accepted"):
        em.spec_decode_counters(parse(without))
    gap = VLLM_METRICS.replace('position="2"', 'position="7"')
    with pytest.raises(em.EngineMetricsError, match=r"positions are \[0, 1, 3, 4, 7\]"):
        em.spec_decode_counters(parse(gap))


# --- the expected range, the bands and the verdict -------------------------------------------


def test_the_catalog_carries_the_field_figure_for_dspark_k5() -> None:
    catalog = module_utils("model_catalog")
    entry, figure = catalog.expected_spec_acceptance("dspark", 5)
    assert entry.name == "deepseek-v4-flash-fp8"
    assert (figure.low, figure.high) == (0.83, 0.87)  # FIELD_NOTES section 1: 83-87%
    assert "FIELD_NOTES section 1" in figure.source
    assert catalog.expected_spec_acceptance("dspark", 3) is None  # another k: another rate
    assert catalog.expected_spec_acceptance("deepseek_mtp", 5) is None


def test_the_bands_are_derived_from_the_low_end() -> None:
    bands = em.expected_bands({"method": "dspark", "num_speculative_tokens": 5})
    assert bands is not None
    assert (bands.low, bands.high) == (0.83, 0.87)
    assert (bands.warning_below, bands.error_below) == (0.78, 0.58)
    assert bands.checkpoint == "deepseek-v4-flash-fp8"
    assert "expected 83%-87% for dspark k=5" in bands.describe()
    assert "warning below 0.78 (0.94 x 0.83), error below 0.58 (0.7 x 0.83)" in bands.describe()
    other = em.bands(
        type(
            "Figure",
            (),
            {"low": 0.5, "high": 0.6, "method": "m", "num_speculative_tokens": 2, "source": "s"},
        )()
    )
    assert (other.warning_below, other.error_below) == (0.47, 0.35)


@pytest.mark.parametrize(
    "speculative",
    [
        None,
        {},
        {"method": "dspark", "num_speculative_tokens": 3},
        {"method": "dspark", "num_speculative_tokens": "five"},
        {"num_speculative_tokens": 5},
    ],
)
def test_no_bands_without_a_figure_for_the_config(speculative: Any) -> None:
    assert em.expected_bands(speculative) is None


@pytest.mark.parametrize(
    ("draft_tokens", "accepted", "verdict"),
    [
        (999, 100, "unmeasured"),  # too little evidence, however bad
        (0, 0, "unmeasured"),
        (1000, 850, "ok"),
        (10000, 7800, "ok"),  # 0.78: the bottom of ok
        (10000, 7799, "warning"),
        (10000, 5800, "warning"),  # 0.58: the bottom of warning
        (10000, 5799, "error"),
        (10000, 0, "error"),
        (10000, 9900, "ok"),  # above the range is not a fault
    ],
)
def test_the_verdict_bands(draft_tokens: float, accepted: float, verdict: str) -> None:
    bands = em.expected_bands({"method": "dspark", "num_speculative_tokens": 5})
    assert bands is not None
    counters = em.SpecDecodeCounters(draft_tokens / 5, draft_tokens, accepted)
    assert em.judge(counters, bands) == verdict


# --- the scrape (loopback) -------------------------------------------------------------------


class Metrics(BaseHTTPRequestHandler):
    """/metrics as the test sets it: status, body, how slowly; records the headers seen."""

    status: ClassVar[int] = 200
    body: ClassVar[bytes] = VLLM_METRICS.encode()
    drip: ClassVar[float] = 0.0  # seconds between bytes; 0: all at once
    seen: ClassVar[list[dict[str, str]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        Metrics.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        self.send_response(self.status)
        self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
        self.end_headers()
        if not self.drip:
            self.wfile.write(self.body)
            return
        for byte in self.body[:50]:  # bounded: 50 bytes at most
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(self.drip)


@pytest.fixture
def server() -> Iterator[str]:
    Metrics.status, Metrics.body, Metrics.drip, Metrics.seen = 200, VLLM_METRICS.encode(), 0.0, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_scrape_reads_the_counters_from_the_served_endpoint(server: str) -> None:
    got = em.scrape(f"{server}/v1")
    assert got.problem is None
    assert got.url == f"{server}/metrics"
    assert got.spec is not None
    assert got.spec.acceptance == 0.85
    assert Metrics.seen[-1]["path"] == "/metrics"
    assert "authorization" not in Metrics.seen[-1]  # vLLM's --api-key does not guard /metrics
    em.scrape(server, api_key="k3y")
    assert Metrics.seen[-1]["authorization"] == "Bearer k3y"


def test_scrape_names_an_http_error_and_a_refused_key(server: str) -> None:
    Metrics.status, Metrics.body = 503, b"busy"
    assert em.scrape(server).problem == f"{server}/metrics answered HTTP 503"
    Metrics.status = 401
    problem = em.scrape(server).problem or ""
    assert "answered HTTP 401" in problem
    assert "--api-key-file" in problem


def test_scrape_names_text_that_is_not_prometheus(server: str) -> None:
    Metrics.body = b"<html>proxy login</html>\n"
    got = em.scrape(server)
    assert got.spec is None
    assert got.problem is not None
    assert got.problem.startswith(f"{server}/metrics is not Prometheus text (line 1: ")


def test_scrape_names_counters_of_another_shape(server: str) -> None:
    Metrics.body = VLLM_METRICS.replace(
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        "# TYPE vllm:spec_decode_num_drafts_total untyped",
    ).encode()
    assert "is a untyped, vLLM exports it as a counter" in (em.scrape(server).problem or "")


def test_scrape_of_a_server_without_speculative_decoding(server: str) -> None:
    Metrics.body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    got = em.scrape(server)
    assert (got.problem, got.spec) == (None, None)


def test_scrape_of_a_port_nobody_listens_on() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    got = em.scrape(f"http://127.0.0.1:{port}/v1", timeout=2.0)
    assert got.spec is None
    assert got.problem is not None
    assert got.problem.startswith(f"http://127.0.0.1:{port}/metrics did not answer (Connect")


def test_scrape_is_bounded_in_time_by_a_slow_server(server: str) -> None:
    Metrics.drip = 0.1  # a byte every 0.1 s: each read is quick, the whole (5 s) is not
    got = em.scrape(server, timeout=0.5)
    # Read to the end, the 50 bytes would be a parse error: this is the deadline's own word.
    assert got.problem == f"{server}/metrics took over 0.5 s to answer"


class Dripping(httpx.SyncByteStream):
    """/metrics in 50 one-byte chunks, each one `step` seconds of `clock` after the last."""

    def __init__(self, clock: list[float], step: float) -> None:
        self.clock, self.step, self.sent = clock, step, 0

    def __iter__(self) -> Iterator[bytes]:
        for byte in VLLM_METRICS.encode()[:50]:
            self.clock[0] += self.step
            self.sent += 1
            yield bytes([byte])


def test_scrape_stops_reading_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline on a fake clock: the read stops at the first chunk past it, not at the end."""
    clock = [1000.0]
    monkeypatch.setattr(em, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    body = Dripping(clock, 0.125)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=body))
    got = em.scrape("http://gx10-a:8000", timeout=0.5, transport=transport)
    assert got.problem == "http://gx10-a:8000/metrics took over 0.5 s to answer"
    assert body.sent == 5  # 0.625 s after the start: the first chunk past 0.5 s
    assert clock[0] == 1000.625


def test_scrape_of_a_bad_endpoint_does_not_raise() -> None:
    got = em.scrape("gx10-a:8000")
    assert got.spec is None
    assert "expected http://HOST:PORT" in (got.problem or "")
