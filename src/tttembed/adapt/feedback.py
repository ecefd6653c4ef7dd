"""Query vectors moved by rewarded feedback, one per query (pure numpy).

Two of the deployable states of ``--method auto`` besides the learned vectors; both are
an additive query vector, so search, serving, MTEB and the vector databases apply them
unchanged (as a query-wise state with alpha 1, :mod:`tttembed.ttt.select`):

* **Reward-weighted Rocchio**: ``x' = unit(x + beta * sum_i r_i z_i / sum_i r_i - gamma *
  sum_i (1 - r_i) z_i / sum_i (1 - r_i))`` with SMART's ``beta = 0.75``, ``gamma = 0.15``;
  a term whose weights sum to 0 is dropped. Queries without rewards keep their vector.
* **Qdrant's naive relevance-feedback formula** (Qdrant 1.17,
  ``lib/segment/src/vector_storage/query/feedback_query.rs``): the items sorted by score,
  the best paired with the worst, ... at most ``min(3, n // 2)`` pairs; a document scores
  ``a sim(t, d) + sum_pairs conf^b c (sim(p, d) - sim(n, d))``: with inner products, the
  inner product of ``d`` with ``a t + sum_pairs conf^b c (p - n)`` (:func:`feedback_vector`).
  Its fitting lives with the baseline, :mod:`tttembed.evaluation.baselines.qdrant_rf`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tttembed.core.errors import DataError

RW_BETA = 0.75
RW_GAMMA = 0.15
#: Qdrant's cap on feedback pairs.
MAX_PAIRS = 3

#: Qdrant's naive-formula coefficients ``(a, b, c)``.
Coef = tuple[float, float, float]

__all__ = ["MAX_PAIRS", "RW_BETA", "RW_GAMMA", "Coef", "feedback_pairs", "feedback_vector",
           "pair_weight", "reward_rocchio", "unit_rows"]


def unit_rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    return a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)


def reward_rocchio(x: np.ndarray, z: Sequence[np.ndarray], r: Sequence[np.ndarray],
                   beta: float = RW_BETA, gamma: float = RW_GAMMA) -> np.ndarray:
    """Reward-weighted Rocchio for rewarded queries: row q of ``x`` with ``z[q]`` (K_q, d)
    candidate vectors and ``r[q]`` (K_q,) rewards on [0, 1] (nan = missing, ignored)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or len(z) != len(x) or len(r) != len(x):
        raise DataError("reward Rocchio needs one candidate and reward array per query row")
    out = x.astype(np.float64)
    for q in range(len(x)):
        zq = np.asarray(z[q], dtype=np.float64)
        rq = np.asarray(r[q], dtype=np.float64)
        if zq.ndim != 2 or zq.shape != (len(rq), x.shape[1]):
            raise DataError(f"row {q}: candidates {zq.shape} do not match rewards {rq.shape}")
        ok = np.isfinite(rq)
        zq, rq = zq[ok], np.clip(rq[ok], 0.0, 1.0)
        if rq.size == 0:
            continue
        pos, neg = rq, 1.0 - rq
        if pos.sum() > 0:
            out[q] += beta * (pos @ zq) / pos.sum()
        if neg.sum() > 0:
            out[q] -= gamma * (neg @ zq) / neg.sum()
    return unit_rows(out)


def feedback_pairs(scores: Sequence[float] | np.ndarray, max_pairs: int = MAX_PAIRS
                   ) -> list[tuple[int, int, float]]:
    """Qdrant's pairs ``(positive, negative, confidence)`` as indices into ``scores``."""
    n = len(scores)
    if n < 2:
        return []
    order = sorted(range(n), key=lambda i: -float(scores[i]))  # stable, like sort_by_key
    limit = min(max_pairs, n // 2)
    out: list[tuple[int, int, float]] = []
    front, back = 0, n - 1
    while front < back and len(out) < limit:
        p, q = order[front], order[back]
        out.append((p, q, float(scores[p]) - float(scores[q])))
        front += 1
        back -= 1
    return out


def pair_weight(confidence: float, b: float, c: float) -> float:
    """``confidence.powf(b) * c``; 0 where that is not finite."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = float(np.power(np.float64(confidence), np.float64(b)) * c)
    return w if math.isfinite(w) else 0.0


def feedback_vector(target: np.ndarray, items: np.ndarray, scores: Sequence[float] | np.ndarray,
                    coef: Coef) -> np.ndarray:
    """The query vector whose inner product with any ``d`` is Qdrant's naive score."""
    a, b, c = coef
    v = a * np.asarray(target, dtype=np.float64)
    items = np.asarray(items, dtype=np.float64)
    for p, q, conf in feedback_pairs(scores):
        v = v + pair_weight(conf, b, c) * (items[p] - items[q])
    return v
