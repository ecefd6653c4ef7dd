"""The learner's view of clicks: the store's shown documents tailed incrementally (only
searches old enough that their clicks have settled), a bounded window of them, and from
that window the propensities and the click rewards a cycle learns from.

The window keeps the newest :data:`MAX_SHOWN` shown records (a year of traffic never
sits in memory; old clicks age out), so a cycle's cost is bounded by the window, not by
all past traffic; the propensities are estimated from its newest :data:`MAX_ESTIMATE`
records. Without a judge one session in k can be held out (``view(hold_out=k)``): its
click rewards are the promotion check's, not learned from. With a judge, a pair that has both a judge reward and clicks takes the
doubly robust estimate (the judge as the direct model, clicks correct it); the mean
judge-click disagreement is reported beside the propensities, and the judge-click gap
(:func:`tttembed.loop.clicks.rewards.judge_gap`) goes to the drift audit. Each cycle's
click rewards become rows of the store (:meth:`ClickView.rows`, ``source`` "clicks").

Interleaved searches (``Shown.test`` names the candidate) are also credited as they are
read: per (search, session) +1 when the candidate's team got more clicks, -1 when the
served team did, 0 otherwise (:func:`tttembed.loop.clicks.interleave.credit`); the
outcomes per candidate outlive the window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.loop.clicks.interleave import Interleaving, credit
from tttembed.loop.clicks.propensity import MIN_INTERVENTIONS, Propensities, estimate, flat
from tttembed.loop.clicks.rewards import (
    GAP_BASES,
    ClickStat,
    DRStat,
    JudgeGap,
    click_rewards,
    doubly_robust,
    judge_gap,
)
from tttembed.loop.forget import Forgotten, forgotten_key
from tttembed.loop.pending import Tail
from tttembed.loop.rows import CLICK_SETTLE_S, ClickReward, Shown, Store
from tttembed.ttt.judged import text_folds

#: Shown records the window keeps at most (the oldest age out first).
MAX_SHOWN = 1_000_000
#: Shown records the propensities are estimated from at most (the newest): the estimate
#: (EM with its bootstrap) was half a soak cycle's time and grew with the window; ten
#: rank parameters need far fewer rows, and a bounded input bounds the cycle (issue 62).
MAX_ESTIMATE = 50_000
#: The tail of the list whose documents set a task's unseen floor: pairs shown only at the
#: last ``TAIL_RANKS`` ranks (8-10 of 10). Fixed by the list's shape (the documents a
#: candidate displaces first), never tuned on evaluation labels.
TAIL_RANKS = 3
#: Ways a click becomes a reward (``--clicks``): debiased by the propensities, or the
#: naive click-through rate (for comparison only, never the default).
CLICK_MODES = ("ips", "naive", "off")

#: (task, query text) -> {doc id: reward}
ClickTextRewards = dict[tuple[str, str], dict[str, float]]


@dataclass(frozen=True)
class ClickView:
    """What one cycle reads from the window: ``rewards`` by (task, text), their
    statistics, the propensities, the sessions given no weight and the judge-click
    disagreement (mean, over pairs with both; None without such pairs); ``robust`` the
    doubly robust estimates, ``gap`` the judge-click gap the drift audit checks (None:
    too few pairs with both), ``mode`` the feed's."""

    rewards: ClickTextRewards
    stats: tuple[ClickStat, ...]
    propensities: Propensities
    dropped_sessions: tuple[str, ...]
    disagreement: float | None = None
    combined: int = 0
    robust: tuple[DRStat, ...] = ()
    gap: JudgeGap | None = None
    mode: str = "ips"
    #: per task, what a pair nobody was shown is worth (:func:`unseen_floors`)
    floors: Mapping[str, float] = field(default_factory=dict)
    #: click rewards of the held-out sessions (``hold_out``), not learned from: the
    #: no-judge promotion check's evidence (empty when nothing is held out)
    held: ClickTextRewards = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        return sum(len(v) for v in self.rewards.values())

    def to_dict(self) -> dict[str, Any]:
        return {"propensities": self.propensities.to_dict(), "pairs": self.pairs,
                "clicked_pairs": sum(1 for s in self.stats if s.clicks),
                "dropped_sessions": len(self.dropped_sessions),
                "judge_disagreement": self.disagreement, "doubly_robust_pairs": self.combined,
                "judge_gap": self.gap.as_dict() if self.gap is not None else None,
                "unseen_floor": {t: round(v, 4) for t, v in sorted(self.floors.items())}}

    def rows(self, created: float, *, trusted: bool) -> list[ClickReward]:
        """The store's rows of this view (one per pair of ``stats``): the reward the
        learner uses (doubly robust where a judge reward was corrected), its counts and
        variance, the mode and the propensities' basis."""
        judge = {(d.task, d.query, d.doc_id): d.judge for d in self.robust}
        prop = self.propensities
        basis = prop.method if self.mode == "ips" else "none"
        out = []
        for s in self.stats:
            reward = self.rewards.get((s.task, s.query), {}).get(s.doc_id, s.reward)
            out.append(ClickReward(
                s.task, s.query, s.doc_id, float(reward), s.clicks, s.impressions,
                s.exposure, s.variance, s.raw, self.mode, basis,
                prop.interventions if self.mode == "ips" else 0,
                judge.get((s.task, s.query, s.doc_id)), created, trusted))
        return out


