"""Position-bias propensities θ_1..θ_k (θ_1 = 1) from shown documents and their clicks
(METHOD.md Part 4, "Clicks as rewards").

Intervention harvesting (Agarwal et al., WSDM 2019; Fang et al., SIGIR 2019): a (query,
doc) pair shown at ranks r and r' (by different served versions, by interleaving, or by a
RandPair swap: every list counts, ``explored`` ones included) gives the ratio θ_r / θ_r'
from its click rates there. For each rank pair the ratio pools every such (query, doc)
with weight n_r n_r' / (n_r + n_r'); the log ratios of all rank pairs are combined by
weighted least squares with log θ_1 = 0, each weighted by the inverse of its delta-method
variance (binomial click rates). Intervals: Poisson bootstrap over (query, doc) pairs,
seeded. When fewer than :data:`MIN_INTERVENTIONS` pairs were seen at two ranks, or some rank
is not linked to rank 1, the fallback is regression-EM (Wang et al., WSDM 2018) on the
position-based model, with relevance a logistic regression on the caller's features (or a
per-pair rate shrunk to the mean when no features are given).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.loop.rows import Shown

#: fewest (query, doc) pairs seen at two or more ranks before harvesting is trusted
MIN_INTERVENTIONS = 100
#: clicks a rank pair needs before its ratio enters the least squares
MIN_PAIR_CLICKS = 3
#: bootstrap resamples behind the intervals
RESAMPLES = 200


@dataclass(frozen=True)
class Propensities:
    """θ at ranks 1..k (θ_1 = 1) with bootstrap intervals ``low``/``high`` (5th/95th
    percentiles), the (query, doc) pairs seen at two or more ranks it rests on
    (``interventions``), and ``method`` ("harvest", "em" or "none": all ones)."""

    theta: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    interventions: int
    method: str

    def at(self, rank: int, clip: float = 0.0) -> float:
        """θ at a 1-based rank, at least ``clip`` (ranks past k take θ_k)."""
        return max(self.theta[min(max(rank, 1), len(self.theta)) - 1], clip)

    def to_dict(self) -> dict[str, Any]:
        return {"theta": list(self.theta), "low": list(self.low), "high": list(self.high),
                "interventions": self.interventions, "method": self.method}


def flat(k: int) -> Propensities:
    """No position bias: θ = 1 at every rank (what the naive click rate assumes)."""
    ones = (1.0,) * k
    return Propensities(ones, ones, ones, 0, "none")


def counts(shown: Sequence[Shown], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Impressions ``N`` and clicks ``C`` of shape (pairs, k): one row per (task, query,
    doc), ranks past k left out."""
    keys: dict[tuple[str, str, str], int] = {}
    rows, ranks, clicks = [], [], []
    for s in shown:
        if 1 <= s.rank <= k:
            rows.append(keys.setdefault((s.task, s.query, s.doc_id), len(keys)))
            ranks.append(s.rank - 1)
            clicks.append(1.0 if s.clicked else 0.0)
    n = np.zeros((len(keys), k))
    c = np.zeros((len(keys), k))
    np.add.at(n, (rows, ranks), 1.0)
    np.add.at(c, (rows, ranks), clicks)
    return n, c


