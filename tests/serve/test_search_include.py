"""``/v1/search`` with ``"include": ["text", "title"]`` returns each hit's document fields
(as Qdrant and OpenSearch return their documents), read from the corpus the server was
given (``--corpus``, else the index's recorded source); unknown fields are a 400 listing
the known ones, and a server without the texts answers a 400 saying how to give them."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")

from tests.serve.conftest import DOCS, QUERIES, TASK, make_app, running  # noqa: E402


def _search(url: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/search",
                      json={"query": QUERIES["q3"], "task": TASK, "k": 3, **body}, timeout=60)


@pytest.fixture(scope="module")
def corpus_file(setup) -> str:
    path = setup["root"] / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                            for d, t in DOCS.items()))
    return str(path)


def test_include_returns_the_documents_of_each_hit(setup, minilm, corpus_file) -> None:
    with running(make_app(setup, minilm, corpus=corpus_file)) as url:
        plain, full = _search(url), _search(url, include=["text", "title"])
        only_text = _search(url, include=["text"]).json()
        bad = _search(url, include=["text", "payload"])
        not_list = _search(url, include="text")
    assert "documents" not in plain.json()["data"][0]  # nothing unasked
    assert full.status_code == 200, full.text
    hit = full.json()["data"][0]
    assert full.status_code == 200 and hit["ids"] == plain.json()["data"][0]["ids"]
    assert hit["documents"] == [{"id": d, "text": DOCS[d], "title": ""}
                                for d in hit["ids"]]
    assert only_text["data"][0]["documents"][0] == {"id": hit["ids"][0],
                                                    "text": DOCS[hit["ids"][0]]}
    for r in (bad, not_list):
        assert r.status_code == 400 and r.json()["error"]["param"] == "include", r.text
    assert "'payload'" in bad.json()["error"]["message"]
    assert "text, title" in bad.json()["error"]["message"]


def test_include_without_a_corpus_is_a_400_with_the_fix(setup, minilm) -> None:
    with running(make_app(setup, minilm)) as url:  # an index built from a dict: no source
        r, plain = _search(url, include=["text"]), _search(url)
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_corpus", r.text
    assert "--corpus" in r.json()["error"]["message"]
    assert plain.status_code == 200
