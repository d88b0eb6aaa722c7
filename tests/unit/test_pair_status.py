"""The pair supervisor's status as `gx10 doctor` and `gx10 status` read it.

Every report here is real `gx10-pair status --json` output: the agents run on 127.0.0.1 with the
fake nodes of test_gx10_pair (its `Pair`), and each scenario puts them where the status is read
(serving, a GID that moved under a frozen agent, a tripped breaker, a stopped agent). The output
goes through the doctor's parser (`parse_pair_report`, `collect.parse_evidence`) into the rules
and into `gx10 status`, its table, its JSON and its exit code.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_gx10_pair import DEV, NETDEV, RAIL_IP, TIMINGS, Pair, write_gid_table

from gx10 import cli, status
from gx10.doctor import ContainerEvidence, Evidence, diagnose
from gx10.doctor import collect as c
from gx10.doctor import rules as r
from gx10.doctor.pair import PairReport, PairReportError, parse_pair_report
from gx10.provision import HostStats, ProvisionResult

AGENT = "/usr/local/lib/gx10/pair/gx10-pair"
HEAD, WORKER = "node-a", "node-b"
PLAN: dict[str, Any] = {
    "head": HEAD,
    "workers": [WORKER],
    "nodes": [
        {"name": HEAD, "rank": 0, "role": "head"},
        {"name": WORKER, "rank": 1, "role": "worker"},
    ],
    "hosts": {HEAD: {"rails": []}, WORKER: {"rails": []}},
}
IMAGE = "registry.invalid/vllm@sha256:" + "0" * 64


@pytest.fixture
def make_pair(tmp_path: Path) -> Iterator[Callable[..., Pair]]:
    made: list[Pair] = []

    def make(**overrides: Any) -> Pair:
        home = tmp_path / f"pair{len(made)}"
        home.mkdir()
        built = Pair(home, {**TIMINGS, **overrides})
        made.append(built)
        return built

    yield make
    for built in made:
        for proc in built.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a frozen agent still dies by SIGKILL
        built.close()


def status_text(p: Pair, name: str) -> str:
    done = p.cli(name, "status", "--json")
    assert done.returncode == 0, done.stderr
    return done.stdout


def report(p: Pair, name: str) -> PairReport:
    return parse_pair_report(status_text(p, name), AGENT)


def evidence(name: str, pair: PairReport | None, *, running: bool = True, **kw: Any) -> Evidence:
    rank = 0 if name == HEAD else 1
    state = "running" if running else "missing"
    container = ContainerEvidence("gx10-vllm", rank, state, True, True, image=IMAGE)
    return Evidence(
        node=name,
        containers=(container,),
        endpoint="http://node-a:8000/v1" if rank == 0 else None,
        supervisor_installed=pair is not None or kw.pop("installed", False),
        pair=pair,
        **kw,
    )


def found(evidences: list[Evidence], code: str) -> list[r.Finding]:
    return [f for f in diagnose(evidences, PLAN) if f.code == code]


@pytest.fixture
def healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "_health", lambda endpoint, timeout: 200)


# --------------------------------------------------------------------------------------------
# The agents' reports
# --------------------------------------------------------------------------------------------


def test_a_serving_pair_reads_as_supervised_and_healthy(
    make_pair: Callable[..., Pair], healthy: None
) -> None:
    p = make_pair()
    p.up()
    # The worker holds the head's breaker once a heartbeat carried it.
    p.wait("the worker's copy of the breaker", lambda: "breaker" in p.saved("b")["peer_report"])
    head, worker = report(p, "a"), report(p, "b")
    assert (head.node, head.role, head.state, head.generation) == (HEAD, "head", "serving", 1)
    assert head.rank_active is True
    assert head.restarts_in_window == 0
    assert head.last_restart is None
    assert (head.breaker.state, head.breaker.reason) == ("closed", None)
    assert [(g.netdev, g.pinned, g.current) for g in head.gid] == [("eth-a", 3, 3)]
    assert head.source == "local"
    assert head.peer == WORKER
    assert head.supervising
    assert worker.source == "head"
    assert worker.breaker.state == "closed"
    assert [(g.netdev, g.pinned, g.current) for g in worker.gid] == [("eth-b", 3, 3)]

    evidences = [evidence(HEAD, head), evidence(WORKER, worker)]
    assert diagnose(evidences, PLAN) == []
    state = status.judge(evidences, PLAN)
    assert state.ok, state.problems
    assert [n.supervision_state for n in state.nodes] == ["serving", "serving"]


def test_a_gid_that_moved_under_the_running_rank_is_named_and_the_agent_repairs_it(
    make_pair: Callable[..., Pair], healthy: None
) -> None:
    p = make_pair()
    p.up()
    # Frozen agents: the status file still says serving, but nothing acts on the move yet.
    for proc in p.procs.values():
        proc.send_signal(signal.SIGSTOP)
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], 5)
    worker = report(p, "b")
    assert worker.state == "serving"
    assert [(g.netdev, g.pinned, g.current) for g in worker.gid] == [("eth-b", 3, 5)]
    evidences = [evidence(HEAD, report(p, "a")), evidence(WORKER, worker)]
    (moved,) = found(evidences, r.GID_MOVED)
    assert (moved.node, moved.severity) == (WORKER, "warning")
    assert "eth-b 3 -> 5" in moved.summary
    assert "pinned at this rank's start (generation 1): eth-b 3" in moved.evidence
    assert "restarts the pair" in moved.fix

    table = render(status.judge(evidences, PLAN))
    assert "eth-b 5 (pinned 3) MOVED" in table

    for proc in p.procs.values():
        proc.send_signal(signal.SIGCONT)
    p.wait("the pair restarted on the new index", lambda: p.generation() == 2 and p.serving())
    worker = report(p, "b")
    assert [(g.pinned, g.current) for g in worker.gid] == [(5, 5)]
    head = report(p, "a")
    assert head.last_restart is not None
    assert head.last_restart.reason == "gid-changed:eth-b 3->5"
    assert not found([evidence(HEAD, head), evidence(WORKER, worker)], r.GID_MOVED)


def test_an_open_breaker_is_named_with_its_reason_and_fails_status(
    make_pair: Callable[..., Pair], healthy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_pair(breaker_max_restarts=2)
    (p.dirs["a"] / "crash").touch()  # a config that cannot boot: the head rank exits at once
    p.start("b")
    p.start("a")
    p.wait("the breaker tripped", lambda: p.state("a") == "tripped")
    p.wait("the worker's copy", lambda: p.status("b")["breaker"]["tripped"] is True)
    head, worker = report(p, "a"), report(p, "b")
    assert (head.state, head.breaker.state) == ("tripped", "open")
    assert head.restarts_in_window == 3
    assert head.last_restart is not None
    assert head.last_restart.reason.startswith("head-rank-inactive")
    assert "3 restarts within 600s (limit 2)" in str(head.breaker.reason)
    assert (worker.source, worker.breaker.state) == ("head", "open")

    stopped = [evidence(HEAD, head, running=False), evidence(WORKER, worker, running=False)]
    (tripped,) = found(stopped, r.SUPERVISION_TRIPPED)
    assert (tripped.node, tripped.severity) == (HEAD, "error")
    assert "3 restarts within 600s (limit 2)" in tripped.evidence
    assert "3 restart(s) in the window; last: head-rank-inactive" in tripped.evidence
    assert "journalctl -u gx10-pair" in tripped.fix
    assert f"`{AGENT} reset` on the head" in tripped.fix
    assert "serve.yml" in tripped.fix
    # The head unreachable: the worker's copy still names the head's breaker, on the head.
    alone = [Evidence(node=HEAD, reachable=False), stopped[1]]
    (copied,) = found(alone, r.SUPERVISION_TRIPPED)
    assert copied.node == HEAD
    assert f"as {WORKER} last heard from its head" in copied.evidence

    state = status.judge(stopped, PLAN)
    assert not state.ok
    assert any("breaker is open (3 restarts within 600s" in x for x in state.problems)
    assert "OPEN since" in render(state)
    document = json.loads(json.dumps(state.to_dict()))
    supervision = document["nodes"][0]["supervision"]
    assert supervision["breaker"]["state"] == "open"
    assert supervision["last_restart"]["reason"].startswith("head-rank-inactive")

    # `gx10 status` exits non-zero on it, with the breaker in its JSON.
    fake_collect(monkeypatch, stopped)
    assert cli.main(["status", "-i", "inv", "--json"]) == cli.EXIT_FAILED

    (p.dirs["a"] / "crash").unlink()
    assert p.cli("a", "reset").returncode == 0
    p.wait("serving after the reset", p.serving)
    p.wait("the worker's copy", lambda: p.status("b")["breaker"]["tripped"] is False)
    serving = [evidence(HEAD, report(p, "a")), evidence(WORKER, report(p, "b"))]
    assert not found(serving, r.SUPERVISION_TRIPPED)
    fake_collect(monkeypatch, serving)
    assert cli.main(["status", "-i", "inv"]) == cli.EXIT_OK


def test_a_stopped_agent_leaves_the_node_unsupervised(
    make_pair: Callable[..., Pair], healthy: None
) -> None:
    """stop.yml, or an unsupervised serve after a supervised one: the agent is installed but not
    running, so nccl.env's pin is the one the running rank has, and it is judged again."""
    p = make_pair()
    p.up()
    assert p.terminate("b") == 0
    write_gid_table(p.dirs["b"] / "sys", DEV["b"], NETDEV["b"], RAIL_IP["b"], 5)
    worker = report(p, "b")
    assert worker.state == "stopped"
    assert not worker.supervising
    assert worker.rank_active is None
    ev = evidence(WORKER, worker)
    assert not ev.supervised
    # Its old pin moved, but that rank is not the agent's now: no supervised GID_MOVED.
    assert not found([evidence(HEAD, report(p, "a")), ev], r.GID_MOVED)
    assert status.judge([evidence(HEAD, report(p, "a")), ev], PLAN).nodes[1].supervision_state == (
        "stopped"
    )


