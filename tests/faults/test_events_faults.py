"""Client-made event bodies on ``POST /v1/events`` are 4xx in OpenAI's error shape, never a
500, and a refused body stores nothing: lone surrogates, numbers past what SQLite holds,
NaN and infinities, deep nesting, wrong types at every level."""

from __future__ import annotations

import json
import logging
import math

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from tests.serve.conftest import DOCS, TASK, running  # noqa: E402


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, minilm):
    import tttembed.api as tt

    root = tmp_path_factory.mktemp("events-faults")
    tt.index_corpus({d: {"title": "", "text": t} for d, t in DOCS.items()}, root / "index",
                    embedder=minilm)
    return root / "index"


def _bodies(sid: str, doc: str) -> list[bytes]:
    ubi = {"action_name": "click", "query_id": sid,
           "event_attributes": {"object": {"object_id": doc}, "position": {"ordinal": 1}}}

    def variant(**kw: object) -> dict:
        out = json.loads(json.dumps(ubi))
        for path, value in kw.items():
            node = out
            *parents, last = path.split("__")
            for p in parents:
                node = node[p]
            node[last] = value
        return out

    raw = [json.dumps([variant(session_id="\ud800")]),
           json.dumps([variant(query_id="\udfff")]),
           json.dumps({"impressions": {"\ud83d": [doc]}}),
           json.dumps({"impressions": {sid: ["\ud800"]}}),
           json.dumps([variant(event_attributes__position__ordinal=10 ** 30)]),
           json.dumps([variant(event_attributes__position__ordinal=True)]),
           json.dumps([variant(timestamp=10 ** 400)]),
           json.dumps([{"type": "dwell", "search_id": sid, "doc_id": doc,
                        "dwell_ms": math.nan}]),  # NaN: JSON that Python reads
           json.dumps([{"type": "click", "search_id": sid, "doc_id": doc,
                        "timestamp": -math.inf}]),
           json.dumps([variant(timestamp="2026-13-45T99:00:00Z")]),
           json.dumps([variant(timestamp=["2026"])]),
           json.dumps([variant(event_attributes="x")]),
           json.dumps([variant(event_attributes__object=[doc])]),
           json.dumps([variant(action_name="x" * 500)]),
           json.dumps([variant(action_name={"a": 1})]),
           json.dumps([variant(query_id=None)]),
           json.dumps([variant(query_id="s" * 5000)]),
           json.dumps({"events": {"a": 1}}),
           json.dumps({"impressions": [doc]}),
           json.dumps({"impressions": {sid: [doc, doc]}}),
           json.dumps([ubi] * 5000),
           "[" * 100000 + "]" * 100000,
           "\"just a string\"", "null", "{}"]
    return [b.encode("utf-8", "surrogatepass") for b in raw]


def test_malformed_events_are_4xx_and_store_nothing(index_dir, minilm, tmp_path, caplog):
    """Every malformed event body is a 400-499 with an error message, no server traceback is
    logged, the server keeps serving and no event of those bodies is stored."""
    from tttembed.loop.open import open_store
    from tttembed.serve import create_app

    app = create_app(index=str(index_dir), registry=str(tmp_path / "reg"), embedder=minilm)
    with caplog.at_level(logging.ERROR, logger="tttembed.serve"), running(app) as url:
        hit = httpx.post(f"{url}/v1/search", json={"query": "pet", "task": TASK, "k": 3},
                         timeout=60).json()["data"][0]
        for body in _bodies(hit["search_id"], hit["ids"][0]):
            r = httpx.post(f"{url}/v1/events", content=body, timeout=60,
                           headers={"content-type": "application/json"})
            assert 400 <= r.status_code < 500, (body[:120], r.status_code, r.text[:300])
            assert r.json()["error"]["message"], r.text[:300]
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert not [rec for rec in caplog.records if rec.exc_info], caplog.text[:500]
    store = open_store(None, tmp_path / "reg")
    try:
        assert store.event_counts() == {}
    finally:
        store.close()
