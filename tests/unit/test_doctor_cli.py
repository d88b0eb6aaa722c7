"""`gx10 doctor`: exit codes and the JSON document, over a fake evidence collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gx10 import cli
from gx10.doctor import ContainerEvidence, Evidence
from gx10.doctor import collect as doctor_collect
from gx10.doctor import engine_metrics as em
from gx10.doctor import rules as r
from gx10.doctor.collect import BandwidthReport, parse_bandwidth_report
from gx10.errors import InventoryNotFoundError
from gx10.provision import HostStats, ProvisionResult

PLAN: dict[str, Any] = {
    "head": "gx10-a",
    "workers": ["gx10-b"],
    "nodes": [{"name": "gx10-a", "rank": 0}, {"name": "gx10-b", "rank": 1}],
    "hosts": {"gx10-a": {"rails": []}, "gx10-b": {"rails": []}},
}


def _run(status: str = "successful") -> ProvisionResult:
    return ProvisionResult(
        ok=status == "successful",
        status=status,
        rc=0,
        hosts={"gx10-a": HostStats(ok=9), "gx10-b": HostStats(ok=9)},
        failed_tasks=(),
        artifact_dir=Path("/tmp/artifacts/x"),
    )


def _node(name: str, rank: int, **changes: Any) -> Evidence:
    fields: dict[str, Any] = {
        "node": name,
        "containers": (ContainerEvidence("gx10-vllm", rank, "running", True, True),),
        **changes,
    }
    return Evidence(**fields)


HEALTHY = [_node("gx10-a", 0), _node("gx10-b", 1)]
WORKER_DOWN = [_node("gx10-a", 0), _node("gx10-b", 1, reachable=False, containers=())]
CLOCK_LEFT = [_node("gx10-a", 0, sm_clock_cap_mhz=2000), _node("gx10-b", 1)]


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace the evidence collection; the test sets what it returns, and sees the call."""
    state: dict[str, Any] = {"evidences": HEALTHY, "run": _run(), "calls": []}

    def fake_collect(
        inventory: str, *, limit: str | None = None, on_event: Any = None
    ) -> tuple[list[Evidence], dict[str, Any], ProvisionResult]:
        state["calls"].append({"inventory": inventory, "limit": limit, "on_event": on_event})
        if "error" in state:
            raise state["error"]
        return list(state["evidences"]), PLAN, state["run"]

    monkeypatch.setattr("gx10.doctor.collect.collect", fake_collect)
    monkeypatch.setenv("COLUMNS", "240")  # the table folds long cells at 80 columns
    return state


def test_healthy_exits_0(collected: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "-i", "inventories/lab"]) == cli.EXIT_OK
    assert "no known fault found" in capsys.readouterr().out
    assert collected["calls"] == [{"inventory": "inventories/lab", "limit": None, "on_event": None}]


def test_error_finding_exits_2_with_the_table(
    collected: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    collected["evidences"] = WORKER_DOWN
    assert cli.main(["doctor", "-i", "inv", "--limit", "gx10-*", "-v"]) == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert r.NODE_UNREACHABLE in out
    assert r.WORKER_GONE in out
    assert collected["calls"][0]["limit"] == "gx10-*"
    assert collected["calls"][0]["on_event"] is not None  # -v: progress on stderr


def test_warning_only_exits_0(
    collected: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    collected["evidences"] = CLOCK_LEFT
    assert cli.main(["doctor", "-i", "inv"]) == cli.EXIT_OK
    assert r.CLOCK_CAP_LEFT in capsys.readouterr().out


def test_json_document(collected: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    collected["evidences"] = WORKER_DOWN
    assert cli.main(["doctor", "-i", "inv", "--json"]) == cli.EXIT_FAILED
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"ok", "errors", "warnings", "findings", "nodes", "artifact_dir"}
    assert document["ok"] is False
    assert document["errors"] == len(document["findings"]) == 2
    assert document["warnings"] == 0
    assert document["nodes"] == {"gx10-a": {"reachable": True}, "gx10-b": {"reachable": False}}
    assert document["artifact_dir"] == "/tmp/artifacts/x"
    first = document["findings"][0]
    assert set(first) == {"code", "severity", "node", "summary", "evidence", "fix"}
    assert {(f["code"], f["node"]) for f in document["findings"]} == {
        (r.NODE_UNREACHABLE, "gx10-b"),
        (r.WORKER_GONE, "gx10-b"),
    }


def test_json_healthy(collected: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "-i", "inv", "--json"]) == cli.EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert (document["ok"], document["findings"]) == (True, [])


def test_setup_error_exits_1(collected: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    collected["error"] = InventoryNotFoundError("inventory 'nope' not found")
    assert cli.main(["doctor", "-i", "nope"]) == cli.EXIT_ERROR
    assert "inventory 'nope' not found" in capsys.readouterr().err


def test_missing_inventory_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["doctor"])
    assert exit_info.value.code == cli.EXIT_ERROR


def test_canceled_run_exits_130(collected: dict[str, Any]) -> None:
    collected["run"] = _run("canceled")
    assert cli.main(["doctor", "-i", "inv"]) == cli.EXIT_INTERRUPTED


def test_measure_bandwidth_passes_the_figures_to_the_evidence_play(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    figures = {"gx10-b": {"enP2p1s0f0np0": 0.28, "enp1s0f0np0": 9.8}}

    def fake_measure(inventory: str, **kwargs: Any) -> BandwidthReport:
        calls.append(("measure", {"inventory": inventory, **kwargs}))
        return BandwidthReport(figures)  # two nodes on cables: no links in the report

    def fake_collect(
        inventory: str, **kwargs: Any
    ) -> tuple[list[Evidence], dict[str, Any], ProvisionResult]:
        calls.append(("collect", {"inventory": inventory, **kwargs}))
        degraded = _node(
            "gx10-b",
            1,
            bandwidth_gbps=figures["gx10-b"],
            bandwidth_min_gbps=2.0,
            bandwidth_degraded_band=(0.1, 0.5),
        )
        return [_node("gx10-a", 0), degraded], PLAN, _run()

    monkeypatch.setattr("gx10.doctor.collect.measure_bandwidth_report", fake_measure)
    monkeypatch.setattr("gx10.doctor.collect.collect", fake_collect)
    code = cli.main(["doctor", "-i", "inventories/lab", "--measure-bandwidth", "--json"])
    assert code == cli.EXIT_FAILED
    assert [name for name, _ in calls] == ["measure", "collect"]
    assert calls[1][1]["extravars"] == {"doctor_bandwidth_gbps": figures}
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["code"], f["node"]) for f in findings] == [(r.BANDWIDTH_DEGRADED, "gx10-b")]


