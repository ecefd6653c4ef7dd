from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tttembed.core.errors import ConfigError, DataError
from tttembed.metrics.stats import (
    Comparison,
    aubc,
    compare,
    paired_bootstrap_ci,
    paired_randomization_test,
)

# --- randomization test ---------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 40])  # exact enumeration and Monte Carlo
def test_identical_inputs_give_p_one_and_ci_at_zero(n):
    a = np.random.default_rng(1).random(n)
    assert paired_randomization_test(a, a.copy()) == 1.0
    lo, hi = paired_bootstrap_ci(a, a.copy())
    assert lo <= 0.0 <= hi


def test_large_constant_shift_gives_tiny_p():
    a = np.random.default_rng(2).random(200)
    p = paired_randomization_test(a + 0.5, a, n_resamples=5000)
    assert p == pytest.approx(1 / 5001)  # no resample reaches the observed mean
    lo, hi = paired_bootstrap_ci(a + 0.5, a)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)


def test_exact_test_matches_scipy_exactly_on_small_inputs():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for n in (4, 7, 10):
        for _ in range(5):
            a, b = rng.random(n), rng.random(n) + 0.1
            ours = paired_randomization_test(a, b, n_resamples=10_000)
            theirs = stats.permutation_test(
                (a, b),
                lambda x, y, axis: np.mean(x - y, axis=axis),
                permutation_type="samples",
                vectorized=True,
                n_resamples=10_000,
                alternative="two-sided",
            ).pvalue
            assert ours == pytest.approx(theirs, abs=1e-12)


def test_monte_carlo_test_agrees_with_scipy_within_sampling_error():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    n = 30
    a = rng.normal(0.0, 1.0, n)
    b = a - rng.normal(0.3, 1.0, n)  # a modest effect: p somewhere around 0.01..0.5
    ours = paired_randomization_test(a, b, n_resamples=20_000, seed=5)
    theirs = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=20_000,
        alternative="two-sided",
        random_state=6,
    ).pvalue
    se = math.sqrt(theirs * (1 - theirs) / 20_000)
    assert abs(ours - theirs) < 5 * math.sqrt(2) * se + 1e-4
    assert 0.0 < ours < 1.0


def test_seeded_and_chunked_runs_are_deterministic(monkeypatch):
    rng = np.random.default_rng(8)
    a, b = rng.random(300), rng.random(300)
    p1 = paired_randomization_test(a, b, n_resamples=3000, seed=11)
    ci1 = paired_bootstrap_ci(a, b, n_resamples=3000, seed=11)
    assert paired_randomization_test(a, b, n_resamples=3000, seed=11) == p1
    assert paired_bootstrap_ci(a, b, n_resamples=3000, seed=11) == ci1
    assert paired_randomization_test(a, b, n_resamples=3000, seed=12) != p1
    # Chunk size changes the stream split, not the statistics: still a valid p-value.
    monkeypatch.setattr("tttembed.metrics.stats._CHUNK_ELEMENTS", 1000)
    p_small_chunks = paired_randomization_test(a, b, n_resamples=3000, seed=11)
    assert abs(p_small_chunks - p1) < 0.05


# --- bootstrap ------------------------------------------------------------------------


def test_bootstrap_ci_matches_scipy_percentile_interval():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(9)
    d = rng.normal(0.2, 1.0, 80)
    lo, hi = paired_bootstrap_ci(d, np.zeros_like(d), n_resamples=20_000, alpha=0.1)
    ref = stats.bootstrap(
        (d,),
        np.mean,
        method="percentile",
        n_resamples=20_000,
        confidence_level=0.9,
        random_state=1,
    ).confidence_interval
    width = ref.high - ref.low
    assert lo == pytest.approx(ref.low, abs=0.05 * width)
    assert hi == pytest.approx(ref.high, abs=0.05 * width)
    assert lo < d.mean() < hi


def test_bootstrap_ci_narrows_with_alpha():
    d = np.random.default_rng(10).normal(0, 1, 50)
    lo95, hi95 = paired_bootstrap_ci(d, np.zeros(50), alpha=0.05)
    lo50, hi50 = paired_bootstrap_ci(d, np.zeros(50), alpha=0.5)
    assert lo95 < lo50 < hi50 < hi95


# --- compare --------------------------------------------------------------------------


