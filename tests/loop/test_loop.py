"""The closed loop end to end in one process: served traffic in the store -> the
background judge (a real rerank server on 127.0.0.1 speaking Cohere's wire format,
scoring from judgments by text) -> a learning cycle -> a registered, promoted version
that serves the rewarded texts better; a judge that turns against itself freezes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serve.conftest import DOCS as SERVE_DOCS
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")

DOCS = {**SERVE_DOCS,
        "d11": "Ferrets are playful, curious and sleep up to fourteen hours.",
        "d12": "Guinea pigs squeak loudly and need vitamin C in their food."}
QUERIES = ["which pet talks like a person", "animal that lives in an aquarium",
           "pet that sleeps all day", "what do bunnies eat", "long lived reptile with armor",
           "animal that needs walking", "pet that sings", "animal kept in a stable"]
TASK = "pets"


class Judgments:
    """The rerank server's scores: 1 for the query's relevant document (chosen at raw
    rank 4, so that raw retrieval is wrong), 0 otherwise; ``inverted`` turns it around."""

    def __init__(self, relevant: dict[str, str]) -> None:
        self.relevant = relevant
        self.inverted = False

    def __call__(self, query: str, documents: list[str]) -> list[float]:
        hit = self.relevant.get(query)
        scores = [1.0 if DOCS.get(hit or "") == d else 0.0 for d in documents]
        return [1.0 - s for s in scores] if self.inverted else scores


@pytest.fixture(scope="module")
def world(tmp_path_factory, minilm) -> dict[str, Any]:
    import tttembed.api as tt

    root = tmp_path_factory.mktemp("loop")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                              for d, t in DOCS.items()))
    docs = {d: {"title": "", "text": t} for d, t in DOCS.items()}
    index = tt.index_corpus(docs, root / "index", embedder=minilm)
    x = minilm.encode(QUERIES, "query")
    _, rows = index.search(np.asarray(x, np.float32), len(DOCS))
    ids = index.doc_ids
    raw = {q: [ids[r] for r in row] for q, row in zip(QUERIES, rows)}
    return {"root": root, "corpus": corpus, "index": index, "raw": raw,
            "relevant": {q: raw[q][3] for q in QUERIES}}


def audit_folder(world: dict[str, Any], folder: Path) -> str:
    """People's judgments of the queries as a BEIR folder (each query's relevant
    document): the ``--audit`` spec."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"a{i}", "text": q}) + "\n" for i, q in enumerate(QUERIES)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"a{i}\t{world['relevant'][q]}\t1\n" for i, q in enumerate(QUERIES)))
    (folder / "corpus.jsonl").write_text(world["corpus"].read_text())
    return f"qrels:{folder}"


def _log_traffic(store: Any, world: dict[str, Any], version: str | None = None) -> None:
    from tttembed.loop.store import SearchLog

    now = time.time()
    store.log_searches([SearchLog(f"s{i}-{now}", TASK, q, now, version,
                                  tuple(world["raw"][q][:10]))
                        for i, q in enumerate(QUERIES)])


def _loop(world: dict[str, Any], tmp_path: Path, server: LocalOpenAIServer, **kw: Any) -> Any:
    from tttembed.loop.config import LoopConfig
    from tttembed.loop.run import Loop

    kw.setdefault("min_queries", 2)  # this world has 8 queries (the default needs 20)
    config = LoopConfig(registry=str(tmp_path / "reg"), index=str(world["root"] / "index"),
                        judge=f"rerank:test@{server.url}", corpus=str(world["corpus"]),
                        judge_rpm=60_000, **kw)
    return Loop(config)


def _until_idle(loop: Any, steps: int = 60) -> None:
    for _ in range(steps):
        loop.step()
        if loop.state.idle:
            return
        time.sleep(0.01)
    raise AssertionError(f"not idle after {steps} steps: {loop.state}")


def _ndcg_served(world: dict[str, Any], loop: Any) -> float:
    from tttembed.loop.promote import adapted, top_lists

    name = loop.registry.served()
    states = [loop.registry.get(name).load()] if name else []
    x = loop.learner.embedder.encode(QUERIES, "query")
    lists = top_lists(loop.index, adapted(x, QUERIES, [TASK] * len(QUERIES), states))
    rel = world["relevant"]
    return float(np.mean([1 / np.log2(lst.index(rel[q]) + 2) if rel[q] in lst else 0.0
                          for q, lst in zip(QUERIES, lists)]))


