"""The report shows what results.json says, as text: a `<`, `&` or quote in a model name, a case
id, a setting, an error or a note is shown, never interpreted (no element, link, image or script
comes from the data), in the page (Jinja2, autoescaped) and in the summary (markdown-it, raw HTML
and inline markup off). In the browser too when chromium is there (tests/unit/browser.py)."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import available, browser

from gx10.bench.report import build_report, summary_html
from gx10.bench.results import SCHEMA

MODEL = "m<script>alert(1)</script> & 'q'"
ENDPOINT = "http://127.0.0.1:9/<i>v1</i>"
ODD = "p<256>-c1-'x'&\"y\""  # a case id with every character HTML cares about
NOTE = (
    "![img](http://127.0.0.1:9/x.png) [link](http://127.0.0.1:9/) <http://127.0.0.1:9/> "
    "<b>bold</b> *not emphasis* `not code` &lt;kept&gt; \\* a|b"
)
ERROR = "HTTP 500: <html><body>boom</body></html>"


def _case(case_id: str, prompt: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": case_id,
        "prompt_tokens": prompt,
        "concurrency": 1,
        "clock_cap": "unlocked",
        "status": "ok",
        "requests": 1,
        "requests_ok": 1,
        "requests_failed": 0,
        "aggregate_tps": 20.0 + prompt / 1000,
        "ttft_s": {"p50": 0.1 + prompt / 10000},
        "prefill_tps": {"p50": 1000.0},
        "decode_tps": {"p50": 20.0 + prompt / 1000},
        "prompt_tokens_sent": prompt,
        **extra,
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("escaping")
    cases = [
        _case(ODD, 256),
        _case("p512-c1-unlocked", 512),
        _case("p1024-c1-unlocked", 1024, status="failed", requests_ok=0, errors=[ERROR]),
    ]
    document = {
        "schema": SCHEMA,
        "endpoint": ENDPOINT,
        "model": MODEL,
        "settings": {"<label>": "<value>"},
        "config": {},
        "notes": [NOTE],
        "cases": {c["id"]: c for c in cases},
    }
    (out / "results.json").write_text(json.dumps(document), encoding="utf-8")
    return build_report(out)


class _Text(HTMLParser):
    """Each element's text and attributes, as a browser's DOM would have them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.texts: dict[str, list[str]] = {}
        self.attrs: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append((tag, dict(attrs)))
        if tag not in ("meta", "circle", "rect", "use", "path"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.texts.setdefault(self.stack[-1], []).append(data)


def _parse(text: str) -> _Text:
    parser = _Text()
    parser.feed(text)
    parser.close()
    return parser


def test_the_page_shows_the_data_as_text(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    for markup in ("<script>alert", "<i>", "<b>", "<img", "<a ", "<em>", "<code>", "<body>boom"):
        assert markup not in text
    assert text.count("<html>") == 1
    page = _parse(text)
    assert page.texts["title"][0] == f"gx10 bench: {MODEL}"  # then the SVG targets' titles
    assert ODD in page.texts["title"]
    assert page.texts["h1"] == [f"Bench summary: {MODEL} at {ENDPOINT}"]
    assert "Settings: <label> <value>" in page.texts["p"]
    notes = [t.strip() for t in page.texts["li"]]
    assert f"note: {NOTE}" in notes
    assert f"p1024-c1-unlocked failed: {ERROR}" in notes
    # The figures' targets carry the case id, the data script has it: nothing ends that script.
    cases = [a["data-case"] for tag, a in page.attrs if tag == "circle" and "data-case" in a]
    assert ODD in cases
    start = text.index("id='gx10-cases'>") + len("id='gx10-cases'>")
    data = text[start : text.index("</script>", start)]
    assert "<" not in data
    assert ODD in json.loads(data)
    assert [n for tag, a in page.attrs for n in (a.get("src"), a.get("href")) if n] == []


def test_the_summary_is_markdown_it_html_of_the_summary() -> None:
    markdown = (
        "# T <x>\n\nSettings: a_b_c *d*\n\n| h<1> | h2 |\n|---|---|\n| 1 & 2 | `3` |\n\n- n <y>\n"
    )
    assert summary_html(markdown) == (
        "<h1>T &lt;x&gt;</h1>\n<p>Settings: a_b_c *d*</p>\n<table>\n<thead>\n<tr>\n"
        "<th>h&lt;1&gt;</th>\n<th>h2</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1 &amp; 2</td>\n"
        '<td>`3`</td>\n</tr>\n</tbody>\n</table>\n<ul>\n<li class="note">n &lt;y&gt;</li>\n</ul>\n'
    )


SHOWN = """
const el = [...document.querySelectorAll('circle.pt')].find(e => e.dataset.case === arguments[0]);
if (!el) return null;
el.focus();
const tip = document.getElementById('tip');
return {title: document.title, h1: document.querySelector('h1').textContent,
        notes: [...document.querySelectorAll('li.note')].map(e => e.textContent),
        tip: tip.hidden ? null : tip.querySelector('b').textContent,
        elements: document.querySelectorAll('img, a, em, code, i, b:not(#tip b), body script')
          .length,
        requests: performance.getEntriesByType('resource').map(e => e.name)};
"""


def test_the_browser_shows_the_data_as_text(report: Path) -> None:
    missing = available()
    if missing:
        if os.environ.get("MAKELEVEL") or os.environ.get("CI"):
            pytest.fail(f"the browser tests must run under make/CI: {missing}")
        pytest.skip(f"no headless browser: {missing}")
    with browser() as page:
        page.get(report.as_uri())
        assert page.wait("return document.readyState === 'complete'", timeout_s=15)
        shown = page.script(SHOWN, ODD)
        assert shown is not None, "no figure target for the case"
        assert shown["title"] == f"gx10 bench: {MODEL}"
        assert shown["h1"] == f"Bench summary: {MODEL} at {ENDPOINT}"
        assert f"note: {NOTE}" in [n.strip() for n in shown["notes"]]
        assert shown["tip"] == ODD
        assert shown["elements"] == 2  # the page's own two <script> blocks, nothing else
        assert shown["requests"] == []
        assert [e for e in page.browser_log() if e.get("level") == "SEVERE"] == []
