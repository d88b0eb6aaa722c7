"""`gx10 keys`: the key made from the CSPRNG and shown once, only its hash sent to the head, and
what a refused name does (nothing, and no key shown). playbooks/keys.yml is replaced by a fake
that answers as the head's gateway_keys task does; tests/unit/test_api_gateway.py runs the real
playbook in front of a real HAProxy."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import Invocation, invoke

from gx10 import keys
from gx10._collection import load
from gx10.cli import main
from gx10.provision import FailedTask, HostStats, ProvisionResult

GATEWAY_KEYS = load("gateway_keys")
GATEWAY_USAGE = load("gateway_usage")

TOKEN = re.compile(r"^gx10-[A-Za-z0-9_-]{43}$")
ROOT = Path(__file__).resolve().parents[2]


def test_a_key_is_256_bits_from_secrets_urlsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = keys.secrets.token_urlsafe

    def spy(nbytes: int) -> str:
        asked.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(keys.secrets, "token_urlsafe", spy)
    key = keys.generate_key()
    assert asked == [32]
    assert TOKEN.match(key), key


def test_keys_differ() -> None:
    made = {keys.generate_key() for _ in range(200)}
    assert len(made) == 200


def test_the_hash_is_what_haproxy_computes() -> None:
    # HAProxy: req.fhdr(authorization),word(2,' '),sha2(256),hex,lower
    assert keys.key_sha256("gx10-abc") == hashlib.sha256(b"gx10-abc").hexdigest()
    assert keys.key_sha256("gx10-abc") == keys.key_sha256("gx10-abc").lower()


class FakeHead:
    """Stands in for provision(playbooks/keys.yml): records the extra variables, answers with the
    gateway_keys task's result (or its failure) through the event handler, changing its keys with
    the module's own functions (module_utils/gateway_keys.py), and with the gateway_usage task's
    summary of `log` for `usage`."""

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self.calls: list[dict[str, Any]] = []
        self.log: list[str] = []

    @property
    def keys(self) -> dict[str, dict[str, Any]]:
        return {entry.name: entry.listed() for entry in self.entries}

    def _change(self, action: str, extravars: Mapping[str, Any]) -> None:
        name = extravars.get("api_gateway_key_name", "")
        limit = extravars.get("api_gateway_key_max_concurrent")
        if action == "add":
            entry = GATEWAY_KEYS.KeyEntry(
                name, extravars["api_gateway_key_sha256"], "2026-01-02T03:04:05Z", limit
            )
            self.entries = GATEWAY_KEYS.add_key(self.entries, entry)
        elif action == "revoke":
            self.entries = GATEWAY_KEYS.remove_key(self.entries, name)
        elif action == "limit":
            self.entries = GATEWAY_KEYS.set_limit(self.entries, name, limit)

    def __call__(
        self,
        inventory: str,
        playbook: str,
        *,
        extravars: Mapping[str, Any],
        on_event: Callable[[dict[str, Any]], object],
    ) -> ProvisionResult:
        self.calls.append({"inventory": inventory, "playbook": playbook, **extravars})
        action = extravars["api_gateway_key_action"]
        name = extravars.get("api_gateway_key_name", "")
        failure = ""
        try:
            self._change(action, extravars)
        except GATEWAY_KEYS.GatewayKeyError as exc:
            failure = f"{exc}; nothing was changed"
        task = "gx10.cluster.gateway_keys"
        res: dict[str, Any] = {"keys": list(self.keys.values()), "running": True, "runtime": []}
        if failure:
            res = {"msg": failure, "keys": list(self.keys.values())}
        elif action == "usage":
            task, res = "gx10.cluster.gateway_usage", GATEWAY_USAGE.summarize(self.log).as_dict()
        elif action != "list":
            res["runtime"] = [f"{'del' if action == 'revoke' else 'add'} {name}"]
        on_event(
            {
                "event": "runner_on_failed" if failure else "runner_on_ok",
                "event_data": {"task_action": task, "res": res},
            }
        )
        return ProvisionResult(
            ok=not failure,
            status="failed" if failure else "successful",
            rc=2 if failure else 0,
            hosts={"gx10-a": HostStats(ok=3, failed=int(bool(failure)))},
            failed_tasks=(FailedTask("gx10-a", "Change or read", failure, "keys"),)
            if failure
            else (),
            artifact_dir=Path("/tmp/artifacts/x"),
        )


@pytest.fixture
def head(monkeypatch: pytest.MonkeyPatch) -> FakeHead:
    fake = FakeHead()
    monkeypatch.setattr(keys, "provision", fake)
    return fake


def test_add_prints_the_key_once_alone_on_stdout_and_sends_only_its_hash(head: FakeHead) -> None:
    run = invoke(["keys", "add", "alice", "-i", "inventories/lab"])
    assert run.code == 0, run.stderr
    key = run.stdout.strip()
    assert TOKEN.match(key)
    assert run.stdout == key + "\n"  # the key, once, and nothing else
    assert key not in run.stderr
    assert "added key alice" in run.stderr
    assert "accepts it from the next request" in run.stderr
    (call,) = head.calls
    assert call["playbook"] == "keys.yml"
    assert call["api_gateway_key_sha256"] == hashlib.sha256(key.encode()).hexdigest()
    assert key not in json.dumps(call)


def test_add_json_carries_the_key_and_the_entry(head: FakeHead) -> None:
    run = invoke(["keys", "add", "ci-bot", "-i", "inv", "--json"])
    assert run.code == 0
    document = json.loads(run.stdout)
    assert TOKEN.match(document["key"])
    assert document["name"] == "ci-bot"
    assert document["sha256_prefix"] == keys.key_sha256(document["key"])[:12]
    assert document["gateway_running"] is True


def test_add_to_a_key_file_writes_it_0600_and_prints_no_key(head: FakeHead, tmp_path: Path) -> None:
    path = tmp_path / "alice.key"
    run = invoke(["keys", "add", "alice", "-i", "inv", "--key-file", str(path)])
    assert run.code == 0, run.stderr
    key = path.read_text().strip()
    assert TOKEN.match(key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key not in run.stdout + run.stderr
    assert head.calls[0]["api_gateway_key_sha256"] == keys.key_sha256(key)


def test_an_existing_key_file_is_refused_before_anything_runs(
    head: FakeHead, tmp_path: Path
) -> None:
    path = tmp_path / "alice.key"
    path.write_text("an older key\n")
    run = invoke(["keys", "add", "alice", "-i", "inv", "--key-file", str(path)])
    assert run.code == 1
    assert "exists" in run.stderr
    assert head.calls == []
    assert path.read_text() == "an older key\n"


def test_a_duplicate_name_changes_nothing_and_shows_no_key(head: FakeHead, tmp_path: Path) -> None:
    assert invoke(["keys", "add", "alice", "-i", "inv"]).code == 0
    path = tmp_path / "second.key"
    run = invoke(["keys", "add", "alice", "-i", "inv", "--key-file", str(path)])
    assert run.code == 2
    assert run.stdout == ""
    assert "not added: a key named 'alice' already exists" in run.stderr
    assert not path.exists()  # the reserved file is removed again
    # The key the failed call made is nowhere.
    sent = head.calls[-1]["api_gateway_key_sha256"]
    assert sent[:12] not in run.stderr
    assert list(head.keys) == ["alice"]


def _assert_no_token(run: Invocation) -> None:
    assert not re.search(r"gx10-[A-Za-z0-9_-]{43}", run.stdout + run.stderr)


def test_revoke_of_an_unknown_name_is_an_error(head: FakeHead) -> None:
    run = invoke(["keys", "revoke", "carol", "-i", "inv"])
    assert run.code == 2
    assert "not revoked: no key named 'carol'" in run.stderr
    _assert_no_token(run)


def test_revoke_then_list(head: FakeHead) -> None:
    invoke(["keys", "add", "alice", "-i", "inv"])
    invoke(["keys", "add", "bob", "-i", "inv"])
    run = invoke(["keys", "revoke", "alice", "-i", "inv"])
    assert run.code == 0
    assert "revoked key alice" in run.stdout
    assert "refuses it from the next request" in run.stdout
    listed = invoke(["keys", "list", "-i", "inv"])
    assert listed.code == 0
    assert "bob" in listed.stdout
    assert "alice" not in listed.stdout
    assert "1 key(s); the gateway is running" in listed.stdout
    document = json.loads(invoke(["keys", "list", "-i", "inv", "--json"]).stdout)
    assert [k["name"] for k in document["keys"]] == ["bob"]
    assert len(document["keys"][0]["sha256_prefix"]) == 12
    assert head.calls[-1]["api_gateway_key_action"] == "list"


@pytest.mark.parametrize("name", ["Alice", "service", "a b", ".x"])
def test_a_bad_or_reserved_name_is_refused_before_anything_runs(head: FakeHead, name: str) -> None:
    run = invoke(["keys", "add", name, "-i", "inv"])
    assert run.code == 1
    assert "key name" in run.stderr
    assert head.calls == []
    _assert_no_token(run)


# --- a fair share per key, and usage ------------------------------------------------------------


def test_add_with_a_limit_sends_it_and_list_shows_it(head: FakeHead) -> None:
    run = invoke(["keys", "add", "swarm", "--max-concurrent", "2", "-i", "inv"])
    assert run.code == 0, run.stderr
    assert head.calls[-1]["api_gateway_key_max_concurrent"] == 2
    assert "at most 2 request(s) in flight at once" in run.stderr
    assert invoke(["keys", "add", "alice", "-i", "inv"]).code == 0
    assert "api_gateway_key_max_concurrent" not in head.calls[-1]  # the gateway's default
    listed = invoke(["keys", "list", "-i", "inv"]).stdout
    assert re.search(r"^swarm .* 2 +user$", listed, re.MULTILINE), listed
    assert re.search(r"^alice .* default +user$", listed, re.MULTILINE), listed
    document = json.loads(invoke(["keys", "list", "-i", "inv", "--json"]).stdout)
    assert {k["name"]: k["max_concurrent"] for k in document["keys"]} == {
        "swarm": 2,
        "alice": None,
    }


@pytest.mark.parametrize("value", ["-1", "4097", "two", "1.5", ""])
def test_a_bad_limit_is_refused_before_anything_runs(head: FakeHead, value: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main(["keys", "add", "alice", f"--max-concurrent={value}", "-i", "inv"])
    assert exited.value.code == 1  # a usage error: nothing ran
    assert "argument --max-concurrent: max_concurrent" in err.getvalue()
    assert "is not valid" in err.getvalue()
    assert "--max-concurrent 2" in err.getvalue()  # the fix
    assert head.calls == []
    assert not re.search(r"gx10-[A-Za-z0-9_-]{43}", err.getvalue())


def test_limit_changes_a_keys_limit_and_default_gives_it_back(head: FakeHead) -> None:
    assert invoke(["keys", "add", "alice", "-i", "inv"]).code == 0
    run = invoke(["keys", "limit", "alice", "0", "-i", "inv"])
    assert run.code == 0, run.stderr
    assert "key alice: no limit of requests in flight" in run.stdout
    assert head.keys["alice"]["max_concurrent"] == 0
    run = invoke(["keys", "limit", "alice", "default", "-i", "inv", "--json"])
    assert json.loads(run.stdout)["max_concurrent"] is None
    assert "api_gateway_key_max_concurrent" not in head.calls[-1]
    unknown = invoke(["keys", "limit", "carol", "3", "-i", "inv"])
    assert unknown.code == 2
    assert "no key named 'carol'" in unknown.stderr
    reserved = invoke(["keys", "limit", "service", "3", "-i", "inv"])
    assert reserved.code == 1
    assert "reserved" in reserved.stderr


def test_usage_sums_the_access_log_per_key(head: FakeHead) -> None:
    head.log = [
        f"10.0.0.5:1 [07/Dec/2026:21:40:0{n}.000] gx10_api gx10_engine/engine 0/0/0/5/5 {status} "
        f'{size} ---- key={key} in={tin} out={tout} "POST /v1/chat/completions HTTP/1.1"'
        for n, (status, size, key, tin, tout) in enumerate(
            [
                (200, 500, "alice", "10", "5"),
                (200, 900, "alice", "-", "-"),
                (429, 200, "alice", "-", "-"),
                (200, 700, "bob", "7", "3"),
                (401, 180, "-", "-", "-"),
            ]
        )
    ] + ["Proxy gx10_api started."]
    run = invoke(["keys", "usage", "-i", "inv", "--since=-24h", "--json"])
    assert run.code == 0, run.stderr
    assert head.calls[-1]["api_gateway_usage_since"] == "-24h"
    document = json.loads(run.stdout)
    by_name = {k["name"]: k for k in document["keys"]}
    assert [k["name"] for k in document["keys"]] == ["alice", "bob", "-"]
    expected = {
        "requests": 3,
        "ok": 2,
        "limited": 1,
        "failed": 0,
        "tokens_in": 10,
        "tokens_out": 5,
        "counted": 1,
        "bytes": 1600,
    }
    assert {k: by_name["alice"][k] for k in expected} == expected
    assert by_name["-"]["failed"] == 1
    assert (document["lines"], document["unread"]) == (6, 1)
    table = invoke(["keys", "usage", "-i", "inv"]).stdout
    assert re.search(r"^alice +3 +2 +1 +0 +10 +5 +1$", table, re.MULTILINE), table


# --- gx10 keys init: the inventory's service key ---------------------------------------------


def test_init_makes_the_service_key_0600_in_a_directory_git_ignores(tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text("all: {}\n", encoding="utf-8")
    run = invoke(["keys", "init", "-i", str(inventory)])
    assert run.code == 0, run.stderr
    path = inventory / ".secrets" / "service.key"
    key = path.read_text(encoding="utf-8").strip()
    assert TOKEN.match(key), key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert (path.parent / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    assert key not in run.stdout + run.stderr  # the file has it; nothing shows it
    assert str(path) in run.stdout
    assert "lookup('file', inventory_dir ~ '/.secrets/service.key'" in run.stdout

    # An inventory file: the key goes beside it.
    again = invoke(["keys", "init", "-i", str(inventory / "hosts.yml"), "--json"])
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout) == {"path": str(path), "created": False}
    assert path.read_text(encoding="utf-8").strip() == key  # kept, never replaced


def test_init_keeps_no_key_others_can_read_and_no_empty_one(tmp_path: Path) -> None:
    secrets_dir = tmp_path / ".secrets"
    secrets_dir.mkdir()
    path = secrets_dir / "service.key"
    path.write_text("gx10-old\n", encoding="utf-8")
    path.chmod(0o644)
    run = invoke(["keys", "init", "-i", str(tmp_path)])
    assert run.code == 1
    assert f"{path} has mode 0644" in run.stderr
    assert f"chmod 600 {path}" in run.stderr
    assert path.read_text(encoding="utf-8") == "gx10-old\n"
    path.write_text("\n", encoding="utf-8")
    path.chmod(0o600)
    run = invoke(["keys", "init", "-i", str(tmp_path)])
    assert run.code == 1
    assert f"{path} is empty" in run.stderr


def test_inits_at_once_agree_on_one_whole_key(tmp_path: Path) -> None:
    """`gx10 lab up`, molecule and the unit run may init the lab's key at the same time: one
    key wins, each sees it whole, no temporary file stays."""
    import concurrent.futures  # noqa: PLC0415

    (tmp_path / "hosts.yml").write_text("all: {}\n")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: keys.init_service_key(tmp_path), range(16)))
    assert sum(m.created for m in made) == 1
    assert {m.path for m in made} == {tmp_path / ".secrets" / "service.key"}
    assert TOKEN.match((tmp_path / ".secrets" / "service.key").read_text().strip())
    left = sorted(p.name for p in (tmp_path / ".secrets").iterdir())
    assert left == [".gitignore", "service.key"]


def test_init_refuses_an_inventory_that_is_not_there(tmp_path: Path) -> None:
    run = invoke(["keys", "init", "-i", str(tmp_path / "nope")])
    assert run.code == 1
    assert "no such inventory" in run.stderr
    assert not (tmp_path / "nope").exists()


def test_gx10s_own_inventory_readers_get_the_key_init_wrote(tmp_path: Path) -> None:
    """inventories/gx10 read as gx10 bench, clients and metrics config read it (Ansible's
    loader and templar in gx10's own process, a fresh one as the CLI is): the key is the file's,
    and empty before init. The lookup must work without Ansible's collection loader."""
    inventory = tmp_path / "gx10"
    shutil.copytree(
        ROOT / "inventories" / "gx10", inventory, ignore=shutil.ignore_patterns(".secrets")
    )
    read = (
        "import sys; from gx10.bench.nodes import load_cluster; "
        "print(repr(load_cluster([sys.argv[1]]).api_key))"
    )

    def key_read() -> str:
        done = subprocess.run(
            [sys.executable, "-c", read, str(inventory)],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "GX10_HOME": str(ROOT)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return str(done.stdout.strip())

    assert key_read() == "''"
    # The inventory's expression is the one validation and init print (cluster_plan's).
    written = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    expression = " ".join(written["vllm_serve_api_key"].split())  # folded over two lines there
    assert f'vllm_serve_api_key: "{expression}"' == keys.LOOKUP
    made = keys.init_service_key(inventory)
    assert key_read() == repr(made.path.read_text(encoding="utf-8").strip())


def test_ansible_reads_no_host_from_the_key_file(tmp_path: Path) -> None:
    """Ansible reads every file of an inventory directory, recursively, as inventory (a line of
    text is a host name to its INI plugin), but never a hidden one: the key lives in `.secrets`,
    so it never becomes a host (in --list, --limit, `hosts: all`). Found when it was `secrets/`."""
    inventory = tmp_path / "gx10"
    shutil.copytree(
        ROOT / "inventories" / "gx10", inventory, ignore=shutil.ignore_patterns(".secrets")
    )
    key = keys.init_service_key(inventory).path.read_text(encoding="utf-8").strip()
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert key not in listed.stdout + listed.stderr
    hosts = json.loads(listed.stdout)["_meta"]["hostvars"].keys()
    assert set(hosts) == {"gx10-a", "gx10-b"}
