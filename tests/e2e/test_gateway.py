"""The API gateway on the lab (issue 14, per-user keys; issue 26, on by default): the lab serves
as real nodes do, HAProxy on the head's API port and the engine on loopback; `gx10 keys` adds a
key that a completion through the official openai client uses at once, the access log names it
and never shows it, and a revoked key is refused at once; the engine is never restarted
meanwhile, and its port is not reachable from the other node while the gateway's is. A key over
its limit of requests in flight gets 429 while another key is served, and `gx10 keys usage`
counts both.

The inventory is the lab's own, with its service key from `gx10 keys init` (made by `gx10 lab
up`). The last test turns the gateway off and on again, as a user would in the inventory: the
engine answers on every address without it, and the keys count again when it is back.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from labtools import LAB_INVENTORY, ROOT, auth, node_sh, service_key

from gx10 import ProvisionResult, provision
from gx10.cli import main

CONTAINER = "gx10-vllm"
UNIT = "gx10-gateway.service"
MODEL = "deepseek-v4-flash"
API, ENGINE = 8000, 8001


def _head_address() -> str:
    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    head = hosts["all"]["children"]["gx10"]["children"]["head"]["hosts"]["gx10-a"]
    return str(head["gx10_api_host"])


HEAD = _head_address()


def _started(node: str) -> str:
    return node_sh(node, f"docker inspect -f '{{{{.State.StartedAt}}}}' {CONTAINER}").strip()


def _gateway_pid() -> str:
    return node_sh("gx10-a", f"systemctl show -p MainPID --value {UNIT}").strip()


def _code(node: str, url: str, *headers: str) -> str:
    flags = " ".join(f"-H '{header}'" for header in headers)
    return node_sh(
        node,
        f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {flags} {url} || true",
    ).strip()


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def inventory() -> Path:
    """The lab's inventory: the gateway on, its service key from `gx10 keys init`'s file."""
    return LAB_INVENTORY


@pytest.fixture(scope="module")
def gated(serving_lab: ProvisionResult) -> ProvisionResult:
    """The lab as the shared converge left it: serving behind the gateway."""
    assert node_sh("gx10-a", f"systemctl is-active {UNIT}").strip() == "active"
    return serving_lab


def test_the_engine_is_on_loopback_and_only_the_gateway_is_reachable(
    gated: ProvisionResult,
) -> None:
    args = node_sh("gx10-a", f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}")
    assert f'"--host","127.0.0.1","--port","{ENGINE}"' in args
    assert _code("gx10-b", f"http://{HEAD}:{ENGINE}/health") == "000"  # refused
    assert _code("gx10-b", f"http://{HEAD}:{API}/v1/models") == "401"
    assert (
        httpx.get(f"http://{HEAD}:{API}/v1/models", headers=auth(), timeout=10).status_code == 200
    )
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{HEAD}:{ENGINE}/health", timeout=5)
    assert node_sh("gx10-a", f"systemctl is-enabled {UNIT}").strip() == "enabled"


def test_every_vllm_route_is_refused_without_a_key_from_the_other_node(
    gated: ProvisionResult,
) -> None:
    """Each of vLLM's routes (tests/fixtures/vllm-routes.json) asked from the worker node without
    a key: 401 from the gateway, none answered by the engine (whose own key guards /v1/* only)."""
    routes = json.loads((ROOT / "tests" / "fixtures" / "vllm-routes.json").read_text())["routes"]
    script = "; ".join(
        f"printf '%s %s\\n' {route['path']} "
        f"$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 -X {route['method']} "
        f"-H 'content-type: application/json' -d '{{}}' http://{HEAD}:{API}{route['path']})"
        for route in routes
    )
    answers = dict(line.split() for line in node_sh("gx10-b", script).splitlines())
    assert len(answers) == len(routes)
    assert {path: code for path, code in answers.items() if code != "401"} == {}
    assert _code("gx10-b", f"http://{HEAD}:{API}/health") == "200"


def test_the_smoke_stage_goes_through_the_gateway(gated: ProvisionResult, inventory: Path) -> None:
    result = provision(inventory, "smoke.yml")
    assert result.ok, result.failed_tasks
    log = node_sh("gx10-a", f"journalctl -u {UNIT} --no-pager -o cat")
    # The smoke stage's completion, with the tokens the engine reported.
    assert re.search(r'key=service in=[1-9]\d* out=[1-9]\d* "POST /v1/chat/completions', log)
    assert service_key() not in log


def test_a_key_added_used_and_revoked_without_restarting_anything(
    gated: ProvisionResult, inventory: Path, tmp_path: Path
) -> None:
    engine = {node: _started(node) for node in ("gx10-a", "gx10-b")}
    gateway = _gateway_pid()

    code, out, err = _cli("keys", "add", "e2e-alice", "-i", str(inventory))
    assert code == 0, err
    key = out.strip()
    assert re.fullmatch(r"gx10-[A-Za-z0-9_-]{43}", key)
    client = openai.OpenAI(base_url=f"http://{HEAD}:{API}/v1", api_key=key, timeout=60)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16
    )
    assert reply.choices[0].message is not None
    assert (
        httpx.get(f"http://{HEAD}:{API}/v1/models", headers={"x-api-key": key}).status_code == 200
    )

    log = node_sh("gx10-a", f"journalctl -u {UNIT} --no-pager -o cat")
    assert re.search(r'key=e2e-alice in=[1-9]\d* out=[1-9]\d* "POST /v1/chat/completions', log)
    assert key not in log
    assert key not in node_sh("gx10-a", f"docker logs {CONTAINER} 2>&1 | tail -n 500")
    # Nor the service key, nor this one, in any process's arguments on either node (the engine
    # reads its key from the environment, HAProxy and the supervisor's probe from files).
    for node in ("gx10-a", "gx10-b"):
        processes = node_sh(node, "ps -eo args")
        assert key not in processes, node
        assert service_key() not in processes, node

    code, out, err = _cli("keys", "list", "-i", str(inventory), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert {"e2e-alice", "service"} <= {k["name"] for k in listed["keys"]}
    assert listed["running"] is True
    assert key not in out

    code, _, err = _cli("keys", "add", "e2e-alice", "-i", str(inventory))
    assert code == 2
    assert "already exists" in err

    code, out, err = _cli("keys", "revoke", "e2e-alice", "-i", str(inventory))
    assert code == 0, err
    with pytest.raises(openai.AuthenticationError):
        client.models.list()

    code, _, err = _cli("keys", "revoke", "e2e-alice", "-i", str(inventory))
    assert code == 2
    assert "no key named 'e2e-alice'" in err

    # Neither the engine nor the gateway restarted (nor reloaded: the same main process).
    assert {node: _started(node) for node in ("gx10-a", "gx10-b")} == engine
    assert _gateway_pid() == gateway


# The re-apply with the gateway on (changed=0, neither the engine nor HAProxy restarted) is the role
# pipeline's idempotence step of molecule/api_gateway: the same serve stage and settings, on the
# same lab, before this stage.


def test_a_key_over_its_limit_gets_429_while_another_is_served_and_usage_counts_them(
    gated: ProvisionResult, inventory: Path
) -> None:
    """Issue 26's fair share: a key with --max-concurrent 1 streaming a long answer gets 429
    (with Retry-After, never reaching the engine) on a second request at once, while another
    key is served; `gx10 keys usage` then counts each key's requests and tokens."""
    since = node_sh("gx10-a", "date '+%Y-%m-%d %H:%M:%S'").strip()  # this test's lines only
    keys = {}
    for name, extra in (("e2e-swarm", ["--max-concurrent", "1"]), ("e2e-bob", [])):
        code, out, err = _cli("keys", "add", name, *extra, "-i", str(inventory))
        assert code == 0, err
        keys[name] = out.strip()
    try:
        swarm, bob = (
            openai.OpenAI(
                base_url=f"http://{HEAD}:{API}/v1", api_key=keys[n], timeout=60, max_retries=0
            )
            for n in ("e2e-swarm", "e2e-bob")
        )
        question = "Count to a thousand."
        with swarm.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": question}],
            max_tokens=1000,
            stream=True,
        ) as stream:
            next(iter(stream))  # the answer has begun: the request is in flight
            with pytest.raises(openai.RateLimitError) as refused:
                _ask(swarm, question)
            assert refused.value.response.headers["retry-after"] == "2"
            assert refused.value.code == "rate_limit_exceeded"
            assert _ask(bob, question).choices
        # Its slot is free once the gateway sees the stream's client gone (at its next write):
        # the SDK's own retries, after Retry-After, find it free.
        assert _ask(swarm.with_options(max_retries=3), question).choices

        code, out, err = _cli("keys", "usage", "-i", str(inventory), "--since", since, "--json")
        assert code == 0, err
        usage = {k["name"]: k for k in json.loads(out)["keys"]}
        assert usage["e2e-swarm"]["limited"] >= 1
        assert usage["e2e-swarm"]["ok"] == 2
        assert usage["e2e-bob"]["ok"] == 1
        assert usage["e2e-bob"]["tokens_in"] > 0
        assert 0 < usage["e2e-bob"]["tokens_out"] <= 8
    finally:
        for name in keys:
            _cli("keys", "revoke", name, "-i", str(inventory))
    log = node_sh("gx10-a", f"journalctl -u {UNIT} --no-pager -o cat")
    assert not any(key in log for key in keys.values())


def _ask(client: openai.OpenAI, question: str) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=8
    )


def test_the_gateway_turned_off_and_on_again_keeps_the_keys(gated: ProvisionResult) -> None:
    """Off (the inventory says its network is trusted): the engine answers on the API port
    without a key and the gateway is stopped, its unit gone; on again: a key added before counts
    again (the key map stays), and the engine is back on loopback."""
    code, out, err = _cli("keys", "add", "e2e-carol", "-i", str(LAB_INVENTORY))
    assert code == 0, err
    key = out.strip()
    try:
        off = provision(
            LAB_INVENTORY,
            "serve.yml",
            extravars={"gx10_gateway_enabled": False, "gx10_allow_unauthenticated": True},
        )
        assert off.ok, off.failed_tasks
        assert node_sh("gx10-a", f"systemctl is-active {UNIT} || true").strip() != "active"
        assert httpx.get(f"http://{HEAD}:{API}/health", timeout=10).status_code == 200
        # The engine's own key guards /v1/* (vLLM's --api-key); /tokenize answers anyone.
        assert httpx.get(f"http://{HEAD}:{API}/v1/models", headers=auth()).status_code == 200
        tokenize = {"model": MODEL, "prompt": "open"}
        assert httpx.post(f"http://{HEAD}:{API}/tokenize", json=tokenize).status_code == 200
    finally:
        on = provision(LAB_INVENTORY, "serve.yml")
        assert on.ok, on.failed_tasks
    assert httpx.get(f"http://{HEAD}:{API}/tokenize").status_code == 401
    carol = httpx.get(f"http://{HEAD}:{API}/v1/models", headers={"x-api-key": key}, timeout=10)
    assert carol.status_code == 200
    assert _cli("keys", "revoke", "e2e-carol", "-i", str(LAB_INVENTORY))[0] == 0
