"""Paired comparisons over queries and the area under the gain-budget curve (pure numpy).

* ``paired_randomization_test``: two-sided sign-flip test of the mean per-query difference.
  With ``2**n <= n_resamples`` every sign pattern is enumerated (an exact test); otherwise
  ``n_resamples`` random patterns give ``p = (hits + 1) / (n_resamples + 1)``, which never
  returns 0 (the observed pattern counts as one of the resamples).
* ``paired_bootstrap_ci``: percentile bootstrap interval of the mean difference.
* ``compare``: both, over the queries two per-query dicts have in common.
* ``adjust_p``: p-values of a family of tests corrected for multiple testing (Holm's
  step-down or Bonferroni), as R's ``p.adjust``.
* ``aubc``: trapezoid integral of Delta(b) over log b, divided by log(b_max / b_min).
* ``ComparisonCache``: the results of the two tests on disk, keyed by the bytes of the
  paired scores, the seed, the resample count and alpha (as the eval cells are keyed by
  their inputs): a rerun over the same per-query metrics recomputes nothing and returns
  the identical floats.

Resamples are processed in chunks so that memory stays bounded for 20k+ queries.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.core.io import json_hash, read_json, write_text
from tttembed.types import CORRECTIONS

__all__ = ["Comparison", "ComparisonCache", "adjust_p", "aubc", "compare", "p_value",
           "paired_bootstrap_ci", "paired_randomization_test"]

log = logging.getLogger(__name__)

#: Bump when a test's numbers change for the same inputs (invalidates cached comparisons).
STATS_VERSION = 1

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
    table = _byte_sums(d)
    columns = np.arange(table.shape[1])
    hits = 0
    for size in _chunks(n_resamples, n):
        # One random bit per pair: 8 flips per random byte; a byte's flipped sum is read
        # from its column of ``table`` (one gather per 8 pairs instead of 8 products).
        packed = rng.integers(0, 256, size=(size, table.shape[1]), dtype=np.uint8)
        stats = total - 2.0 * table[packed, columns].sum(axis=1)
        hits += int(np.count_nonzero(np.abs(stats) >= threshold))
    return (hits + 1) / (n_resamples + 1)


def _byte_sums(d: np.ndarray) -> np.ndarray:
    """``table[v, j]``: the sum of the pairs of byte ``j`` (pairs ``8j .. 8j+7``) whose bit
    is set in ``v``, most significant bit first (``np.unpackbits`` order). The flipped sum
    of a resample is then a sum of one table entry per byte: the same pattern and the same
    statistic as multiplying the unpacked bits by ``d``, up to rounding (far inside the
    test's 1e-9 tolerance)."""
    nb = (d.size + 7) // 8
    padded = np.zeros(nb * 8, dtype=np.float64)
    padded[: d.size] = d
    bits = ((np.arange(256)[:, None] >> np.arange(7, -1, -1)) & 1).astype(np.float64)
    return bits @ padded.reshape(nb, 8).T


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
        means[start : start + size] = np.take(d, idx).sum(axis=1) / n  # == d[idx].mean(1)
        start += size
    lo, hi = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def _paired(per_query_a: Mapping[str, float], per_query_b: Mapping[str, float]
            ) -> tuple[np.ndarray, np.ndarray]:
    common = sorted(set(per_query_a) & set(per_query_b))
    if not common:
        raise DataError(
            "the two per-query results share no query id; evaluate both on the same qrels"
        )
    x = np.array([per_query_a[q] for q in common], dtype=np.float64)
    y = np.array([per_query_b[q] for q in common], dtype=np.float64)
    return x, y


def _comparison(x: np.ndarray, y: np.ndarray, n_resamples: int, alpha: float,
                seed: int) -> Comparison:
    p = paired_randomization_test(x, y, n_resamples=n_resamples, seed=seed)
    lo, hi = paired_bootstrap_ci(x, y, n_resamples=n_resamples, alpha=alpha, seed=seed)
    return Comparison(mean_a=float(x.mean()), mean_b=float(y.mean()),
                      delta=float((x - y).mean()), p_value=p, ci_low=lo, ci_high=hi,
                      n=int(x.size))


def compare(
    per_query_a: Mapping[str, float],
    per_query_b: Mapping[str, float],
    n_resamples: int = 10000,
    alpha: float = 0.05,
    seed: int = 0,
    cache: ComparisonCache | None = None,
) -> Comparison:
    """Compare two per-query metric dicts over their common queries (sorted ids).

    ``delta = mean_a - mean_b``: positive when A scores higher. Queries present in only one
    dict are left out; ``n`` says how many were compared. With ``cache`` a comparison of
    the same scores, seed, resamples and alpha is read back instead of recomputed.
    """
    x, y = _paired(per_query_a, per_query_b)
    if cache is None:
        return _comparison(x, y, n_resamples, alpha, seed)
    got = cache.get("compare", x, y, {"n": n_resamples, "alpha": alpha, "seed": seed},
                    lambda: asdict(_comparison(x, y, n_resamples, alpha, seed)))
    return Comparison(**got)


def p_value(per_query_a: Mapping[str, float], per_query_b: Mapping[str, float],
            n_resamples: int = 10000, seed: int = 0,
            cache: ComparisonCache | None = None) -> float:
    """Only the randomisation p-value of :func:`compare` (the same number, no interval)."""
    x, y = _paired(per_query_a, per_query_b)
    if cache is None:
        return paired_randomization_test(x, y, n_resamples=n_resamples, seed=seed)
    got = cache.get("p_value", x, y, {"n": n_resamples, "seed": seed}, lambda: {
        "p_value": paired_randomization_test(x, y, n_resamples=n_resamples, seed=seed)})
    return float(got["p_value"])


def _valid_entry(kind: str, got: Any) -> bool:
    """A cached ``compare`` is every field of :class:`Comparison`, a ``p_value`` its one
    number; each a finite-or-nan number (never a bool or a string)."""
    want = ({f.name for f in fields(Comparison)} if kind == "compare" else {"p_value"})
    return (isinstance(got, dict) and set(got) == want
            and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                    for v in got.values()))


