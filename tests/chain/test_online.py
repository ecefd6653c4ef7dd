"""chain/online.py: the server's batches of questions share token offsets, and chain_run
is the greedy or beam search of chain search."""

from __future__ import annotations

import numpy as np

from tttembed.chain.online import QuestionTexts, chain_run
from tttembed.chain.search import beam_chain, greedy_chain
from tttembed.chain.states import StateTexts, TokenBudget


class WordTokenizer:
    """A whitespace tokenizer with offsets (the shape TokenBudget reads)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, texts, add_special_tokens=False, return_offsets_mapping=False):
        self.calls += 1
        many = isinstance(texts, list)
        out = []
        for t in texts if many else [texts]:
            offs, at = [], 0
            for w in t.split():
                at = t.index(w, at)
                offs.append((at, at + len(w)))
                at += len(w)
            out.append(offs)
        key = "offset_mapping" if return_offsets_mapping else "input_ids"
        return {key: out if many else out[0]}


PASSAGES = ["alpha beta gamma delta", "beta gamma epsilon", "gamma delta zeta eta",
            "theta iota kappa", "alpha zeta"]
WORDS = sorted({w for p in PASSAGES for w in p.split()} | {"who", "what"})


def encode(texts):
    x = np.array([[t.split().count(w) for w in WORDS] for t in texts], np.float32) + 0.01
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def search(Q, k):
    P = encode(PASSAGES)
    sims = Q @ P.T
    ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, ids, axis=1), ids


def test_batches_share_offsets_and_chain_run_is_chain_search():
    tok = WordTokenizer()
    budget = TokenBudget(tok, 6)
    texts = QuestionTexts(PASSAGES, budget)
    first = texts.of(["who alpha", "what gamma"])
    first.texts([(0, (0, 1)), (1, (2,))])
    calls = tok.calls
    second = texts.of(["who zeta"])
    second.texts([(0, (0, 1))])   # passages 0 and 1 are tokenised already
    assert tok.calls == calls + 1  # only the new question
    qs = ["who alpha", "what gamma", "who zeta"]
    for beam in (1, 2):
        got = chain_run(3, texts.of(qs), encode, search, steps=2, beam=beam, depth=3, keep=5)
        offline = StateTexts(qs, PASSAGES, budget=TokenBudget(WordTokenizer(), 6))
        want = greedy_chain(3, offline, encode, search, 2, depth=3, keep=5) if beam == 1 \
            else beam_chain(3, offline, encode, search, 2, width=2, depth=3, keep=5)
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_array_equal(got.picked, want.picked)
