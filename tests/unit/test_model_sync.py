"""`gx10 model sync`: per-node totals from the role's model_sync_result, and the exit code.

`provision()` is replaced by a fake that feeds the events a real run of playbooks/model.yml sends
(the shape of ansible-runner's job events: event, event_data.host/task/task_path/
resolved_action/res; the role's declared result is the set_fact event of `model_sync_result`,
see tests/fixtures/runner-events/ for recorded ones) and returns the run's result.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import invoke
from rich.console import Console

from ansible_collections.gx10.cluster.plugins.modules import model_fetch
from gx10.errors import InventoryNotFoundError
from gx10.model import sync as sync_module
from gx10.progress import RunStatus
from gx10.provision import FailedTask, HostStats, ProvisionResult

ROLE_TASKS = "/srv/gx10/roles/model_sync/tasks"
TOTAL = 166_900_000_000
SHARD = "model-00007-of-00048.safetensors"


def _event(
    host: str, where: str, res: dict[str, Any], *, failed: bool = False, role: str = "model_sync"
) -> dict[str, Any]:
    """The model_sync role's published `model_sync_result` for pass `where` (its set_fact event);
    for another role, that role's own model_fetch result, which is not this stage's."""
    if role != "model_sync":
        return {
            "event": "runner_on_failed" if failed else "runner_on_ok",
            "event_data": {
                "host": host,
                "task": f"a task in {where}",
                "task_path": f"/srv/gx10/roles/{role}/tasks/{where}.yml:5",
                "task_action": "gx10.cluster.model_fetch",
                "resolved_action": "gx10.cluster.model_fetch",
                "res": {"failed": failed, **res},
            },
        }
    published = {"schema": 1, "pass": where, "failed": failed, "result": res}
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": host,
            "task": "Publish this pass as model_sync_result",
            "task_path": "/srv/gx10/roles/model_sync/tasks/publish.yml:7",
            "task_action": "ansible.builtin.set_fact",
            "resolved_action": "ansible.builtin.set_fact",
            "res": {"ansible_facts": {"model_sync_result": published}, "changed": False},
        },
    }


def _pass(event: dict[str, Any]) -> str | None:
    facts = event["event_data"]["res"].get("ansible_facts", {})
    return facts.get("model_sync_result", {}).get("pass")


def _res(**changes: Any) -> dict[str, Any]:
    """A model_fetch result of a 74-file checkpoint that was already in place and cached."""
    base: dict[str, Any] = {
        "ok": True,
        "files_total": 74,
        "files_ok": 74,
        "files_fetched": 0,
        "fetched": [],
        "bytes_total": TOTAL,
        "bytes_from_source": 0,
        "bytes_received": 0,
        "bytes_hashed_receiving": 0,
        "bytes_read_back": 0,
        "bytes_hashed": 0,
        "bytes_cached": TOTAL,
        "seconds": 0.01,
        "found": [],
        "failures": [],
        "extras": [],
    }
    return {**base, **changes}


def _run(status: str = "successful", failed_tasks: tuple[FailedTask, ...] = ()) -> ProvisionResult:
    failed_hosts = {t.host for t in failed_tasks}
    return ProvisionResult(
        ok=status == "successful" and not failed_tasks,
        status=status,
        rc=0 if status == "successful" and not failed_tasks else 2,
        # site.yml --tags model: the validate play runs on the controller, localhost.
        hosts={
            name: HostStats(ok=12, failed=int(name in failed_hosts))
            for name in ("gx10-a", "gx10-b", "localhost")
        },
        failed_tasks=failed_tasks,
        artifact_dir=Path("/tmp/gx10-run-x/artifacts/1"),
    )


# A first sync: the head fetches everything from the source, the worker from the head.
FIRST_SYNC = [
    _event(
        "gx10-b",
        "need",
        _res(ok=False, files_ok=0, bytes_cached=0, fetched=["a"], seconds=0.002),
    ),
    _event(
        "gx10-a",
        "fetch",
        _res(
            files_fetched=74,
            bytes_from_source=TOTAL,
            bytes_received=TOTAL - 600_000,
            bytes_hashed_receiving=TOTAL - 600_000,
            bytes_read_back=1000 + 600_000,  # a verify read, a resumed .partial's prefix
            bytes_hashed=1000,
            bytes_cached=0,
            seconds=412.5,
        ),
    ),
    _event(
        "gx10-b",
        "fetch",
        _res(
            files_fetched=74,
            bytes_from_source=TOTAL,
            bytes_received=TOTAL,
            bytes_hashed_receiving=TOTAL,
            bytes_cached=0,
            seconds=220.0,
        ),
    ),
    _event("gx10-a", "verify", _res(seconds=0.25)),
    _event("gx10-b", "verify", _res(seconds=0.5, bytes_read_back=7, bytes_hashed=7)),
    # Another role's task file of the same name is not this stage's verify.
    _event(
        "gx10-a", "verify", _res(bytes_hashed=5, bytes_read_back=5, seconds=9.0), role="vllm_serve"
    ),
]

BAD_WORKER = {
    "path": SHARD,
    "status": "hash_mismatch",
    "message": "sha256 00ff, expected 1234",
}


@dataclass
class FakeProvision:
    events: list[dict[str, Any]]
    result: ProvisionResult = field(default_factory=_run)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(
        self,
        inventory: str,
        playbook: str,
        *,
        on_event: Callable[[dict[str, Any]], object] | None = None,
        **kwargs: Any,
    ) -> ProvisionResult:
        self.calls.append({"inventory": inventory, "playbook": playbook, **kwargs})
        for event in self.events:
            if on_event is not None:
                on_event(event)
        return self.result


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeProvision:
    stub = FakeProvision(list(FIRST_SYNC))
    monkeypatch.setattr(sync_module, "provision", stub)
    return stub


def test_every_node_verified_exits_0_with_its_totals(fake: FakeProvision) -> None:
    run = invoke(["model", "sync", "-i", "inventories/lab", "--json"])
    assert run.code == 0, run.stderr
    assert fake.calls == [
        {
            "inventory": "inventories/lab",
            "playbook": "site.yml",
            "tags": ["model"],
            "limit": None,
            "extravars": None,
            "artifact_dir": None,
        }
    ]
    document = json.loads(run.stdout)
    assert document["ok"] is True
    assert document["unverified"] == []
    head, worker = document["nodes"]["gx10-a"], document["nodes"]["gx10-b"]
    assert head == {
        "verified": True,
        "files": 74,
        "files_fetched": 74,
        "bytes_total": TOTAL,
        "bytes_fetched": TOTAL,
        "bytes_received": TOTAL - 600_000,
        "bytes_hashed_receiving": TOTAL - 600_000,
        "bytes_read_back": 601_000,  # every pass of this stage, not the vllm_serve gate
        "bytes_hashed": 1000,  # the fetch pass and the verify pass, not the vllm_serve gate
        "bytes_cached": 0,  # the first pass found nothing to vouch for
        "seconds": 412.75,
        "reason": None,
        "problems": [],
        "extras": [],
    }
    assert worker["seconds"] == 220.502  # need + fetch + verify
    assert worker["bytes_cached"] == 0
    assert worker["bytes_received"] == worker["bytes_hashed_receiving"] == TOTAL
    assert worker["bytes_read_back"] == 7  # the fetch pass read nothing back; its verify pass 7
    assert "gx10-a" in run.stderr  # the human report went to stderr with --json


def test_the_table_names_each_node_and_what_it_fetched(fake: FakeProvision) -> None:
    run = invoke(["model", "sync", "-i", "inventories/lab"])
    assert run.code == 0
    rows = {line.split()[0]: line.split() for line in run.stdout.splitlines() if "gx10-" in line}
    assert rows["gx10-a"][1:4] == ["yes", "74", "74"]
    assert "(166.9 GB)" in " ".join(rows["gx10-a"])
    assert rows["gx10-a"][6:8] == ["601.0", "kB"]  # read back: a verify read and a prefix
    assert "read back" in run.stdout
    assert "OK: 2 node(s) verified (166.9 GB each)" in run.stdout
    assert "601.0 kB read back to hash" in run.stdout
    # Not a terminal: no status line, no bar, nothing else on stderr.
    assert run.stderr == ""


def test_warm_rerun_reports_cache_hits_and_nothing_fetched(fake: FakeProvision) -> None:
    fake.events = [
        _event("gx10-b", "need", _res()),
        _event("gx10-a", "fetch", _res()),
        _event("gx10-a", "verify", _res()),
        _event("gx10-b", "verify", _res()),
    ]
    document = json.loads(invoke(["model", "sync", "-i", "inv", "--json"]).stdout)
    for node in ("gx10-a", "gx10-b"):
        assert document["nodes"][node]["bytes_cached"] == TOTAL
        assert document["nodes"][node]["bytes_fetched"] == 0
        assert document["nodes"][node]["bytes_hashed"] == 0


def test_reverify_and_limit_reach_the_playbook(fake: FakeProvision) -> None:
    run = invoke(["model", "sync", "-i", "inv", "--reverify", "--limit", "gx10-b"])
    assert run.code == 0
    call = fake.calls[0]
    assert call["extravars"] == {"model_sync_reverify": True}
    assert call["limit"] == "gx10-b"


def test_a_node_whose_verify_fails_exits_2_naming_it_and_its_files(fake: FakeProvision) -> None:
    message = (
        f"/srv/models/x does not match the manifest: 1 file(s) missing or mismatching: {SHARD}"
    )
    fake.events[-2] = _event(
        "gx10-b",
        "verify",
        _res(ok=False, failures=[BAD_WORKER], msg=message),
        failed=True,
    )
    fake.result = _run(
        "failed", (FailedTask("gx10-b", "Verify this node's copy", message, "Every node"),)
    )
    run = invoke(["model", "sync", "-i", "inv"])
    assert run.code == 2
    assert "FAILED: not verified: gx10-b" in run.stdout
    problem = next(line for line in run.stdout.splitlines() if SHARD in line and "hash" in line)
    assert "hash_mismatch" in problem
    assert "expected 1234" in problem
    document = json.loads(invoke(["model", "sync", "-i", "inv", "--json"]).stdout)
    assert document["ok"] is False
    assert document["unverified"] == ["gx10-b"]
    assert document["nodes"]["gx10-b"]["problems"] == [BAD_WORKER]
    assert document["nodes"]["gx10-a"]["verified"] is True


def test_a_fetch_failure_on_the_head_leaves_every_node_unverified(fake: FakeProvision) -> None:
    message = f"/srv/models/x: fetch failed: {SHARD}: HTTP 404 Not Found"
    fake.events = [
        FIRST_SYNC[0],
        _event(
            "gx10-a",
            "fetch",
            _res(ok=False, failures=[{**BAD_WORKER, "status": "missing"}], msg=message),
            failed=True,
        ),
    ]
    fake.result = _run("failed", (FailedTask("gx10-a", "Fetch", message, "Fetch on the head"),))
    run = invoke(["model", "sync", "-i", "inv", "--json"])
    assert run.code == 2
    document = json.loads(run.stdout)
    assert document["unverified"] == ["gx10-a", "gx10-b"]
    assert document["nodes"]["gx10-a"]["reason"] == message
    assert "failed on gx10-a" in document["nodes"]["gx10-b"]["reason"]


def test_a_successful_run_without_a_verify_result_is_not_verified(fake: FakeProvision) -> None:
    """Fail safe: no verify result for a node (skipped, or events we cannot read)."""
    fake.events = [e for e in FIRST_SYNC if _pass(e) != "verify"]
    run = invoke(["model", "sync", "-i", "inv", "--json"])
    assert run.code == 2
    assert json.loads(run.stdout)["unverified"] == ["gx10-a", "gx10-b"]


def test_a_verify_event_that_does_not_say_ok_is_not_verified(fake: FakeProvision) -> None:
    fake.events[-2] = _event("gx10-b", "verify", {"changed": False})
    run = invoke(["model", "sync", "-i", "inv", "--json"])
    assert run.code == 2
    assert json.loads(run.stdout)["unverified"] == ["gx10-b"]


def test_no_node_matched_is_a_failure(fake: FakeProvision) -> None:
    fake.events = []
    fake.result = ProvisionResult(True, "successful", 0, {}, (), Path("/tmp/x"))
    run = invoke(["model", "sync", "-i", "inv", "--limit", "nope"])
    assert run.code == 2
    assert "FAILED: no node ran the model stage" in run.stdout


def test_interrupted_run_exits_130(fake: FakeProvision) -> None:
    fake.events = fake.events[:2]
    fake.result = _run("canceled")
    assert invoke(["model", "sync", "-i", "inv"]).code == 130


def test_setup_error_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> ProvisionResult:
        raise InventoryNotFoundError("inventory 'nope' not found")

    monkeypatch.setattr(sync_module, "provision", refuse)
    run = invoke(["model", "sync", "-i", "nope"])
    assert run.code == 1
    assert "inventory 'nope' not found" in run.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_run_status_shows_the_task_on_a_terminal_only() -> None:
    task = {"event": "playbook_on_task_start", "event_data": {"task": "Fetch on the head"}}
    tty = _Tty()
    console = Console(file=tty, force_terminal=True, force_interactive=True, width=100)
    with RunStatus(console, "model sync") as status:
        status(task)
        console.print("a line")  # status lines are redrawn; printed lines stay
    assert "model sync: Fetch on the head" in tty.getvalue()
    piped = io.StringIO()
    with RunStatus(Console(file=piped, force_terminal=True), "model sync") as status:
        status(task)
    assert piped.getvalue() == ""


def test_every_node_verified_but_the_playbook_failed_exits_2(fake: FakeProvision) -> None:
    """Say so, with the failed task: e.g. stopping the peer server failed after the verify."""
    stop = FailedTask("gx10-a", "Stop the peer server", "unit not loaded", "Copy the head's files")
    fake.result = _run("failed", (stop,))
    run = invoke(["model", "sync", "-i", "inv"])
    assert run.code == 2
    assert "FAILED: the playbook failed (status=failed, rc=2)" in run.stdout
    assert "Stop the peer server: unit not loaded" in run.stdout


# --- the reader against recorded events -------------------------------------------------------

RECORDED = Path(__file__).resolve().parents[1] / "fixtures/runner-events/model_sync_verify.json"


def test_the_reader_takes_the_recorded_published_result_not_the_module_event() -> None:
    """Recorded ansible-runner events of verify.yml: failed (a file missing), then ok."""
    events = json.loads(RECORDED.read_text(encoding="utf-8"))
    module_failed, published_failed, module_ok, published_ok = events
    assert module_failed["event"] == "runner_on_failed"
    # The module's own events say nothing to the reader: only the declared fact does.
    assert sync_module.read_result(module_failed) is None
    assert sync_module.read_result(module_ok) is None
    failed = sync_module.read_result(published_failed)
    assert failed is not None
    host, kind, outcome = failed
    assert (host, kind, outcome.failed) == ("gx10-a", "verify", True)
    assert outcome.res["ok"] is False
    assert outcome.res["failures"] == [
        {"path": "missing.bin", "status": "missing", "message": "missing"}
    ]
    ok = sync_module.read_result(published_ok)
    assert ok is not None
    assert (ok[0], ok[1], ok[2].failed, ok[2].res["ok"]) == ("gx10-a", "verify", False, True)


def test_a_node_is_verified_from_the_recorded_events_alone() -> None:
    events = json.loads(RECORDED.read_text(encoding="utf-8"))
    reader = sync_module.SyncEvents()
    for event in events[:2]:
        reader(event)
    first = reader.result(_run()).nodes[0]
    assert (first.node, first.verified) == ("gx10-a", False)
    assert [p.path for p in first.problems] == ["missing.bin"]
    for event in events[2:]:
        reader(event)
    again = reader.result(_run()).nodes[0]
    assert (again.node, again.verified, again.files, again.bytes_total) == ("gx10-a", True, 1, 6)


def test_another_schema_or_pass_is_not_read() -> None:
    for published in (
        {"schema": 2, "pass": "verify", "failed": False, "result": {"ok": True}},
        {"schema": 1, "pass": "serve", "failed": False, "result": {"ok": True}},
        {"schema": 1, "pass": "verify", "failed": False, "result": "ok"},
    ):
        event = _event("gx10-a", "verify", {})
        event["event_data"]["res"]["ansible_facts"]["model_sync_result"] = published
        assert sync_module.read_result(event) is None, published
    unsure = _event("gx10-a", "verify", _res())
    unsure["event_data"]["res"]["ansible_facts"]["model_sync_result"]["failed"] = "False"
    read = sync_module.read_result(unsure)
    assert read is not None
    assert read[2].failed is True  # not a plain boolean "no": never counted as verified


# --- the contract between model_fetch, the role and this reader ------------------------------

ROOT = Path(__file__).resolve().parents[2]
# What NodeSync reads from a published result.
READ_KEYS = {
    "ok",
    "msg",
    "files_total",
    "files_fetched",
    "bytes_total",
    "bytes_from_source",
    "bytes_received",
    "bytes_hashed_receiving",
    "bytes_read_back",
    "bytes_hashed",
    "bytes_cached",
    "seconds",
    "failures",
    "extras",
}


def test_every_total_the_reader_takes_is_published_documented_and_returned() -> None:
    role_vars = yaml.safe_load((ROOT / "roles/model_sync/vars/main.yml").read_text())
    published = set(role_vars["__model_sync_result_keys"])
    assert published >= READ_KEYS
    readme = (ROOT / "roles/model_sync/README.md").read_text()
    example = readme[readme.index("model_sync_result:\n  schema: 1") :]
    example = example[: example.index("```")]
    assert {key for key in published if f"    {key}: " in example} == published
    returned = yaml.safe_load(model_fetch.RETURN)
    assert published - {"msg"} <= set(returned)


def test_a_fetch_that_read_nothing_back_shows_zero_beside_what_it_received() -> None:
    reader = sync_module.SyncEvents()
    fetch = _res(
        files_fetched=74,
        bytes_from_source=TOTAL,
        bytes_received=TOTAL,
        bytes_hashed_receiving=TOTAL,
        bytes_cached=0,
    )
    for event in (_event("gx10-a", "fetch", fetch), _event("gx10-a", "verify", _res())):
        reader(event)
    node = reader.result(_run()).nodes[0]
    assert (node.bytes_received, node.bytes_hashed_receiving) == (TOTAL, TOTAL)
    assert node.bytes_read_back == 0
    assert node.to_dict()["bytes_read_back"] == 0


def _served(node: str, to: str, sent: int, *, head: bool, host: str = "gx10-b") -> dict[str, Any]:
    """peer_stop.yml's set_fact of `model_sync_served`, delegated to `node` from a worker's task
    (the event's host is the worker that ran it)."""
    fact = {
        "schema": 1,
        "node": node,
        "head": head,
        "to": to,
        "bytes_sent": sent,
        "files_sent": 74,
        "bytes_total": TOTAL,
    }
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": host,
            "task": "Publish the bytes sent as model_sync_served",
            "task_path": "/srv/gx10/roles/model_sync/tasks/peer_stop.yml:22",
            "resolved_action": "ansible.builtin.set_fact",
            "res": {"ansible_facts": {"model_sync_served": fact}, "changed": False},
        },
    }