def test_a_cycle_registers_and_promotes_a_version_that_serves_better(world, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    judge = Judgments(world["relevant"])
    with LocalOpenAIServer(rerank=judge) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=500)
        _log_traffic(loop.store, world)
        before = _ndcg_served(world, loop)
        _until_idle(loop)
        status = json.loads((tmp_path / "reg" / "loop.json").read_text())
    versions = loop.registry.versions()
    assert [v.name for v in versions] == ["v1"]
    v1 = versions[0]
    assert v1.promoted and loop.registry.served() == "v1", v1.manifest["reason"]
    assert v1.manifest["evidence"]["ci_low"] > 0
    assert v1.manifest["pairs"]["judged"] == 10 * len(QUERIES)  # every served pair once
    after = _ndcg_served(world, loop)
    assert after > before + 0.2, (before, after)
    assert status["idle"] and status["cycles"] == 1 and not status["frozen"]
    assert status["pairs_judged"] == (10 * len(QUERIES) + status["drift_pairs"]
                                      + v1.manifest["pairs"]["validation"])
    assert status["judge_budget_left"] == 500 - status["pairs_judged"]


def test_a_judge_that_turns_freezes_promotions_and_distrusts_its_rewards(world, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    judge = Judgments(world["relevant"])
    with LocalOpenAIServer(rerank=judge) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=2000)
        _log_traffic(loop.store, world)
        _until_idle(loop)
        assert loop.registry.served() == "v1"
        trusted = loop.store.counts()["rewards"]
        judge.inverted = True
        _log_traffic(loop.store, world, "v1")  # the same queries again, served by v1
        new_queries = {"a pet that squeaks": "d12", "playful animal that sleeps long": "d11"}
        judge.relevant.update(new_queries)
        from tttembed.loop.store import SearchLog

        now = time.time()
        loop.store.log_searches([SearchLog(f"n{i}", TASK, q, now, "v1", tuple(DOCS)[:10])
                                 for i, q in enumerate(new_queries)])
        _until_idle(loop)
        assert loop.state.frozen, loop.state
        assert "disagrees" in loop.state.reason
        assert loop.registry.served() == "v1"  # nothing promoted while frozen
        counts = loop.store.counts()
        # the turned rewards, and those judged since the last audit that passed
        assert counts["untrusted"] >= counts["rewards"] - trusted > 0
        judge.inverted = False
        from dataclasses import replace

        config = loop.config
        loop.config = replace(config, judge_budget=loop.spent())  # nothing left to audit
        loop.run_cycle("test")
        assert loop.state.frozen and "no judge budget left" in loop.state.reason
        loop.config = config
        loop.state.audited_at = 0.0  # a minute since the last audit: step() audits again,
        before = server.count()
        loop.step()  # with no new traffic: the timed re-audit re-scores nothing
        assert loop.state.frozen and server.count() == before
        loop.run_cycle("learn-every")  # the next learning cycle's audit re-scores
    assert not loop.state.frozen  # agreement returned
    assert [a["passed"] for a in loop.state.audits][-2:] == [None, True]


def test_an_audit_set_of_peoples_judgments_freezes_a_judge_that_disagrees(world, tmp_path,
                                                                         monkeypatch):
    """``--audit qrels:FOLDER``: the judge scores the audited pairs afresh each cycle; a
    judge whose AUC against people is low freezes promotions before anything is learned."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    spec = audit_folder(world, tmp_path / "audit")
    judge = Judgments(world["relevant"])
    judge.inverted = True  # wrong from the start: it agrees with itself, not with people
    with LocalOpenAIServer(rerank=judge) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=1000,
                     audit=spec)
        _log_traffic(loop.store, world)
        _until_idle(loop)
        assert loop.state.frozen and "agrees with people at audit AUC" in loop.state.reason
        assert loop.registry.versions() == [] and loop.registry.served() is None
        assert loop.state.audits[-1]["auc"] < 0.2
        judge.inverted = False
        loop.run_cycle("test")
    assert not loop.state.frozen and loop.state.audits[-1]["auc"] > 0.9
    # the rewards the wrong judge gave stay distrusted: nothing is learned from them
    assert loop.store.counts()["untrusted"] == 10 * len(QUERIES)
    assert loop.registry.versions() == [] and loop.state.last_cycle["reason"] == "no reward yet"
