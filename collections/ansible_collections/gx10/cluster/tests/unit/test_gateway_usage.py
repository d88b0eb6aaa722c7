# SPDX-License-Identifier: Apache-2.0
"""Per-key usage from the gateway's access log (module_utils/gateway_usage.py), and the
gateway_usage module run by a real ansible-playbook on a log file. The lines are the ones the
role's log-format writes; tests/unit/test_api_gateway.py reads them from a real HAProxy."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gx10.cluster.plugins.module_utils.gateway_usage import (
    Request,
    parse_line,
    summarize,
)
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_tasks


def line(
    status: int, key: str, tokens_in: str = "-", tokens_out: str = "-", size: int = 100
) -> str:
    return (
        f"10.0.0.5:51234 [07/Dec/2026:21:40:00.123] gx10_api gx10_engine/engine 0/0/0/5/5 "
        f"{status} {size} ---- key={key} in={tokens_in} out={tokens_out} "
        '"POST /v1/messages HTTP/1.1"'
    )


def test_a_line_gives_its_request() -> None:
    assert parse_line(line(200, "alice", "12", "34", 567)) == Request(
        time="07/Dec/2026:21:40:00.123",
        status=200,
        bytes=567,
        key="alice",
        tokens_in=12,
        tokens_out=34,
        method="POST",
        path="/v1/messages",
    )
    unreported = parse_line(line(429, "alice"))
    assert unreported is not None
    assert (unreported.tokens_in, unreported.tokens_out) == (None, None)


def test_other_lines_are_not_guessed_at() -> None:
    for text in [
        "Proxy gx10_api started.",
        "[WARNING]  (1) : Server gx10_engine/engine is DOWN",
        line(200, "alice").replace("in=", "tokens="),
    ]:
        assert parse_line(text) is None


def test_summarize_counts_outcomes_and_tokens_per_key() -> None:
    usage = summarize(
        [
            line(200, "alice", "10", "5"),
            line(200, "alice"),  # a chat stream without include_usage: no tokens reported
            line(429, "alice"),
            line(500, "bob", "3", "-"),
            line(401, "-"),
            "",
            "Proxy gx10_api started.",
        ]
    )
    alice, bob, anonymous = (usage.keys[name] for name in ("alice", "bob", "-"))
    assert (alice.requests, alice.ok, alice.limited, alice.failed) == (3, 2, 1, 0)
    assert (alice.tokens_in, alice.tokens_out, alice.counted) == (10, 5, 1)
    assert (bob.failed, bob.tokens_in, bob.tokens_out, bob.counted) == (1, 3, 0, 1)
    assert anonymous.failed == 1
    document = usage.as_dict()
    assert [k["name"] for k in document["keys"]] == ["alice", "bob", "-"]
    assert (document["lines"], document["unread"]) == (6, 1)


def test_the_module_reads_a_log_file(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    log.write_text(line(200, "alice", "1", "2") + "\n" + line(200, "alice", "3", "4") + "\n")
    results = run_tasks(
        tmp_path,
        [
            {"gx10.cluster.gateway_usage": {"path": str(log)}},  # r0
            {"gx10.cluster.gateway_usage": {"path": str(tmp_path / "none.log")}},  # r1
        ],
    )
    assert results["r0"]["changed"] is False
    expected = {"name": "alice", "requests": 2, "tokens_in": 4, "tokens_out": 6}
    assert {k: results["r0"]["keys"][0][k] for k in expected} == expected
    assert results["r1"]["failed"] is True
    assert "cannot read the gateway's log" in results["r1"]["msg"]
