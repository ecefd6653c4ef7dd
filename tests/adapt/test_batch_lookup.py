"""The adaptation step in one pass over a batch: the batch keys are each query's own
:func:`group_key`, and the whole-batch path gives ``unit(x + alpha v)`` bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt import make_groups
from tttembed.adapt.apply import BLOCK, apply_states, lookup_keys
from tttembed.adapt.scopes import group_key, query_digest, query_digests, query_keys
from tttembed.adapt.state import AdaptState

TEXTS = ["a  query", " a query ", "Caf\u00e9 cr\u00e8me", "Cafe\u0301 cre\u0300me", "tab\tand\nnewline",
         "", "\u00c5ngstr\u00f6m", "lone \udcff surrogate", "plain"]


def test_batch_digests_and_keys_are_each_querys_own():
    tasks = [f"t{i % 2}" for i in range(len(TEXTS))]
    assert query_digests(TEXTS) == [query_digest(t) for t in TEXTS]
    assert query_digests(TEXTS)[2] == query_digests(TEXTS)[3]  # NFC: the same text
    for scope in ("global", "task", "query", "adapter", "neighbour"):
        assert query_keys(scope, TEXTS, tasks) == [group_key(scope, t, q)
                                                   for q, t in zip(TEXTS, tasks)]


def naive(x: np.ndarray, st: AdaptState, keys: list[str]) -> np.ndarray:
    """``unit(x + alpha_g v_g)`` query by query (unchanged where the key is unknown)."""
    out = x.copy()
    for i, k in enumerate(keys):
        g = st.index().get(k)
        if g is not None:
            u = x[i:i + 1] + (st.alpha[[g], None] * st.vectors[[g]]).astype(np.float32)
            out[i] = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    return out


@pytest.mark.parametrize("scope", ["global", "task", "query"])
@pytest.mark.parametrize("n", [1, BLOCK - 1, 3 * BLOCK + 5])
def test_the_whole_batch_path_gives_unit_x_plus_alpha_v_bit_for_bit(scope, n):
    rng = np.random.default_rng(n)
    texts = [f"query {i % 50}" for i in range(n)]
    tasks = [f"t{i % 3}" for i in range(n)]
    g = make_groups(scope, [f"q{i}" for i in range(n)], tasks, texts)
    c = g.counts
    st = AdaptState(scope, tuple(g.keys), rng.normal(size=(len(g.keys), 16)).astype(
        np.float32) * 0.1, c / (c + 1.0), c, identity="x", dim=16)
    x = rng.normal(size=(n, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    keys = lookup_keys([st], texts, tasks)
    got = apply_states(x, keys, [st])
    np.testing.assert_array_equal(got, naive(x, st, keys[next(iter(keys))]))
    partial = tasks[:-1] + ["unknown"]  # one query without a state: the general path
    keys = lookup_keys([st], texts, partial)
    want = naive(x, st, keys[next(iter(keys))])
    np.testing.assert_array_equal(apply_states(x, keys, [st]), want)
    if scope != "global":
        np.testing.assert_array_equal(want[-1], x[-1])
