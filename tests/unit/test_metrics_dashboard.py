"""The Grafana dashboard of gx10 metrics config: its shape as Grafana reads it, a panel for each
thing the issue asks to watch, and every PromQL expression asking only for series that exist:
the lab's vLLM simulator's /metrics (vLLM's names, speculative decoding on), the node tool's
gx10_gpu_* output, node exporter's meminfo names (served by the real binary in
test_metrics_gpu_tool.py) and Prometheus' `up`. promtool parses every expression, where
`make prometheus-tools` put it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_tools import need

from gx10.doctor.prometheus import parse
from gx10.lab.simulators import vllm_sim
from gx10.lab.simulators.vllm_sim.metrics import render_metrics
from gx10.metrics import config as metrics_config
from gx10.metrics import dashboard
from gx10.metrics.promql import PromQLError, metric_names

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "roles" / "metrics_exporter" / "files" / "gx10-gpu-metrics"
SIM = ROOT / "python" / "gx10" / "lab" / "simulators" / "nvidia_smi.py"
# What Grafana puts in for its variables when it runs a query, for promtool's parser.
GRAFANA = {"$__rate_interval": "1m", "$node": ".*"}


def sample_names(text: str) -> set[str]:
    return {sample.name for family in parse(text) for sample in family.samples}


@pytest.fixture(scope="module")
def vllm_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name the lab's vLLM simulator serves, speculative decoding on (k=5)."""
    workdir = tmp_path_factory.mktemp("vllm")
    env = vllm_sim.SimEnv(time_scale=0.0, state_dir=workdir / "nvidia-smi")
    engine = vllm_sim.Engine(env, 12, 5, vllm_sim.Log(out=io.StringIO()))
    return sample_names(render_metrics(engine, "deepseek-v4-flash"))


@pytest.fixture(scope="module")
def gpu_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name gx10-gpu-metrics writes for the simulated GB10."""
    state = tmp_path_factory.mktemp("smi")
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--print", "--nvidia-smi", str(SIM)],
        env={**os.environ, "GX10_SIM_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return sample_names(proc.stdout)


@pytest.fixture(scope="module")
def known(vllm_names: set[str], gpu_names: set[str]) -> set[str]:
    return vllm_names | gpu_names | set(dashboard.NODE_EXPORTER_METRICS) | {"up"}


def unknown(expressions: list[tuple[str, str]], known: set[str]) -> list[tuple[str, str]]:
    return [
        (title, name)
        for title, expr in expressions
        for name in sorted(metric_names(expr))
        if name not in known
    ]


# --- the metric names -----------------------------------------------------------------------


def test_every_query_asks_for_series_that_exist(known: set[str]) -> None:
    assert unknown(dashboard.queries(), known) == []


def test_the_check_catches_a_name_that_does_not_exist(known: set[str]) -> None:
    """vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc; the simulator has the new one."""
    wrong = [("KV", "max(vllm:gpu_cache_usage_perc)"), ("power", "gx10_gpu_power_watts")]
    assert unknown(wrong, known) == [
        ("KV", "vllm:gpu_cache_usage_perc"),
        ("power", "gx10_gpu_power_watts"),
    ]


def test_the_simulator_serves_the_speculative_counters(vllm_names: set[str]) -> None:
    """Else the check above would pass on a simulator that dropped them."""
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert name in vllm_names


@pytest.mark.parametrize(
    ("topic", "names"),
    [
        ("throughput", {"vllm:prompt_tokens_total", "vllm:generation_tokens_total"}),
        ("TTFT", {"vllm:time_to_first_token_seconds_bucket"}),
        ("queue", {"vllm:num_requests_running", "vllm:num_requests_waiting"}),
        ("KV cache", {"vllm:kv_cache_usage_perc"}),
        (
            "speculative acceptance",
            {
                "vllm:spec_decode_num_accepted_tokens_total",
                "vllm:spec_decode_num_draft_tokens_total",
            },
        ),
        ("power", {"gx10_gpu_power_draw_watts"}),
        ("temperature", {"gx10_gpu_temperature_celsius"}),
        ("clock", {"gx10_gpu_sm_clock_hertz"}),
        ("memory", {"node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"}),
    ],
)
def test_a_panel_for_each_thing_to_watch(topic: str, names: set[str]) -> None:
    """Each topic has a panel whose queries read all its metrics."""
    panels = [
        p
        for p in dashboard.panels()
        if names <= set().union(*(metric_names(q.expr) for q in p.queries))
    ]
    assert panels, topic


# --- PromQL --------------------------------------------------------------------------------


def grafana_expanded(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def promtool_rules(tmp_path: Path, expressions: list[str]) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on one recording rule per expression: promtool parses each."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"gx10:dashboard_query_{i}", "expr": grafana_expanded(expr)}
                    for i, expr in enumerate(expressions)
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run(
        [str(need("promtool")), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    proc = promtool_rules(tmp_path, [expr for _, expr in dashboard.queries()])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(dashboard.queries())} rules found" in proc.stdout


def test_promtool_refuses_a_broken_query(tmp_path: Path) -> None:
    proc = promtool_rules(tmp_path, ["sum(rate(vllm:prompt_tokens_total[$__rate_interval])"])
    assert proc.returncode != 0, proc.stdout


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('up{job="node", node=~"a|b"} == 1', {"up"}),
        ("sum by (le)(rate(x_bucket[5m]))", {"x_bucket"}),
        ("histogram_quantile(0.95, sum(rate(a:b_bucket[1m])) by (le, node))", {"a:b_bucket"}),
        ("a / on(node) group_left(uuid) b offset 5m", {"a", "b"}),
        ("1e3 * rate(c_total[$__rate_interval]) > bool 0.5", {"c_total"}),
        ("m1 and m2 or m3 unless m4", {"m1", "m2", "m3", "m4"}),
        ("max_over_time(g[10m:1m])", {"g"}),
        ('absent(x{a="sum(y)"})', {"x"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize("expr", ["sum(rate(x[5m])", 'x{a="b}', "x]"])
def test_a_malformed_expression_is_refused(expr: str) -> None:
    with pytest.raises(PromQLError):
        metric_names(expr)


# --- Grafana's JSON -------------------------------------------------------------------------


def test_the_json_is_a_grafana_dashboard() -> None:
    board = json.loads(json.dumps(dashboard.dashboard()))  # plain JSON, as written
    assert board["uid"] == "gx10-vllm"
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    # Grafana's label_values(METRIC, LABEL): the values of the config's `node` label on `up`.
    assert variables["node"]["query"]["query"] == 'label_values(up{job="node"}, node)'
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"] and t["datasource"] == panel["datasource"] for t in panel["targets"])
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_the_dashboard_filters_on_what_the_config_labels(tmp_path: Path) -> None:
    """$node is the `node` label of job `node`: the names gx10 metrics config writes."""
    cluster = metrics_config.load([ROOT / "inventories" / "lab"])
    jobs = {job.name: job for job in cluster.jobs}
    assert {target.labels["node"] for target in jobs["node"].targets} == {"gx10-a", "gx10-b"}
    per_node = [q.expr for p in dashboard.panels() for q in p.queries if "$node" in q.expr]
    assert per_node
    assert all('node=~"$node"' in expr for expr in per_node)
