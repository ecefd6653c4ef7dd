"""Serving a registry: every search logged with its ``search_id`` and ``version``,
feedback validated and stored once, ``/v1/loop`` status, and promotions and rollbacks
(by the CLI, as a user types them) picked up by the running server within seconds."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.loop.test_loop import DOCS, QUERIES, TASK

pytest.importorskip("starlette")
pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def served(tmp_path_factory, minilm) -> dict[str, Any]:
    import tttembed.api as tt
    from tttembed.score.qrels import QrelsScorer

    root = tmp_path_factory.mktemp("served")
    docs = {d: {"title": "", "text": t} for d, t in DOCS.items()}
    index = tt.index_corpus(docs, root / "index", embedder=minilm)
    qrels = {f"q{i}": {"d12": 1} for i in range(len(QUERIES))}
    queries = {f"q{i}": q for i, q in enumerate(QUERIES)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(root / "cache"))
        state = tt.learn(index, queries, scorer=QrelsScorer("labels", qrels=qrels),
                         scope="query", budget=12, task=TASK, embedder=minilm, corpus=docs)
    return {"root": root, "index": index, "state": state}


def _client(served: dict[str, Any], minilm: Any, registry: Any, **kw: Any) -> Any:
    from starlette.testclient import TestClient

    from tttembed.serve import create_app

    app = create_app(index=str(served["root"] / "index"), registry=str(registry),
                     embedder=minilm, registry_poll_s=0.1, **kw)
    return TestClient(app)


def _search(client: Any, queries: list[str]) -> dict[str, Any]:
    r = client.post("/v1/search", json={"queries": queries, "task": TASK, "k": 5})
    assert r.status_code == 200, r.text
    return r.json()


def test_searches_are_logged_and_feedback_is_validated_and_stored_once(served, minilm,
                                                                       tmp_path):
    from tttembed.loop.open import open_store

    with _client(served, minilm, tmp_path / "reg") as client:
        body = _search(client, QUERIES[:2])
        assert body["version"] is None  # nothing promoted yet: raw
        sid = body["data"][0]["search_id"]
        doc = body["data"][0]["ids"][0]
        ok = client.post("/v1/feedback", json=[{"search_id": sid, "doc_id": doc, "label": 1},
                                               {"query": QUERIES[5], "task": TASK,
                                                "doc_id": "d3", "label": 0.25}])
        assert ok.status_code == 202 and ok.json()["stored"] == 2, ok.text
        again = client.post("/v1/feedback", json={"search_id": sid, "doc_id": doc, "label": 1})
        assert again.status_code == 202 and again.json()["duplicates"] == 1
        bad = {"unknown_search_id": ({"search_id": "nope", "doc_id": doc, "label": 1}, 404),
               "unknown_doc_id": ({"search_id": sid, "doc_id": "d99", "label": 1}, 422),
               "invalid_label": ({"search_id": sid, "doc_id": doc, "label": 1.5}, 400),
               "invalid_feedback": ({"doc_id": doc, "label": 1}, 400)}
        for code, (item, status) in bad.items():
            r = client.post("/v1/feedback", json=[{"search_id": sid, "doc_id": "d1",
                                                    "label": 0}, item])
            assert r.status_code == status and r.json()["error"]["code"] == code, r.text
        loop = client.get("/v1/loop").json()
    store = open_store(None, tmp_path / "reg")
    logged = store.searches()
    assert [s.query for s in logged] == QUERIES[:2] and logged[0].search_id == sid
    assert list(logged[0].ids) == body["data"][0]["ids"]
    assert len(store.feedback()) == 2  # a refused body stored nothing of itself
    for field in ("version", "versions", "learning", "idle", "pairs_judged",
                  "judge_budget_left", "feedback_received", "frozen", "reason"):
        assert field in loop
    assert loop["feedback_received"] == 2 and loop["searches"] == 2


def test_a_promotion_and_a_rollback_reach_the_running_server(served, minilm, tmp_path):
    from typer.testing import CliRunner

    from tttembed.cli import app
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "reg", create=True, index={"identity": served["index"].identity})
    v1 = reg.register(served["state"], parent=None, reason="test")
    runner = CliRunner()
    with _client(served, minilm, tmp_path / "reg") as client:
        raw = _search(client, QUERIES[:1])
        assert raw["version"] is None
        out = runner.invoke(app, ["states", "promote", str(tmp_path / "reg"), v1.name])
        assert out.exit_code == 0, out.output
        deadline = time.monotonic() + 10
        while _search(client, QUERIES[:1])["version"] != "v1":
            assert time.monotonic() < deadline, "promotion not picked up within 10 s"
            time.sleep(0.05)
        adapted = _search(client, QUERIES[:1])
        assert adapted["data"][0]["ids"][0] == "d12" != raw["data"][0]["ids"][0]
        out = runner.invoke(app, ["states", "rollback", str(tmp_path / "reg")])
        assert out.exit_code == 0 and "raw" in out.output, out.output
        deadline = time.monotonic() + 10
        while _search(client, QUERIES[:1])["version"] is not None:
            assert time.monotonic() < deadline, "rollback not picked up within 10 s"
            time.sleep(0.05)
        assert _search(client, QUERIES[:1])["data"][0]["ids"] == raw["data"][0]["ids"]
    listed = runner.invoke(app, ["states", "list", str(tmp_path / "reg"), "--json"])
    record = json.loads(listed.output)
    assert record["served"] is None and record["versions"][0]["promoted"]


def test_feedback_without_a_registry_is_a_404(served, minilm):
    from starlette.testclient import TestClient

    from tttembed.serve import create_app

    app = create_app(index=str(served["root"] / "index"), embedder=minilm)
    with TestClient(app) as client:
        r = client.post("/v1/feedback", json={"query": "x", "task": TASK, "doc_id": "d1",
                                              "label": 1})
    assert r.status_code == 404 and r.json()["error"]["code"] == "loop_disabled"


def test_the_dashboard_renders_in_chromium_with_the_numbers_of_v1_loop(served, minilm,
                                                                       tmp_path):
    """The real server's page in headless Chromium: its numbers are /v1/loop's, and the
    screenshot shows a page (the promoted marker's green, the refused one's red)."""
    import urllib.request

    from tests.browser import dump_dom, expected_fields, page_fields, png_pixels, screenshot
    from tests.serve.conftest import running
    from tttembed.registry.versions import Registry
    from tttembed.serve import create_app

    reg = Registry(tmp_path / "reg", create=True, index={"identity": served["index"].identity})
    ev = {"gain": 0.12, "ci_low": 0.05, "ci_high": 0.2, "p": 0.001, "queries": 8,
          "validation_pairs": 11}
    v1 = reg.register(served["state"], parent=None, reason="promoted: test", evidence=ev,
                      pairs={"judged": 80, "feedback": 1, "validation": 11})
    reg.promote(v1.name, by="learner")
    reg.register(served["state"], parent="v1", reason="refused: the interval does not lie "
                 "above 0", evidence={**ev, "ci_low": -0.1}, pairs={"judged": 120})
    app = create_app(index=str(served["root"] / "index"), registry=str(tmp_path / "reg"),
                     embedder=minilm)
    with running(app) as url:
        for q in QUERIES[:3]:
            req = urllib.request.Request(f"{url}/v1/search", method="POST",
                                         data=json.dumps({"query": q, "task": TASK}).encode(),
                                         headers={"content-type": "application/json"})
            urllib.request.urlopen(req, timeout=30).read()
        status = json.loads(urllib.request.urlopen(f"{url}/v1/loop", timeout=30).read())
        dom = dump_dom(f"{url}/dashboard")
        png = screenshot(f"{url}/dashboard", tmp_path / "dashboard.png")
    assert status["version"] == "v1" and status["queries_served"] == {"v1": 3}
    got, want = page_fields(dom), expected_fields(status)
    assert (got.top, got.versions, got.states) == (want.top, want.versions, want.states)
    assert got.top["pairs_judged"] == str(status["pairs_judged"])
    assert [(m["data-marker"], m["data-kind"], m["data-served"]) for m in got.markers] == [
        ("v1", "promoted", "true"), ("v2", "refused", "false")]
    size, pixels = png_pixels(png)
    counts: dict[tuple[int, ...], int] = {}
    for rgb in pixels:
        counts[rgb] = counts.get(rgb, 0) + 1
    assert size == (1200, 900) and len(counts) > 50
    assert counts.get((0x1A, 0x7F, 0x37), 0) > 200  # promoted marker (green)
    assert counts.get((0xC6, 0x28, 0x28), 0) > 100  # refused marker (red)
