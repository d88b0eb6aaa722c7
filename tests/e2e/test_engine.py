"""vLLM itself on the lab (issue 25): the product's launch checked by an engine it did not write.

The lab's two nodes serve vLLM's CPU build (`gx10 lab up --engine vllm-cpu`, conftest's
`engine_lab` and `engine_converge`): site.yml on inventories/lab-vllm through the unchanged
roles, worker headless first, head second, `--nnodes 2`, Gloo on the rails. Then what coding
agents send reaches it, and under supervision a killed worker, a killed head and a rebooted
worker node each end with the pair serving again, worker first, no rank alone past its bound.

Opt-in for now (`make e2e-engine`, marker real_engine): the engine's image (7 GB), its publish
and the nodes' pulls do not fit the suite's 40 minutes yet (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from labtools import (
    AGENT,
    ROOT,
    LoneWatch,
    agent_status,
    node_sh,
    rank_container,
    task_results,
    until,
)

from gx10 import ProvisionResult, lab, provision
from gx10.cli import main

pytestmark = pytest.mark.real_engine

INVENTORY = ROOT / "inventories" / "lab-vllm"
_HOSTS = yaml.safe_load((INVENTORY / "hosts.yml").read_text(encoding="utf-8"))
HEAD_HOST = _HOSTS["all"]["children"]["gx10"]["children"]["head"]["hosts"]["gx10-a"]
API = f"http://{HEAD_HOST['gx10_api_host']}:8000"
MODEL = "deepseek-v4-flash"
NODES = ("gx10-a", "gx10-b")
SUPERVISED = {"vllm_supervisor_enabled": True}
RECOVERY = 420.0  # a real cold start is 60-100 s on two cores; a restart is two of them
LONE_BOUND = 30.0  # seconds one rank may run without the other (as for the simulator)


@pytest.fixture(scope="module")
def converged(engine_converge: ProvisionResult) -> ProvisionResult:
    assert engine_converge.ok, [
        f"{t.host} {t.task}: {t.message}" for t in engine_converge.failed_tasks
    ]
    return engine_converge


def _inspect(node: str, template: str) -> str:
    return node_sh(node, f"docker inspect -f '{template}' gx10-vllm").strip()


def test_site_converges_and_both_ranks_run_vllm_itself(converged: ProvisionResult) -> None:
    """The smoke stage passed through the head (models, chat, stream, a tool call); each rank is
    the engine image at its rank, the worker headless, Gloo on rail0."""
    smoke = task_results(converged, "Run the four smoke checks")
    assert smoke["localhost"]["rc"] == 0, smoke
    for rank, node in enumerate(NODES):
        args = json.loads(_inspect(node, "{{json .Args}}"))
        assert args[:2] == ["serve", "/srv/models/gx10-lab-tiny-llama"], args
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == str(rank)
        assert ("--headless" in args) is (rank == 1)
        assert "--speculative-config" not in args  # the lab profile's one delta of flags
        image = _inspect(node, "{{.Config.Image}}")
        assert image.startswith("gx10-registry:5000/gx10-lab/vllm-cpu@sha256:"), image
        env = _inspect(node, "{{json .Config.Env}}")
        assert "GLOO_SOCKET_IFNAME=enp1s0f0np0" in env
    logs = node_sh("gx10-a", "docker logs gx10-vllm 2>&1 | head -400")
    assert "(v0.32.0)" in logs, "the head's log names no vLLM 0.32.0 engine"


def test_a_re_apply_changes_nothing(converged: ProvisionResult) -> None:
    before = {node: rank_container(node) for node in NODES}
    again = provision(INVENTORY, "site.yml")
    assert again.ok, again.failed_tasks
    assert again.changed_total == 0, {h: s.changed for h, s in again.hosts.items()}
    assert {node: rank_container(node) for node in NODES} == before


@pytest.fixture(scope="module")
def configs(converged: ProvisionResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agents' configs as `gx10 clients` writes them, Codex's on the Responses API (its
    default), which the simulator does not serve and the real engine does."""
    out = tmp_path_factory.mktemp("clients") / "gx10-clients"
    assert main(["clients", "-i", str(INVENTORY), "--out", str(out)]) == 0
    return out