def test_a_status_file_whose_pid_was_reused_is_a_stopped_agent(
    make_pair: Callable[..., Pair],
) -> None:
    """After a reboot the kernel hands the agent's old pid to another process: not the agent."""
    p = make_pair()
    assert report(p, "a").state == "stopped"  # never started: no status file
    saved = {"pid": os.getpid(), "state": "serving", "generation": 4, "rank_active": True}
    (p.dirs["a"] / "state").mkdir(exist_ok=True)
    (p.dirs["a"] / "state" / "status.json").write_text(json.dumps(saved))
    head = report(p, "a")
    assert (head.state, head.rank_active, head.generation) == ("stopped", None, 4)


# --------------------------------------------------------------------------------------------
# Parsing and the evidence
# --------------------------------------------------------------------------------------------


def test_the_report_parses_from_text_and_from_the_object_ansible_made_of_it(
    make_pair: Callable[..., Pair],
) -> None:
    p = make_pair()
    text = status_text(p, "a")
    assert parse_pair_report(text) == parse_pair_report(json.loads(text))
    for bad, why in (
        ("", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"node": "n", "role": "leader", "state": "serving"}', "different versions"),
        ('{"node": "n", "role": "head", "state": "dancing"}', "different versions"),
    ):
        with pytest.raises(PairReportError, match=why):
            parse_pair_report(bad)


