"""gx10 doctor on the lab: silent when healthy, names the fault when the GID table shifts, and
names a draft accepted far below the field's rate (a draft loaded wrong: no error, slow decode)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml
from labtools import LAB_INVENTORY, auth, node_sh, service_key

from gx10 import ProvisionResult, provision
from gx10.doctor import engine_metrics

LAB_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all.yml").read_text(encoding="utf-8"))
_HOSTS = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text(encoding="utf-8"))
HEAD = _HOSTS["all"]["children"]["gx10"]["children"]["head"]["hosts"]["gx10-a"]["gx10_api_host"]
HEAD_API = f"http://{HEAD}:8000"  # gx10_serve_port's default
LOW_ACCEPTANCE = 0.4  # a draft that works at half the field's rate


def _doctor() -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "gx10", "doctor", "-i", str(LAB_INVENTORY), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def converged(serving_lab: ProvisionResult) -> None:
    """The lab serving as site.yml leaves it (shared with the other read-only files)."""


@pytest.fixture
def gid_shift(converged: None) -> Iterator[str]:
    """The lab's fault switch: gx10-b's IPv4 GID entries move to index 5 (a stale table)."""
    node = "gx10-b"
    node_sh(node, "mkdir -p /run/gx10-sim/rdma && echo 5 > /run/gx10-sim/rdma/shift")
    gid = "/run/gx10-sim/sys/class/infiniband/rocep1s0f0/ports/1/gids/6"
    deadline = time.monotonic() + 10
    while "ffff" not in node_sh(node, f"cat {gid} 2>/dev/null || true"):
        assert time.monotonic() < deadline, "the RDMA simulator did not apply the shift"
        time.sleep(0.2)
    try:
        yield node
    finally:
        node_sh(node, "rm -f /run/gx10-sim/rdma/shift; touch /run/gx10-sim/rdma/reset")


def test_healthy_lab_has_no_finding(converged: None) -> None:
    rc, report = _doctor()
    assert rc == 0, report
    assert report["ok"] is True
    assert report["findings"] == []


def test_a_shifted_gid_table_is_named_with_its_fix(gid_shift: str) -> None:
    """The lab serves unsupervised (site.yml): the worker's rank runs on nccl.env's index 3,
    which moved under it (GID_MOVED; GID_INDEX_MISMATCH is for a file no rank runs with)."""
    rc, report = _doctor()
    assert rc == 2
    codes = {(f["code"], f["node"]) for f in report["findings"]}
    assert ("GID_MOVED", gid_shift) in codes, report["findings"]
    assert ("GID_INDEX_MISMATCH", gid_shift) not in codes, report["findings"]
    finding = next(f for f in report["findings"] if f["code"] == "GID_MOVED")
    assert "NCCL_IB_GID_INDEX=3" in finding["summary"]
    assert "enp1s0f0np0 3 -> 6" in finding["summary"]
    assert "rerun the NCCL stage" in finding["fix"]
    assert "then the serve stage" in finding["fix"]


@pytest.fixture
def low_acceptance(converged: None) -> Iterator[str]:
    """The head's draft accepted at 0.4: GX10_SIM_SPEC_ACCEPTANCE is read when the simulator
    starts, so the serve stage restarts the pair with it, and without it at the end. A switch
    while serving would not do: the counters count from the start, so moving their rate needs as
    many tokens as the head ever served, and would leave it low for the doctor runs after this;
    a restart also starts the counters afresh, so the doctor sees only what this test made."""
    env = {**LAB_VARS["vllm_serve_extra_env"], "GX10_SIM_SPEC_ACCEPTANCE": str(LOW_ACCEPTANCE)}
    result = provision(LAB_INVENTORY, "serve.yml", extravars={"vllm_serve_extra_env": env})
    assert result.ok, result.failed_tasks
    try:
        yield HEAD_API
    finally:
        restored = provision(LAB_INVENTORY, "serve.yml")
        assert restored.ok, restored.failed_tasks


def _generate(api: str, requests: int, max_tokens: int) -> None:
    """`requests` completions of `max_tokens` at once (the lab serves the profile's 6 sequences
    at a time; the rest wait their turn, and every one still drafts)."""

    key = auth()

    def one(n: int) -> int:
        body = {
            "model": "deepseek-v4-flash",
            "prompt": f"Draft badly, request {n}:",
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        return httpx.post(f"{api}/v1/completions", json=body, headers=key, timeout=180).status_code

    with ThreadPoolExecutor(requests) as pool:
        assert set(pool.map(one, range(requests))) == {200}


def test_a_low_draft_acceptance_is_named_with_its_rate(low_acceptance: str) -> None:
    # About 3 tokens a step at 0.4 (1 + 5 x 0.4), 5 draft tokens each: 12 x 150 tokens are about
    # 3,000 draft tokens, three times what the rule needs. Bounded: three rounds at most.
    for _round in range(3):
        _generate(low_acceptance, requests=12, max_tokens=150)
        scraped = engine_metrics.scrape(low_acceptance, api_key=service_key())
        assert scraped.problem is None, scraped.problem
        assert scraped.spec is not None
        if scraped.spec.draft_tokens >= 2 * engine_metrics.MIN_DRAFT_TOKENS:
            break
    rc, report = _doctor()
    assert rc == 2, report
    found = [f for f in report["findings"] if f["code"] == "SPEC_ACCEPTANCE_LOW"]
    assert [(f["node"], f["severity"]) for f in found] == [("gx10-a", "error")], report
    finding = found[0]
    measured = report["nodes"]["gx10-a"]["spec_decode"]
    assert abs(measured["acceptance"] - LOW_ACCEPTANCE) < 0.05, measured
    assert f"accepts {measured['acceptance']:.1%} of its draft tokens" in finding["summary"]
    assert "expected 83%-87%" in finding["summary"]
    assert "vllm:spec_decode_num_draft_tokens_total" in finding["evidence"]
    assert f"{HEAD_API}/metrics" in finding["evidence"]
    assert "--speculative-config" in finding["fix"]
