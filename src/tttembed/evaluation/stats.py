"""Paired comparisons over queries and the area under the gain-budget curve (pure numpy).

* ``paired_randomization_test``: two-sided sign-flip test of the mean per-query difference.
  With ``2**n <= n_resamples`` every sign pattern is enumerated (an exact test); otherwise
  ``n_resamples`` random patterns give ``p = (hits + 1) / (n_resamples + 1)``, which never
  returns 0 (the observed pattern counts as one of the resamples).
* ``paired_bootstrap_ci``: percentile bootstrap interval of the mean difference.
* ``compare``: both, over the queries two per-query dicts have in common.
* ``aubc``: trapezoid integral of Delta(b) over log b, divided by log(b_max / b_min).

Resamples are processed in chunks so that memory stays bounded for 20k+ queries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.core.errors import ConfigError, DataError

__all__ = ["Comparison", "aubc", "compare", "paired_bootstrap_ci", "paired_randomization_test"]

_CHUNK_ELEMENTS = 1 << 22  # resamples x queries processed at once (~32 MiB of float64)


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of system A against system B; ``delta = mean_a - mean_b``."""

    mean_a: float
    mean_b: float
    delta: float
    p_value: float
    ci_low: float
    ci_high: float
    n: int


def _differences(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise DataError(
            f"paired scores need two 1-d arrays of one length, got shapes {x.shape} and {y.shape}"
        )
    if x.size == 0:
        raise DataError("paired comparison over zero queries; give at least one query")
    d = x - y
    if not np.isfinite(d).all():
        raise DataError("paired scores contain NaN or infinity; give finite per-query values")
    return d


def _check_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 1:
        raise ConfigError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return int(n_resamples)


def _chunks(total: int, n: int) -> list[int]:
    step = max(1, _CHUNK_ELEMENTS // max(n, 1))
    return [min(step, total - s) for s in range(0, total, step)]


def paired_randomization_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = 10000,
    seed: int = 0,
) -> float:
    """Two-sided p-value that the mean of ``a - b`` is 0, by flipping the sign of each pair.

    A resampled statistic counts as extreme when ``|sum(s * d)| >= |sum(d)|`` (up to a
    relative tolerance of 1e-9 for rounding). Identical inputs give ``p = 1``.
    """
    d = _differences(a, b)
    n_resamples = _check_resamples(n_resamples)
    n = d.size
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(float(np.abs(d).sum()), np.finfo(np.float64).tiny)
    threshold = observed - tol
    if n < 63 and 2**n <= n_resamples:
        # Exact: enumerate every sign pattern (bit j of the pattern index flips pair j).
        patterns = np.arange(2**n, dtype=np.int64)
        flips = ((patterns[:, None] >> np.arange(n, dtype=np.int64)) & 1).astype(np.float64)
        stats = d.sum() - 2.0 * (flips @ d)
        return float(np.mean(np.abs(stats) >= threshold))
    rng = np.random.default_rng(seed)
    total = d.sum()
    hits = 0
    for size in _chunks(n_resamples, n):
        # One random bit per pair: 8 flips per random byte.
        packed = rng.integers(0, 256, size=(size, (n + 7) // 8), dtype=np.uint8)
        flips = np.unpackbits(packed, axis=1, count=n).astype(np.float64)
        stats = total - 2.0 * (flips @ d)
        hits += int(np.count_nonzero(np.abs(stats) >= threshold))
    return (hits + 1) / (n_resamples + 1)


def paired_bootstrap_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = 10000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap ``(lo, hi)`` for the mean of ``a - b`` at level ``1 - alpha``."""
    d = _differences(a, b)
    n_resamples = _check_resamples(n_resamples)
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must lie in (0, 1), got {alpha!r}")
    rng = np.random.default_rng(seed)
    n = d.size
    means = np.empty(n_resamples, dtype=np.float64)
    start = 0
    for size in _chunks(n_resamples, n):
        idx = rng.integers(0, n, size=(size, n), dtype=np.int32 if n < 2**31 else np.int64)
        means[start : start + size] = d[idx].mean(axis=1)
        start += size
    lo, hi = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def compare(
    per_query_a: Mapping[str, float],
    per_query_b: Mapping[str, float],
    n_resamples: int = 10000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Comparison:
    """Compare two per-query metric dicts over their common queries (sorted ids).

    ``delta = mean_a - mean_b``: positive when A scores higher. Queries present in only one
    dict are left out; ``n`` says how many were compared.
    """
    common = sorted(set(per_query_a) & set(per_query_b))
    if not common:
        raise DataError(
            "the two per-query results share no query id; evaluate both on the same qrels"
        )
    x = np.array([per_query_a[q] for q in common], dtype=np.float64)
    y = np.array([per_query_b[q] for q in common], dtype=np.float64)
    p = paired_randomization_test(x, y, n_resamples=n_resamples, seed=seed)
    lo, hi = paired_bootstrap_ci(x, y, n_resamples=n_resamples, alpha=alpha, seed=seed)
    mean_a, mean_b = float(x.mean()), float(y.mean())
    return Comparison(
        mean_a=mean_a,
        mean_b=mean_b,
        delta=float((x - y).mean()),
        p_value=p,
        ci_low=lo,
        ci_high=hi,
        n=len(common),
    )


def aubc(budgets: Sequence[float] | np.ndarray, deltas: Sequence[float] | np.ndarray) -> float:
    """Area under the gain-budget curve: mean of Delta(b) per unit of log budget.

    ``sum_i (Delta_i + Delta_{i+1}) / 2 * log(b_{i+1} / b_i) / log(b_max / b_min)`` over the
    points sorted by budget. A zero budget (the raw baseline, log 0 undefined) is dropped;
    at least two distinct positive budgets must remain. A constant Delta gives that constant.
    """
    b = np.asarray(budgets, dtype=np.float64)
    g = np.asarray(deltas, dtype=np.float64)
    if b.ndim != 1 or b.shape != g.shape:
        raise DataError(f"budgets and deltas need one length, got shapes {b.shape} and {g.shape}")
    if not (np.isfinite(b).all() and np.isfinite(g).all()):
        raise DataError("budgets and deltas must be finite numbers")
    if (b < 0).any():
        raise DataError("budgets must be >= 0; normalised budgets are pairs per query")
    keep = b > 0
    b, g = b[keep], g[keep]
    order = np.argsort(b, kind="stable")
    b, g = b[order], g[order]
    if b.size < 2 or np.any(np.diff(b) == 0):
        raise DataError(
            "AUBC needs at least two distinct positive budgets, each given once; "
            "add budget points or remove duplicates"
        )
    logb = np.log(b)
    area = float(np.sum((g[1:] + g[:-1]) * 0.5 * np.diff(logb)))
    return area / float(logb[-1] - logb[0])