def test_the_heads_draft_acceptance_is_read_judged_and_shown(
    collected: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The CLI reads the head's /metrics (with the key of --api-key-file) after the evidence
    play; a low rate is an error finding, and the counters are in the node's JSON."""
    dspark = {"method": "dspark", "num_speculative_tokens": 5}
    collected["evidences"] = [
        _node("gx10-a", 0, endpoint="http://gx10-a:8000/v1", speculative=dspark),
        _node("gx10-b", 1, endpoint="http://gx10-b:8000/v1", speculative=dspark),
    ]
    counters = em.SpecDecodeCounters(2000.0, 10000.0, 4000.0, (1500.0, 1000.0, 800.0, 500.0, 200.0))
    asked: list[tuple[str, str | None]] = []

    def fake_scrape(endpoint: str, *, api_key: str | None = None, timeout: float = 5.0) -> Any:
        asked.append((endpoint, api_key))
        return em.EngineScrape("http://gx10-a:8000/metrics", counters)

    monkeypatch.setattr(em, "scrape", fake_scrape)
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    code = cli.main(["doctor", "-i", "inv", "--json", "--api-key-file", str(key)])
    assert code == cli.EXIT_FAILED
    assert asked == [("http://gx10-a:8000/v1", "s3cret")]  # the head only
    document = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["severity"]) for f in document["findings"]] == [
        (r.SPEC_ACCEPTANCE_LOW, "error")
    ]
    spec = document["nodes"]["gx10-a"]["spec_decode"]
    assert (spec["acceptance"], spec["draft_tokens"], spec["url"]) == (
        0.4,
        10000.0,
        "http://gx10-a:8000/metrics",
    )
    assert document["nodes"]["gx10-b"] == {"reachable": True}


