"""The guard on the new parts (tasks of :mod:`tests.ttt.test_guard`, whose answer is known):
an adapter that hurts held-out queries is refused (alpha 0, and ``auto`` keeps raw), a
helpful one is kept, and ``auto``'s menu holds adapter and neighbour."""

from __future__ import annotations

import pytest

import tttembed.api as tt
from tests.ttt.test_guard import _ndcg, _task
from tttembed.score.qrels import QrelsScorer
from tttembed.ttt.select import METHODS, Selection


def _learn(index, emb, docs, queries, qrels, **kw):
    return tt.learn(index, queries, scorer=QrelsScorer("labels", qrels=qrels), task="t",
                    embedder=emb, corpus=docs, **kw)


def test_the_guard_refuses_an_adapter_that_hurts_held_out_queries(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    raw = _ndcg(index, emb, queries, qrels)
    rule = _learn(index, emb, docs, queries, qrels, budget=10, scope="adapter")
    assert rule.scope == "adapter" and rule.parts.rank == 8
    assert _ndcg(index, emb, queries, qrels, [rule]) < raw - 0.3  # it does hurt
    auto = _learn(index, emb, docs, queries, qrels, budget=10, scope="adapter",
                  alpha="auto", validate_budget=10)
    assert auto.crossval["method"] == "judged-diff" and auto.alpha_chosen == "0"
    assert all(g["ci"][1] < 0 for g in auto.crossval["gains"] if g["alpha"] != "0")
    assert _ndcg(index, emb, queries, qrels, [auto]) == pytest.approx(raw)


def test_auto_keeps_raw_where_every_shared_part_hurts(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    raw = _ndcg(index, emb, queries, qrels)
    state = _learn(index, emb, docs, queries, qrels, budget=10, method="auto",
                   validate_budget=10)
    sel = Selection.from_dict(state.selection)
    assert {"adapter", "neighbour"} <= set(METHODS)
    assert "adapter" in sel.evidence["t"] and "neighbour" in sel.evidence["t"]
    assert sel.evidence["t"]["adapter"]["ci_high"] < 0
    assert sel.shared["t"] == "raw" and sel.neighbour["t"] == "none"
    assert _ndcg(index, emb, queries, qrels, [state]) >= raw - 1e-9


def test_a_helpful_adapter_is_kept_on_held_out_queries(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "helpful")
    raw = _ndcg(index, emb, queries, qrels)
    auto = _learn(index, emb, docs, queries, qrels, budget=3, scope="adapter",
                  alpha="auto", validate_budget=3)
    assert auto.crossval["method"] == "judged-diff" and auto.alpha_chosen != "0"
    assert _ndcg(index, emb, queries, qrels, [auto]) > raw + 0.3
