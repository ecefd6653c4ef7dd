"""Fitting Qdrant's naive relevance-feedback coefficients (pure numpy).

The PyPI package ``qdrant-relevance-feedback`` 0.1.1 reimplemented (``train/train.py``,
``train/naive_formula.py``; the baseline's module
:mod:`tttembed.evaluation.baselines.qdrant_rf` says where every step comes from): per
query, the context pair is the most confident ordered pair of the top ``CONTEXT_LIMIT``
responses; every later response is a training row; a pairwise hinge loss with margin
0.01, Adam from ``(1, 1, 1)``, early stopping on the second half of the queries.
:func:`fit_on_rewards` fits from rewards already paid (the judged prefix of each query's
base ranking), as ``learn --method auto`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.adapt.feedback import Coef

CONTEXT_LIMIT = 5
MARGIN = 0.01
LR = 0.005
EPOCHS = 1000
PATIENCE = 200
MIN_DELTA = 1e-6
INIT: Coef = (1.0, 1.0, 1.0)

__all__ = ["CONTEXT_LIMIT", "INIT", "Batch", "Fit", "Rows", "context_pair",
           "fit_coefficients", "fit_on_rewards", "query_rows", "ranking_loss"]


# --- training data (prepare_train_data_*) ----------------------------------------------

def context_pair(feedback: Sequence[float] | np.ndarray, margin: float = 0.0) -> tuple[int, int, float] | None:
    """``get_context_pairs(...)[0]``: (negative, positive, confidence) of the most
    confident ordered pair, first in (negative, positive) order among ties."""
    best: tuple[int, int, float] | None = None
    for neg in range(len(feedback)):
        for pos in range(len(feedback)):
            conf = float(feedback[pos]) - float(feedback[neg])
            if pos != neg and conf > margin and (best is None or conf > best[2]):
                best = (neg, pos, conf)
    return best


@dataclass(frozen=True)
class Rows:
    """Training rows of one query: responses ``CONTEXT_LIMIT..LIMIT-1``."""

    score: np.ndarray
    confidence: float
    delta: np.ndarray
    target: np.ndarray


def query_rows(base_scores: np.ndarray, feedback: np.ndarray, vectors: np.ndarray,
               context_limit: int = CONTEXT_LIMIT) -> Rows | None:
    """One query's rows (None: no context pair in the top ``context_limit``)."""
    feedback = np.asarray(feedback, dtype=np.float64)
    if not np.all(np.isfinite(feedback)):
        return None
    found = context_pair(feedback[:context_limit])
    if found is None:
        return None
    neg, pos, conf = found
    v = np.asarray(vectors, dtype=np.float64)
    delta = v @ v[pos] - v @ v[neg]
    target = feedback - feedback[:context_limit].max()
    return Rows(np.asarray(base_scores, np.float64)[context_limit:], conf,
                delta[context_limit:], target[context_limit:])


# --- loss and Adam (naive_formula.py, train_formula) ------------------------------

@dataclass(frozen=True)
class Batch:
    score: np.ndarray  # (Q, m)
    confidence: np.ndarray  # (Q, 1)
    delta: np.ndarray  # (Q, m)
    q: np.ndarray  # pair query index
    lo: np.ndarray  # the row that must score lower
    hi: np.ndarray  # the row that must score higher

    @classmethod
    def of(cls, rows: Sequence[Rows]) -> Batch:
        target = np.stack([r.target for r in rows])
        q, lo, hi = np.nonzero(target[:, None, :] - target[:, :, None] > 0)
        return cls(np.stack([r.score for r in rows]),
                   np.array([[r.confidence] for r in rows], dtype=np.float64),
                   np.stack([r.delta for r in rows]), q, lo, hi)


def ranking_loss(coef: np.ndarray, batch: Batch, margin: float = MARGIN
                 ) -> tuple[float, np.ndarray]:
    """The package's pairwise hinge loss (summed) and its gradient in (a, b, c)."""
    a, b, c = (float(x) for x in coef)
    power = batch.confidence ** b
    s = a * batch.score + power * batch.delta * c
    viol = s[batch.q, batch.lo] - s[batch.q, batch.hi] + margin
    on = viol > 0
    q, lo, hi = batch.q[on], batch.lo[on], batch.hi[on]
    grads = (batch.score, c * batch.delta * power * np.log(batch.confidence),
             power * batch.delta)
    g = np.array([float((d[q, lo] - d[q, hi]).sum()) for d in grads])
    return float(viol[on].sum()), g


@dataclass(frozen=True)
class Fit:
    coef: Coef
    fitted: bool
    epochs: int = 0
    train_queries: int = 0
    val_queries: int = 0
    loss_start: float = float("nan")  # validation loss at the initial coefficients
    loss_best: float = float("nan")


def fit_coefficients(rows: Sequence[Rows], *, lr: float = LR, epochs: int = EPOCHS,
                     patience: int = PATIENCE, min_delta: float = MIN_DELTA,
                     init: Coef = INIT) -> Fit:
    """``split_train_val`` + ``train_formula``: the first half of the queries trains, the
    rest validates; Adam with early stopping; the best validation coefficients."""
    n_train = len(rows) // 2
    if n_train < 1 or len(rows) - n_train < 1:
        return Fit(init, False, train_queries=n_train, val_queries=len(rows) - n_train)
    train, val = Batch.of(rows[:n_train]), Batch.of(rows[n_train:])
    p = np.array(init, dtype=np.float64)
    m, v = np.zeros(3), np.zeros(3)
    b1, b2, eps = 0.9, 0.999, 1e-8
    start, best = ranking_loss(p, val)[0], float("inf")
    best_p, since, epoch = p.copy(), 0, 0
    for epoch in range(1, epochs + 1):
        _, g = ranking_loss(p, train)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** epoch)) / (np.sqrt(v / (1 - b2 ** epoch)) + eps)
        val_loss = ranking_loss(p, val)[0]
        if val_loss + min_delta < best:
            best, best_p, since = val_loss, p.copy(), 0
        else:
            since += 1
        if since >= patience:
            break
    coef = (float(best_p[0]), float(best_p[1]), float(best_p[2]))
    return Fit(coef, True, epoch, n_train, len(rows) - n_train, start, best)


def fit_on_rewards(base_scores: Sequence[np.ndarray], feedback: Sequence[np.ndarray],
                   vectors: Sequence[np.ndarray]) -> Fit:
    """The package's fit on paid rewards: per query its base scores, rewards and vectors
    of the judged prefix of its base ranking (at least ``CONTEXT_LIMIT + 1`` long to give
    a row); ``INIT`` unfitted when fewer than two queries give rows."""
    rows = []
    for s, f, v in zip(base_scores, feedback, vectors):
        if len(f) > CONTEXT_LIMIT:
            r = query_rows(s, f, v)
            if r is not None:
                rows.append(r)
    widths = {len(r.score) for r in rows}
    if len(widths) > 1:  # Batch stacks rows: keep the most common width
        common = max(widths, key=lambda w: sum(len(r.score) == w for r in rows))
        rows = [r for r in rows if len(r.score) == common]
    return fit_coefficients(rows)