def pair_section(stdout: str, *, installed: bool = True, rc: int | None = 0) -> dict[str, Any]:
    """The doctor playbook's `pair` section of gx10_doctor_evidence."""
    return {"installed": installed, "agent": AGENT, "rc": rc, "stdout": stdout, "msg": ""}


def raw(node: str, pair: dict[str, Any] | None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": 1,
        "node": node,
        "reachable": True,
        "netdev": {"ok": True, "netdevs": {}},
        "gid": {"ok": True, "rails": []},
        "env_file": {"ok": True, "content_b64": base64.b64encode(b"NCCL_IB_HCA=x\n").decode()},
        "container": {"ok": True, "exists": False},
    }
    if pair is not None:
        document["pair"] = pair
    return document


def test_the_evidence_carries_the_report_or_says_why_not(make_pair: Callable[..., Pair]) -> None:
    p = make_pair()
    ev = c.parse_evidence(HEAD, raw(HEAD, pair_section(status_text(p, "a"))))
    assert ev.supervisor_installed
    assert ev.pair is not None
    assert (ev.pair.node, ev.pair.agent) == (HEAD, AGENT)
    assert ev.problems == ()

    for section in (None, pair_section("", installed=False, rc=None)):  # older play, no agent
        ev = c.parse_evidence(HEAD, raw(HEAD, section))
        assert (ev.supervisor_installed, ev.pair, ev.problems) == (False, None, ())
        assert status.judge([ev], PLAN).nodes[0].supervision_state == status.NOT_SUPERVISED

    broken = {**pair_section("", rc=2), "msg": "gx10-pair: /etc/gx10/pair.json is not JSON"}
    ev = c.parse_evidence(HEAD, raw(HEAD, broken))
    assert (ev.supervisor_installed, ev.pair) == (True, None)
    assert ev.problems == (
        f"pair supervisor status not read ({AGENT} status --json): "
        "gx10-pair: /etc/gx10/pair.json is not JSON",
    )
    assert r.EVIDENCE_INCOMPLETE in {f.code for f in diagnose([ev], PLAN)}
    judged = status.judge([ev], PLAN)
    assert judged.nodes[0].supervision_state == status.UNREADABLE
    assert any(
        "status could not be read (pair supervisor status not read" in x for x in judged.problems
    )

    ev = c.parse_evidence(HEAD, raw(HEAD, pair_section("Traceback (most recent call last)")))
    assert ev.pair is None
    assert "pair supervisor status not understood" in ev.problems[0]


