"""gx10 clients against the lab's service: the configs written for every OpenAI-compatible agent,
read back with each format's own parser, point at the served model, and a request made from
each config's values (base URL, model, output limit, the extra body fields the agent sends, a
tool) is accepted by the server: streamed from the official openai client, the first chunk read.
The server checks the output limit against its context window, so a limit it cannot serve is
refused (the last test shows it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from labtools import LAB_INVENTORY, node_sh, service_key

from gx10 import ProvisionResult
from gx10.cli import main

TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}


@pytest.fixture(scope="module")
def served(serving_lab: ProvisionResult) -> ProvisionResult:
    return serving_lab


@pytest.fixture(scope="module")
def configs(served: ProvisionResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clients") / "gx10-clients"
    # Codex's config speaks the Responses API (the default), which the simulator serves as the
    # real engine does (tests/unit/test_vllm_sim_contract.py).
    assert main(["clients", "-i", str(LAB_INVENTORY), "--out", str(out)]) == 0
    return out


def request_of(agent: str, out: Path) -> dict[str, Any]:
    """What the agent would send, from its own file: base URL, model, output limit, extras."""
    if agent == "pi":
        provider = json.loads((out / "pi/models.json").read_text())["providers"]["gx10"]
        model = provider["models"][0]
        return {"base": provider["baseUrl"], "model": model["id"], "max": model["maxTokens"]}
    if agent == "opencode":
        provider = json.loads((out / "opencode/opencode.json").read_text())["provider"]["gx10"]
        ((name, model),) = provider["models"].items()
        base = provider["options"]["baseURL"]
        return {"base": base, "model": name, "max": model["limit"]["output"]}
    if agent == "codex":
        document = tomllib.loads((out / "codex/config.toml").read_text())
        provider = document["model_providers"][document["model_provider"]]
        assert provider["wire_api"] == "responses"
        base = provider["base_url"]
        limit = document["model_max_output_tokens"]
        return {"base": base, "model": document["model"], "max": limit, "api": "responses"}
    if agent == "aider":
        conf = yaml.safe_load((out / "aider/.aider.conf.yml").read_text())
        (settings,) = yaml.safe_load(Path(conf["model-settings-file"]).read_text())
        extra = dict(settings["extra_params"])
        return {
            "base": conf["openai-api-base"],
            "model": conf["model"].removeprefix("openai/"),  # litellm's provider prefix
            "max": extra.pop("max_tokens"),
            "extra": extra.get("extra_body", {}),
        }
    (model,) = yaml.safe_load((out / "continue/config.yaml").read_text())["models"]
    return {
        "base": model["apiBase"],
        "model": model["model"],
        "max": model["defaultCompletionOptions"]["maxTokens"],
        "extra": model["requestOptions"]["extraBodyProperties"],
    }


def first_chunk(request: dict[str, Any]) -> Any:
    """The first event of a streamed request as the agent makes it: a chat completion, or a
    response for an agent on the Responses API (Codex), with a tool."""
    # The key a user gives the agent (here the lab's own): the lab's gateway wants one.
    client = openai.OpenAI(base_url=request["base"], api_key=service_key(), timeout=60)
    if request.get("api") == "responses":
        function = TOOL["function"]
        events = client.responses.create(
            model=request["model"],
            input="Write fizzbuzz.py.",
            max_output_tokens=request["max"],
            tools=[{"type": "function", **function, "strict": False}],  # type: ignore[list-item]
            stream=True,
        )
        try:
            return next(iter(events)).response  # response.created: the response so far
        finally:
            events.close()
    stream = client.chat.completions.create(
        model=request["model"],
        messages=[{"role": "user", "content": "Write fizzbuzz.py."}],
        max_tokens=request["max"],
        tools=[TOOL],  # type: ignore[list-item]
        stream=True,
        extra_body=request.get("extra") or None,
    )
    try:
        return next(iter(stream))
    finally:
        stream.close()


@pytest.mark.parametrize("agent", ["pi", "opencode", "codex", "aider", "continue"])
def test_the_service_accepts_what_each_config_sends(agent: str, configs: Path) -> None:
    request = request_of(agent, configs)
    listed = openai.OpenAI(base_url=request["base"], api_key=service_key()).models.list()
    assert request["model"] in [m.id for m in listed.data]
    chunk = first_chunk(request)
    assert chunk.model == request["model"]


def test_claude_code_reaches_the_server_root(configs: Path) -> None:
    env = json.loads((configs / "claude-code/settings.json").read_text())["env"]
    assert httpx.get(f"{env['ANTHROPIC_BASE_URL']}/health", timeout=10).status_code == 200
    listed = httpx.get(
        f"{env['ANTHROPIC_BASE_URL']}/v1/models",
        headers={"x-api-key": service_key()},  # as Claude Code sends its key
        timeout=10,
    ).json()
    assert env["ANTHROPIC_MODEL"] in [m["id"] for m in listed["data"]]


def test_an_output_limit_the_server_cannot_serve_is_refused(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "full"
    context = "1048576"  # the profile's max_model_len (dspark-0731), which the lab serves
    code = main(
        ["clients", "-i", str(LAB_INVENTORY), "--out", str(out), "--max-output-tokens", context]
    )
    assert code == 0  # allowed (not above the context), but no room is left for the prompt
    with pytest.raises(openai.BadRequestError):
        first_chunk(request_of("pi", out))


# --- the tool-call battery against the lab's head (gx10 smoke --battery) ---------------------

# long-argument and reasoning stay unit-level (tests/unit/test_battery.py): their outputs take
# the simulator's decode time at the lab's time scale.
LAB_CASES = ("parallel", "nested", "stream", "tool-choice", "agent-loop", "messages")
HEAD, SERVE_CONTAINER = "gx10-a", "gx10-vllm"
BREAK_FILE = "/run/gx10-vllm-sim/break"  # vllm_sim DEFAULT_BREAK_FILE, read at every request


def set_break(mode: str | None) -> None:
    """Write (or remove) the head simulator's break file, as a test on the lab flips it."""
    script = (
        f"mkdir -p {Path(BREAK_FILE).parent} && printf %s {mode} > {BREAK_FILE}"
        if mode
        else f"rm -f {BREAK_FILE}"
    )
    node_sh(HEAD, f"docker exec {SERVE_CONTAINER} sh -c '{script}'")


def battery_json(capsys: pytest.CaptureFixture[str], *cases: str) -> tuple[int, dict[str, Any]]:
    args = ["smoke", "-i", str(LAB_INVENTORY), "--battery", "--json", "--timeout", "60"]
    code = main([*args, *(arg for case in cases for arg in ("--case", case))])
    return code, json.loads(capsys.readouterr().out)


def test_the_tool_call_battery_passes_and_a_broken_parser_fails_it(
    served: ProvisionResult, capsys: pytest.CaptureFixture[str]
) -> None:
    set_break(None)
    code, result = battery_json(capsys, *LAB_CASES)
    assert code == 0, [(c["name"], c["detail"]) for c in result["cases"] if not c["ok"]]
    assert [c["name"] for c in result["cases"]] == list(LAB_CASES)
    try:
        set_break("parallel,messages")  # no restart: the simulator reads the file per request
        code, result = battery_json(capsys, "parallel", "stream", "messages")
        assert code == 2
        failed = {c["name"]: c for c in result["cases"] if not c["ok"]}
        assert sorted(failed) == ["messages", "parallel"]  # stream still passes
        assert "got get_weather" in failed["parallel"]["detail"]
        assert failed["messages"]["response"]
    finally:
        set_break(None)
    code, result = battery_json(capsys, "parallel")
    assert code == 0, result