def harvest_theta(n: np.ndarray, c: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Harvested θ (θ_1 = 1) from impressions and clicks per (pair, rank), each pair
    weighted by ``w`` (bootstrap counts; ones when None); NaN where a rank is unlinked."""
    g, k = n.shape
    w = np.ones(g) if w is None else w
    rate = np.divide(c, n, out=np.zeros_like(c), where=n > 0)
    rows, ys, ws = [], [], []
    for a in range(k):
        for b in range(a + 1, k):
            both = (n[:, a] > 0) & (n[:, b] > 0)
            if not both.any():
                continue
            na, nb = n[both, a], n[both, b]
            h = w[both] * na * nb / (na + nb)
            ra, rb = rate[both, a], rate[both, b]
            num, den = float(h @ ra), float(h @ rb)
            ca, cb = float(w[both] @ c[both, a]), float(w[both] @ c[both, b])
            if min(ca, cb) < MIN_PAIR_CLICKS or num <= 0 or den <= 0:
                continue
            # delta method: Var(log den/num) = Var(num)/num^2 + Var(den)/den^2, each a
            # sum of h^2 p / n over the pairs, p the pooled rate (rare clicks: Poisson)
            sa, sb = float(h @ (h / na)), float(h @ (h / nb))
            var = sa / (num * float(h.sum())) + sb / (den * float(h.sum()))
            x = np.zeros(k)
            x[a], x[b] = -1.0, 1.0  # log θ_b - log θ_a = log(den / num)
            rows.append(x)
            ys.append(np.log(den / num))
            ws.append(1.0 / max(var, 1e-12))
    return _solve(np.array(rows).reshape(-1, k), np.array(ys), np.array(ws), k)


def _solve(x: np.ndarray, y: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """Weighted least squares for log θ_2..θ_k (log θ_1 = 0); NaN for unlinked ranks."""
    theta = np.full(k, np.nan)
    theta[0] = 1.0
    if not len(y):
        return theta
    linked = _linked(x, k)
    cols = [r for r in range(1, k) if linked[r]]
    if not cols:
        return theta
    sw = np.sqrt(w)
    sol, *_ = np.linalg.lstsq(x[:, cols] * sw[:, None], y * sw, rcond=None)
    theta[cols] = np.exp(sol)
    return theta


def _linked(x: np.ndarray, k: int) -> np.ndarray:
    """Which ranks a chain of rank-pair equations links to rank 1."""
    seen = np.zeros(k, dtype=bool)
    seen[0] = True
    edges = [tuple(np.flatnonzero(row)) for row in x]
    changed = True
    while changed:
        changed = False
        for a, b in edges:
            if seen[a] != seen[b]:
                seen[a] = seen[b] = True
                changed = True
    return seen


def estimate(shown: Sequence[Shown], k: int = 10, *, seed: int = 0,
             resamples: int = RESAMPLES, min_interventions: int = MIN_INTERVENTIONS,
             features: Mapping[tuple[str, str], Sequence[float]] | None = None
             ) -> Propensities:
    """Propensities at ranks 1..k from ``shown``: harvested when at least
    ``min_interventions`` (query, doc) pairs were seen at two ranks and every rank is
    linked to rank 1, else regression-EM (:func:`em`, ``features`` keyed by (query, doc)).
    Intervals from ``resamples`` Poisson-bootstrap draws seeded by ``seed``."""
    if k < 1:
        raise ConfigError(f"propensities need k >= 1, got {k}")
    n, c = counts(shown, k)
    interventions = int(((n > 0).sum(axis=1) >= 2).sum())
    theta = harvest_theta(n, c) if interventions >= min_interventions else None
    if theta is None or np.isnan(theta).any():
        return em(shown, k, features=features, seed=seed, resamples=resamples,
                  interventions=interventions)
    rng = np.random.default_rng(seed)
    draws = np.array([harvest_theta(n, c, rng.poisson(1.0, len(n)).astype(np.float64))
                      for _ in range(resamples)]).reshape(-1, k)
    low, high = _band(draws, theta)
    return Propensities(_tup(theta), low, high, interventions, "harvest")


def _em_draw(inputs: Any, iterations: int, weights: np.ndarray) -> np.ndarray:
    """One bootstrap draw of :func:`em`; NaN at every rank when the draw weighs no
    impression at rank 1 (few searches: a draw may leave them all out), which
    :func:`_band` skips, instead of failing the learning cycle."""
    from tttembed.loop.clicks.em import em_fit

    if not weights[np.asarray(inputs.rank) == 0].any():
        return np.full(int(inputs.k), np.nan)
    return em_fit(inputs, iterations=iterations, weights=weights)


def _band(draws: np.ndarray, theta: np.ndarray) -> tuple[tuple[float, ...], ...]:
    """The 5th and 95th percentiles of bootstrap draws (the estimate where none is finite)."""
    if not len(draws):
        return _tup(theta), _tup(theta)
    lo = np.array([np.nanpercentile(col, 5) if np.isfinite(col).any() else t
                   for col, t in zip(draws.T, theta, strict=True)])
    hi = np.array([np.nanpercentile(col, 95) if np.isfinite(col).any() else t
                   for col, t in zip(draws.T, theta, strict=True)])
    return _tup(lo), _tup(hi)


def _tup(a: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in a)


def em(shown: Sequence[Shown], k: int = 10, *,
       features: Mapping[tuple[str, str], Sequence[float]] | None = None,
       seed: int = 0, resamples: int = 50, interventions: int = 0,
       iterations: int = 200) -> Propensities:
    """Regression-EM (Wang et al., WSDM 2018) on the position-based model: θ_r and the
    relevance γ of each (query, doc) by EM; with ``features`` γ is a logistic regression
    on them refit at every M step (what identifies θ when every pair sits at one rank),
    without them a per-pair rate shrunk toward the mean."""
    from tttembed.loop.clicks.em import em_fit, em_inputs

    inputs = em_inputs(shown, k, features)
    theta = em_fit(inputs, iterations=iterations)
    rng = np.random.default_rng(seed)
    draws = np.array([_em_draw(inputs, max(iterations // 4, 20),
                               rng.poisson(1.0, len(inputs.rank)).astype(np.float64))
                      for _ in range(resamples)]).reshape(-1, k)
    low, high = _band(draws, theta)
    return Propensities(_tup(theta), low, high, interventions, "em")