class ComparisonCache:
    """Results of paired tests as small JSON files under ``root`` (None: memory only),
    keyed by the sha256 of the paired scores' bytes, the test, its parameters and
    :data:`STATS_VERSION`. Floats are stored by ``repr`` and read back bit-identical.
    ``hits``/``misses`` count lookups."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = None if root is None else Path(root)
        self.hits = self.misses = 0
        self._memory: dict[str, dict[str, Any]] = {}

    def key(self, kind: str, x: np.ndarray, y: np.ndarray, params: Mapping[str, Any]) -> str:
        digest = hashlib.sha256()
        for a in (x, y):
            digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            digest.update(b"|")
        return json_hash({"kind": kind, "scores": digest.hexdigest(), "n": int(x.size),
                          "params": dict(params), "version": STATS_VERSION})

    def get(self, kind: str, x: np.ndarray, y: np.ndarray, params: Mapping[str, Any],
            compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        key = self.key(kind, x, y, params)
        if key in self._memory:
            self.hits += 1
            return self._memory[key]
        path = None if self.root is None else self.root / key[:2] / f"{key}.json"
        if path is not None and path.is_file():
            try:
                got: dict[str, Any] = read_json(path, what="cached comparison")
                if not _valid_entry(kind, got):
                    raise DataError("not a cached comparison of the right shape", path=path)
                self.hits += 1
                self._memory[key] = got
                return got
            except DataError as exc:  # a corrupt entry is recomputed and rewritten
                log.warning("recomputing a corrupt cached comparison: %s", exc)
        value = compute()
        self.misses += 1
        self._memory[key] = value
        if path is not None:
            write_text(path, json.dumps(value))
        return value


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


def adjust_p(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """``p_values`` of one family of tests corrected for testing them together (in their
    order; R's ``p.adjust``): ``holm`` (step-down: the i-th smallest times ``m - i + 1``,
    made monotone), ``bonferroni`` (each times ``m``), ``none``; capped at 1."""
    if method not in CORRECTIONS:
        raise ConfigError(f"unknown correction {method!r}; choose one of: "
                          f"{', '.join(CORRECTIONS)}")
    p = [float(x) for x in p_values]
    m = len(p)
    if method == "none" or m == 0:
        return p
    if method == "bonferroni":
        return [min(1.0, m * x) for x in p]
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p[j])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