@dataclass
class ClickFeed:
    """Tails ``store.shown_after`` and turns the window into a :class:`ClickView`
    (``mode`` one of :data:`CLICK_MODES`; ranks 1..``k``)."""

    store: Store
    k: int = 10
    mode: str = "ips"
    settle_s: float = CLICK_SETTLE_S
    max_shown: int = MAX_SHOWN
    max_estimate: int = MAX_ESTIMATE
    seed: int = 0
    window: deque[Shown] = field(init=False)
    _tail: Tail[Shown] = field(init=False)
    _forgotten: Tail[Forgotten] = field(init=False)
    _clicks_seen: int = field(init=False, default=0)
    _outcomes: dict[str, list[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.window = deque(maxlen=self.max_shown)
        self._tail = Tail(self._read, lambda s: (s.created, _shown_key(s)))
        self._forgotten: Tail[Forgotten] = Tail(self.store.forgotten_after, forgotten_key)

    def _read(self, cursor: Any, limit: int) -> list[Shown]:
        return self.store.shown_after(cursor, limit, before=time.time() - self.settle_s)

    def refresh(self) -> int:
        """Read the settled searches not read before; the clicks among them. Searches
        forgotten since the last read (``tttembed store forget``) leave the window."""
        self._drop_forgotten()
        new = 0
        for page in self._tail.pages():
            self.window.extend(page)
            new += sum(1 for s in page if s.clicked)
            for test, outcome in _credits(page):
                self._outcomes.setdefault(test, []).append(outcome)
        self._clicks_seen += new
        return new

    def _drop_forgotten(self) -> None:
        gone = {f.search_id for page in self._forgotten.pages() for f in page}
        if gone:
            kept = [s for s in self.window if s.search_id not in gone]
            self.window = deque(kept, maxlen=self.max_shown)

    def outcomes(self, candidate: str) -> list[int]:
        """The interleaving outcomes of ``candidate`` read so far, oldest first."""
        return list(self._outcomes.get(candidate, ()))

    @property
    def clicks(self) -> int:
        """Clicks read so far (the window may hold fewer)."""
        return self._clicks_seen

    def view(self, judge: Mapping[tuple[str, str, str], float] | None = None, *,
             hold_out: int = 0) -> ClickView:
        """Propensities and click rewards of the window (module docstring); ``hold_out``
        k > 0: the sessions of one fold in k (by a hash of the session id, else the
        search id) are held out of the rewards and give ``held`` instead."""
        shown = list(self.window)
        if self.mode == "off" or not any(s.clicked for s in shown):
            return ClickView({}, (), flat(self.k), (), mode=self.mode)
        prop = estimate(shown[-self.max_estimate:], self.k, seed=self.seed)
        held: ClickTextRewards = {}
        dropped: tuple[str, ...] = ()
        if hold_out > 0:
            fold = text_folds([s.session or s.search_id for s in shown], hold_out)
            kept = [s for s, f in zip(shown, fold) if f]
            out_of = click_rewards([s for s, f in zip(shown, fold) if not f], prop,
                                   naive=self.mode == "naive")
            for st in out_of.stats:
                held.setdefault((st.task, st.query), {})[st.doc_id] = st.reward
            shown, dropped = kept, tuple(out_of.dropped_sessions)
        got = click_rewards(shown, prop, naive=self.mode == "naive")
        out: ClickTextRewards = {}
        for s in got.stats:
            out.setdefault((s.task, s.query), {})[s.doc_id] = s.reward
        disagreement, dr, gap = None, [], None
        if judge and self.mode == "ips":
            dr = doubly_robust(got.cleaned, prop, judge)
            for d in dr:
                out.setdefault((d.task, d.query), {})[d.doc_id] = d.reward
            disagreement = float(np.mean([d.disagreement for d in dr])) if dr else None
            gap = judge_gap(got.stats, judge) if prop.method in GAP_BASES else None
        return ClickView(out, got.stats, prop, (*got.dropped_sessions, *dropped),
                         disagreement, len(dr),
                         tuple(dr), gap, self.mode,
                         unseen_floors(got.cleaned, got.stats, self.k), held)


def unseen_floors(shown: Sequence[Shown], stats: Sequence[ClickStat], k: int,
                  tail: int = TAIL_RANKS) -> dict[str, float]:
    """Per task, the mean click reward of the (query, doc) pairs of ``stats`` that
    ``shown`` placed only at the last ``tail`` of ranks 1..``k``: what a document no user
    was shown is worth in the no-judge validation (:mod:`tttembed.loop.nojudge`). Tasks
    with no such pair have no floor."""
    best: dict[tuple[str, str, str], int] = {}
    for s in shown:
        key = (s.task, s.query, s.doc_id)
        best[key] = min(best.get(key, s.rank), s.rank)
    cut = max(k - tail, 0)
    sums: dict[str, list[float]] = {}
    for st in stats:
        rank = best.get((st.task, st.query, st.doc_id))
        if rank is not None and rank > cut:
            sums.setdefault(st.task, []).append(st.reward)
    return {t: float(np.mean(v)) for t, v in sums.items()}


def _credits(page: list[Shown]) -> list[tuple[str, int]]:
    """(candidate, outcome) per interleaved (search, session) of ``page``."""
    groups: dict[tuple[str, str], list[Shown]] = {}
    for s in page:
        if s.test:
            groups.setdefault((s.search_id, s.session), []).append(s)
    out = []
    for rows in groups.values():
        rows.sort(key=lambda s: s.rank)
        shown = Interleaving(tuple(s.doc_id for s in rows), tuple(s.ranker for s in rows))
        out.append((rows[0].test, credit(shown, {s.doc_id for s in rows if s.clicked})))
    return out


def _shown_key(s: Shown) -> str:
    return f"{s.search_id}\x1f{s.session}\x1f{s.rank:04d}"



def clicks_note(view: ClickView | None) -> str:
    """Why a cycle's clicks could not carry a candidate yet ('' when their position bias
    is harvested, or no clicks are read): the clicks and the click rewards of the window,
    and how many more (query, document) pairs seen at two ranks harvesting needs. Added to
    a refusal "no part helps", so a clicks-fed app's first cycles say what they wait for."""
    if view is None or view.mode == "off" or view.propensities.method == "harvest":
        return ""
    clicks = sum(s.clicks for s in view.stats)
    got = view.propensities.interventions
    return (f"; the clicks could not be used yet: {clicks} click(s) in the window gave "
            f"{view.pairs} click reward(s), their position bias only estimated "
            f"({view.propensities.method}) from {got} of the {MIN_INTERVENTIONS} (query, "
            f"document) pairs seen at two ranks that harvesting it needs "
            f"({MIN_INTERVENTIONS - got} more: a document a served version change, "
            "interleaving or an exploration swap shows at another rank)")

__all__ = ["CLICK_MODES", "MAX_ESTIMATE", "MAX_SHOWN", "TAIL_RANKS", "ClickFeed",
           "ClickTextRewards", "ClickView", "clicks_note", "unseen_floors"]