# --------------------------------------------------------------------------------------------
# gx10 status
# --------------------------------------------------------------------------------------------


def render(state: status.ClusterStatus) -> str:
    console = Console(record=True, width=250, file=io.StringIO())
    status.print_status(console, state)
    return console.export_text()


def fake_collect(monkeypatch: pytest.MonkeyPatch, evidences: list[Evidence]) -> None:
    run = ProvisionResult(
        ok=True,
        status="successful",
        rc=0,
        hosts={e.node: HostStats(ok=9) for e in evidences},
        failed_tasks=(),
        artifact_dir=Path("/tmp/artifacts/x"),
    )
    monkeypatch.setattr(c, "collect", lambda inventory: (list(evidences), PLAN, run))


def test_status_shows_each_nodes_supervision(
    make_pair: Callable[..., Pair],
    healthy: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = make_pair()
    p.up()
    (p.dirs["a"] / "active").unlink()  # the head's rank dies: one restart, with its reason
    p.wait("the pair serving again", lambda: p.generation() == 2 and p.serving())
    p.wait("the worker's copy", lambda: p.status("b")["restarts_in_window"] == 1)
    evidences = [evidence(HEAD, report(p, "a")), evidence(WORKER, report(p, "b"))]
    state = status.judge(evidences, PLAN)
    assert state.ok, state.problems
    text = render(state)
    assert "pair supervision" in text
    assert "head-rank-inactive" in text
    assert "eth-a 3 (pinned 3)" in text
    assert "eth-b 3 (pinned 3)" in text
    assert "1 (head's)" in text  # the worker's count is the head's, as it last heard it
    assert "OK: the service is whole" in text

    fake_collect(monkeypatch, evidences)
    monkeypatch.setenv("COLUMNS", "250")
    assert cli.main(["status", "-i", "inv"]) == cli.EXIT_OK
    assert "head-rank-inactive" in capsys.readouterr().out
    assert cli.main(["status", "-i", "inv", "--json"]) == cli.EXIT_OK
    document = json.loads(capsys.readouterr().out)
    head, worker = document["nodes"]
    assert head["supervision_state"] == worker["supervision_state"] == "serving"
    assert head["supervision"]["restarts_in_window"] == 1
    assert head["supervision"]["last_restart"]["reason"] == "head-rank-inactive"
    assert head["supervision"]["breaker"] == {"state": "closed", "reason": None, "at": None}
    assert worker["supervision"]["gid"] == [{"netdev": "eth-b", "pinned": 3, "current": 3}]
    assert worker["supervision"]["source"] == "head"


def test_status_of_an_unsupervised_pair(
    healthy: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    evidences = [evidence(HEAD, None), evidence(WORKER, None)]
    state = status.judge(evidences, PLAN)
    assert state.ok
    assert [n.supervision_state for n in state.nodes] == ["not supervised"] * 2
    assert render(state).count("not supervised") == 2
    fake_collect(monkeypatch, evidences)
    assert cli.main(["status", "-i", "inv", "--json"]) == cli.EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert [n["supervision"] for n in document["nodes"]] == [None, None]
    assert document["ok"] is True
