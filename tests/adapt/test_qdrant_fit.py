"""Qdrant's coefficients fitted on rewards already paid (``learn --method auto``)."""

from __future__ import annotations

import numpy as np

from tttembed.adapt.feedback import feedback_vector
from tttembed.adapt.qdrant_fit import CONTEXT_LIMIT, INIT, fit_on_rewards


def _query(rng, m, d=8):
    v = rng.normal(size=(m, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    scores = np.sort(rng.random(m))[::-1]
    feedback = rng.random(m)
    return scores, feedback, v


def test_too_short_a_judged_prefix_leaves_the_package_defaults():
    rng = np.random.default_rng(0)
    fit = fit_on_rewards(*zip(*[_query(rng, CONTEXT_LIMIT) for _ in range(10)]))
    assert fit.coef == INIT and not fit.fitted


def test_prefixes_of_two_lengths_fit_on_the_common_one():
    rng = np.random.default_rng(1)
    queries = [_query(rng, 10) for _ in range(12)] + [_query(rng, 8) for _ in range(3)]
    fit = fit_on_rewards(*zip(*queries))
    assert fit.fitted and fit.train_queries + fit.val_queries <= 12
    assert all(np.isfinite(fit.coef))
    s, f, v = queries[0]
    assert np.isfinite(feedback_vector(v[0], v, f, fit.coef)).all()