def test_an_unreadable_api_key_file_is_a_setup_error(
    collected: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = cli.main(["doctor", "-i", "inv", "--api-key-file", str(tmp_path / "missing")])
    assert code == cli.EXIT_ERROR
    assert f"cannot read --api-key-file {tmp_path / 'missing'}" in capsys.readouterr().err
    assert collected["calls"] == []  # refused before any node is asked


def test_behind_the_gateway_the_metrics_are_read_with_the_inventorys_key(
    collected: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The gateway wants a key for /metrics: the doctor sends the inventory's own (the lab's,
    from `gx10 keys init`'s file), unless --api-key-file names another; without the gateway,
    none is read."""
    sent: list[str | None] = []

    def fake_read(evidences: Any, plan: Any, *, api_key: str | None = None) -> Any:
        sent.append(api_key)
        return evidences

    ungated = doctor_collect.collect  # the fixture's: a plan without the gateway
    monkeypatch.setattr("gx10.doctor.collect.read_engine_metrics", fake_read)
    lab = Path(__file__).resolve().parents[2] / "inventories" / "lab"
    key = (lab / ".secrets" / "service.key").read_text().strip()
    gated = {**PLAN, "gateway": {"enabled": True}}

    def gated_collect(inventory: str, **_: Any) -> Any:
        return list(HEALTHY), gated, _run()

    monkeypatch.setattr("gx10.doctor.collect.collect", gated_collect)
    assert cli.main(["doctor", "-i", str(lab)]) == cli.EXIT_OK
    given = tmp_path / "other.key"
    given.write_text("other-key\n")
    assert cli.main(["doctor", "-i", str(lab), "--api-key-file", str(given)]) == cli.EXIT_OK
    monkeypatch.setattr("gx10.doctor.collect.collect", ungated)
    assert cli.main(["doctor", "-i", "inv"]) == cli.EXIT_OK  # no gateway: no inventory read
    assert sent == [key, "other-key", None]


# --- four nodes on a switch ------------------------------------------------------------------

LAB4 = ["gx10-a", "gx10-b", "gx10-c", "gx10-d"]
PLAN4: dict[str, Any] = {
    "head": "gx10-a",
    "workers": LAB4[1:],
    "topology": "switch",
    "nodes": [{"name": n, "rank": i} for i, n in enumerate(LAB4)],
    "hosts": {n: {"rails": []} for n in LAB4},
}
RAIL1 = "enP2p1s0f0np0"


def _switch_report(slow: tuple[str, str]) -> dict[str, Any]:
    """The head's gx10_fabric_bandwidth on four nodes: every pair measured on both rails, one
    link slow (rail1 between the pair ``slow``)."""
    links = []
    for i, node in enumerate(LAB4):
        for peer in LAB4[i + 1 :]:
            for rail, netdev, subnet in (("rail0", "enp1s0f0np0", 100), ("rail1", RAIL1, 101)):
                gbps = 0.3 if (node, peer) == slow and rail == "rail1" else 9.5
                address = f"192.168.{subnet}.{10 + LAB4.index(peer)}"
                links.append(
                    {
                        "rail": rail,
                        "netdev": netdev,
                        "node": node,
                        "peer": peer,
                        "address": address,
                        "gbps": gbps,
                        "min_gbps": 2.0,
                        "ok": gbps >= 2.0,
                    }
                )
    return {
        "schema": 1,
        "tool": "iperf3",
        "head": "gx10-a",
        "per_rail": {w: {"enp1s0f0np0": 9.5, RAIL1: 9.5} for w in LAB4[1:]},
        "total": {w: 15.0 for w in LAB4[1:]},
        "links": links,
        "bad_links": [],
        "skipped_pairs": [],
    }


def test_measure_bandwidth_on_four_nodes_names_a_slow_link_between_two_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The head's pairs are all fine: only the link gx10-b -> gx10-c is slow, and the doctor
    names it by its rail and both ends (it judges the report's links, not only per_rail)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    report = parse_bandwidth_report(_switch_report(slow=("gx10-b", "gx10-c")))

    def fake_measure(inventory: str, **kwargs: Any) -> BandwidthReport:
        calls.append(("measure", {"inventory": inventory, **kwargs}))
        return report

    def fake_collect(
        inventory: str, **kwargs: Any
    ) -> tuple[list[Evidence], dict[str, Any], ProvisionResult]:
        calls.append(("collect", {"inventory": inventory, **kwargs}))
        nodes = [
            _node(n, i, bandwidth_min_gbps=2.0, bandwidth_degraded_band=(0.1, 0.5))
            for i, n in enumerate(LAB4)
        ]
        return nodes, PLAN4, _run()

    monkeypatch.setattr("gx10.doctor.collect.measure_bandwidth_report", fake_measure)
    monkeypatch.setattr("gx10.doctor.collect.collect", fake_collect)
    monkeypatch.setenv("COLUMNS", "240")
    code = cli.main(["doctor", "-i", "inventories/lab4", "--measure-bandwidth", "--json"])
    assert code == cli.EXIT_FAILED
    # The links hold the head's pairs too: the per_rail figures are not judged a second time.
    assert "extravars" not in calls[1][1]
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["code"], f["node"]) for f in findings] == [(r.BANDWIDTH_DEGRADED, "gx10-c")]
    assert findings[0]["summary"].startswith("rail1 gx10-b -> gx10-c 192.168.101.12 measured 0.30")
    assert findings[0]["evidence"] == (
        f"rail1 gx10-b -> gx10-c 192.168.101.12: 0.30 Gb/s < 2 Gb/s ({RAIL1})"
    )

    assert cli.main(["doctor", "-i", "inventories/lab4", "--measure-bandwidth"]) == 2
    assert "rail1 gx10-b -> gx10-c 192.168.101.12" in capsys.readouterr().out


def test_doctor_help_says_every_pair_of_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["doctor", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "between every pair of nodes" in text
    assert "head and every worker" not in text