def test_the_codex_config_reaches_the_engine_over_the_responses_api(configs: Path) -> None:
    document = tomllib.loads((configs / "codex/config.toml").read_text())
    provider = document["model_providers"][document["model_provider"]]
    assert provider["wire_api"] == "responses"
    client = openai.OpenAI(base_url=provider["base_url"], api_key="lab-has-no-key", timeout=120)
    reply = client.responses.create(model=document["model"], input="Say hi.", max_output_tokens=8)
    assert reply.model == MODEL
    assert reply.usage is not None
    assert reply.usage.output_tokens > 0


def test_the_aider_config_reaches_the_engine(configs: Path) -> None:
    conf = yaml.safe_load((configs / "aider/.aider.conf.yml").read_text())
    (settings,) = yaml.safe_load(Path(conf["model-settings-file"]).read_text())
    extra = dict(settings["extra_params"])
    client = openai.OpenAI(base_url=conf["openai-api-base"], api_key="lab-has-no-key", timeout=120)
    reply = client.chat.completions.create(
        model=conf["model"].removeprefix("openai/"),
        messages=[{"role": "user", "content": "Write fizzbuzz.py."}],
        max_tokens=8,
        extra_body=extra.get("extra_body") or None,
    )
    assert reply.choices[0].finish_reason in ("length", "stop")
    assert reply.usage is not None
    assert reply.usage.completion_tokens > 0


def test_the_engine_answers_the_messages_api_claude_code_uses(converged: ProvisionResult) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(f"{API}/v1/messages", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["type"] == "message"
    assert answer["usage"]["output_tokens"] > 0


# --------------------------------------------------------------------------------------------
# Supervised: the nodes' gx10-pair agents own the ranks of the real engine.
# --------------------------------------------------------------------------------------------


_status = agent_status


def _until(what: str, test: Callable[[], bool], timeout: float = RECOVERY) -> None:
    until(what, test, timeout, poll=2.0)


def _serving() -> bool:
    ranks = {node: rank_container(node) for node in NODES}
    if _status("gx10-a").get("state") != "serving" or not all(ranks.values()):
        return False
    try:
        return httpx.get(f"{API}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _answers() -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    reply = httpx.post(f"{API}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] > 0


@pytest.fixture(scope="module")
def supervised(converged: ProvisionResult) -> Iterator[ProvisionResult]:
    result = provision(INVENTORY, "serve.yml", extravars=SUPERVISED)
    assert result.ok, result.failed_tasks
    _until("serving", _serving)
    yield result
    restored = provision(INVENTORY, "serve.yml")  # supervision off again: the agents go
    assert restored.ok, restored.failed_tasks


def _recovers(fault: Callable[[], None]) -> dict[str, dict[str, str]]:
    """Inject the fault into a serving pair; both ranks are new ones, serving, the worker
    started first, and no rank ran alone past the bound. Returns the new ranks."""
    _until("serving", _serving)
    node_sh("gx10-a", f"python3 {AGENT} reset", check=False)  # a fresh breaker window
    before = {node: rank_container(node) for node in NODES}
    watch = LoneWatch(interval=2.0)
    watch.start()
    started = time.monotonic()
    try:
        fault()

        def restarted() -> bool:
            now = {node: rank_container(node) for node in NODES}
            return all(now[n] and now[n]["id"] != before[n]["id"] for n in NODES) and _serving()

        _until("restarted and serving", restarted)
    finally:
        watch.done.set()
        watch.join(timeout=30)
    print(f"recovered in {time.monotonic() - started:.0f} s")
    after = {node: rank_container(node) for node in NODES}
    assert after["gx10-b"]["started"] < after["gx10-a"]["started"], after
    assert watch.samples > 5, watch.samples
    assert watch.longest <= LONE_BOUND, f"one rank ran alone for {watch.longest:.0f} s"
    _answers()
    return after


def test_a_killed_worker_rank_restarts_the_pair_worker_first(supervised: ProvisionResult) -> None:
    _recovers(lambda: lab.kill_rank("gx10-b", log=lambda line: None))
    assert "worker-rank-inactive" in json.dumps(_status("gx10-a").get("last_restart"))


def test_a_killed_head_rank_restarts_the_pair_worker_first(supervised: ProvisionResult) -> None:
    _recovers(lambda: lab.kill_rank("gx10-a", log=lambda line: None))
    assert "head-rank-inactive" in json.dumps(_status("gx10-a").get("last_restart"))


def test_the_pair_comes_back_after_the_worker_node_reboots(supervised: ProvisionResult) -> None:
    _recovers(lambda: lab.reboot("gx10-b", log=lambda line: None))
