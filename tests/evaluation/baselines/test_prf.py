from __future__ import annotations

import numpy as np
import pytest

from tttembed.core.errors import DataError
from tttembed.evaluation.baselines.prf import average_prf, reward_rocchio, rocchio_prf, unit_rows


def _data(n=4, k=5, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return unit_rows(rng.normal(size=(n, d))), unit_rows(rng.normal(size=(n, k, d)))


def test_average_prf_is_the_unit_mean_of_query_and_top_k():
    x, z = _data()
    got = average_prf(x, z, k=3)
    want = unit_rows(x + z[:, 0] + z[:, 1] + z[:, 2])
    assert np.allclose(got, want, atol=1e-6)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_rocchio_prf_weights():
    x, z = _data()
    got = rocchio_prf(x, z, k=2, a=1.0, b=0.5)
    assert np.allclose(got, unit_rows(x + 0.5 * (z[:, 0] + z[:, 1]) / 2), atol=1e-6)
    # b = 0 leaves the query unchanged
    assert np.allclose(rocchio_prf(x, z, k=2, b=0.0), x, atol=1e-6)


def test_prf_checks_shapes_and_depth():
    x, z = _data()
    with pytest.raises(DataError):
        average_prf(x, z, k=6)
    with pytest.raises(DataError):
        average_prf(x[:2], z)


def test_reward_rocchio_moves_towards_rewarded_documents():
    x, z = _data(n=2, k=4)
    r = [np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0, np.nan])]
    got = reward_rocchio(x, list(z), r, beta=0.75, gamma=0.15)
    want0 = unit_rows(x[0] + 0.75 * z[0, 0] - 0.15 * (z[0, 1] + z[0, 2] + z[0, 3]) / 3)
    want1 = unit_rows(x[1] + 0.75 * z[1, 2] - 0.15 * (z[1, 0] + z[1, 1]) / 2)  # nan ignored
    assert np.allclose(got[0], want0, atol=1e-6)
    assert np.allclose(got[1], want1, atol=1e-6)
    for q in range(2):
        best = int(np.nanargmax(r[q]))
        assert got[q] @ z[q, best] > x[q] @ z[q, best]


def test_reward_rocchio_edge_cases():
    x, z = _data(n=2, k=3)
    all_nan = [np.full(3, np.nan), np.ones(3)]
    got = reward_rocchio(x, list(z), all_nan, gamma=0.15)
    assert np.allclose(got[0], x[0], atol=1e-6)  # nothing usable: unchanged
    assert np.allclose(got[1], unit_rows(x[1] + 0.75 * z[1].mean(axis=0)), atol=1e-6)
    with pytest.raises(DataError):
        reward_rocchio(x, list(z), [np.ones(2), np.ones(3)])