def test_compare_uses_common_queries_only():
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "only_a": 9.0}
    b = {"q3": 0.0, "q2": 0.25, "q1": 0.5, "only_b": -9.0}
    c = compare(a, b, n_resamples=1000)
    assert isinstance(c, Comparison)
    assert c.n == 3
    assert c.mean_a == pytest.approx(0.5)
    assert c.mean_b == pytest.approx(0.25)
    assert c.delta == pytest.approx(0.25)
    # Differences (0.5, 0.25, 0): of the 8 sign patterns, the 4 giving +-0.75 reach 0.75.
    assert c.p_value == pytest.approx(4 / 8)
    assert c.ci_low <= c.delta <= c.ci_high
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.delta = 0.0  # type: ignore[misc]


def test_compare_with_no_common_query_fails():
    with pytest.raises(DataError, match="share no query"):
        compare({"a": 1.0}, {"b": 1.0})


def test_bad_inputs():
    with pytest.raises(DataError):
        paired_randomization_test([1.0, 2.0], [1.0])
    with pytest.raises(DataError):
        paired_randomization_test([], [])
    with pytest.raises(DataError):
        paired_bootstrap_ci([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ConfigError):
        paired_randomization_test([1.0], [2.0], n_resamples=0)
    with pytest.raises(ConfigError):
        paired_bootstrap_ci([1.0], [2.0], alpha=1.5)


# --- AUBC -----------------------------------------------------------------------------


def test_aubc_of_a_constant_is_that_constant():
    budgets = [0.01, 0.02, 0.05, 0.1, 1, 10, 100]
    assert aubc(budgets, [2.5] * len(budgets)) == pytest.approx(2.5)
    assert aubc([0.0, *budgets], [0.0] + [-1.0] * len(budgets)) == pytest.approx(-1.0)


def test_aubc_by_hand():
    # Zero budget dropped; log-spacing ln 10 twice: (1.5 + 3) ln10 / (2 ln10) = 2.25.
    assert aubc([0, 1, 10, 100], [0.0, 1.0, 2.0, 4.0]) == pytest.approx(2.25)
    # Unequal spacing, unsorted input: b = 1, 2, 8 -> ln2 and 2 ln2 over 3 ln2.
    got = aubc([8, 1, 2], [3.0, 0.0, 6.0])
    assert got == pytest.approx(((0 + 6) / 2 * 1 + (6 + 3) / 2 * 2) / 3)


def test_aubc_bad_inputs():
    with pytest.raises(DataError, match="two distinct"):
        aubc([0, 1], [0.0, 1.0])
    with pytest.raises(DataError, match="two distinct"):
        aubc([1, 1, 2], [0.0, 1.0, 2.0])
    with pytest.raises(DataError):
        aubc([-1, 1, 2], [0.0, 1.0, 2.0])
    with pytest.raises(DataError):
        aubc([1, 2], [0.0])


# --- the byte-table statistic equals the unpacked-bits product it replaced -------------

def _reference_p(a, b, n_resamples, seed):
    """The earlier implementation: unpack the sign bits to floats, one matrix product."""
    from tttembed.metrics.stats import _chunks
    d = np.asarray(a, float) - np.asarray(b, float)
    n = d.size
    threshold = abs(d.sum()) - 1e-9 * max(np.abs(d).sum(), np.finfo(np.float64).tiny)
    rng = np.random.default_rng(seed)
    hits = 0
    for size in _chunks(n_resamples, n):
        packed = rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8)
        flips = np.unpackbits(packed, axis=1, count=n).astype(np.float64)
        hits += int(np.count_nonzero(np.abs(d.sum() - 2.0 * (flips @ d)) >= threshold))
    return (hits + 1) / (n_resamples + 1)


@pytest.mark.parametrize("trial", range(12))
def test_table_statistic_gives_the_reference_p_value(trial):
    rng = np.random.default_rng(100 + trial)
    n = int(rng.integers(64, 700))
    a = np.round(rng.random(n), 2 if trial % 2 else 6)  # rounded grades tie often
    b = np.round(a + rng.normal(0, [0.002, 0.02, 0.08][trial % 3], n), 2 if trial % 2 else 6)
    got = paired_randomization_test(a, b, n_resamples=4000, seed=trial)
    assert got == _reference_p(a, b, 4000, trial)


def test_bootstrap_means_equal_fancy_index_means():
    rng = np.random.default_rng(5)
    a, b = rng.random(257), rng.random(257)
    d = a - b
    lo, hi = paired_bootstrap_ci(a, b, n_resamples=2000, seed=3)
    idx = np.random.default_rng(3).integers(0, 257, size=(2000, 257), dtype=np.int32)
    ref = np.quantile(d[idx].mean(axis=1), [0.025, 0.975])
    assert (lo, hi) == (float(ref[0]), float(ref[1]))
