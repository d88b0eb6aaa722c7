"""bench/sync_chain.py without a lab: its reading of `gx10 model sync --json` and its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]


sync_chain = load_bench("sync_chain")
TOTAL = 1_000_000


def _report(head_sent: int) -> dict[str, Any]:
    sent = {"gx10-a": {"head": True, "to": "gx10-b", "bytes_sent": head_sent, "bytes_total": TOTAL}}
    for index, (name, to) in enumerate((("gx10-b", "gx10-c"), ("gx10-c", "gx10-d"))):
        sent[name] = {"head": False, "to": to, "bytes_sent": TOTAL - index, "bytes_total": TOTAL}
    nodes = {n: {"bytes_fetched": TOTAL} for n in ("gx10-a", "gx10-b", "gx10-c", "gx10-d")}
    return {"ok": True, "nodes": nodes, "sent": sent}


def test_the_head_comes_first_and_its_ratio_is_the_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = sync_chain.links(_report(TOTAL))
    assert [link.node for link in table] == ["gx10-a", "gx10-b", "gx10-c"]
    assert table[0].ratio == 1.0
    assert sync_chain.print_links(table, 4, 1.05)
    out = capsys.readouterr().out
    assert (
        "head sent 1,000,000 bytes = 1.000 x checkpoint for 4 nodes (a star would send 3 x)" in out
    )
    assert "(met)" in out
    assert sync_chain.fetched_by_workers(_report(TOTAL), "gx10-a") == 3 * TOTAL


def test_a_head_that_sent_more_than_the_goal_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert not sync_chain.print_links(sync_chain.links(_report(3 * TOTAL)), 4, 1.05)
    assert "= 3.000 x checkpoint" in capsys.readouterr().out


def test_no_head_server_is_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert not sync_chain.print_links([], 2, 1.05)
    assert "did not run" in capsys.readouterr().out


def test_it_refuses_to_remove_copies_without_yes() -> None:
    with pytest.raises(SystemExit) as refused:
        sync_chain.main(["-i", "inventories/lab"])
    assert refused.value.code == 2
