"""The HTML report in a real headless browser (chromium over WebDriver, tests/unit/browser.py).

A small sample run (the vLLM simulator pair and two simulated nodes of bench_helpers, a clock
sweep at two caps) gives the report every figure. In the browser: the pointer resting on a case's
point, or the keyboard focus on it, shows exactly that case's figures (per node SM clock, power,
temperature, the failed requests); so does a case's span in the temperature timeline; nothing is
requested from outside the file; the console has no errors; each point sits where its values put
it on its axes. Without chromium the browser tests are skipped, except under make (or CI), where
they fail."""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import SERVED, sim_node, sim_pair
from browser import TAB, Browser, available, browser
from rich.console import Console

from gx10.bench.client import Endpoint
from gx10.bench.matrix import build_config
from gx10.bench.nodes import Cluster
from gx10.bench.report import build_report
from gx10.bench.runner import run_bench

SCALE = 0.2  # the vLLM simulator at 5x real time
NODES = ("node-a", "node-b")
PARTLY_FAILED = "p256-c2-2400"  # requests_ok lowered by one, no requests_failed: 1 failed
COUNTED = "p256-c2-unlocked"  # carries requests_failed (the runner's own count), which wins


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT of a small run with nodes: prompts 256, streams 1 and 2, caps 2400 and unlocked."""
    root = tmp_path_factory.mktemp("report")
    a, b = sim_node(root, "node-a"), sim_node(root, "node-b", apply=False)
    out = root / "out"
    with sim_pair(root / "sim", SCALE, states=(a.state, b.state)) as url:
        config = build_config(
            None,
            {
                "max_tokens": 24,
                "request_timeout_s": 60.0,
                "telemetry_interval_ms": 200,
                "prompt_lengths": "256",
                "concurrency": "1,2",
                "clock_caps": "2400,unlocked",
            },
        )
        cluster = Cluster(
            sources=("(test)",), nodes=(a.node("head"), b.node()), endpoint=url, model=SERVED
        )
        outcome = run_bench(
            config,
            Endpoint.parse(url, "", SERVED),
            out,
            lock_path=root / "lock",
            console=Console(file=io.StringIO(), width=120),
            command=["gx10", "bench", "(test)"],
            cluster=cluster,
            owner="gx10 bench (test)",
        )
    assert outcome.failed == []
    # The failed counts the report must show: requests - requests_ok, or requests_failed.
    path = out / "results.json"
    document = json.loads(path.read_text())
    cases = document["cases"]
    assert {PARTLY_FAILED, COUNTED} <= set(cases)
    cases[PARTLY_FAILED]["requests_ok"] = cases[PARTLY_FAILED]["requests"] - 1
    # As an older results file has it: no requests_failed, so the report counts the difference.
    cases[PARTLY_FAILED].pop("requests_failed", None)
    cases[COUNTED]["requests_failed"] = 2
    path.write_text(json.dumps(document))
    build_report(out)
    return out


@pytest.fixture(scope="module")
def cases(sample: Path) -> dict[str, Any]:
    return dict(json.loads((sample / "results.json").read_text())["cases"])


@pytest.fixture(scope="module")
def page(request: pytest.FixtureRequest) -> Iterator[Browser]:
    """One browser session for the module, on the report (the sample run only once a browser
    is known to be there)."""
    missing = available()
    if missing:
        if os.environ.get("MAKELEVEL") or os.environ.get("CI"):
            pytest.fail(f"the browser tests must run under make/CI: {missing}")
        pytest.skip(f"no headless browser: {missing}")
    sample: Path = request.getfixturevalue("sample")
    with browser() as session:
        session.get((sample / "report.html").as_uri())
        assert session.wait("return document.readyState === 'complete'", timeout_s=15)
        yield session


def expected(case: dict[str, Any]) -> dict[str, str]:
    """What the report must show for `case`, computed here from results.json."""
    nodes = case["telemetry"]["nodes"]
    shown = {
        "requests_failed": str(
            case["requests_failed"]
            if case.get("requests_failed") is not None
            else case["requests"] - case["requests_ok"]
        ),
        "aggregate_tps": f"{case['aggregate_tps']:.1f}",
        "decode_tps": f"{case['decode_tps']['p50']:.1f}",
        "ttft_s": f"{case['ttft_s']['p50']:.3f}",
    }
    for node in NODES:
        shown[f"{node}.sm_clock_mhz"] = f"{nodes[node]['sm_clock_mhz']['mean']:.1f}"
        shown[f"{node}.power_w"] = f"{nodes[node]['power_w']['mean']:.1f}"
        shown[f"{node}.temperature_c"] = f"{nodes[node]['temperature_c']['mean']:.1f}"
        shown[f"{node}.temperature_c_max"] = f"{nodes[node]['temperature_c']['max']:.1f}"
    return shown


TIP = """
const tip = document.getElementById('tip');
if (tip.hidden || tip.dataset.case !== arguments[0]) return null;
const rows = {};
for (const r of tip.querySelectorAll('tr')) rows[r.dataset.k] = r.cells[1].textContent;
const b = tip.getBoundingClientRect();
return {case: tip.querySelector('b').textContent, rows: rows, visible: b.width > 0 && b.height > 0};
"""


SHOWING = """const tip = document.getElementById('tip');
return {hidden: tip.hidden, case: tip.dataset.case || null,
        under_pointer: [...document.querySelectorAll('.hot:hover')].map(e => e.dataset.case)};"""


def tip_for(page: Browser, case_id: str) -> dict[str, Any]:
    shown = page.wait(TIP, case_id)
    assert shown, f"no tooltip for {case_id}: {page.script(SHOWING)}"
    assert shown["visible"]
    return dict(shown)


def rest_on(page: Browser, css: str, case_id: str) -> dict[str, Any]:
    """The pointer rests on the first of `css` that no other mark covers."""
    page.hover_at(1, 1)  # away first: a fresh pointerenter
    assert page.settled_at(1, 1), "the page did not take the pointer's move away"
    page.script(UNPROBE)
    assert page.script(UNCOVERED, css, True) == case_id, f"every {css} is covered"
    # The scroll moved the page under the resting pointer: its hover is updated first, so no
    # late update replays a position from before this move.
    assert page.settled_at(1, 1), "the page did not update the hover after its scroll"
    # Onto the very pixel UNCOVERED found the mark on top at: WebDriver's own centre of an
    # element is rounded its own way, and on a mark a pixel from its neighbour it once landed on
    # the neighbour.
    x, y = page.script(PROBED_AT)
    page.hover_at(int(x), int(y))
    return tip_for(page, case_id)


UNPROBE = """
for (const e of document.querySelectorAll('[data-probe]')) {
  for (const name of ['data-probe', 'data-probe-x', 'data-probe-y']) e.removeAttribute(name);
}
"""
PROBED_AT = """
const e = document.querySelector('[data-probe]');
return [e.dataset.probeX, e.dataset.probeY];
"""
UNCOVERED = """
for (const el of document.querySelectorAll(arguments[0])) {
  el.scrollIntoView({block: 'center'});
  const b = el.getBoundingClientRect();
  const x = Math.round(b.x + b.width / 2), y = Math.round(b.y + b.height / 2);
  if (document.elementFromPoint(x, y) === el) {
    if (arguments[1]) Object.assign(el.dataset, {probe: '1', probeX: String(x), probeY: String(y)});
    return el.dataset.case;
  }
}
return null;
"""


def subset(rows: dict[str, str], keys: dict[str, str]) -> dict[str, str]:
    return {k: rows.get(k, "(missing)") for k in keys}


@pytest.mark.parametrize(
    ("figure", "case_id"),
    [
        ("clock", PARTLY_FAILED),
        ("clock", COUNTED),
        ("clock", "p256-c1-2400"),
        ("decode", "p256-c1-unlocked"),
        ("ttft", None),
        ("concurrency", None),
    ],
)
def test_the_pointer_on_a_point_shows_that_cases_figures(
    page: Browser, cases: dict[str, Any], figure: str, case_id: str | None
) -> None:
    if case_id is None:  # points of these cases can coincide: one nothing covers
        case_id = str(page.script(UNCOVERED, f"#fig-{figure} circle.pt"))
        assert case_id in cases
    shown = rest_on(page, f"#fig-{figure} circle.pt[data-case='{case_id}']", case_id)
    assert shown["case"] == case_id
    want = expected(cases[case_id])
    assert subset(shown["rows"], want) == want
    assert shown["rows"]["clock_cap"] == (
        "unlocked" if case_id.endswith("unlocked") else "2400 MHz"
    )
    # No other case has these figures: a mix-up of cases would show.
    assert all(expected(c) != want for k, c in cases.items() if k != case_id)


def test_the_failed_requests_are_shown(page: Browser) -> None:
    assert (
        rest_on(page, f"circle.pt[data-case='{PARTLY_FAILED}']", PARTLY_FAILED)["rows"][
            "requests_failed"
        ]
        == "1"
    )
    assert (
        rest_on(page, f"circle.pt[data-case='{COUNTED}']", COUNTED)["rows"]["requests_failed"]
        == "2"
    )
    assert (
        rest_on(page, "circle.pt[data-case='p256-c1-2400']", "p256-c1-2400")["rows"][
            "requests_failed"
        ]
        == "0"
    )


def test_keyboard_focus_shows_the_same(page: Browser, cases: dict[str, Any]) -> None:
    css = f"#fig-clock circle.pt[data-case='{COUNTED}']"
    by_pointer = rest_on(page, css, COUNTED)
    page.hover_at(1, 1)
    # Focus the target before it, then Tab as a keyboard user would.
    assert page.script(
        """const all = [...document.querySelectorAll('.hot')];
        const i = all.indexOf(document.querySelector(arguments[0]));
        if (i < 1) return false; all[i - 1].focus(); return true;""",
        css,
    )
    page.keys(TAB)
    assert page.script(
        "return document.activeElement === document.querySelector(arguments[0])", css
    )
    by_focus = tip_for(page, COUNTED)
    assert by_focus["rows"] == by_pointer["rows"]
    assert subset(by_focus["rows"], expected(cases[COUNTED])) == expected(cases[COUNTED])
    page.keys("\ue00c")  # Escape hides it
    assert page.wait("return document.getElementById('tip').hidden")


def test_a_cases_span_in_the_temperature_timeline_shows_its_figures(
    page: Browser, cases: dict[str, Any]
) -> None:
    spans = page.script(
        "return [...document.querySelectorAll('#fig-thermal rect.span')].map(e => e.dataset.case)"
    )
    assert sorted(spans) == sorted(cases)
    for case_id in (PARTLY_FAILED, "p256-c1-unlocked"):
        shown = rest_on(page, f"#fig-thermal rect.span[data-case='{case_id}']", case_id)
        want = expected(cases[case_id])
        assert subset(shown["rows"], want) == want


def test_nothing_is_requested_from_outside_and_the_console_is_clean(
    page: Browser, sample: Path
) -> None:
    page.get((sample / "report.html").as_uri())
    assert page.wait("return document.readyState === 'complete'", timeout_s=15)
    rest_on(page, f"circle.pt[data-case='{PARTLY_FAILED}']", PARTLY_FAILED)
    names = page.script(
        "return performance.getEntriesByType('navigation').concat("
        "performance.getEntriesByType('resource')).map(e => e.name)"
    )
    assert names, "no performance entries"
    assert [n for n in names if not n.startswith(("file:", "data:"))] == []
    policy = page.script(
        "return document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]').content"
    )
    assert "default-src 'none'" in policy
    # The policy holds: a request the page did not plan is refused (and reported, not fetched).
    probe = page.script(
        """return new Promise(done => {
        document.addEventListener('securitypolicyviolation',
          e => done('refused ' + e.blockedURI + ' by ' + e.effectiveDirective), {once: true});
        const i = new Image(); i.onload = () => done('loaded');
        setTimeout(() => done('timeout'), 3000); i.src = 'http://127.0.0.1:9/x.png'; });"""
    )
    assert probe == "refused http://127.0.0.1:9/x.png by img-src"
    log = page.browser_log()
    severe = [e for e in log if e.get("level") == "SEVERE"]
    # Only the refused probe above; nothing from the report itself.
    assert [e for e in severe if "127.0.0.1:9" not in e.get("message", "")] == [], severe


POSITIONS = """
const out = [];
for (const el of document.querySelectorAll('svg.figure circle.pt')) {
  const svg = el.ownerSVGElement;
  const rect = svg.querySelector(`rect.axes[data-axes="${el.dataset.axes}"]`);
  const axes = rect.getBoundingClientRect(), frame = rect.dataset;
  const p = el.getBoundingClientRect();
  const cx = p.x + p.width / 2, cy = p.y + p.height / 2;
  let marker = Infinity;
  for (const u of svg.querySelectorAll('use')) {
    const b = u.getBoundingClientRect();
    marker = Math.min(marker, Math.hypot(b.x + b.width / 2 - cx, b.y + b.height / 2 - cy));
  }
  out.push({figure: svg.id, x: +el.dataset.x, y: +el.dataset.y, cx, cy, marker,
            left: axes.left, right: axes.right, top: axes.top, bottom: axes.bottom,
            xscale: frame.xscale, yscale: frame.yscale,
            xlim: frame.xlim.split(',').map(Number), ylim: frame.ylim.split(',').map(Number)});
}
return out;
"""


def _fraction(value: float, lim: list[float], scale: str) -> float:
    if scale == "log":
        return (math.log(value) - math.log(lim[0])) / (math.log(lim[1]) - math.log(lim[0]))
    return (value - lim[0]) / (lim[1] - lim[0])


def test_each_point_sits_where_its_values_put_it(page: Browser) -> None:
    page.script("window.scrollTo(0, 0)")
    points = page.script(POSITIONS)
    figures = {p["figure"] for p in points}
    assert figures == {"fig-decode", "fig-ttft", "fig-concurrency", "fig-clock"}
    assert any(p["xscale"] == "log" and p["yscale"] == "log" for p in points)  # TTFT: log-log
    for p in points:
        fx = _fraction(p["x"], p["xlim"], p["xscale"])
        fy = _fraction(p["y"], p["ylim"], p["yscale"])
        want_x = p["left"] + fx * (p["right"] - p["left"])
        want_y = p["bottom"] - fy * (p["bottom"] - p["top"])
        assert abs(p["cx"] - want_x) < 1.0, p
        assert abs(p["cy"] - want_y) < 1.0, p
        assert p["left"] - 1 <= p["cx"] <= p["right"] + 1, p
        # On top of a marker matplotlib drew.
        assert p["marker"] < 1.5, p


def test_the_report_is_self_contained(sample: Path) -> None:
    """No browser needed: nothing in the file refers outside it."""
    text = (sample / "report.html").read_text()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text)
    assert [r for r in refs if not r.startswith(("#", "data:"))] == []
    assert "@import" not in text
    assert "url(http" not in text
    assert len(re.findall(r"<svg [^>]*class=\"figure\"", text)) == 5
    assert len(text) < 1_500_000
