from __future__ import annotations

import numpy as np
import pytest

from tttembed.chain.search import (
    beam_chain,
    chain_metrics,
    chain_recall_at_k,
    complete_at_k,
    final_ranking,
    greedy_chain,
    next_picks,
    single_shot,
)
from tttembed.metrics.ranking import recall_at_k as beir_recall

N_DOCS = 8
DOCS = np.eye(N_DOCS, dtype=np.float32)


def brute_search(Q, k):
    S = Q @ DOCS.T
    idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(S, idx, axis=1), idx


class FakeEncoder:
    """The state text is 'q<i>' plus '|d<row>' per passage; the vector prefers the docs in
    ``prefs[(text)]`` with decreasing weight (a deterministic toy policy)."""

    def __init__(self, prefs):
        self.prefs = prefs
        self.calls = 0

    def __call__(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), N_DOCS), np.float32)
        for i, t in enumerate(texts):
            for rank, row in enumerate(self.prefs.get(t, [7])):
                out[i, row] = 1.0 - 0.1 * rank
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def text_of(qi, hist):
    return f"q{qi}" + "".join(f"|d{h}" for h in hist)


def test_greedy_skips_history_and_ranks_picked_first():
    enc = FakeEncoder({"q0": [0, 1, 2], "q0|d0": [0, 3, 1], "q0|d0|d3": [3, 0, 5],
                       "q1": [4], "q1|d4": [4, 6], "q1|d4|d6": [6, 4, 2]})
    run = greedy_chain(2, text_of, enc, brute_search, 3, depth=4, keep=6)
    assert run.picked.tolist() == [[0, 3, 5], [4, 6, 2]]
    assert enc.calls == 3                       # batched: one encoder call per step
    assert run.n_encoded == 6
    assert run.ranking[0, :3].tolist() == [0, 3, 5]
    # the tail is ordered by the best score any step gave (doc 1: 0.9/|v| at step 1)
    assert run.ranking[0, 3] == 1
    assert np.isinf(run.ranking_scores[0, :3]).all()
    tail = run.ranking_scores[0, 3:]
    assert np.all(np.diff(tail[np.isfinite(tail)]) <= 0)


def test_final_ranking_rule():
    rows, scores = final_ranking([5, 2], {1: 0.3, 2: 0.9, 5: 0.1, 7: 0.3, 8: 0.5}, keep=10)
    assert rows == [5, 2, 8, 1, 7]             # ties by row ascending
    assert scores[2:] == [0.5, 0.3, 0.3]
    assert final_ranking([5, 2], {1: 0.3, 8: 0.5}, keep=3)[0] == [5, 2, 8]


def test_beam_width_one_is_greedy_and_counts_encodings():
    prefs = {"q0": [0, 1, 2], "q0|d0": [3, 1], "q0|d0|d3": [5, 0]}
    greedy = greedy_chain(1, text_of, FakeEncoder(prefs), brute_search, 3, depth=4, keep=6)
    beam1 = beam_chain(1, text_of, FakeEncoder(prefs), brute_search, 3, width=1, depth=4,
                       keep=6)
    assert beam1.picked.tolist() == greedy.picked.tolist()
    beam3 = beam_chain(2, text_of, FakeEncoder(prefs), brute_search, 3, width=3, depth=4)
    assert beam3.n_encoded == 2 * (1 + 3 * 2)


def test_beam_finds_a_chain_greedy_misses():
    # greedy takes 0 (score 1.0) then is stuck with weak follow-ups; starting from 1
    # (0.9) leads to a strong second step
    prefs = {"q0": [0, 1], "q0|d0": [7], "q0|d1": [2]}
    enc = FakeEncoder(prefs)
    # make the follow-up of d0 weak: spread its vector over many docs
    def encode(texts):
        out = enc(texts)
        for i, t in enumerate(texts):
            if t == "q0|d0":
                out[i] = np.ones(N_DOCS, np.float32) / np.sqrt(N_DOCS)
        return out
    greedy = greedy_chain(1, text_of, encode, brute_search, 2, depth=4)
    beam = beam_chain(1, text_of, encode, brute_search, 2, width=2, depth=4)
    assert greedy.picked[0, 0] == 0
    assert beam.picked[0].tolist() == [1, 2]


def test_next_picks_and_single_shot():
    enc = FakeEncoder({"q0": [3, 2], "q0|d3": [3, 2]})
    picks, scores, sims, ids = next_picks([(0, ()), (0, (3,))], text_of, enc, brute_search, 2)
    assert picks.tolist() == [3, 2]
    assert scores[0] > scores[1]
    one = single_shot(1, text_of, enc, brute_search, keep=4)
    assert one.ranking[0, :2].tolist() == [3, 2]


def test_small_corpus_pads_with_minus_one():
    enc = FakeEncoder({})
    run = greedy_chain(1, text_of, enc, brute_search, N_DOCS + 2, depth=2)
    assert sorted(run.picked[0, :N_DOCS].tolist()) == list(range(N_DOCS))
    assert run.picked[0, N_DOCS:].tolist() == [-1, -1]


def test_metrics_by_hand_and_against_the_beir_recall():
    ranking = np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]])
    golds = [[0, 4], [1, 2, 3, 9]]
    assert complete_at_k(ranking, golds, 5).tolist() == [1.0, 0.0]
    assert complete_at_k(ranking, golds, 2).tolist() == [0.0, 0.0]
    assert chain_recall_at_k(ranking, golds, 3).tolist() == [0.5, 0.25]
    qrels = {f"q{i}": {f"d{g}": 1 for g in gold} for i, gold in enumerate(golds)}
    run = {f"q{i}": {f"d{r}": 1.0 / (1 + p) for p, r in enumerate(row)}
           for i, row in enumerate(ranking)}
    ours = chain_recall_at_k(ranking, golds, 3)
    theirs = beir_recall(qrels, run, 3)
    assert ours.tolist() == pytest.approx([theirs["q0"], theirs["q1"]])
    m = chain_metrics(ranking, golds)
    assert m["all"]["C@5"] == 50.0 and m["all"]["n"] == 2
    assert m["by_hops"][2]["C@5"] == 100.0 and m["by_hops"][4]["C@10"] == 0.0


def test_next_picks_can_exclude_rows_the_text_no_longer_shows():
    enc = FakeEncoder({"q0": [3, 2, 1]})
    picks, _, _, _ = next_picks([(0, ()), (0, ())], text_of, enc, brute_search, 2,
                                exclude=[[3], [3, 2]])
    assert picks.tolist() == [2, 1]
