"""Metrics on the lab: the lab's Prometheus (Debian's, started by `gx10 lab up` with the config
`gx10 metrics config` writes from the lab inventory) scrapes the head's vLLM simulator and both
nodes' node exporters once site.yml has run the metrics stage, and is read here through its HTTP
API: every target up, vLLM's and the GPU's series per node, a request that moves the generation
counter, each dashboard query answered, a node's heat seen on that node only, and a stopped GPU
writer whose values vanish instead of going stale. Every wait is bounded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml
from labtools import LAB_INVENTORY, auth, node_sh

from gx10 import ProvisionResult, lab
from gx10.lab.config import LabConfig
from gx10.metrics import dashboard
from gx10.metrics.promql import metric_names

PROMETHEUS = LabConfig().prometheus_url
_HOSTS = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text(encoding="utf-8"))
HEAD = _HOSTS["all"]["children"]["gx10"]["children"]["head"]["hosts"]["gx10-a"]["gx10_api_host"]
HEAD_API = f"http://{HEAD}:8000"  # gx10_serve_port's default
NODES = ("gx10-a", "gx10-b")
# Scrapes every 5 s (gx10 metrics config's default): a few scrapes' worth for anything to show.
SCRAPE_WAIT = 60.0


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Call `check` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def query(expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector (Prometheus' /api/v1/query)."""
    response = httpx.get(f"{PROMETHEUS}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def by_node(expr: str) -> dict[str, float]:
    return {r["metric"].get("node", ""): float(r["value"][1]) for r in query(expr)}


def targets() -> list[dict[str, Any]]:
    response = httpx.get(f"{PROMETHEUS}/api/v1/targets", params={"state": "active"}, timeout=10)
    assert response.status_code == 200, response.text
    active: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
    return active


@pytest.fixture(scope="module")
def converged(lab_up: lab.LabStatus, serving_lab: ProvisionResult) -> None:
    """site.yml on the lab: the metrics stage on both nodes, the pair serving."""
    assert lab_up.prometheus == "running", lab_up.summary_lines()


@pytest.fixture(scope="module")
def scraped(converged: None) -> None:
    """Every target healthy in Prometheus (the first scrapes after the stage may still fail)."""

    def healthy() -> bool:
        return all(t["health"] == "up" for t in targets()) and len(targets()) == 3

    wait_for(healthy, SCRAPE_WAIT, "every target up")


def test_every_target_is_up(scraped: None) -> None:
    found = {
        (t["labels"]["job"], t["labels"]["node"], t["labels"]["role"]): t["health"]
        for t in targets()
    }
    # The head's vLLM (a headless worker serves no /metrics) and each node's exporter.
    assert found == {
        ("vllm", "gx10-a", "head"): "up",
        ("node", "gx10-a", "head"): "up",
        ("node", "gx10-b", "worker"): "up",
    }
    up = {(r["metric"]["job"], r["metric"]["node"]): float(r["value"][1]) for r in query("up")}
    assert up == {("vllm", "gx10-a"): 1.0, ("node", "gx10-a"): 1.0, ("node", "gx10-b"): 1.0}


def test_vllm_and_gpu_metrics_have_values_for_each_node(scraped: None) -> None:
    assert set(by_node("vllm:num_requests_running")) == {"gx10-a"}
    assert set(by_node("vllm:kv_cache_usage_perc")) == {"gx10-a"}
    assert by_node("gx10_gpu_query_success") == {"gx10-a": 1.0, "gx10-b": 1.0}
    power = by_node("gx10_gpu_power_draw_watts")
    assert set(power) == set(NODES)
    assert all(5 < watts < 60 for watts in power.values()), power  # the simulated GB10's range
    clocks = by_node("gx10_gpu_sm_clock_hertz")
    assert all(200e6 <= hz <= 3003e6 for hz in clocks.values()), clocks
    assert set(by_node("gx10_gpu_temperature_celsius")) == set(NODES)
    (info,) = [r for r in query("gx10_gpu_info") if r["metric"]["node"] == "gx10-b"]
    assert info["metric"]["name"] == "NVIDIA GB10"
    assert set(by_node("node_memory_MemAvailable_bytes")) == set(NODES)


def test_a_request_raises_the_generation_counter(scraped: None) -> None:
    def generated() -> float | None:
        result = query("sum(vllm:generation_tokens_total)")
        return float(result[0]["value"][1]) if result else None

    # A tuple, so a counter still at 0 counts as found.
    (before,) = wait_for(
        lambda: (value := generated()) is not None and (value,), SCRAPE_WAIT, "the counter"
    )
    body = {
        "model": "deepseek-v4-flash",
        "prompt": "Count the metrics:",
        "max_tokens": 32,
        "ignore_eos": True,
    }
    response = httpx.post(f"{HEAD_API}/v1/completions", json=body, headers=auth(), timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 32
    after = wait_for(
        lambda: (value := generated()) is not None and value >= before + 32 and value,
        SCRAPE_WAIT,
        f"vllm:generation_tokens_total above {before} + 32",
    )
    assert after >= before + 32
    rate = query("sum(rate(vllm:generation_tokens_total[1m]))")
    assert rate
    assert float(rate[0]["value"][1]) > 0


def test_every_dashboard_query_runs_and_its_series_exist(scraped: None) -> None:
    """Each panel's PromQL as Grafana sends it (variables filled in) is valid to this Prometheus,
    and every series a panel reads has been scraped."""
    for title, expr in dashboard.queries():
        filled = expr.replace("$__rate_interval", "1m").replace("$node", ".*")
        query(filled)  # status success, else the assert in query() says what Prometheus said
        for name in sorted(metric_names(expr)):
            assert query(f"count({name})"), f"panel {title!r}: no series {name}"


@pytest.fixture
def worker_heat(scraped: None) -> Iterator[str]:
    """gx10-b, whose simulated GPU the test warms; its heat is cleared afterwards."""
    node = "gx10-b"
    try:
        yield node
    finally:
        lab.heat(node, None, None, log=print)


def test_a_hot_node_shows_on_that_node_only(worker_heat: str) -> None:
    hot, idle = worker_heat, "gx10-a"
    baseline = by_node("gx10_gpu_temperature_celsius")
    # 30 C warmer at once (no thermal lag), from the simulator's next reading on.
    lab.heat(hot, 30.0, tau_s=0.0, log=print)
    temperature = wait_for(
        lambda: (
            (t := by_node("gx10_gpu_temperature_celsius")).get(hot, 0) > baseline[hot] + 20 and t
        ),
        SCRAPE_WAIT,
        f"{hot}'s GPU 20 C warmer in Prometheus",
    )
    # The heat is on gx10-b's series only: the labels name the node the reading came from.
    assert abs(temperature[idle] - baseline[idle]) < 10, (baseline, temperature)


@pytest.fixture
def writer_stopped(scraped: None) -> Iterator[str]:
    node = "gx10-b"
    node_sh(node, "systemctl stop gx10-gpu-metrics.service")
    try:
        yield node
    finally:
        node_sh(node, "systemctl start gx10-gpu-metrics.service")
        wait_for(
            lambda: by_node("gx10_gpu_query_success").get(node) == 1.0,
            SCRAPE_WAIT,
            f"{node}'s GPU telemetry back",
        )


def test_a_stopped_writer_leaves_no_stale_values(writer_stopped: str) -> None:
    node = writer_stopped
    textfile = "/var/lib/prometheus/node-exporter/gx10_gpu.prom"
    assert node_sh(node, f"test -e {textfile} && echo present || echo gone").strip() == "gone"
    wait_for(
        lambda: node not in by_node("gx10_gpu_power_draw_watts"),
        SCRAPE_WAIT,
        f"{node}'s GPU values gone from Prometheus",
    )
    assert query(f'up{{job="node",node="{node}"}} == 1')  # node exporter itself still answers
    assert "gx10-a" in by_node("gx10_gpu_power_draw_watts")