def test_what_each_node_sent_down_the_chain_is_reported(fake: FakeProvision) -> None:
    fake.events = [
        *FIRST_SYNC,
        _served("gx10-a", "gx10-b", TOTAL, head=True),
        _served("gx10-b", "gx10-c", TOTAL // 2, head=False),
        {**_served("gx10-x", "gx10-y", 5, head=False), "event": "runner_on_failed"},
        _served("gx10-z", "", 5, head=False) | {"event_data": {"res": {"ansible_facts": {}}}},
    ]
    run = invoke(["model", "sync", "-i", "inv", "--json"])
    assert run.code == 0, run.stderr
    sent = json.loads(run.stdout)["sent"]
    assert sent == {
        "gx10-a": {
            "head": True,
            "to": "gx10-b",
            "bytes_sent": TOTAL,
            "files_sent": 74,
            "bytes_total": TOTAL,
            "ratio": 1.0,
        },
        "gx10-b": {
            "head": False,
            "to": "gx10-c",
            "bytes_sent": TOTAL // 2,
            "files_sent": 74,
            "bytes_total": TOTAL,
            "ratio": 0.5,
        },
    }
    assert f"head sent {TOTAL} bytes = 1.00 x checkpoint" in run.stderr
    assert "gx10-b sent 83450000000 bytes (83.5 GB) to gx10-c = 0.50 x the checkpoint" in run.stderr


def test_another_schema_of_the_served_fact_is_not_read() -> None:
    event = _served("gx10-a", "gx10-b", TOTAL, head=True)
    event["event_data"]["res"]["ansible_facts"]["model_sync_served"]["schema"] = 2
    assert sync_module.read_served(event) is None
    reader = sync_module.SyncEvents()
    reader(event)
    assert reader.result(_run()).head_served is None
