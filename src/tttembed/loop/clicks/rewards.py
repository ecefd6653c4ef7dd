"""Debiased click rewards per (task, query, doc) (METHOD.md Part 4, "Clicks as rewards").

γ̂ = Σ clicks / Σ_impressions max(θ_r, clip), shrunk toward the task's mean with
``prior`` pseudo-impressions (so a pair seen twice is not a reward of 0 or 1), clipped to
[0, 1]; its variance by the delta method for a ratio. ``naive`` is the same with θ = 1
(the raw click-through rate, for comparison only). :func:`doubly_robust` combines a
judge's score j with the clicks: γ̂_DR = j + mean_i (c_i − θ_i j) / θ_i, and reports the
judge–click disagreement γ̂_DR − j per pair; :func:`judge_gap` is what the drift audit
checks (:class:`JudgeGap`). Robustness (in
:mod:`tttembed.loop.clicks.robust`): clicks deduplicated, capped per session and query,
sessions whose clicks ignore the document dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.loop.clicks.propensity import Propensities, flat
from tttembed.loop.clicks.robust import Cleaned, clean_clicks
from tttembed.loop.rows import Reward, Shown

#: θ is clipped from below at this (inverse propensities at most 10)
CLIP = 0.1
#: pseudo-impressions (examination-weighted) of the task's mean in every pair's estimate
PRIOR = 5.0
#: The judge-click gap is measured only on pairs shown at least this often (fewer and
#: the per-pair variance, which the gap subtracts, is itself too noisy: with θ clipped at
#: 0.1 a single click is a rate of up to 10)...
GAP_IMPRESSIONS = 20
#: ...and only when at least this many pairs have a judge reward and that many
#: impressions (fewer: no verdict either way). Both are fixed by the sampling noise of
#: the estimate, never tuned on evaluation labels.
GAP_PAIRS = 20
#: The propensities the gap is measured under: harvested from interventions only. An
#: EM fit (the fallback where traffic holds few interventions) can be off by half at
#: rank 2 on thin traffic, and its error would read as the judge's.
GAP_BASES = ("harvest",)

Key = tuple[str, str, str]


@dataclass(frozen=True)
class ClickStat:
    """The click estimate of one (task, query, doc): ``reward`` in [0, 1], from
    ``impressions`` and ``clicks``, ``exposure`` Σ max(θ_r, clip), ``variance`` of the
    unshrunk rate, ``raw`` the unshrunk rate itself (may exceed 1)."""

    task: str
    query: str
    doc_id: str
    reward: float
    impressions: int
    clicks: int
    exposure: float
    variance: float
    raw: float


@dataclass(frozen=True)
class ClickRewards:
    """What :func:`click_rewards` returns: the loop's rows, their statistics (same
    order), and the sessions given no weight."""

    rows: tuple[Reward, ...]
    stats: tuple[ClickStat, ...]
    dropped_sessions: tuple[str, ...]
    #: the shown records the stats were computed from (deduplicated, capped, bots out)
    cleaned: tuple[Shown, ...] = ()


@dataclass(frozen=True)
class _Columns:
    """``shown`` as arrays: each record's pair (an index into ``keys``, the pairs in the
    order first shown), θ at its rank (clipped) and its click."""

    keys: tuple[Key, ...]
    pair: np.ndarray
    theta: np.ndarray
    click: np.ndarray

    @property
    def impressions(self) -> np.ndarray:
        return np.bincount(self.pair, minlength=len(self.keys))

    def per_pair(self, values: np.ndarray) -> np.ndarray:
        """The sum of ``values`` (one per record) over each pair's records."""
        return np.bincount(self.pair, weights=values, minlength=len(self.keys))


def _columns(shown: Sequence[Shown], prop: Propensities, clip: float) -> _Columns:
    """:class:`_Columns` of ``shown``: θ as :meth:`Propensities.at` gives it, in one pass."""
    index: dict[Key, int] = {}
    n = len(shown)
    pair = np.fromiter((index.setdefault((s.task, s.query, s.doc_id), len(index))
                        for s in shown), np.int64, n)
    rank = np.fromiter((s.rank for s in shown), np.int64, n)
    table = np.maximum(np.asarray(prop.theta, np.float64), clip)
    theta = table[np.clip(rank, 1, len(table)) - 1] if n else np.zeros(0)
    click = np.fromiter((1.0 if s.clicked else 0.0 for s in shown), np.float64, n)
    return _Columns(tuple(index), pair, theta, click)


def click_stats(shown: Sequence[Shown], propensities: Propensities, *, clip: float = CLIP,
                prior: float = PRIOR) -> list[ClickStat]:
    """One :class:`ClickStat` per (task, query, doc) of ``shown`` (already cleaned), in the
    order first shown, shrunk toward its task's mean rate Σ clicks / Σ exposure."""
    if not 0 < clip <= 1:
        raise ConfigError(f"the propensity clip must be in (0, 1], got {clip}")
    cols = _columns(shown, propensities, clip)
    if not cols.keys:
        return []
    n, c, e = cols.impressions, cols.per_pair(cols.click), cols.per_pair(cols.theta)
    raw = c / e
    variance = cols.per_pair((cols.click - raw[cols.pair] * cols.theta) ** 2) / e ** 2
    tasks = {t: i for i, t in enumerate(dict.fromkeys(k[0] for k in cols.keys))}
    task_of = np.fromiter((tasks[k[0]] for k in cols.keys), np.int64, len(cols.keys))
    per_task = task_of[cols.pair]
    mean = np.bincount(per_task, cols.click) / np.maximum(np.bincount(per_task, cols.theta),
                                                           1e-12)
    shrunk = np.clip((c + prior * mean[task_of]) / (e + prior), 0.0, 1.0)
    return [ClickStat(k[0], k[1], k[2], float(shrunk[i]), int(n[i]), int(c[i]), float(e[i]),
                      float(variance[i]), float(raw[i])) for i, k in enumerate(cols.keys)]


