"""gx10 clients: every agent's config from the inventory (Ansible's own inventory code, the
vllm_serve role's defaults beneath), each parsed back with its format's real parser and checked
against the agent's published schema (vendored excerpts in tests/fixtures/client-schemas) or the
fields the agent's source reads; the key only by reference unless --inline-key; file modes; and
every bad input refused with nothing written."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gx10.cli import main

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab"
SCHEMAS = ROOT / "tests" / "fixtures" / "client-schemas"
BASE = "http://172.31.240.10:8000/v1"  # the lab head's gx10_api_host, port 8000
MODEL = "deepseek-v4-flash"
CONTEXT = 1048576  # the serving profile dspark-0731 (module_utils/serve_profiles.py)
SECRET = "sk-gx10-test-9f3c1d"

FILES = {
    "pi": ["pi/models.json"],
    "opencode": ["opencode/opencode.json"],
    "codex": ["codex/config.toml"],
    "aider": [
        "aider/.aider.conf.yml",
        "aider/.aider.model.settings.yml",
        "aider/.aider.model.metadata.json",
    ],
    "continue": ["continue/config.yaml"],
    "claude-code": ["claude-code/settings.json"],
}


def run(
    capsys: pytest.CaptureFixture[str], *args: str | Path, inventory: Path = LAB
) -> tuple[int, str, str]:
    code = main(["clients", "-i", str(inventory), *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def generate(
    capsys: pytest.CaptureFixture[str], out: Path, *args: str | Path, inventory: Path = LAB
) -> dict[str, Any]:
    code, stdout, stderr = run(capsys, "--out", out, "--json", *args, inventory=inventory)
    assert code == 0, stderr
    document: dict[str, Any] = json.loads(stdout)
    return document


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    return loaded


def validate(document: Any, name: str) -> None:
    validator = jsonschema.Draft7Validator(schema(name))
    validator.check_schema(validator.schema)
    validator.validate(document)


def inventory(tmp_path: Path, head_vars: str = "", group_vars: str = "") -> Path:
    root = tmp_path / "inv"
    root.mkdir()
    (root / "hosts.yml").write_text(
        textwrap.dedent(
            """\
            all:
              children:
                head:
                  hosts:
                    spark-1:
                      ansible_host: 10.0.0.11
            """
        )
        + textwrap.indent(textwrap.dedent(head_vars), " " * 10)
        + textwrap.dedent(
            """\
                workers:
                  hosts:
                    spark-2: {ansible_host: 10.0.0.12}
            """
        )
    )
    if group_vars:
        (root / "group_vars").mkdir()
        (root / "group_vars" / "all.yml").write_text(textwrap.dedent(group_vars))
    return root


def all_text(out: Path) -> str:
    return "".join(p.read_text() for p in sorted(out.rglob("*")) if p.is_file())


# --- every agent from the lab inventory ------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lab") / "gx10-clients"
    assert main(["clients", "-i", str(LAB), "--out", str(out)]) == 0
    return out


def test_json_lists_every_file_written_with_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gx10-clients"
    document = generate(capsys, out)
    assert [a["agent"] for a in document["agents"]] == list(FILES)
    for agent in document["agents"]:
        paths = [Path(f["path"]) for f in agent["files"]]
        assert paths == [out / p for p in FILES[agent["agent"]]]
        assert {f["mode"] for f in agent["files"]} == {"0644"}
    listed = {Path(f["path"]) for a in document["agents"] for f in a["files"]}
    listed.add(Path(document["readme"]))
    assert listed == {p for p in out.rglob("*") if p.is_file()}
    for path in listed:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert document["endpoint"] == BASE
    assert (document["model"], document["context_window"]) == (MODEL, CONTEXT)
    assert document["output_limit"] == 32768
    assert document["key"] == "env"


def test_readme_has_one_start_command_per_agent(lab: Path) -> None:
    readme = (lab / "README.md").read_text()
    assert f'pi --provider gx10 --model {MODEL} -p "..."' in readme
    assert (
        f"OPENCODE_CONFIG={lab}/opencode/opencode.json opencode run --model gx10/{MODEL}" in readme
    )
    assert f"CODEX_HOME={lab}/codex codex exec" in readme
    assert f'OPENAI_API_KEY="$GX10_API_KEY" aider --config {lab}/aider/.aider.conf.yml' in readme
    assert f"cn --config {lab}/continue/config.yaml" in readme
    assert f"claude --settings {lab}/claude-code/settings.json" in readme
    assert "export GX10_API_KEY=<your key>" in readme
    assert 'echo GX10_API_KEY="$GX10_API_KEY" >> ~/.continue/.env' in readme
    assert f"context window {CONTEXT} tokens" in readme


def test_pi_models_json(lab: Path) -> None:
    document = json.loads((lab / "pi" / "models.json").read_text())
    provider = document["providers"]["gx10"]
    assert provider["baseUrl"] == BASE
    assert provider["api"] == "openai-completions"
    assert provider["apiKey"] == "GX10_API_KEY"  # pi reads a variable of that name
    assert provider["compat"]["maxTokensField"] == "max_tokens"
    (model,) = provider["models"]
    assert model["id"] == MODEL
    assert (model["contextWindow"], model["maxTokens"]) == (CONTEXT, 32768)
    assert model["reasoning"] is True
    assert model["input"] == ["text"]
    # The fields pi's models.json documents for a model, nothing else.
    assert set(model) <= {
        "id", "name", "api", "reasoning", "input", "contextWindow", "maxTokens", "cost",
    }  # fmt: skip


# The model fields opencode declares (ModelsDev.Model, packages/opencode/src/provider/models.ts)
# and their types; a provider's config takes any subset of them.
OPENCODE_MODEL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "name": str,
    "attachment": bool,
    "reasoning": bool,
    "temperature": bool,
    "tool_call": bool,
    "limit": dict,
    "options": dict,
    "cost": dict,
}


def test_opencode_json(lab: Path) -> None:
    document = json.loads((lab / "opencode" / "opencode.json").read_text())
    assert document["$schema"] == "https://opencode.ai/config.json"
    assert document["model"] == f"gx10/{MODEL}"
    provider = document["provider"]["gx10"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": BASE, "apiKey": "{env:GX10_API_KEY}"}
    model = provider["models"][MODEL]
    for key, value in model.items():
        assert key in OPENCODE_MODEL_FIELDS, key
        assert isinstance(value, OPENCODE_MODEL_FIELDS[key]), key
    assert model["limit"] == {"context": CONTEXT, "output": 32768}
    assert model["tool_call"] is True
    assert model["reasoning"] is True


def test_codex_config_toml(lab: Path) -> None:
    document = tomllib.loads((lab / "codex" / "config.toml").read_text())
    assert document["model"] == MODEL
    assert document["model_provider"] == "gx10"
    assert document["model_context_window"] == CONTEXT
    assert document["model_max_output_tokens"] == 32768
    assert document["show_raw_agent_reasoning"] is True
    provider = document["model_providers"]["gx10"]
    assert provider["base_url"] == BASE
    assert provider["wire_api"] == "responses"  # the only one Codex 0.122 and later accept
    assert provider["env_key"] == "GX10_API_KEY"
    assert "experimental_bearer_token" not in provider


def test_codex_chat_wire_api_for_an_older_codex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    generate(capsys, out, "--agent", "codex", "--codex-wire-api", "chat")
    document = tomllib.loads((out / "codex" / "config.toml").read_text())
    assert document["model_providers"]["gx10"]["wire_api"] == "chat"


def test_aider_files(lab: Path) -> None:
    conf = yaml.safe_load((lab / "aider" / ".aider.conf.yml").read_text())
    validate(conf, "aider-0.82.json")
    assert conf["model"] == f"openai/{MODEL}"
    assert conf["openai-api-base"] == BASE
    assert "openai-api-key" not in conf
    settings_file = Path(conf["model-settings-file"])
    metadata_file = Path(conf["model-metadata-file"])
    assert settings_file == lab / "aider" / ".aider.model.settings.yml"
    (settings,) = yaml.safe_load(settings_file.read_text())
    assert settings["name"] == conf["model"]
    assert settings["extra_params"] == {
        "max_tokens": 32768,
        # The serving profile's default (dspark-0731: thinking on, effort low on the server).
        "extra_body": {"chat_template_kwargs": {"thinking": True}},
    }
    metadata = json.loads(metadata_file.read_text())
    entry = metadata[conf["model"]]
    assert (entry["max_input_tokens"], entry["max_output_tokens"]) == (CONTEXT, 32768)
    assert entry["litellm_provider"] == "openai"
    assert entry["supports_function_calling"] is True


def test_continue_config_yaml(lab: Path) -> None:
    document = yaml.safe_load((lab / "continue" / "config.yaml").read_text())
    validate(document, "continue-config-yaml.json")
    assert document["schema"] == "v1"
    (model,) = document["models"]
    assert model["provider"] == "openai"
    assert (model["model"], model["apiBase"]) == (MODEL, BASE)
    assert model["apiKey"] == "${{ secrets.GX10_API_KEY }}"
    assert "tool_use" in model["capabilities"]
    assert "chat" in model["roles"]
    assert model["defaultCompletionOptions"] == {"contextLength": CONTEXT, "maxTokens": 32768}
    body = model["requestOptions"]["extraBodyProperties"]
    assert body == {"chat_template_kwargs": {"thinking": True}}


def test_claude_code_settings(lab: Path) -> None:
    document = json.loads((lab / "claude-code" / "settings.json").read_text())
    validate(document, "claude-code-settings.json")
    env = document["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://172.31.240.10:8000"  # the root: no /v1
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[name] == MODEL
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(CONTEXT)
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32768"
    assert "ANTHROPIC_AUTH_TOKEN" not in env
    assert document["apiKeyHelper"] == "printf '%s' \"$GX10_API_KEY\""


@pytest.mark.parametrize(
    ("name", "document"),
    [
        ("aider-0.82.json", {"model": 7}),
        ("continue-config-yaml.json", {"name": "x", "version": "1", "models": [{"name": "m"}]}),
        (
            "continue-config-yaml.json",
            {
                "name": "x",
                "version": "1",
                "models": [
                    {
                        "name": "m",
                        "model": "m",
                        "provider": "openai",
                        "defaultCompletionOptions": {"maxTokens": 1, "thinking": "high"},
                    }
                ],
            },
        ),
        ("continue-config-yaml.json", {"name": "x", "version": "1", "modles": []}),
        ("claude-code-settings.json", {"env": {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "yes"}}),
        ("claude-code-settings.json", {"apiKeyHelper": ""}),
        ("claude-code-settings.json", {"env": {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": 32768}}),
    ],
)
def test_the_vendored_schemas_reject_bad_configs(name: str, document: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate(document, name)


# --- values from the inventory ---------------------------------------------------------------


def test_inventory_values_beat_the_role_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(
        tmp_path,
        head_vars="""\
            gx10_api_host: 192.0.2.7
            gx10_serve_port: "{{ 9000 + 1 }}"
        """,
        group_vars="""\
            vllm_serve_served_model_name: ds-flash-test
            vllm_serve_max_model_len: "{{ 128 * 1024 }}"
            vllm_serve_default_chat_template_kwargs: {thinking: "off"}
        """,
    )
    out = tmp_path / "out"
    document = generate(capsys, out, "--max-output-tokens", "8192", inventory=inv)
    assert document["endpoint"] == "http://192.0.2.7:9001/v1"
    assert (document["model"], document["context_window"]) == ("ds-flash-test", 131072)
    pi = json.loads((out / "pi" / "models.json").read_text())["providers"]["gx10"]
    assert pi["baseUrl"] == "http://192.0.2.7:9001/v1"
    assert (pi["models"][0]["contextWindow"], pi["models"][0]["maxTokens"]) == (131072, 8192)
    (settings,) = yaml.safe_load((out / "aider" / ".aider.model.settings.yml").read_text())
    assert settings["extra_params"]["extra_body"]["chat_template_kwargs"] == {"thinking": "off"}


def test_a_small_context_gets_half_of_it_as_output_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, group_vars="vllm_serve_max_model_len: 4096\n")
    document = generate(capsys, tmp_path / "out", "--agent", "pi", inventory=inv)
    assert (document["context_window"], document["output_limit"]) == (4096, 2048)
    assert document["endpoint"] == "http://10.0.0.11:8000/v1"  # ansible_host, the default port


def test_endpoint_option_overrides_the_inventory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    generate(capsys, out, "--endpoint", "https://llm.example:8443/v1/", "--agent", "claude-code")
    env = json.loads((out / "claude-code" / "settings.json").read_text())["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://llm.example:8443"
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["README.md", "settings.json"]


# --- the key ---------------------------------------------------------------------------------


def test_key_file_is_referenced_never_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "my key"
    key.write_text(SECRET + "\n")
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}-inventory\n")
    out = tmp_path / "out"
    document = generate(capsys, out, "--key-file", key, inventory=inv)
    assert document["key"] == "file"
    assert SECRET not in all_text(out)
    quoted = f"'{key}'"
    pi = json.loads((out / "pi" / "models.json").read_text())["providers"]["gx10"]
    assert pi["apiKey"] == f"!cat {quoted}"
    opencode = json.loads((out / "opencode" / "opencode.json").read_text())
    assert opencode["provider"]["gx10"]["options"]["apiKey"] == f"{{file:{key}}}"
    claude = json.loads((out / "claude-code" / "settings.json").read_text())
    assert claude["apiKeyHelper"] == f"cat {quoted}"
    codex = tomllib.loads((out / "codex" / "config.toml").read_text())
    assert codex["model_providers"]["gx10"]["env_key"] == "GX10_API_KEY"
    commands = {a["agent"]: a["command"] for a in document["agents"]}
    assert commands["aider"].startswith(f'OPENAI_API_KEY="$(cat {quoted})" aider')
    assert commands["codex"].startswith(f'GX10_API_KEY="$(cat {quoted})" CODEX_HOME=')


def test_key_env_names_the_variable_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    document = generate(capsys, out, "--key-env", "TEAM_LLM_KEY")
    pi = json.loads((out / "pi" / "models.json").read_text())["providers"]["gx10"]
    assert pi["apiKey"] == "TEAM_LLM_KEY"
    codex = tomllib.loads((out / "codex" / "config.toml").read_text())
    assert codex["model_providers"]["gx10"]["env_key"] == "TEAM_LLM_KEY"
    continue_ = yaml.safe_load((out / "continue" / "config.yaml").read_text())
    assert continue_["models"][0]["apiKey"] == "${{ secrets.TEAM_LLM_KEY }}"
    claude = json.loads((out / "claude-code" / "settings.json").read_text())
    assert claude["apiKeyHelper"] == "printf '%s' \"$TEAM_LLM_KEY\""
    opencode = json.loads((out / "opencode" / "opencode.json").read_text())
    assert opencode["provider"]["gx10"]["options"]["apiKey"] == "{env:TEAM_LLM_KEY}"
    aider = next(a for a in document["agents"] if a["agent"] == "aider")
    assert aider["command"].startswith('OPENAI_API_KEY="$TEAM_LLM_KEY" aider')
    assert "export TEAM_LLM_KEY=<your key>" in (out / "README.md").read_text()


def test_the_inventory_key_stays_out_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
    out = tmp_path / "out"
    generate(capsys, out, inventory=inv)
    assert SECRET not in all_text(out)


def test_inline_key_from_the_inventory_goes_into_0600_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, group_vars=f"vllm_serve_api_key: {SECRET}\n")
    out = tmp_path / "out"
    document = generate(capsys, out, "--inline-key", inventory=inv)
    assert document["key"] == "inline"
    modes = {Path(f["path"]).relative_to(out).as_posix(): f["mode"] for a in document["agents"]
             for f in a["files"]}  # fmt: skip
    secret_files = {
        "pi/models.json",
        "opencode/opencode.json",
        "codex/config.toml",
        "aider/.aider.conf.yml",
        "continue/config.yaml",
        "claude-code/settings.json",
    }
    for rel, mode in modes.items():
        path = out / rel
        holds_key = SECRET in path.read_text()
        assert holds_key == (rel in secret_files), rel
        assert mode == ("0600" if holds_key else "0644"), rel
        assert stat.S_IMODE(path.stat().st_mode) == int(mode, 8), rel
    assert SECRET not in (out / "README.md").read_text()
    assert stat.S_IMODE((out / "README.md").stat().st_mode) == 0o644
    pi = json.loads((out / "pi" / "models.json").read_text())["providers"]["gx10"]
    assert pi["apiKey"] == SECRET
    codex = tomllib.loads((out / "codex" / "config.toml").read_text())
    assert codex["model_providers"]["gx10"]["experimental_bearer_token"] == SECRET
    assert "env_key" not in codex["model_providers"]["gx10"]
    claude = json.loads((out / "claude-code" / "settings.json").read_text())
    validate(claude, "claude-code-settings.json")
    assert claude["env"]["ANTHROPIC_AUTH_TOKEN"] == SECRET
    assert "apiKeyHelper" not in claude
    aider = yaml.safe_load((out / "aider" / ".aider.conf.yml").read_text())
    validate(aider, "aider-0.82.json")
    assert aider["openai-api-key"] == SECRET


def test_inline_key_from_a_key_file_and_from_a_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "key"
    key.write_text(f"  {SECRET}\n")
    out = tmp_path / "a"
    generate(capsys, out, "--inline-key", "--key-file", key, "--agent", "opencode")
    opencode = json.loads((out / "opencode" / "opencode.json").read_text())
    assert opencode["provider"]["gx10"]["options"]["apiKey"] == SECRET
    monkeypatch.setenv("TEAM_LLM_KEY", SECRET + "-env")
    out = tmp_path / "b"
    generate(capsys, out, "--inline-key", "--key-env", "TEAM_LLM_KEY", "--agent", "continue")
    continue_ = yaml.safe_load((out / "continue" / "config.yaml").read_text())
    assert continue_["models"][0]["apiKey"] == SECRET + "-env"
    assert stat.S_IMODE((out / "continue" / "config.yaml").stat().st_mode) == 0o600


# --- bad input: a clear error, nothing written -----------------------------------------------


def refused(
    capsys: pytest.CaptureFixture[str], out: Path, *args: str | Path, inventory: Path = LAB
) -> str:
    code, stdout, stderr = run(capsys, "--out", out, *args, inventory=inventory)
    assert code == 1
    assert stdout == ""
    assert not out.exists() or not any(out.rglob("*"))
    return stderr


def test_unknown_agent_names_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, tmp_path / "out", "--agent", "pi", "--agent", "cursor")
    assert "--agent 'cursor' is not an agent gx10 clients knows" in err
    assert "pi, opencode, codex, aider, continue, claude-code" in err


def test_inventory_without_a_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  children:\n    workers:\n      hosts:\n        b: {}\n")
    err = refused(capsys, tmp_path / "out", inventory=inv)
    assert "has no host in group 'head'" in err
    assert "add the head node to group 'head'" in err


def test_a_bad_endpoint_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, tmp_path / "out", "--endpoint", "ftp://llm.example/v1")
    assert "--endpoint 'ftp://llm.example/v1': the scheme must be http or https" in err
    assert "expected http://HOST:PORT" in err


def test_output_limit_above_the_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, tmp_path / "out", "--max-output-tokens", "2000000")
    assert f"--max-output-tokens 2000000 is above the context window {CONTEXT}" in err
    assert "vllm_serve_max_model_len" in err
    assert f"give at most {CONTEXT}" in err
    err = refused(capsys, tmp_path / "out", "--max-output-tokens", "0")
    assert "--max-output-tokens 0: the output limit must be a positive number" in err


def test_a_context_that_is_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path, group_vars="vllm_serve_max_model_len: lots\n")
    err = refused(capsys, tmp_path / "out", inventory=inv)
    assert "vllm_serve_max_model_len is 'lots'" in err
    assert "positive number of tokens" in err


def test_out_dir_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = refused(capsys, blocker / "gx10-clients")
    assert f"--out {blocker}/gx10-clients: {blocker} is not a directory" in err
    assert blocker.read_text() == "x"


def test_out_dir_not_writable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root writes through mode bits: make the probe file fail instead

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    err = refused(capsys, locked / "gx10-clients")
    assert f"--out {locked}/gx10-clients is not writable (Permission denied)" in err
    assert "give a directory you can write" in err
    assert list(locked.iterdir()) == []  # the directory it tried is removed again


def test_bad_key_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, tmp_path / "out", "--key-env", "MY-KEY")
    assert "--key-env 'MY-KEY' is not an environment variable name" in err
    keyless = inventory(tmp_path)
    err = refused(capsys, tmp_path / "out", "--inline-key", inventory=keyless)
    assert "--inline-key: no key to write: the inventory sets no vllm_serve_api_key" in err
    err = refused(capsys, tmp_path / "out", "--inline-key", "--key-file", tmp_path / "none")
    assert f"--inline-key: cannot read --key-file {tmp_path}/none" in err
    with pytest.raises(SystemExit) as exited:  # argparse: a usage error, exit 1
        run(capsys, "--key-file", "k", "--key-env", "K")
    assert exited.value.code == 1
    assert "argument --key-env: not allowed with argument --key-file" in capsys.readouterr().err


def test_existing_files_are_kept_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    generate(capsys, out, "--agent", "pi")
    models = out / "pi" / "models.json"
    models.write_text("mine\n")
    code, _, err = run(capsys, "--out", out, "--agent", "pi", "--agent", "codex")
    assert code == 1
    assert f"{models}" in err
    assert "give --force to overwrite them" in err
    assert models.read_text() == "mine\n"
    assert not (out / "codex").exists()  # nothing written
    generate(capsys, out, "--agent", "pi", "--agent", "codex", "--force")
    assert json.loads(models.read_text())["providers"]["gx10"]["baseUrl"] == BASE
    assert (out / "codex" / "config.toml").is_file()
