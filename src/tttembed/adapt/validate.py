"""Judged-diff validation statistics (METHOD.md Part 3, "the guard"): pure numpy.

A held-out query's raw and adapted top-k lists are both fully judged (the documents the
learning budget did not judge are paid for, through the ledger, by
:mod:`tttembed.ttt.guard`); then the paired difference

    Delta_q = nDCG@k(adapted) - nDCG@k(raw)

is exact under the judge: gains are the judge's rewards on [0, 1], the discount
``1 / log2(rank + 1)``, and both lists share one ideal DCG (the query's judged documents,
best first), so ``Delta_q`` is a difference of two DCGs on one scale. Per alpha: the mean
Delta with tasks weighted equally, its 95% percentile bootstrap interval (queries resampled
within each task) and a two-sided paired sign-flip p-value. ``auto`` is then chosen as by
:meth:`tttembed.adapt.crossval.CrossValidation.auto`: the largest mean gain whose interval
lies above 0, else 0 (raw).

Past the validation budget, a random sample of the never-judged documents is paid
instead (:mod:`tttembed.adapt.sampled`). Per task, :func:`task_gains` gives each method's
mean Delta with its interval and p-value, and :func:`best_method` the one ``auto`` keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tttembed.adapt.crossval import MIN_CHOICE_QUERIES, AlphaGain, task_bootstrap

__all__ = ["alpha_gains", "best_method", "judged_dcg", "judged_deltas", "sign_flip_p",
           "task_folds", "task_gains"]


def task_folds(tasks: Sequence[str], k: int, rng: np.random.Generator) -> np.ndarray:
    """Fold of each row, stratified by task (tasks in order of first appearance)."""
    fold = np.zeros(len(tasks), dtype=np.int64)
    names = np.asarray(tasks)
    for t in dict.fromkeys(tasks):
        rows = np.flatnonzero(names == t)
        fold[rows[rng.permutation(len(rows))]] = np.arange(len(rows)) % k
    return fold


def judged_dcg(docs: Sequence[str], judged: Mapping[str, float], k: int) -> float:
    """DCG@k of a ranked list under the judge (unjudged or missing rewards count 0)."""
    gains = np.array([_gain(judged.get(d)) for d in list(docs)[:k]], dtype=np.float64)
    return float((gains / np.log2(np.arange(2, len(gains) + 2))).sum())


def _gain(value: float | None) -> float:
    return float(value) if value is not None and np.isfinite(value) else 0.0


def judged_deltas(raw: Sequence[str], adapted: Sequence[Sequence[str]],
                  judged: Mapping[str, float], k: int) -> tuple[float, np.ndarray]:
    """One query: raw nDCG@k and ``Delta`` of each adapted list, over one ideal DCG."""
    ideal = sorted((_gain(v) for v in judged.values()), reverse=True)[:k]
    idcg = float((np.asarray(ideal) / np.log2(np.arange(2, len(ideal) + 2))).sum())
    if idcg <= 0:
        return 0.0, np.zeros(len(adapted))
    base = judged_dcg(raw, judged, k)
    return base / idcg, np.array([(judged_dcg(a, judged, k) - base) / idcg for a in adapted])


def sign_flip_p(deltas: np.ndarray, tasks: np.ndarray, n: int,
                rng: np.random.Generator) -> float:
    """Two-sided paired sign-flip test of the task-balanced mean of ``deltas``."""
    names = list(dict.fromkeys(tasks.tolist()))
    weight = np.zeros(len(deltas))
    for t in names:
        hit = tasks == t
        weight[hit] = 1.0 / (hit.sum() * len(names))
    observed = abs(float((weight * deltas).sum()))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n, len(deltas)))
    flipped = np.abs(signs @ (weight * deltas))
    return float((np.sum(flipped >= observed - 1e-12) + 1) / (n + 1))


def alpha_gains(alphas: Sequence[str], deltas: np.ndarray, tasks: np.ndarray, *,
                n_boot: int, rng: np.random.Generator) -> tuple[tuple[AlphaGain, ...],
                                                                 np.ndarray]:
    """Per alpha (columns of ``deltas``, one row per held-out query): the task-balanced
    mean gain with its 95% bootstrap interval, and the sign-flip p-values."""
    mean, boot = task_bootstrap(deltas, tasks, n_boot, rng)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    gains = tuple(AlphaGain(a, float(mean[j]), float(lo[j]), float(hi[j]))
                  for j, a in enumerate(alphas))
    p = np.array([sign_flip_p(deltas[:, j], tasks, 2000, rng) for j in range(len(alphas))])
    return gains, p


def task_gains(deltas: Mapping[str, np.ndarray], tasks: Sequence[str], *, n_boot: int,
               rng: np.random.Generator) -> dict[str, dict[str, dict[str, float]]]:
    """Per task and method (``deltas[method]``: one Delta per row, nan = not scored): the
    mean Delta, its 95% bootstrap interval, the sign-flip p-value and the queries scored."""
    names = np.asarray(tasks)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for t in dict.fromkeys(tasks):
        out[t] = {}
        for method, d in deltas.items():
            d = np.asarray(d, dtype=np.float64)[names == t]
            d = d[np.isfinite(d)]
            if len(d) < 2:
                out[t][method] = {"gain": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p": 1.0,
                                  "queries": float(len(d))}
                continue
            (g,), p = alpha_gains([method], d[:, None], np.full(len(d), t), n_boot=n_boot,
                                  rng=rng)
            out[t][method] = {"gain": g.gain, "ci_low": g.ci_low, "ci_high": g.ci_high,
                              "p": float(p[0]), "queries": float(len(d))}
    return out


def best_method(gains: Mapping[str, Mapping[str, float]], default: str) -> str:
    """The method with the largest mean gain among those whose interval lies above 0
    over at least :data:`~tttembed.adapt.crossval.MIN_CHOICE_QUERIES` queries (fewer
    give no 95% interval), the first listed on a tie; else ``default``."""
    shown = [(g["gain"], -i, m) for i, (m, g) in enumerate(gains.items())
             if g["ci_low"] > 0 and g.get("queries", MIN_CHOICE_QUERIES) >= MIN_CHOICE_QUERIES]
    return max(shown)[2] if shown else default