def click_rewards(shown: Sequence[Shown], propensities: Propensities, *,
                  clip: float = CLIP, prior: float = PRIOR, naive: bool = False,
                  created: float | None = None, cap: int | None = None) -> ClickRewards:
    """The loop's click rewards from raw ``shown``: cleaned (:func:`robust.clean_clicks`: one
    click per (search, doc, session), at most ``cap`` clicks per session and query,
    document-blind sessions dropped), then :func:`click_stats` with ``propensities``
    (θ = 1 when ``naive``). Rows are ``Reward(source="clicks", paid=False)``, ``created``
    the newest record's time unless given."""
    cleaned: Cleaned = clean_clicks(shown, propensities) if cap is None \
        else clean_clicks(shown, propensities, cap=cap)
    prop = flat(len(propensities.theta)) if naive else propensities
    stats = click_stats(cleaned.shown, prop, clip=clip, prior=prior)
    when = created if created is not None else max((s.created for s in shown), default=0.0)
    rows = tuple(Reward(s.task, s.query, s.doc_id, s.reward, when, source="clicks",
                        paid=False, trusted=True) for s in stats)
    return ClickRewards(rows, tuple(stats), cleaned.dropped_sessions, cleaned.shown)


@dataclass(frozen=True)
class DRStat:
    """The doubly robust estimate of one (task, query, doc): ``reward`` in [0, 1],
    ``judge`` the direct model's score, ``disagreement`` = unclipped DR − judge (the
    clicks' correction; large and one-signed across pairs means a drifting judge)."""

    task: str
    query: str
    doc_id: str
    reward: float
    judge: float
    disagreement: float
    impressions: int


def doubly_robust(shown: Sequence[Shown], propensities: Propensities,
                  judge: Mapping[Key, float], *, clip: float = CLIP) -> list[DRStat]:
    """γ̂_DR = j + mean_i (c_i − θ_i j) / θ_i per (task, query, doc) of ``shown`` that
    ``judge`` scored (pairs without a judge score are left out: use :func:`click_stats`
    for them), θ clipped at ``clip``, the reward clipped to [0, 1]."""
    cols = _columns(shown, propensities, clip)
    scored = np.array([key in judge for key in cols.keys], dtype=bool)
    if not scored.any():
        return []
    j = np.array([float(judge[key]) if ok else 0.0 for key, ok in zip(cols.keys, scored)])
    n = cols.impressions
    dr = j + cols.per_pair((cols.click - cols.theta * j[cols.pair]) / cols.theta) / \
        np.maximum(n, 1)
    return [DRStat(k[0], k[1], k[2], float(np.clip(dr[i], 0.0, 1.0)), float(j[i]),
                   float(dr[i] - j[i]), int(n[i]))
            for i, k in enumerate(cols.keys) if scored[i]]


@dataclass(frozen=True)
class JudgeGap:
    """How far a judge's rewards lie from the clicks on the ``pairs`` that have both:
    ``gap`` the root mean squared difference (clicks' unshrunk debiased rate − judge)
    with each pair's sampling variance taken out, so noisy click rates alone do not read
    as disagreement; ``bias`` the mean signed difference (> 0: the judge scores lower
    than people click)."""

    gap: float
    bias: float
    pairs: int

    def as_dict(self) -> dict[str, float | int]:
        return {"gap": round(self.gap, 4), "bias": round(self.bias, 4), "pairs": self.pairs}


def judge_gap(stats: Sequence[ClickStat], judge: Mapping[Key, float], *,
              min_impressions: int = GAP_IMPRESSIONS,
              min_pairs: int = GAP_PAIRS) -> JudgeGap | None:
    """The :class:`JudgeGap` over the pairs of ``stats`` (debiased, not naive) that
    ``judge`` scored and that were shown at least ``min_impressions`` times:
    sqrt(max(mean((raw − j)² − variance), 0)). None with fewer than ``min_pairs``."""
    diffs, noise = [], []
    for s in stats:
        j = judge.get((s.task, s.query, s.doc_id))
        if j is None or not np.isfinite(j) or s.impressions < min_impressions:
            continue
        if np.isfinite(s.raw) and np.isfinite(s.variance):
            diffs.append(s.raw - float(j))
            noise.append(s.variance)
    if len(diffs) < max(min_pairs, 1):
        return None
    d, v = np.array(diffs), np.array(noise)
    return JudgeGap(float(np.sqrt(max(float(np.mean(d ** 2 - v)), 0.0))), float(d.mean()),
                    len(diffs))
