from __future__ import annotations

import numpy as np

from tttembed.chain.analysis import (
    delete_wrong,
    deletion_counterfactual,
    state_mismatch,
    success_by_wrong,
)

N = 6
DOCS = np.eye(N, dtype=np.float32)


def search(Q, k):
    S = Q @ DOCS.T
    idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(S, idx, axis=1), idx


def text_of(qi, hist):
    return f"q{qi}" + "".join(f"|d{h}" for h in hist)


def encode_prefs(prefs):
    def encode(texts):
        out = np.full((len(texts), N), 0.01, np.float32)
        for i, t in enumerate(texts):
            for rank, row in enumerate(prefs.get(t, [5])):
                out[i, row] = 1.0 - 0.1 * rank
        return out / np.linalg.norm(out, axis=1, keepdims=True)
    return encode


def test_state_mismatch_counts_states_missing_gold_with_a_wrong_passage():
    golds = [[0, 1], [2, 3], [4, 5]]
    picked = np.array([[0, 1, 5], [9, 2, 3], [4, 0, 5]])
    rows = state_mismatch(picked, golds)
    # step 2 (one passage): all three miss gold, one holds a wrong passage (9)
    assert rows[0] == {"step": 2, "states": 3, "with_wrong": 1, "share_wrong": 33.33}
    # step 3: q0 is complete; q1 (9, 2) and q2 (4, 0) both hold a wrong passage
    assert rows[1] == {"step": 3, "states": 2, "with_wrong": 2, "share_wrong": 100.0}


def test_success_buckets_and_deletion():
    golds = [[0, 1, 2]]
    states = [(0, (0,)), (0, (0, 4)), (0, (4, 3))]
    ok = np.array([True, False, True])
    table = success_by_wrong(ok, states, golds)
    assert table["0"] == {"rate": 100.0, "n": 1}
    assert table["1"] == {"rate": 0.0, "n": 1}
    assert table[">=2"] == {"rate": 100.0, "n": 1}
    assert delete_wrong(states, golds) == [(0, (0,)), (0, (0,)), (0, ())]
    # with the wrong passage in the text the encoder goes astray; without it, it finds 1;
    # the deleted passage (4) stays excluded although the clean text prefers it
    enc = encode_prefs({"q0|d0|d4": [5, 3], "q0|d0": [4, 1], "q0|d4|d3": [5]})
    res = deletion_counterfactual(states[1:2], golds, text_of, enc, search, depth=3)
    assert res == {"n": 1, "original": 0.0, "deleted": 100.0, "cost": 100.0}
