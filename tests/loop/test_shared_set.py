"""The shared set (:mod:`tttembed.loop.shared_set`): a cycle's shared part is learned from
more rewarded texts than its window, its query part from the window."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ttt.test_guard import _task
from tttembed.loop.populations import is_query_key
from tttembed.loop.shared_set import shared_only, with_shared
from tttembed.loop.window import RecentTexts
from tttembed.ttt.distil import learn_auto
from tttembed.ttt.queries import QuerySet, base_retrieval


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """Method auto on a window of 8 rewarded texts (query and task parts) and on all of
    them with the task scope only (the shared set), on a task where a task part helps."""
    index, emb, _, queries, qrels = _task(tmp_path_factory.mktemp("shared"), "helpful")
    qs = QuerySet(("t",) * len(queries), tuple(queries), tuple(queries.values()))
    base = base_retrieval(index, emb, qs, 20)
    qid = dict(zip(qs.keys, qs.qids))
    rewards = {k: {index.doc_ids[r]: float(index.doc_ids[r] in qrels[qid[k]]) for r in row[:5]}
               for k, row in zip(qs.keys, base.rows)}

    def pay(pairs):
        out: dict[str, dict[str, float]] = {}
        for k, d in pairs:
            out.setdefault(k, {})[d] = float(d in qrels[qid[k]])
        return out

    window = qs.subset(list(range(8)))
    wbase = base_retrieval(index, emb, window, 20)
    cand = learn_auto([(window, wbase, index)], {k: rewards[k] for k in window.keys}, pay,
                      validate_cap=40, scopes=("query", "task"))
    shared = learn_auto([(qs, base, index)], rewards, pay, validate_cap=40, scopes=("task",))
    return cand, shared, len(qs)


def test_the_candidate_serves_its_query_part_under_the_shared_sets_shared_part(learned):
    cand, shared, n = learned
    assert cand is not None and shared is not None
    got = with_shared(cand, shared, n)
    assert got is not None and got.scope == "mixed"
    theirs = [k for k in shared.keys if not is_query_key(k)]
    mine = [k for k in cand.keys if is_query_key(k)]
    assert theirs and mine and list(got.keys) == theirs + mine
    for k in theirs:  # the shared rows are the shared set's, not the window's
        g, s = list(got.keys).index(k), list(shared.keys).index(k)
        assert np.allclose(got.vectors[g], shared.vectors[s])
        assert got.alpha[g] == shared.alpha[s] and got.n_g[g] == shared.n_g[s]
    for k in mine:
        g, c = list(got.keys).index(k), list(cand.keys).index(k)
        assert np.allclose(got.vectors[g], cand.vectors[c])
    sel = got.selection or {}
    assert sel["shared"] == (shared.selection or {})["shared"]
    assert sel["query"] == (cand.selection or {})["query"]
    assert sel["choice"]["t"] == "+".join(
        p for p in (sel["shared"]["t"], sel["query"]["t"]) if p not in ("raw", "none"))
    assert sel["evidence"]["t"]["task"] == (shared.selection or {})["evidence"]["t"]["task"]
    assert f"the shared set ({n} rewarded texts)" in sel["notes"][0]


def test_nothing_to_merge_leaves_either_as_it_is(learned):
    cand, shared, n = learned
    assert with_shared(cand, None, n) is cand
    assert with_shared(None, shared, n) is shared
    assert shared_only(("query", "task", "global")) == ("task", "global")


def test_the_shared_set_is_the_window_and_the_texts_changed_most_recently():
    recent: RecentTexts[str] = RecentTexts(window=2, remembered=10)
    rewards = {f"t{i}": {"d": 0.5} for i in range(4)}
    recent.pick(rewards)
    rewards["t3"] = {"d": 1.0}
    rewards["t9"] = {"d": 1.0}
    window = recent.pick(rewards)
    assert window == ["t3", "t9"]
    assert recent.latest(rewards, 3, keep=window) == ["t0", "t3", "t9"]
    assert recent.latest(rewards, 2, keep=["t1"]) == ["t1", "t3"]  # a kept one, then latest
    assert recent.latest(rewards, 10) == sorted(rewards)
