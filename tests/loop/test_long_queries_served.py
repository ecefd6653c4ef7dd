"""issue 65 item 2: a stated limit on a query's length (``--max-query-chars``, default
:data:`tttembed.serve.wire.MAX_QUERY_CHARS`) at every route that takes one, a 413 naming
it above; every length under it (300, 3,000, 6,000 and the limit's characters) is
searched, clicked, labelled and learned from on both stores (PostgreSQL: a registry in
the database, tier ``postgres``). Before issue 65 a click on a 6,000-character search was
a 500 on PostgreSQL (``index row size ... exceeds btree version 4 maximum 2704``)."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.loop.test_loop import TASK, world  # noqa: F401
from tests.pg import new_database
from tttembed.serve.wire import MAX_QUERY_CHARS

pytest.importorskip("starlette")
pytest.importorskip("sentence_transformers")

LENGTHS = (300, 3000, 6000, MAX_QUERY_CHARS)
WORDS = ("pet fish talks aquarium parrot cat dog lives animal person water bird cage "
         "garden reptile").split()


def _question(n: int, seed: int) -> str:
    """A question of exactly ``n`` characters: words of the world's topic in random order
    (no index row compresses it under PostgreSQL's 2.7 kB)."""
    rng = random.Random(seed)
    out = f"question {seed}:"
    while len(out) < n:
        out += " " + rng.choice(WORDS) + str(rng.randrange(10_000))
    return out[:n]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "reg")
    return new_database(request.getfixturevalue("pg_url"), "r" + uuid.uuid4().hex[:16])


def _traffic(client: Any, n: int, seed: int) -> str:
    """Search a question of ``n`` characters, click its first hit, label its second by
    search id and its third by query: each answered 200/202 and stored."""
    q = _question(n, seed)
    r = client.post("/v1/search", json={"query": q, "task": TASK, "k": 5})
    assert r.status_code == 200, r.text
    hit = r.json()["data"][0]
    sid, ids = hit["search_id"], hit["ids"]
    e = client.post("/v1/events", json={"events": [{"type": "click", "search_id": sid,
                                                    "doc_id": ids[0], "session_id": "u1"}]})
    assert e.status_code == 202 and e.json()["stored"] == 1, e.text
    f = client.post("/v1/feedback", json=[
        {"search_id": sid, "doc_id": ids[1], "label": 1.0},
        {"query": q, "task": TASK, "doc_id": ids[2], "label": 0.0}])
    assert f.status_code == 202 and f.json()["stored"] == 2, f.text
    emb = client.post(f"/t/{TASK}/v1/embeddings", json={"input": q})
    assert emb.status_code == 200, emb.text
    return q


def test_every_length_under_the_limit_is_served_stored_and_learned(
        world: dict[str, Any], registry: str, tmp_path: Path, minilm: Any,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    from tttembed.loop.config import LoopConfig
    from tttembed.loop.run import Loop
    from tttembed.serve import create_app

    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    app = create_app(index=str(world["root"] / "index"), registry=registry, embedder=minilm,
                     registry_poll_s=0.1)
    with TestClient(app) as client:
        questions = [_traffic(client, n, seed) for seed, n in enumerate(LENGTHS)]
    loop = Loop(LoopConfig(registry=registry, index=str(world["root"] / "index"),
                           judge="none", corpus=str(world["corpus"]), min_queries=2,
                           click_settle_s=0.0, learn_every=1))
    try:
        store = loop.store
        assert {s.query for s in store.searches()} >= set(questions)
        assert {f.query for f in store.feedback()} == set(questions)
        assert store.event_counts() == {"click": len(LENGTHS)}
        for _ in range(5):
            loop.step()
        learned = {q for (_, q) in _learned_queries(loop)}
        assert set(questions) <= learned, "the learner did not read every long question"
        assert loop.registry.versions(), "no version was learned from the long questions"
    finally:
        loop.close()


def _learned_queries(loop: Any) -> set[tuple[str, str]]:
    from tttembed.loop.rewarded import collect

    judged, *_ = collect(loop.store, loop.learner.clicks)
    return set(judged)


@pytest.mark.parametrize("route", ["search", "embeddings", "feedback"])
def test_a_query_over_the_limit_is_a_413_naming_it(world: dict[str, Any],  # noqa: F811
                                                   tmp_path: Path, minilm: Any,
                                                   route: str) -> None:
    from starlette.testclient import TestClient

    from tttembed.serve import create_app

    app = create_app(index=str(world["root"] / "index"), registry=str(tmp_path / "reg"),
                     embedder=minilm, max_query_chars=500)
    long = "x " * 251
    path, body = {
        "search": ("/v1/search", {"queries": ["short", long], "task": TASK}),
        "embeddings": (f"/t/{TASK}/v1/embeddings", {"input": long}),
        "feedback": ("/v1/feedback", {"query": long, "task": TASK,
                                      "doc_id": next(iter(world["raw"].values()))[0],
                                      "label": 1}),
    }[route]
    with TestClient(app) as client:
        r = client.post(path, json=body)
        ok = client.post(path, json={**body, **{k: v.replace(long, "x" * 500) for k, v in
                                                 body.items() if isinstance(v, str)}})
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "query_too_long" and "at most 500" in error["message"]
    assert "502 characters" in error["message"]
    if route != "search":
        assert ok.status_code in (200, 202), ok.text


def test_feedback_refuses_the_reserved_chain_task_as_search_does(
        world: dict[str, Any], tmp_path: Path, minilm: Any) -> None:  # noqa: F811
    """issue 64 trust round 5: /v1/feedback took labels under "/chain", which /v1/search
    refuses; now both answer 400 invalid_task."""
    from starlette.testclient import TestClient

    from tttembed.serve import create_app

    app = create_app(index=str(world["root"] / "index"), registry=str(tmp_path / "reg"),
                     embedder=minilm)
    doc = next(iter(world["raw"].values()))[0]
    with TestClient(app) as client:
        s = client.post("/v1/search", json={"query": "a fish", "task": "/chain"})
        f = client.post("/v1/feedback", json={"query": "a fish", "task": "/chain",
                                              "doc_id": doc, "label": 1})
    assert s.status_code == f.status_code == 400, f.text
    assert s.json()["error"]["code"] == f.json()["error"]["code"] == "invalid_task"
