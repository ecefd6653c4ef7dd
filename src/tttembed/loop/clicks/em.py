"""Regression-EM for the position-based click model (Wang et al., WSDM 2018): the fallback
of :func:`tttembed.loop.clicks.propensity.estimate` when interventions are too few.
P(click | q, d, r) = θ_r · γ(q, d); EM over the latent "examined" and "relevant", γ a
logistic regression on per-pair features (IRLS at each M step) or, without features, a
per-pair rate shrunk toward the mean (``PRIOR`` pseudo-impressions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.loop.rows import Shown

#: pseudo-impressions pulling a featureless pair's relevance toward the mean
PRIOR = 2.0
#: ridge on the logistic regression's weights
RIDGE = 1e-3


@dataclass(frozen=True)
class EMInputs:
    """Impressions as arrays: 0-based ``rank``, ``pair`` index, ``click`` (0/1); ``x`` the
    features of each pair with an intercept column (None: featureless), ``k`` ranks."""

    rank: np.ndarray
    pair: np.ndarray
    click: np.ndarray
    x: np.ndarray | None
    k: int


def em_inputs(shown: Sequence[Shown], k: int,
              features: Mapping[tuple[str, str], Sequence[float]] | None) -> EMInputs:
    """The impressions of ``shown`` at ranks 1..k as :class:`EMInputs`; ``features`` must
    hold every (query, doc) shown (a ConfigError names the first missing one)."""
    keys: dict[tuple[str, str], int] = {}
    rank, pair, click = [], [], []
    for s in shown:
        if 1 <= s.rank <= k:
            rank.append(s.rank - 1)
            pair.append(keys.setdefault((s.query, s.doc_id), len(keys)))
            click.append(1.0 if s.clicked else 0.0)
    x = None
    if features is not None:
        missing = next((q for q in keys if q not in features), None)
        if missing is not None:
            raise ConfigError(f"no EM features for query {missing[0]!r}, doc {missing[1]!r} "
                              "(give features for every shown pair, or none)")
        rows = [list(features[q]) for q in keys]
        x = np.hstack([np.ones((len(rows), 1)), np.array(rows, dtype=np.float64)
                       .reshape(len(rows), -1)])
    return EMInputs(np.array(rank, dtype=np.int64), np.array(pair, dtype=np.int64),
                    np.array(click), x, k)


def em_fit(inp: EMInputs, *, iterations: int = 200,
           weights: np.ndarray | None = None) -> np.ndarray:
    """θ at ranks 1..k (θ_1 = 1; NaN at a rank never shown) by ``iterations`` EM steps,
    impressions weighted by ``weights`` (bootstrap counts; ones when None)."""
    w = np.ones(len(inp.rank)) if weights is None else weights
    groups = int(inp.pair.max()) + 1 if len(inp.pair) else 0
    theta = np.full(inp.k, 0.5)
    gamma = np.full(groups, 0.5)
    beta = None if inp.x is None else np.zeros(inp.x.shape[1])
    per_rank = np.bincount(inp.rank, weights=w, minlength=inp.k)
    for _ in range(iterations):
        t, g = theta[inp.rank], gamma[inp.pair]
        denom = np.maximum(1.0 - t * g, 1e-12)
        p_exam = np.where(inp.click > 0, 1.0, t * (1.0 - g) / denom)
        p_rel = np.where(inp.click > 0, 1.0, (1.0 - t) * g / denom)
        theta = np.clip(np.divide(np.bincount(inp.rank, weights=w * p_exam, minlength=inp.k),
                                  per_rank, out=np.full(inp.k, 0.5), where=per_rank > 0),
                        1e-6, 1.0)
        gamma, beta = _relevance(inp, w, p_rel, groups, beta)
    theta = np.where(per_rank > 0, theta, np.nan)
    if not np.isfinite(theta[0]) or theta[0] <= 0:
        raise ConfigError("regression-EM needs impressions at rank 1 (none were shown)")
    return np.asarray(theta / theta[0])


def _relevance(inp: EMInputs, w: np.ndarray, p_rel: np.ndarray, groups: int,
               beta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The M step for γ: per-pair shrunk rates, or a logistic regression's fit."""
    num = np.bincount(inp.pair, weights=w * p_rel, minlength=groups)
    den = np.bincount(inp.pair, weights=w, minlength=groups)
    if inp.x is None or beta is None:
        mean = float(num.sum() / max(den.sum(), 1e-12))
        return np.clip((num + PRIOR * mean) / (den + PRIOR), 1e-6, 1 - 1e-6), None
    target = np.divide(num, den, out=np.zeros(groups), where=den > 0)
    beta = _irls(inp.x, target, den, beta)
    return np.clip(1.0 / (1.0 + np.exp(-inp.x @ beta)), 1e-6, 1 - 1e-6), beta


def _irls(x: np.ndarray, y: np.ndarray, n: np.ndarray, beta: np.ndarray,
          steps: int = 3) -> np.ndarray:
    """A few Newton steps of a weighted logistic regression of soft labels ``y``."""
    if len(y) != x.shape[0]:
        raise ConfigError("EM features and shown pairs disagree in number")
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ beta))
        grad = x.T @ (n * (y - p)) - RIDGE * beta
        hess = (x * (n * p * (1 - p))[:, None]).T @ x + RIDGE * np.eye(len(beta))
        beta = beta + np.linalg.solve(hess, grad)
    return beta
