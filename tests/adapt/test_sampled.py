"""The judged diff with a sampled validation budget: exact when nothing is unpaid, linear
in the fills otherwise, and its interval widens with a small paid sample."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.sampled import (
    MIN_SAMPLE,
    OpenParts,
    fill_samples,
    fill_value,
    open_parts,
    sampled_gains,
)
from tttembed.adapt.validate import judged_deltas


def test_fully_judged_lists_give_the_exact_judged_diff():
    judged = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.2}
    base, lists = ["c", "b", "d"], [["c", "b", "d"], ["a", "b", "c"], ["d", "a", "b"]]
    known, opened, ob = open_parts(base, lists, judged, 3, fill_base=1.0)
    _, exact = judged_deltas(base, lists, judged, 3)
    np.testing.assert_allclose(known, exact)
    assert not opened.any() and ob == 0.0


def test_unpaid_documents_count_the_fill_linearly():
    judged = {"a": 1.0, "b": 0.0, "c": 0.9}  # ideal@2 = 1, 0.9 whatever x (<= 0.9) is worth
    known, opened, ob = open_parts(["a", "b"], [["x", "a"]], judged, 2, fill_base=0.0)
    assert ob == 0.0 and opened[0] > 0  # x at rank 1 is unpaid
    for f in (0.0, 0.3, 0.9):  # Delta = known + open * f, as if x had been paid: reward f
        _, exact = judged_deltas(["a", "b"], [["x", "a"]], dict(judged, x=f), 2)
        assert known[0] + opened[0] * f == pytest.approx(exact[0])
    # a judged pair without a usable reward counts 0, it is not "unpaid"
    k2, o2, _ = open_parts(["a"], [["n"]], {"a": 1.0, "n": float("nan")}, 1, 0.0)
    assert o2[0] == 0.0 and k2[0] == pytest.approx(-1.0)


def test_fill_samples_and_their_bounds():
    lists = [{"": ["a", "x"], "m": ["y", "a"]}, {"": ["b"], "m": ["z"]}]
    judged = [{"a": 1.0, "x": 0.5, "y": 0.25}, {"b": 1.0, "z": 0.75}]
    got = fill_samples(["t", "t"], lists, judged, {(0, "x"), (0, "y"), (1, "z")})
    np.testing.assert_allclose(sorted(got[("t", "m")]), [0.25, 0.75])
    np.testing.assert_allclose(got[("t", "")], [0.5])
    small = np.array([0.5] * (MIN_SAMPLE - 1))
    assert fill_value(small, True) == 1.0 and fill_value(small, False) == 0.0  # bounds
    assert fill_value(np.array([0.5] * MIN_SAMPLE), False) == 0.5


def test_the_interval_carries_the_samples_uncertainty():
    rng = np.random.default_rng(0)
    q = 60
    parts = OpenParts(np.full((q, 1), 0.05), np.full((q, 1), 0.2), np.zeros(q),
                      np.array(["t"] * q))
    wide = {("t", "m"): rng.random(MIN_SAMPLE)}
    narrow = {("t", "m"): np.resize(wide[("t", "m")], 400)}
    m1, lo1, hi1, d1 = sampled_gains(parts, ["m"], "", wide, n_boot=2000, rng=rng)
    m2, lo2, hi2, _ = sampled_gains(parts, ["m"], "", narrow, n_boot=2000, rng=rng)
    assert m1[0] == pytest.approx(m2[0]) == pytest.approx(0.05 + 0.2 * wide[("t", "m")].mean())
    assert (hi1 - lo1)[0] > 3 * (hi2 - lo2)[0]  # same mean, far wider with 5 paid documents
    np.testing.assert_allclose(d1[:, 0], m1[0])
    # nothing unpaid: the plain bootstrap of the known part (zero width for a constant)
    exact = OpenParts(np.full((q, 1), 0.05), np.zeros((q, 1)), np.zeros(q), np.array(["t"] * q))
    m3, lo3, hi3, _ = sampled_gains(exact, ["m"], "", {}, n_boot=500, rng=rng)
    assert (m3[0], lo3[0], hi3[0]) == pytest.approx((0.05, 0.05, 0.05))
