"""The vectorised chain search against the plain-Python rule it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.chain.search import (
    beam_chain,
    best_scores,
    final_ranking,
    first_free,
    greedy_chain,
    lookup_best,
    rankings,
)
from tttembed.chain.states import StateTexts, TokenBudget, format_state


def _reference_greedy(n, text_of, encode, search, steps, depth, keep):
    """The original per-question loops: dict of best scores, first free row per state."""
    picked = np.full((n, steps), -1, dtype=np.int64)
    scores = np.full((n, steps), -np.inf, dtype=np.float32)
    best = [{} for _ in range(n)]
    for t in range(steps):
        hists = [[int(x) for x in picked[qi, :t] if x >= 0] for qi in range(n)]
        Q = encode([text_of(qi, h) for qi, h in enumerate(hists)])
        sims, ids = search(Q, depth + t)
        for qi in range(n):
            for d, row in zip(sims[qi], ids[qi]):
                r = int(row)
                if r >= 0 and (r not in best[qi] or d > best[qi][r]):
                    best[qi][r] = float(d)
            for d, row in zip(sims[qi], ids[qi]):
                if row >= 0 and int(row) not in hists[qi]:
                    picked[qi, t], scores[qi, t] = int(row), d
                    break
    ranks = [final_ranking(picked[qi], best[qi], keep) for qi in range(n)]
    return picked, scores, ranks


class RandomSpace:
    """A tiny random embedding space with coarse (tie-prone) scores."""

    def __init__(self, n_docs=40, dim=6, seed=0):
        rng = np.random.default_rng(seed)
        self.docs = rng.normal(size=(n_docs, dim)).astype(np.float32)
        self.dim = dim

    def encode(self, texts):
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim)
                        for t in texts]).astype(np.float32)
        return out

    def search(self, Q, k):
        S = np.round(Q @ self.docs.T, 1).astype(np.float32)     # rounding makes ties
        k_eff = min(k, S.shape[1])
        idx = np.argsort(-S, axis=1, kind="stable")[:, :k_eff]
        sims = np.take_along_axis(S, idx, axis=1)
        if k > k_eff:                                           # FAISS pads with -1
            pad = k - k_eff
            idx = np.hstack([idx, -np.ones((len(Q), pad), np.int64)])
            sims = np.hstack([sims, np.full((len(Q), pad), -np.inf, np.float32)])
        return sims, idx


def _text(qi, hist):
    return f"q{qi}:" + ",".join(map(str, hist))


@pytest.mark.parametrize("seed,n_docs,depth,keep", [(0, 40, 8, 12), (1, 6, 8, 12),
                                                     (2, 40, 3, 2), (3, 25, 30, 100)])
def test_greedy_equals_the_reference_loops(seed, n_docs, depth, keep):
    space = RandomSpace(n_docs=n_docs, seed=seed)
    run = greedy_chain(17, _text, space.encode, space.search, 4, depth=depth, keep=keep)
    picked, scores, ranks = _reference_greedy(17, _text, space.encode, space.search, 4,
                                              depth, keep)
    np.testing.assert_array_equal(run.picked, picked)
    np.testing.assert_array_equal(run.picked_scores, scores)
    for qi, (rows, rscores) in enumerate(ranks):
        got = run.ranking[qi][run.ranking[qi] >= 0].tolist()
        assert got == rows
        np.testing.assert_array_equal(run.ranking_scores[qi, :len(rows)],
                                      np.array(rscores, dtype=np.float32))


def test_rankings_match_final_ranking_on_random_tables():
    rng = np.random.default_rng(7)
    n, T = 9, 3
    owner = np.repeat(np.arange(n), 30)
    rows = rng.integers(-1, 20, size=owner.size)
    sims = np.round(rng.normal(size=owner.size), 1).astype(np.float32)
    picked = np.full((n, T), -1, dtype=np.int64)
    for qi in range(n):
        mine = rows[(owner == qi) & (rows >= 0)]
        m = int(rng.integers(0, T + 1))
        picked[qi, :m] = rng.permutation(np.unique(mine))[:m]
    for keep in (1, 3, 10, 50):
        R, S = rankings(picked, owner, rows, sims, keep)
        table = best_scores(owner, rows, sims)
        for qi in range(n):
            best = {int(r): float(s) for q, r, s in zip(*table) if q == qi}
            want_rows, want_scores = final_ranking(picked[qi], best, keep)
            assert R[qi][R[qi] >= 0].tolist() == want_rows
            np.testing.assert_array_equal(S[qi, :len(want_rows)],
                                          np.array(want_scores, dtype=np.float32))
        looked = lookup_best(table, picked)
        for qi in range(n):
            for t in range(T):
                r = picked[qi, t]
                mask = (owner == qi) & (rows == r)
                want = sims[mask].max() if r >= 0 and mask.any() else -np.inf
                assert looked[qi, t] == want


def test_first_free_skips_taken_rows_and_padding():
    ids = np.array([[3, 1, 2], [-1, 4, 5], [7, 7, -1]])
    taken = np.array([[3, -1], [5, 4], [7, -1]])
    has, first = first_free(ids, taken)
    assert has.tolist() == [True, False, False]
    assert first[0] == 1


def test_beam_picked_scores_are_best_scores_of_the_question():
    space = RandomSpace(n_docs=30, seed=4)
    calls = []

    def search(Q, k):
        out = space.search(Q, k)
        calls.append(out)
        return out

    run = beam_chain(5, _text, space.encode, search, 3, width=3, depth=6, keep=20)
    assert (run.picked >= 0).all()
    for qi in range(5):
        assert len(set(run.picked[qi].tolist())) == 3
        assert run.ranking[qi, :3].tolist() == run.picked[qi].tolist()
        tail = run.ranking_scores[qi, 3:]
        tail = tail[np.isfinite(tail)]
        assert np.all(np.diff(tail) <= 0)


def test_cached_state_texts_equal_format_state():
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a", "river", "town", "is", "on",
             "coast", "who", "where", "painter", "born", "##s", "bay", "in"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tok = BertTokenizerFast(str(Path(tmp) / "vocab.txt"))
    budget = TokenBudget(tok, 9)
    passages = ["the river is on the coast", "a town is on the bay", "painter born in a town",
                "who is where"]
    questions = ["where is the painter born", "the town"]
    texts = StateTexts(questions, passages, budget=budget)
    for qi in range(2):
        for hist in [(), (0,), (1, 2), (3, 0, 2), (2, 1, 0, 3)]:
            want = format_state(questions[qi], [passages[r] for r in hist],
                                budget=budget.budget, count=budget.count, cut=budget.cut)
            assert texts.text(qi, hist) == want
            assert texts.text(qi, list(hist)) == want          # cached, same answer
    batch = [(qi, hist) for qi in range(2) for hist in [(), (3, 0), (2, 1, 0, 3)]]
    fresh = StateTexts(questions, passages, budget=budget)
    assert fresh.prepare() == len(questions) + len(passages)
    assert fresh.prepare() == 0                                   # nothing left to do
    assert fresh.texts(batch) == [texts.text(qi, h) for qi, h in batch]
    fresh.forget_states()
    assert fresh.texts(batch) == StateTexts(questions, passages, budget=budget).texts(batch)
