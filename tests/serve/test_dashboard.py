"""``tttembed.serve.dashboard``: the page's content and contract (data-field values equal the
status, strings escaped, missing fields tolerated, FROZEN only when frozen), then the page
in a real browser: served over HTTP from 127.0.0.1, read back from chromium's DOM and
looked at in a screenshot."""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import tests.browser
from tests.browser import (
    BrowserError,
    data_fields,
    dump_dom,
    exact,
    expected_fields,
    page_fields,
    png_pixels,
    run_chromium,
    screenshot,
    state_fields,
    version_fields,
)
from tttembed.serve.dashboard import TOP_FIELDS, render_dashboard

STATUS: dict[str, Any] = {
    "version": "v3",
    "versions": [
        {"version": "v1", "created": "2026-12-01T18:00:00Z", "parent": None, "promoted": True,
         "served": False, "reason": "gain CI above 0",
         "evidence": {"gain": 0.05, "ci_low": 0.01, "ci_high": 0.09, "p": 0.003, "queries": 40,
                      "validation_pairs": 120},
         "pairs": {"judged": 400, "feedback": 3, "validation": 120}, "queries_served": 800},
        {"version": "v2", "created": "2026-12-01T18:02:00Z", "parent": "v1", "promoted": False,
         "served": False, "reason": "CI crosses 0",
         "evidence": {"gain": -0.0123456789, "ci_low": -0.04, "ci_high": 0.015, "p": 0.41,
                      "queries": 38, "validation_pairs": 110},
         "pairs": {"judged": 60, "feedback": 5, "validation": 110}, "queries_served": 0},
        {"version": "v3", "created": "2026-12-01T18:04:00Z", "parent": "v1", "promoted": True,
         "served": True, "reason": "gain CI above 0",
         "evidence": {"gain": 0.031, "ci_low": 0.004, "ci_high": 0.058, "p": 0.00002,
                      "queries": 44, "validation_pairs": 130},
         "pairs": {"judged": 63, "feedback": 4, "validation": 130}, "queries_served": 4000},
    ],
    "learning": False, "idle": True, "pairs_judged": 523, "judge_budget": 1000,
    "judge_budget_left": 477, "feedback_received": 12, "frozen": False, "reason": "",
    "searches": 5000, "queries_served": {"raw": 200, "v1": 800, "v3": 4000}, "cycles": 4,
    "updated": "2026-12-01T18:05:00Z",
}

EVIL = '<script>alert("x")</script>'


def _frozen(status: dict[str, Any], reason: str = "drift on 3 of 5 probes") -> dict[str, Any]:
    out = copy.deepcopy(status)
    out.update(frozen=True, reason=reason)
    return out


