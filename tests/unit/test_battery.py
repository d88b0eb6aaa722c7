"""The tool-call battery (gx10.battery, `gx10 smoke --battery`) against the vLLM simulator's API
server, run in this process on loopback: every case passes, and each case fails under its break
mode, alone (the break file is read at every request, as on the lab's head). Then the command
line (table, JSON, exit codes, the key kept out of the output, -i), and the pieces the cases
stand on: the scratch directory's limits, the schema checks, the trimming of responses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from simulators import InProcessHead, vllm_sim_head

from gx10 import battery
from gx10.cli import main
from gx10.lab.simulators import vllm_sim

# What each case's failure says under its break mode (the field failure it reproduces).
BROKEN = {
    "parallel": "expected the calls get_time, get_weather in one turn, got get_weather",
    "nested": "$.customer: expected object",
    "long-argument": "content is 2",
    "stream": "the reassembled arguments are not JSON",
    "tool-choice": "required: expected at least one call, got none",
    "reasoning": "no reasoning field",
    "agent-loop": "line 15: 'Fizz' instead of 'FizzBuzz'",
    "messages": "the call came back as text",
}


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHead]:
    with vllm_sim_head(tmp_path_factory.mktemp("battery")) as served:
        yield served


@pytest.fixture(autouse=True)
def no_break(head: InProcessHead) -> Iterator[None]:
    head.break_file.unlink(missing_ok=True)
    yield
    head.break_file.unlink(missing_ok=True)


def run(head: InProcessHead, **options: object) -> battery.BatteryResult:
    return battery.run(head.url, head.model, api_key=head.api_key, timeout=20.0, **options)  # type: ignore[arg-type]


def test_every_case_passes_against_a_sound_server(head: InProcessHead) -> None:
    result = run(head)
    assert [c.name for c in result.cases] == list(battery.CASES)
    assert result.ok, [(c.name, c.detail) for c in result.cases if not c.ok]
    assert all(c.response is None for c in result.cases)
    details = {c.name: c.detail for c in result.cases}
    assert (
        details["long-argument"]
        == f"write_file content: {len(battery.long_text().encode())} bytes, byte-identical"
    )
    assert details["agent-loop"].startswith("3 turns (write_file, run_command)")
    assert result.base_url == f"{head.url}/v1"


@pytest.mark.parametrize("mode", battery.CASES)
def test_each_break_mode_fails_its_case_alone(head: InProcessHead, mode: str) -> None:
    head.break_file.write_text(mode)
    result = run(head)
    assert result.failed == (mode,)
    (case,) = (c for c in result.cases if not c.ok)
    assert BROKEN[mode] in case.detail
    assert case.response  # the response that failed, kept for the report
    assert len(case.response) <= battery.TRIM + 60


def test_break_modes_from_the_environment(tmp_path: Path) -> None:
    with vllm_sim_head(tmp_path, breaks=("nested", "messages")) as head:
        result = run(head, cases=["messages", "parallel", "nested"])
    assert [c.name for c in result.cases] == ["parallel", "nested", "messages"]  # CASES order
    assert result.failed == ("nested", "messages")


def test_an_unknown_case_is_refused(head: InProcessHead) -> None:
    with pytest.raises(ValueError, match="unknown battery case nope"):
        run(head, cases=["parallel", "nope"])


# --- the command line ------------------------------------------------------------------------


def smoke(head: InProcessHead, *args: str) -> int:
    return main(["smoke", "--endpoint", head.url, "--model", head.model, "--timeout", "20", *args])


def test_the_command_prints_a_table_and_exits_2_on_a_failure(
    head: InProcessHead, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", head.api_key)
    assert smoke(head, "--battery") == 0
    out = capsys.readouterr().out
    for name in battery.CASES:
        assert name in out
    assert f"OK: 8 case(s), {head.url}/v1 model {head.model}" in out
    head.break_file.write_text("agent-loop")
    assert smoke(head, "--battery", "--case", "agent-loop", "parallel") == 2
    captured = capsys.readouterr()
    assert "FAIL" in captured.out
    assert "agent-loop: the response that failed" in captured.out
    assert "FAILED: agent-loop (1 of 2)" in captured.out
    assert head.api_key not in captured.out + captured.err


def test_the_command_prints_json_without_the_key(
    head: InProcessHead, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(head.api_key + "\n")
    head.break_file.write_text("stream")
    code = smoke(head, "--battery", "--json", "--api-key-file", str(key_file), "--case", "stream")
    captured = capsys.readouterr()
    assert code == 2
    document = json.loads(captured.out)
    assert document["ok"] is False
    (case,) = document["cases"]
    assert case["name"] == "stream"
    assert case["ok"] is False
    assert "chat.completion.chunk" in case["response"]
    assert head.api_key not in captured.out + captured.err


def test_a_wrong_key_fails_every_case_with_the_servers_401(
    head: InProcessHead, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "not-the-key")
    assert smoke(head, "--battery", "--json") == 2
    document = json.loads(capsys.readouterr().out)
    assert [c["ok"] for c in document["cases"]] == [False] * len(battery.CASES)
    assert "AuthenticationError" in document["cases"][0]["detail"]
    assert "HTTP 401" in document["cases"][-1]["detail"]


def inventory(tmp_path: Path, head: InProcessHead, key: str) -> Path:
    port = head.url.rsplit(":", 1)[1]
    path = tmp_path / f"hosts-{key}.yml"
    path.write_text(
        "all:\n  children:\n    head:\n      hosts:\n        gx10-a:\n"
        f"          gx10_api_host: 127.0.0.1\n          gx10_serve_port: {port}\n"
        f"          vllm_serve_served_model_name: {head.model}\n"
        f"          vllm_serve_api_key: {key}\n"
        # The engine without the gateway: on this machine's loopback, a trusted network.
        "          gx10_allow_unauthenticated: true\n"
        "    workers:\n      hosts:\n        gx10-b:\n"
    )
    return path


def test_the_inventory_gives_endpoint_model_and_key(
    head: InProcessHead,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = inventory(tmp_path, head, head.api_key)
    args = ["smoke", "-i", str(good), "--battery", "--case", "messages", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["base_url"] == f"{head.url}/v1"
    # --api-key-file wins over the inventory's key.
    stale = inventory(tmp_path, head, "stale-key")
    key_file = tmp_path / "key"
    key_file.write_text(head.api_key)
    assert main(["smoke", "-i", str(stale), "--battery", "--case", "parallel"]) == 2
    args = ["smoke", "-i", str(stale), "--api-key-file", str(key_file), "--battery"]
    assert main([*args, "--case", "parallel"]) == 0
    # Without --battery, -i runs the four smoke checks against the same service.
    assert main(["smoke", "-i", str(good)]) == 0
    out = capsys.readouterr().out
    assert "ok   tool call" in out
    assert head.api_key not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["smoke", "--battery"], "gx10 smoke needs -i INV, or --endpoint URL and --model NAME"),
        (["smoke", "--endpoint", "http://h:8000", "--case", "stream"], "add --battery"),
    ],
)
def test_usage_errors_exit_1(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 1
    assert message in capsys.readouterr().err


def test_an_unknown_case_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["smoke", "--endpoint", "http://h:8000", "--model", "m", "--battery", "--case", "x"])
    assert exited.value.code == 1
    assert "argument --case: invalid choice: 'x'" in capsys.readouterr().err


def test_the_battery_and_the_validation_know_the_same_cases() -> None:
    from gx10._collection import load  # noqa: PLC0415

    assert tuple(load("cluster_plan").SMOKE_BATTERY_CASES) == battery.CASES
    assert tuple(vllm_sim.BREAK_CASES) == battery.CASES


# --- the pieces -------------------------------------------------------------------------------


def test_the_sandbox_keeps_paths_and_commands_inside(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    (tmp_path / "outside.py").write_text("print('outside')\n")
    (root / "link.py").symlink_to(tmp_path / "outside.py")
    box = battery.Sandbox(root)
    for path in ("../x.py", "/etc/passwd", "sub/../../x.py", "", "."):
        result = box.call("write_file", json.dumps({"path": path, "content": "x"}))
        assert result.startswith("error:"), (path, result)
    assert not (tmp_path / "x.py").exists()
    for command in ("rm -rf /", "bash -c 'echo hi'", "python3", "python3 ../outside.py",
                    "python3 link.py", "python3 missing.py"):  # fmt: skip
        assert box.call("run_command", json.dumps({"command": command})).startswith("error:")
    assert box.call("nope", "{}") == "error: no tool 'nope'; the tools are write_file, run_command"
    assert box.call("write_file", "[1]").startswith("error: the arguments are not a JSON object")
    big = "x" * (battery.Sandbox.MAX_FILE + 1)
    assert "at most" in box.call("write_file", json.dumps({"path": "big.txt", "content": big}))
    assert box.call("write_file", json.dumps({"path": "d/ok.py", "content": "print(1)\n"})) == (
        "wrote 9 bytes to d/ok.py"
    )
    assert (
        box.call("run_command", json.dumps({"command": "python3 d/ok.py"})) == "exit status 0\n1\n"
    )


def test_the_sandbox_runs_with_an_empty_environment_and_a_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GX10_BATTERY_SECRET", "s3cret")
    box = battery.Sandbox(tmp_path)
    (tmp_path / "env.py").write_text(
        "import os, sys; print(sorted(os.environ)); print(sys.flags.isolated)\n"
    )
    out = box.call("run_command", json.dumps({"command": "python3 env.py"}))
    assert out.splitlines()[1:] == ["['LC_ALL', 'PATH']", "1"]
    (tmp_path / "spin.py").write_text(
        "import os, time\nopen('spin.pid', 'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\ntime.sleep(60)\n"
    )
    monkeypatch.setattr(battery.Sandbox, "SECONDS", 0.5)
    out = box.call("run_command", json.dumps({"command": "python3 spin.py"}))
    assert out == "exit status killed after 0.5 s\nstarted\n"
    spin = int((tmp_path / "spin.pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left to sleep its minute
        os.kill(spin, 0)
    (tmp_path / "loud.py").write_text("print('y' * 100000)\n")
    out = box.call("run_command", json.dumps({"command": "python3 loud.py"}))
    assert len(out) <= battery.Sandbox.MAX_OUTPUT + 20
    assert os.environ["GX10_BATTERY_SECRET"] == "s3cret"


def test_schema_errors_and_first_difference() -> None:
    assert battery.schema_errors(battery.ORDER, battery.ORDER_SCHEMA) == []
    flattened = {**battery.ORDER, "items": json.dumps(battery.ORDER["items"])}
    (error,) = battery.schema_errors(flattened, battery.ORDER_SCHEMA)
    assert error.startswith("$.items: expected array, got string (JSON text where a value")
    wrong = json.loads(json.dumps(battery.ORDER))
    wrong["items"][0]["quantity"] = "2"
    wrong["customer"]["address"]["country"] = "UK"
    del wrong["express"]
    assert battery.schema_errors(wrong, battery.ORDER_SCHEMA) == [
        "$.express: required, missing",
        "$.customer.address.country: not in the schema",
        "$.items[0].quantity: expected integer, got string",
    ]
    assert battery.first_difference(battery.ORDER, wrong) is not None
    assert battery.first_difference({"a": [1, 2]}, {"a": [1, 3]}) == "$.a[1]: expected 2, got 3"
    assert (
        battery.first_difference({"a": True}, {"a": 1})
        == "$.a: expected boolean true, got integer 1"
    )
    assert battery.first_difference(battery.ORDER, json.loads(json.dumps(battery.ORDER))) is None


def test_a_tool_schema_is_checked_where_it_is_defined() -> None:
    with pytest.raises(jsonschema.SchemaError):  # "objekt" is no JSON type
        battery.function_tool("f", "a broken schema", {"type": "objekt"})


def test_trim_keeps_the_head_and_the_tail() -> None:
    text = "a" * 5000 + "END"
    trimmed = battery.trim(text, limit=400)
    assert trimmed.startswith("a" * 300)
    assert trimmed.endswith("aEND")
    assert "characters cut" in trimmed
    assert len(trimmed) < 460
    assert battery.trim({"k": "v"}) == '{"k": "v"}'


# --- the smoke stage -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def smoke_playbook(inventory: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """playbooks/smoke.yml (validate, then the smoke stage on the controller) against the head;
    the nodes themselves are never contacted."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PYTHONPATH": str(ROOT / "python"),
        "ANSIBLE_FORCE_COLOR": "0",
    }
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(ROOT / "playbooks" / "smoke.yml"),
         "-e", json.dumps(extra)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_smoke_stage_runs_the_battery_when_asked(head: InProcessHead, tmp_path: Path) -> None:
    hosts = inventory(tmp_path, head, head.api_key)
    cases = {"gx10_smoke_battery": True, "gx10_smoke_battery_cases": ["parallel", "agent-loop"]}
    passed = smoke_playbook(hosts, cases)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "OK: 2 case(s)" in passed.stdout
    assert "agent-loop" in passed.stdout
    assert "long-argument" not in passed.stdout  # only the cases asked for
    head.break_file.write_text("agent-loop")
    failed = smoke_playbook(hosts, cases)
    assert failed.returncode == 2, failed.stdout
    assert "FAILED: agent-loop (1 of 2)" in failed.stdout
    assert head.api_key not in failed.stdout
    off = smoke_playbook(hosts, {})  # the default: the four checks only, the battery skipped
    assert off.returncode == 0, off.stdout
    assert "ok   tool call" in off.stdout
    assert "Run the battery's cases" not in off.stdout
    assert "skipped=2" in off.stdout


def test_the_smoke_stage_refuses_a_bad_battery_setting_before_anything_runs(
    head: InProcessHead, tmp_path: Path
) -> None:
    bad = smoke_playbook(inventory(tmp_path, head, head.api_key), {"gx10_smoke_battery": "yes"})
    assert bad.returncode == 2
    assert (
        "gx10_smoke_battery on host gx10-a is 'yes' (str): it must be true or false" in bad.stdout
    )
    assert "Run the four smoke checks" not in bad.stdout
