"""Reward cross-validation: does a learned state order *held-out* rewarded candidates
better than the raw vectors do? Judged from the rewards alone (no label).

The rewards already paid are split in ``K`` folds; each fold's state is learned from the
other folds and scored on the held-out fold:

- shared scopes (``"global"``, ``"task"``): the rewarded *queries* are folded, stratified
  by task (a task-wise state is always checked on held-out queries of its own task; a
  group with no training query in a fold has no vector there, and its held-out queries
  are not scored);
- ``"query"``: each query's own rewarded *candidates* are folded (``min(K, K_q)`` folds,
  leave-one-out when a query has fewer than ``K`` candidates); every candidate is scored
  by the vector learned without it. Queries with fewer than two candidates are not scored.

Every fold's groups are learned as ONE batched problem (one :func:`learn_vectors` call
with ``K x G`` groups, about ``(K - 1)`` times the rows of a single learn), with the
scope's own weights recomputed on each fold's training queries.

A held-out query's score is the ranking quality of its rewarded candidates by
``unit(x + alpha v) . z`` against the rewards as gains: ``"ndcg"`` (nDCG over all its
rewarded candidates, rewards as gains) or ``"pairwise"`` (share of candidate pairs with
different rewards ordered like the rewards; score ties count 1/2). Queries whose rewards
are all equal carry no ranking information and are not scored. The gain of an alpha is
its score minus the raw vector's, averaged within each task and then over tasks (as the
evaluation averages); its 95% CI is a percentile bootstrap over queries, stratified by
task. Alphas: :data:`ALPHA_GRID`, where ``"rule"`` is ``n_g / (n_g + 1)`` with the fold's
``n_g``.

``auto`` (:meth:`CrossValidation.auto`) takes the alpha with the largest mean gain among
those whose CI lies above 0, and shrinks to ``0`` (the raw vector) when none does.
Deterministic: the same inputs and ``seed`` give the same folds, bootstrap and choice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt.optimize import RewardBatch, learn_vectors
from tttembed.adapt.scopes import (
    alpha_from_counts,
    group_key,
    make_groups,
    sharing,
)
from tttembed.core.errors import ConfigError
from tttembed.types import ALPHA_MODES

#: The alphas ``auto`` chooses from; ``"rule"`` is ``n_g / (n_g + 1)``.
ALPHA_GRID: tuple[str, ...] = ("0", "0.1", "0.2", "0.3", "0.5", "0.7", "rule")
FOLDS = 5
CV_METRICS: tuple[str, ...] = ("ndcg", "pairwise")
N_BOOT = 2000
#: Held-out queries a choice needs at least (an alpha, a method): the percentile bootstrap
#: of fewer is no 95% interval (two queries that both gain give [min, max], above 0
#: however little they say), and the paired sign-flip test of n queries cannot reach
#: p < 0.05 below 6 (its smallest two-sided p is 2 / 2^n = 0.0625 at n = 5). Below it raw
#: is kept, and the evidence says why (:func:`too_few_note`).
MIN_CHOICE_QUERIES = 6


def too_few_note(queries: int, what: str = "raw kept") -> str:
    """Why a choice was not made on ``queries`` held-out queries."""
    return (f"{queries} held-out quer{'y' if queries == 1 else 'ies'}, fewer than the "
            f"{MIN_CHOICE_QUERIES} a choice needs (no 95% interval from so few: a paired "
            f"test of {queries} cannot reach p < 0.05; the rule counts held-out queries, "
            f"not rewarded ones: a task needs about {2 * MIN_CHOICE_QUERIES} rewarded "
            f"queries): {what}")

__all__ = ["ALPHA_GRID", "FOLDS", "CV_METRICS", "AlphaGain", "CrossValidation",
           "alpha_label", "alpha_values", "cross_validate", "cv_deltas", "parse_alpha", "task_bootstrap"]


def parse_alpha(value: str | float) -> str | float:
    """``"rule"``, ``"auto"`` or a float in [0, 1] (given as a number or a string)."""
    if isinstance(value, str) and value.strip().lower() in ALPHA_MODES:
        return value.strip().lower()
    try:
        a = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"unknown alpha {value!r}; choose rule, auto or a number in "
                          "[0, 1]") from None
    if not 0.0 <= a <= 1.0 or isinstance(value, bool):
        raise ConfigError(f"alpha {value!r} must lie in [0, 1] (or be rule / auto)")
    return a


def alpha_label(alpha: str | float) -> str:
    """How a fixed alpha or ``rule`` is written in a manifest: ``"rule"``, ``"0.3"``."""
    return alpha if isinstance(alpha, str) else f"{float(alpha):g}"


def alpha_values(label: str, n_g: np.ndarray) -> np.ndarray:
    """Per-group alphas of an alpha label (``"rule"``: ``n_g / (n_g + 1)``; a number: that
    number for every group with evidence, 0 for a group without)."""
    n_g = np.asarray(n_g, dtype=np.int64)
    if label == "rule":
        return alpha_from_counts(n_g)
    return np.where(n_g > 0, float(label), 0.0)


@dataclass(frozen=True)
class AlphaGain:
    """Cross-validated gain of one alpha over the raw vector, with its 95% CI."""

    alpha: str
    gain: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class CrossValidation:
    """The evidence: ``queries`` held-out queries scored (``tasks`` tasks), the raw
    vectors' mean score ``raw``, and one :class:`AlphaGain` per alpha of the grid."""

    scope: str
    folds: int
    metric: str
    queries: int
    tasks: int
    raw: float
    gains: tuple[AlphaGain, ...]
    seed: int = 0

    def gain(self, alpha: str) -> AlphaGain:
        for g in self.gains:
            if g.alpha == alpha:
                return g
        raise KeyError(alpha)

    def auto(self) -> str:
        """The alpha with the largest mean gain among those whose CI lies above 0 (the
        smaller alpha on a tie); ``"0"`` when no alpha shows a gain, or the evidence holds
        fewer than :data:`MIN_CHOICE_QUERIES` queries."""
        if self.queries < MIN_CHOICE_QUERIES:
            return "0"
        shown = [(g.gain, -i, g.alpha) for i, g in enumerate(self.gains)
                 if g.alpha != "0" and g.ci_low > 0.0]
        return max(shown)[2] if shown else "0"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the state's manifest keeps it)."""
        return {"scope": self.scope, "folds": self.folds, "metric": self.metric,
                "queries": self.queries, "tasks": self.tasks, "raw": self.raw,
                "seed": self.seed, "auto": self.auto(),
                "gains": [{"alpha": g.alpha, "gain": g.gain, "ci": [g.ci_low, g.ci_high]}
                          for g in self.gains]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrossValidation:
        gains = tuple(AlphaGain(str(g["alpha"]), float(g["gain"]), float(g["ci"][0]),
                                float(g["ci"][1])) for g in d["gains"])
        return cls(str(d["scope"]), int(d["folds"]), str(d["metric"]), int(d["queries"]),
                   int(d["tasks"]), float(d["raw"]), gains, int(d.get("seed", 0)))


# --- folds -----------------------------------------------------------------------------

@dataclass
class _Folds:
    """The training rows of every fold as one ragged table, and where each held-out
    candidate's vector lives: ``owner[q][i]`` = row of the learned groups (-1: none)."""

    x: list[np.ndarray]
    z: list[np.ndarray]
    r: list[np.ndarray]
    group: list[int]
    weight: list[float]
    owner: list[np.ndarray]
    n_groups: int = 0


def _shared_folds(x: np.ndarray, zs: Sequence[np.ndarray], rs: Sequence[np.ndarray],
                  qids: Sequence[str], tasks: Sequence[str], scope: str, k: int,
                  rng: np.random.Generator) -> _Folds:
    n = len(qids)
    fold = np.zeros(n, dtype=np.int64)
    for t in dict.fromkeys(tasks):  # stratified by task, tasks in order of appearance
        rows = np.array([i for i in range(n) if tasks[i] == t])
        fold[rows[rng.permutation(len(rows))]] = np.arange(len(rows)) % k
    out = _Folds([], [], [], [], [], [np.full(len(r), -1, np.int64) for r in rs])
    for f in range(k):
        train = np.flatnonzero(fold != f).tolist()
        if not train:
            continue
        groups = make_groups(scope, [qids[i] for i in train], [tasks[i] for i in train])
        where = {key: out.n_groups + g for g, key in enumerate(groups.keys)}
        for j in groups.order().tolist():
            i = train[j]
            out.x.append(x[i])
            out.z.append(zs[i])
            out.r.append(rs[i])
            out.group.append(out.n_groups + int(groups.index[j]))
            out.weight.append(float(groups.weights[j]))
        for i in np.flatnonzero(fold == f).tolist():
            out.owner[i][:] = where.get(group_key(scope, tasks[i], ""), -1)  # global/task
        out.n_groups += len(groups.keys)
    return out


def _query_folds(x: np.ndarray, zs: Sequence[np.ndarray], rs: Sequence[np.ndarray], k: int,
                 rng: np.random.Generator) -> _Folds:
    out = _Folds([], [], [], [], [], [np.full(len(r), -1, np.int64) for r in rs])
    for q in range(len(rs)):
        kq = len(rs[q])
        if kq < 2:
            continue
        fold = np.empty(kq, dtype=np.int64)
        fold[rng.permutation(kq)] = np.arange(kq) % min(k, kq)
        for f in range(min(k, kq)):
            train = fold != f
            out.x.append(x[q])
            out.z.append(zs[q][train])
            out.r.append(rs[q][train])
            out.group.append(out.n_groups)
            out.weight.append(1.0)
            out.owner[q][~train] = out.n_groups
            out.n_groups += 1
    return out


# --- scoring ---------------------------------------------------------------------------

def _pad(zs: Sequence[np.ndarray], rs: Sequence[np.ndarray], owner: Sequence[np.ndarray],
         d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    kmax = max(len(r) for r in rs)
    z = np.zeros((len(rs), kmax, d), np.float32)
    r = np.zeros((len(rs), kmax))
    mask = np.zeros((len(rs), kmax), bool)
    own = np.full((len(rs), kmax), -1, np.int64)
    for q, (zq, rq, oq) in enumerate(zip(zs, rs, owner)):
        z[q, : len(rq)], r[q, : len(rq)], mask[q, : len(rq)], own[q, : len(rq)] = zq, rq, True, oq
    return z, r, mask, own


def _ranking(s: np.ndarray, r: np.ndarray, mask: np.ndarray, metric: str) -> np.ndarray:
    """Per-row ranking quality of scores ``s`` against rewards ``r`` (masked entries out)."""
    if metric == "pairwise":
        dr = r[:, :, None] - r[:, None, :]
        ds = s[:, :, None] - s[:, None, :]
        pair = mask[:, :, None] & mask[:, None, :] & (dr > 0)
        right = np.where(ds > 0, 1.0, np.where(ds == 0, 0.5, 0.0))
        return np.asarray((right * pair).sum((1, 2)) / np.maximum(pair.sum((1, 2)), 1))
    disc = 1.0 / np.log2(np.arange(s.shape[1]) + 2.0)
    order = np.argsort(np.where(mask, -s, np.inf), axis=1, kind="stable")
    gains = np.where(mask, r, 0.0)
    dcg = (np.take_along_axis(gains, order, 1) * disc).sum(1)
    ideal = (-np.sort(-gains, axis=1) * disc).sum(1)
    return np.asarray(dcg / np.maximum(ideal, 1e-12))


def _scores(x: np.ndarray, z: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``unit(x_q + a v) . z_qi`` for every candidate: one vector per query (``v`` (N, d),
    ``a`` (N,)) or one per candidate (``v`` (N, K, d), ``a`` (N, K))."""
    if v.ndim == 2:
        u = x + a[:, None].astype(np.float32) * v
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        return np.asarray(np.einsum("nkd,nd->nk", z, u, dtype=np.float64))
    u = x[:, None, :] + a[:, :, None].astype(np.float32) * v
    u /= np.maximum(np.linalg.norm(u, axis=2, keepdims=True), 1e-12)
    return np.asarray(np.einsum("nkd,nkd->nk", u, z, dtype=np.float64))


def task_bootstrap(gain: np.ndarray, tasks: np.ndarray, n_boot: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Task-balanced mean gains (A,) and their bootstrap resamples (n_boot, A)."""
    names = list(dict.fromkeys(tasks.tolist()))
    mean = np.zeros(gain.shape[1])
    boot = np.zeros((n_boot, gain.shape[1]))
    for t in names:
        g = gain[tasks == t]
        mean += g.mean(0) / len(names)
        counts = rng.multinomial(len(g), np.full(len(g), 1.0 / len(g)), size=n_boot)
        boot += counts @ g / (len(g) * len(names))
    return mean, boot


def cross_validate(x: np.ndarray, zs: Sequence[np.ndarray], rs: Sequence[np.ndarray],
                   qids: Sequence[str], tasks: Sequence[str], scope: str, *,
                   objective: str = "kd", folds: int = FOLDS, metric: str = "ndcg",
                   seed: int = 0, n_boot: int = N_BOOT,
                   callback: Callable[[int], None] | None = None) -> CrossValidation:
    """K-fold reward cross-validation of one scope's state (module docstring).

    ``x`` (N, d) unit vectors of the rewarded queries, ``zs[q]`` (K_q, d) their rewarded
    candidates' unit vectors, ``rs[q]`` (K_q,) finite rewards on [0, 1], ``qids`` /
    ``tasks`` as for :func:`~tttembed.adapt.scopes.make_groups`. ``callback`` sees the
    optimizer's steps (one batched run for all folds)."""
    rng = np.random.default_rng(seed)
    held = _held_out(x, zs, rs, qids, tasks, scope, objective=objective, folds=folds,
                     metric=metric, rng=rng, callback=callback)
    if held is None:
        return CrossValidation(scope, folds, metric, 0, 0, 0.0,
                               tuple(AlphaGain(a, 0.0, 0.0, 0.0) for a in ALPHA_GRID), seed)
    per, t, raw = held
    mean, boot = task_bootstrap(per, t, n_boot, rng)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    raw_mean, _ = task_bootstrap(raw[:, None], t, 1, rng)
    gains = tuple(AlphaGain(a, float(mean[j]), float(lo[j]), float(hi[j]))
                  for j, a in enumerate(ALPHA_GRID))
    return CrossValidation(scope, folds, metric, len(t), len(set(t.tolist())),
                           float(raw_mean[0]), gains, seed)


def cv_deltas(x: np.ndarray, zs: Sequence[np.ndarray], rs: Sequence[np.ndarray],
              qids: Sequence[str], tasks: Sequence[str], scope: str, *,
              objective: str = "kd", folds: int = FOLDS, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray]:
    """The per-query gains behind :func:`cross_validate` (nDCG of the judged candidates):
    (Q, A) over :data:`ALPHA_GRID` for the Q held-out queries scored, and their tasks."""
    held = _held_out(x, zs, rs, qids, tasks, scope, objective=objective, folds=folds,
                     metric="ndcg", rng=np.random.default_rng(seed), callback=None)
    if held is None:
        return np.zeros((0, len(ALPHA_GRID))), np.zeros(0, dtype=str)
    return held[0], held[1]


def _held_out(x: np.ndarray, zs: Sequence[np.ndarray], rs: Sequence[np.ndarray],
              qids: Sequence[str], tasks: Sequence[str], scope: str, *, objective: str,
              folds: int, metric: str, rng: np.random.Generator,
              callback: Callable[[int], None] | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per held-out query scored: the gain of each alpha, its task, the raw score (an
    adapter or neighbour state: the estimate of its groups' vectors, task or query)."""
    scope = sharing(scope)
    if metric not in CV_METRICS:
        raise ConfigError(f"unknown cross-validation metric {metric!r}; choose one of: "
                          f"{', '.join(CV_METRICS)}")
    if folds < 2:
        raise ConfigError(f"cross-validation needs at least 2 folds, got {folds}")
    x = np.asarray(x, dtype=np.float32)
    rs = [np.asarray(r, dtype=np.float64) for r in rs]
    fl = (_query_folds(x, zs, rs, folds, rng) if scope == "query"
          else _shared_folds(x, zs, rs, qids, tasks, scope, folds, rng))
    if not fl.group:
        return None
    batch = RewardBatch.from_ragged(np.stack(fl.x), fl.z, fl.r, np.array(fl.group),
                                    np.array(fl.weight))
    res = learn_vectors(batch, fl.n_groups, objective, callback=callback)
    z, r, mask, own = _pad(zs, rs, fl.owner, x.shape[1])
    keep = ((own >= 0) | ~mask).all(1) & (own >= 0).any(1)
    spread = np.where(mask, r, -np.inf).max(1) - np.where(mask, r, np.inf).min(1)
    keep &= spread > 1e-9
    if not keep.any():
        return None
    x, z, r, mask, own = x[keep], z[keep], r[keep], mask[keep], np.maximum(own[keep], 0)
    if scope != "query":  # one vector per held-out query
        own = own[:, 0]
    v = res.vectors[own]
    raw = _ranking(_scores(x, z, v, np.zeros(own.shape)), r, mask, metric)
    per = np.stack([_ranking(_scores(x, z, v, alpha_values(a, res.n_g)[own]), r, mask,
                             metric) - raw for a in ALPHA_GRID], axis=1)
    return per, np.asarray(tasks)[keep], raw
