"""Method auto when the rewards are click rates (the loop with clicks): the documents a
held-out re-search brings in must be valued on the clicks' scale (``shared_pay``, the
loop's :class:`~tttembed.loop.nojudge.FloorOrPay`), not by a judge's 0-1 score, or every
change that swaps a shown irrelevant document (a click rate above 0) for an unshown one
(the judge's 0) reads as a loss (issue 62: live, the task part that lifts SciFact's
held-out questions was measured at -0.10 and never kept).

The task: per question its relevant document sits in the raw top 10, offset along a
shared direction e1; nine irrelevant documents around it are shown; six more irrelevant
ones lie further along e1, outside the raw top 10. The task vector learned from the
click rates (relevant 0.3, irrelevant 0.1) moves the relevant document up and pulls some
of the far ones into the list in place of shown irrelevant ones.
"""

from __future__ import annotations

import numpy as np

import tttembed.api as tt
from tests.ttt.test_guard import D, TableEmbedder, _ndcg, documents
from tttembed.data.beir import corpus_fingerprint
from tttembed.embed.base import l2_normalize
from tttembed.index.store import write_index
from tttembed.loop.nojudge import FloorOrPay

CLICK_REL, CLICK_IRR = 0.3, 0.1


def _reorder_task(tmp_path, nq: int = 40):
    rng = np.random.default_rng(3)
    e0, e1 = np.eye(D)[0], np.eye(D)[1]
    table, queries = {}, {}
    ids, vecs, docs, qrels, add = documents()
    for i in range(nq):
        q, n = f"q{i}", np.zeros(D)
        n[3:] = rng.normal(size=D - 3) * 0.3
        queries[q], qrels[q] = f"question {i}", {}
        table[f"question {i}"] = l2_normalize((e0 + n)[None])[0]
        add(q, f"r{i}", e0 + n + 0.15 * e1 + rng.normal(size=D) * 0.01, True)
        for j in range(9):
            m = np.zeros(D)
            m[3:] = rng.normal(size=D - 3) * (0.03 if j < 2 else 0.2)
            add(q, f"x{i}_{j}", e0 + n + m, False)
        for j in range(6):
            m = np.zeros(D)
            m[3:] = rng.normal(size=D - 3) * 0.12
            add(q, f"y{i}_{j}", e0 + n + 0.6 * e1 + m, False)
    table.update(zip(ids, vecs))
    write_index(tmp_path / "idx", ids, np.array(vecs, np.float32), embedder_identity="test:table",
                embedder_spec="test:table", corpus_fingerprint=corpus_fingerprint(docs))
    return tt.open_index(tmp_path / "idx"), TableEmbedder(table), docs, queries, qrels


def _select(tmp_path, shared: str):
    """Method auto's task part on click-rate rewards of every shown document, the judge
    paying labels (0/1); ``shared``: what values the held-out lists' new documents."""
    from tests.ttt.test_select import _auto_sources, _labels_pay
    from tttembed.ttt.distil import learn_auto

    index, emb, docs, queries, qrels = _reorder_task(tmp_path)
    sources = _auto_sources(index, emb, queries, ["t"])
    qs, base, _ = sources[0]
    rewards = {k: {index.doc_ids[r]: CLICK_REL if index.doc_ids[r].startswith("r") else CLICK_IRR
                   for r in row[:10]} for k, row in zip(qs.keys, base.rows)}
    judge: list = []
    pay = _labels_pay(qrels, judge)
    floors = {k: CLICK_IRR for k in qs.keys}
    state = learn_auto(sources, rewards, pay, validate_cap=400, scopes=("task",),
                       shared_pay=FloorOrPay(floors, pay) if shared == "floor" else None)
    return state, judge, (index, emb, queries, qrels)


def test_click_rated_lists_value_new_documents_at_the_floor(tmp_path):
    """Under the judge's 0 for every new document the task part's evidence is lower and
    auto keeps less of it (a smaller alpha, a lower nDCG@10 by the labels); at the floor
    nothing is paid, the task part is kept with its interval above 0 and lifts the
    questions."""
    by_judge, paid, (index, emb, queries, qrels) = _select(tmp_path / "judge", "judge")
    assert paid  # the judge valued the new documents
    by_floor, paid, _ = _select(tmp_path / "floor", "floor")
    assert paid == []  # every held-out query is click-rated: nothing paid
    judge_ev = by_judge.selection["evidence"]["t"]["task"]
    floor_ev = by_floor.selection["evidence"]["t"]["task"]
    assert by_floor.selection["shared"]["t"] == "task" and floor_ev["ci_low"] > 0
    assert judge_ev["gain"] < floor_ev["gain"] - 0.03
    raw = _ndcg(index, emb, queries, qrels)
    floor_ndcg = _ndcg(index, emb, queries, qrels, [by_floor])
    assert floor_ndcg > raw + 0.3
    assert _ndcg(index, emb, queries, qrels, [by_judge]) < floor_ndcg - 0.05


def test_floor_or_pay_pays_only_queries_without_a_floor():
    calls: list = []

    def pay(pairs):
        calls.append(list(pairs))
        return {k: {d: 1.0} for k, d in pairs}

    got = FloorOrPay({"t/#a": 0.07}, pay)([("t/#a", "d1"), ("t/#b", "d2"), ("t/#a", "d3")])
    assert got == {"t/#a": {"d1": 0.07, "d3": 0.07}, "t/#b": {"d2": 1.0}}
    assert calls == [[("t/#b", "d2")]]
    assert FloorOrPay({"t/#a": 0.07}, pay)([("t/#a", "d1")]) == {"t/#a": {"d1": 0.07}}
    assert len(calls) == 1  # nothing to pay: the judge is not called