def _text(fragment: str) -> str:
    """The visible text of an HTML fragment, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", fragment)).strip()


def _row(page: str, version: str) -> str:
    match = re.search(rf'<tr data-version="{version}".*?</tr>', page, re.S)
    assert match, version
    return match.group(0)


def _assert_fields_match(page: str, status: dict[str, Any]) -> None:
    got, want = page_fields(page), expected_fields(status)
    assert got.top == want.top
    assert got.versions == want.versions
    assert got.states == want.states
    names = [row["version"] for row in status["versions"]]
    assert [m["data-marker"] for m in got.markers] == names
    assert [m["data-kind"] for m in got.markers] == [
        "promoted" if row["promoted"] else "refused" for row in status["versions"]]
    assert [m["data-served"] for m in got.markers] == [
        exact(row["served"]) for row in status["versions"]]


# --- the page itself ------------------------------------------------------------------

def test_a_complete_page_with_nothing_external():
    page = render_dashboard(STATUS)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "<style>" in page and "<svg" in page
    for external in ("<script", "<link", "src=", "href=", "url(", "@import", "http://",
                     "https://", "//cdn"):
        assert external not in page.lower(), external


def test_data_fields_equal_the_status():
    page = render_dashboard(STATUS)
    _assert_fields_match(page, STATUS)
    top = data_fields(page)
    assert set(top) == set(TOP_FIELDS)
    assert top["pairs_judged"] == "523" and top["judge_budget_left"] == "477"
    assert top["version"] == "v3" and top["frozen"] == "false"
    # the integers are also the visible text, as a person reads them
    for name in ("pairs_judged", "judge_budget", "judge_budget_left", "feedback_received",
                 "searches", "cycles"):
        value = STATUS[name]
        assert f'data-field="{name}" data-value="{value}">{value}</span>' in page, name
    # floats round-trip exactly through data-value, whatever the display rounds to
    assert float(version_fields(page)["v2"]["gain"]) == STATUS["versions"][1]["evidence"]["gain"]
    assert state_fields(page) == {"raw": {"queries_served": "200"},
                                  "v1": {"queries_served": "800"},
                                  "v3": {"queries_served": "4000"}}


def test_evidence_is_labelled_with_its_baseline():
    page = render_dashboard(STATUS)
    assert ("Δ nDCG@10 vs raw +0.050 [+0.010, +0.090], p 0.003, 40 queries, "
            "120 validation pairs") in _text(_row(page, "v1"))
    assert ("Δ nDCG@10 vs parent v1 -0.012 [-0.040, +0.015], p 0.410, 38 queries"
            in _text(_row(page, "v2")))
    assert "vs parent v1 +0.031 [+0.004, +0.058], p 2.0e-05, 44 queries" in _text(
        _row(page, "v3"))
    assert 'class="pos"' in _row(page, "v1") and 'class="pos"' not in _row(page, "v2")


def test_served_promoted_and_refused_are_told_apart():
    page = render_dashboard(STATUS)
    assert 'class="served promoted"' in _row(page, "v3")
    assert 'class="refused"' in _row(page, "v2") and "refused" in _text(_row(page, "v2"))
    svg = page[page.index("<svg"):page.index("</svg>")]
    v1 = svg[svg.index('data-marker="v1"'):svg.index('data-marker="v2"')]
    v2 = svg[svg.index('data-marker="v2"'):svg.index('data-marker="v3"')]
    assert "<circle" in v1 and "#1a7f37" in v1  # promoted: a green circle
    assert "<polygon" in v2 and "#c62828" in v2 and "<circle" not in v2  # refused: red diamond
    assert svg.count(">served</text>") == 1 and ">v3</text>" in svg
    assert "width:52.3%" in page  # the budget bar: 523 of 1000 pairs


def test_every_string_is_escaped():
    status = copy.deepcopy(STATUS)
    status["versions"][1].update(version='v2"><img src=x onerror=alert(1)>', reason=EVIL,
                                 created="<b>now</b>", parent="v1&<i>")
    status.update(reason=EVIL, updated="<u>t</u>", frozen=True)
    status["queries_served"]['<svg onload="x">'] = 1
    page = render_dashboard(status)
    for raw in ("<script", "<img", "<b>now", "<i>", "<u>", 'onload="x"', '"><img'):
        assert raw not in page, raw
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # and the strings come back exactly
    got = page_fields(page)
    assert got.top["reason"] == EVIL and got.top["updated"] == "<u>t</u>"
    row = got.versions['v2"><img src=x onerror=alert(1)>']
    assert row["reason"] == EVIL and row["created"] == "<b>now</b>" and row["parent"] == "v1&<i>"
    assert got.states['<svg onload="x">'] == {"queries_served": "1"}
    assert got.markers[1]["data-marker"] == 'v2"><img src=x onerror=alert(1)>'


@pytest.mark.parametrize("status", [
    {},
    {"version": None, "versions": None, "queries_served": None, "frozen": None},
    {"versions": "oops", "queries_served": [1, 2], "pairs_judged": "many", "judge_budget": 0},
    {"versions": [{}, None, 3, {"version": "v1", "evidence": {}, "pairs": None,
                                "promoted": None}]},
    {"versions": [{"version": "v1", "evidence": {"gain": None, "p": float("nan")},
                   "pairs": {"judged": 5}}], "pairs_judged": 2000, "judge_budget": 1000},
], ids=["empty", "nulls", "wrong-types", "empty-rows", "partial-evidence"])
def test_missing_or_null_fields_render(status):
    page = render_dashboard(status)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    top = data_fields(page)
    assert set(top) == set(TOP_FIELDS)
    for name in TOP_FIELDS:
        if status.get(name) is None:
            assert top[name] == "null", name
    assert "serving" in _text(page) and 'data-banner="frozen"' not in page


def test_missing_fields_show_raw_and_empty_states():
    page = render_dashboard({})
    assert 'data-field="version" data-value="null" class="badge served">raw</span>' in page
    assert "No versions registered." in page and "No queries served yet." in page
    assert page_fields(page).markers == []
    page = render_dashboard({"versions": [{"version": "v1", "promoted": True}],
                             "queries_served": {"raw": 3, "v1": 0}})
    assert 'data-origin="raw"' in page and page.count(">served</text>") == 1  # raw is served
    assert version_fields(page)["v1"]["evidence"] == "null" and "no evidence" in page
    assert 'class="served"' in re.search(r'<tr data-state="raw".*?>', page).group(0)


def test_frozen_banner_only_when_frozen():
    for value in (False, None, "true", 1):
        status = dict(STATUS, frozen=value, reason="a note")
        page = render_dashboard(status)
        assert 'data-banner="frozen"' not in page and "FROZEN" not in page, value
        assert "Loop note: a note" in _text(page)
    page = render_dashboard(_frozen(STATUS, reason="judge <down>"))
    banner = re.search(r'<div class="banner".*?</div>', page, re.S)
    assert banner and 'data-banner="frozen"' in banner.group(0)
    assert "FROZEN" in _text(banner.group(0))
    assert "judge &lt;down&gt;" in banner.group(0) and "<down>" not in page
    assert data_fields(page)["frozen"] == "true" and data_fields(page)["reason"] == "judge <down>"


# --- in a real browser ------------------------------------------------------------------

def test_no_chromium_skips_with_the_ci_install_command(monkeypatch):
    monkeypatch.setattr(tests.browser, "chromium_path", lambda: None)
    with pytest.raises(pytest.skip.Exception, match=re.escape("apt-get install -y chromium")):
        dump_dom("http://127.0.0.1:9/")


def test_a_chromium_past_its_timeout_is_killed(serve_html):
    with pytest.raises(BrowserError, match="ran past 0.05s"):
        run_chromium(["--dump-dom", serve_html("<p>x</p>")], timeout=0.05)


@pytest.fixture
def serve_html() -> Iterator[Callable[[str], str]]:
    """``serve(page) -> url``: a ThreadingHTTPServer on 127.0.0.1 answering GET with it."""
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()

    def serve(page: str) -> str:
        path = f"/dashboard/{len(pages)}"
        pages[path] = page.encode("utf-8")
        return f"http://127.0.0.1:{server.server_address[1]}{path}"

    try:
        yield serve
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_chromium_reads_the_status_back(serve_html):
    status = _frozen(STATUS, reason="drift <3 of 5> & rising")
    dom = dump_dom(serve_html(render_dashboard(status)))
    assert "<svg" in dom and 'data-banner="frozen"' in dom
    _assert_fields_match(dom, status)
    assert data_fields(dom)["reason"] == "drift <3 of 5> & rising"


def test_screenshot_shows_the_dashboard(serve_html, tmp_path):
    url = serve_html(render_dashboard(_frozen(STATUS)))
    png = screenshot(url, tmp_path / "dashboard.png", width=1200, height=900)
    assert png.stat().st_size > 10_000
    size, pixels = png_pixels(png)
    assert size == (1200, 900)
    counts: dict[tuple[int, ...], int] = {}
    for rgb in pixels:
        counts[rgb] = counts.get(rgb, 0) + 1
    assert len(counts) > 50  # text, badges, bars, markers: not a blank page
    white = counts.get((255, 255, 255), 0)
    assert white < 0.8 * len(pixels)  # not a blank page
    assert counts.get((0xF4, 0xF6, 0xF9), 0) > 0.05 * len(pixels)  # the CSS background
    assert counts.get((0xB7, 0x1C, 0x1C), 0) > 20_000  # the FROZEN banner
    assert counts.get((0x1A, 0x7F, 0x37), 0) > 200  # promoted markers (green)
    assert counts.get((0xC6, 0x28, 0x28), 0) > 100  # the refused marker (red)
    assert counts.get((0x0B, 0x5C, 0xAD), 0) > 300  # the served ring and badges (blue)


def test_replicas_show_what_each_serves_and_what_it_refused():
    status = copy.deepcopy(STATUS)
    status["replicas"] = [
        {"replica": "a:1", "version": "v3", "generation": 4, "following": True},
        {"replica": "b:2", "version": "v2", "generation": 3, "following": False,
         "error": "StateMismatch: <corpus>", "refused": {"version": "v3",
                                                         "error": "another <corpus>"}},
        "junk"]
    page = render_dashboard(status)
    a = page.split('data-replica="a:1"')[1].split("</tr>")[0]
    b = page.split('data-replica="b:2"')[1].split("</tr>")[0]
    assert ">v3<" in a and "refused" not in a and 'class="warn"' not in a
    assert ">v2<" in b and 'class="warn"' in b and "refused v3: another &lt;corpus&gt;" in b
    assert "Replicas (reported" not in render_dashboard(STATUS)  # none reported: no table


def test_a_version_shows_both_populations_gains():
    """The two-population check (issue 62): the asked questions' line, then the new
    questions' gain with its interval."""
    from tttembed.serve.dashboard import _evidence

    ev = {"gain": 0.1, "ci_low": 0.05, "ci_high": 0.15, "p": 0.001, "queries": 40,
          "validation_pairs": 12,
          "populations": {"new": {"gain": 0.02, "ci_low": 0.004, "ci_high": 0.036,
                                  "p": 0.012}}}
    html = _evidence({"evidence": ev, "parent": "v1"})
    assert "new questions (held out by text)" in html and "+0.020 [+0.004, +0.036]" in html, html
    assert "p 0.012" in html, html
    assert "new questions" not in _evidence({"evidence": {"gain": 0.1}})
