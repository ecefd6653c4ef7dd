"""One learning cycle of the closed loop: the trusted rewards and explicit labels of the
rewarded texts in the bounded window (at most :data:`~tttembed.loop.window.WINDOW`, those
changed most recently; the others keep the served version's query-wise vectors:
:mod:`tttembed.loop.window`) -> the candidate (method auto, :func:`tttembed.ttt.distil.learn_auto`: per task the parts
the guard says help among those ``--scope`` allows, query-wise by the query's text; a part
it excludes is not learned or paid for) -> the promotion check against the served version
(:mod:`tttembed.loop.promote`) -> a registered version, promoted only when the check says
it is better and promotions are not frozen.

What a cycle learns from (people's labels over clicks over the judge's rewards) and what
pays its validation pairs (the same judge and ledger) is :mod:`tttembed.loop.rewarded`'s;
without a judge (``--judge none``) nothing is paid and an unseen pair counts 0
(:mod:`tttembed.loop.nojudge`). With ``--interleave`` a version the offline check does
not find worse becomes the candidate of the online test (:mod:`tttembed.loop.online`)
instead of being promoted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.scopes import query_digest
from tttembed.adapt.state import AdaptState
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.loop.clicks.feed import ClickFeed, ClickView
from tttembed.loop.config import LoopConfig
from tttembed.loop.judge import BackgroundJudge
from tttembed.loop.nojudge import FloorOrPay, UnseenAtFloor, key_floors
from tttembed.loop.online import OnlineTest
from tttembed.loop.populations import NewSet, check_two, decide, oof_shared, worse
from tttembed.loop.promote import PromotionCheck, waiting
from tttembed.loop.rewarded import JudgePay, TextRewards, collect, judge_rewards
from tttembed.loop.shared_set import SHARED_TEXTS, shared_only, with_shared
from tttembed.loop.store import Store
from tttembed.loop.window import RecentTexts, keep_served
from tttembed.registry.base import StateRegistry, Version
from tttembed.ttt.queries import BaseRetrieval, QuerySet, base_retrieval
from tttembed.types import Rewards

#: The promotion check's cap without a judge (nothing is paid: every unseen pair is 0).
UNLIMITED = 10**9
#: Base retrievals a learner keeps between cycles (texts; about 2 KB each at dim 384).
BASE_CACHE = 20_000
#: Without a judge, one click session in this many is held out of learning (by a hash of
#: the session id) and is what the promotion check judges the candidate on.
HOLD_OUT = 5


@dataclass(frozen=True)
class Cycle:
    """What a cycle did: the version it registered (None: nothing to learn), whether it
    was promoted, and the pairs it paid for validation."""

    version: Version | None
    promoted: bool
    validation_pairs: int
    reason: str
    #: what the promotion test lacks to decide (:func:`tttembed.loop.promote.waiting`)
    waiting: dict[str, Any] = field(default_factory=dict)


class Learner:
    """Runs cycles over one index, judge, store and registry."""

    def __init__(self, config: LoopConfig, registry: StateRegistry, store: Store, index: Index,
                 embedder: Embedder, judge: BackgroundJudge, *,
                 clicks: ClickFeed | None = None, online: OnlineTest | None = None) -> None:
        self.config, self.registry, self.store = config, registry, store
        self.index, self.embedder, self.judge = index, embedder, judge
        self.clicks, self.online = clicks, online
        self.last_clicks: ClickView | None = None
        #: the store's click rewards after the last :meth:`record_clicks`
        self.click_rows: dict[str, int] = {}
        #: (task, text) -> its base vector, candidate rows and scores (:meth:`_base`)
        self._bases: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] \
            = OrderedDict()
        #: which rewarded texts changed most recently: a cycle's window
        self.recent: RecentTexts[tuple[str, str]] = RecentTexts()

    def click_view(self) -> ClickView | None:
        """The click view of this cycle over the trusted judge rewards (None without
        clicks)."""
        if self.clicks is None:
            return None
        self.last_clicks = self.clicks.view(judge_rewards(self.store),
                                            hold_out=self.hold_out)
        return self.last_clicks

    @property
    def hold_out(self) -> int:
        """Without a judge, the click sessions of one fold in :data:`HOLD_OUT` are held
        out of learning: the promotion check's evidence (with a judge: none held)."""
        return 0 if self.config.has_judge else HOLD_OUT

    def record_clicks(self, view: ClickView | None, *, trusted: bool) -> int:
        """Upsert ``view``'s click rewards into the store (``trusted``: promotions are not
        frozen); the rows written."""
        if view is None:
            return 0
        written = self.store.add_click_rewards(view.rows(time.time(), trusted=trusted))
        self.click_rows = {"written": written, **self.store.click_reward_counts()}
        return written

    def _queries(self, judged: TextRewards) -> QuerySet:
        keys = sorted(judged)
        return QuerySet(tuple(t for t, _ in keys), tuple(query_digest(q) for _, q in keys),
                        tuple(q for _, q in keys))

    def _base(self, qs: QuerySet) -> BaseRetrieval:
        """The base retrieval of ``qs``: only the texts not seen by an earlier cycle are
        encoded and searched (the index never changes under a learner); at most
        :data:`BASE_CACHE` texts are kept, the least recently used dropped first."""
        cache = self._bases
        todo = [i for i, key in enumerate(zip(qs.tasks, qs.texts)) if key not in cache]
        if todo:
            got = base_retrieval(self.index, self.embedder, qs.subset(todo),
                                 min(self.config.depth, len(self.index)))
            for j, i in enumerate(todo):
                cache[(qs.tasks[i], qs.texts[i])] = (got.x[j], got.rows[j], got.scores[j])
        rows = []
        for key in zip(qs.tasks, qs.texts):
            cache.move_to_end(key)
            rows.append(cache[key])
        while len(cache) > BASE_CACHE:
            cache.popitem(last=False)
        return BaseRetrieval(x=np.stack([r[0] for r in rows]),
                             rows=np.stack([r[1] for r in rows]),
                             scores=np.stack([r[2] for r in rows]))

    def served_states(self) -> tuple[str | None, list[AdaptState]]:
        name = self.registry.served()
        if name is None:
            return None, []
        v = self.registry.get(name)
        return name, [v.load()] if v.state_path.exists() else []

    def cycle(self, budget_left: int, *, frozen: bool, trigger: str = "",
              new_pairs: int | None = None, view: ClickView | None = None) -> Cycle:
        """Learn, check and register one version (module docstring). The validation pays
        at most ``validate_share`` of the ``new_pairs`` rewarded since the last cycle
        (default: of every rewarded pair) for the guard, and as much again for the
        promotion check: what earlier cycles paid stays judged. ``view``: this cycle's
        click view when already read (:meth:`click_view`)."""
        judged_all, n_judge, n_feedback, view = collect(self.store, self.clicks, view,
                                                        self.hold_out, self.judge.corpus)
        self.last_clicks = view
        if not judged_all:
            return Cycle(None, False, 0, "no reward yet")
        judged, outside = self._window(judged_all)
        wide = self._shared_set(judged_all, judged)
        qs, qw = self._queries(judged), self._queries(wide or judged)
        base = self._base(qs)
        rewards = self._rewards(qs, judged)
        cap = self._guard_cap(budget_left, new_pairs, sum(len(r) for r in rewards.values()))
        pay = self._pay(qw, view)
        shared_pay, new_cap = self._shared_pay(qw, view, pay)
        state = self._learn(qs, base, rewards, pay, shared_pay, cap)
        state, base_w, rewards_w = self._widen(state, wide, qw, (base, rewards), pay,
                                               shared_pay, cap)
        parent, served = self.served_states()
        state = keep_served(state, served, outside)
        judged_now = self._marks(qs, rewards, pay, view)
        check_cap = self._check_cap(budget_left, pay, cap)
        new_x = oof_shared(self.index, qw, base_w, rewards_w, state, seed=self.config.seed)
        state, two = check_two(
            self.index, qs, base.x, judged_now, served, state, new_x, pay,
            cap=lambda: self._check_cap(budget_left, pay, cap), seed=self.config.seed,
            min_queries=self.config.min_queries, new_pay=shared_pay, new_cap=new_cap,
            new_on=None if wide is None else NewSet(qw, base_w.x,
                                                    self._marks(qw, rewards_w, pay, view)),
            reach=self._reach(budget_left - pay.spent, check_cap), parent=parent,
            split=f"clicks of 1 session in {HOLD_OUT} held out of learning (by session id)"
            if self.hold_out else "")
        candidate, check = ([state] if state is not None and len(state.keys) else []), two.asked
        ok, reason = decide(two, frozen=frozen, candidate=candidate, clicks=view)
        test = self.online is not None and bool(candidate) and not frozen and \
            (ok or not self.config.has_judge or (_not_worse(check) and not worse(two.new)))
        if test:
            ok, reason = False, (f"candidate: interleaved on {self.config.interleave:g} of "
                                 f"searches until the clicks decide (offline: {reason})")
        record = {"parent": parent, "evidence": {**check.as_dict(),
                                                 "populations": two.as_dict()},
                  "reason": reason, "trigger": trigger, "queries": len(qs),
                  "pairs": {"judged": n_judge, "feedback": n_feedback, "validation": pay.spent,
                            "clicks": view.pairs if view is not None else 0},
                  "choice": dict((state.selection or {}).get("choice", {})) if state else {},
                  "scopes": list(self.config.scopes), "outside_window": len(outside),
                  "shared_set": len(qw),
                  **({"kept_shared": two.kept_shared} if two.kept_shared else {})}
        version = self.registry.register(state, **record)
        if ok:
            self.registry.promote(version.name, by="learner", reason=reason)
        elif test and self.online is not None:
            self.online.propose(version.name)
        return Cycle(version, ok, pay.spent, reason, waiting(check, rewarded=len(qs), candidate=(
            candidate), pairs_left=max(budget_left - pay.spent, 0) * self.config.has_judge))

    def _widen(self, state: AdaptState | None, wide: TextRewards | None, qw: QuerySet,
               window: tuple[BaseRetrieval, Rewards], pay: JudgePay | UnseenAtFloor,
               shared_pay: FloorOrPay | None, cap: int
               ) -> tuple[AdaptState | None, BaseRetrieval, Rewards]:
        """``state``'s query part under the shared part learned from the shared set
        ``wide`` (:mod:`tttembed.loop.shared_set`; its guard paid within what the window's
        learning left of ``cap``), and the shared set's base retrieval and rewards (the
        ``window``'s when there is no shared set)."""
        if wide is None:
            return state, *window
        base_w, rewards_w = self._base(qw), self._rewards(qw, wide)
        shared = self._learn(qw, base_w, rewards_w, pay, shared_pay, max(cap - pay.spent, 0),
                             shared_only(self.config.scopes))
        return with_shared(state, shared, len(qw)), base_w, rewards_w

    def _learn(self, qs: QuerySet, base: BaseRetrieval, rewards: Rewards,
               pay: JudgePay | UnseenAtFloor, shared_pay: FloorOrPay | None, cap: int,
               scopes: tuple[str, ...] | None = None) -> AdaptState | None:
        """Method auto on ``qs`` (the window; with ``scopes``, the shared set's shared
        part), its guard paid within ``cap``."""
        from tttembed.ttt.distil import learn_auto

        n_pairs = sum(len(r) for r in rewards.values())
        return learn_auto([(qs, base, self.index)], rewards, pay, validate_cap=cap,
                          scopes=scopes or self.config.scopes, seed=self.config.seed,
                          provenance=self._provenance(n_pairs), shared_pay=shared_pay)

    @staticmethod
    def _rewards(qs: QuerySet, judged: TextRewards) -> Rewards:
        return {k: judged[(t, q)] for k, t, q in zip(qs.keys, qs.tasks, qs.texts)}

    def _shared_set(self, judged: TextRewards, window: TextRewards) -> TextRewards | None:
        """The shared set's rewarded texts (:mod:`tttembed.loop.shared_set`) when it holds
        more than the window and the loop learns a shared part; else None (the window's
        learning gives the shared part)."""
        if not shared_only(self.config.scopes) or len(judged) <= len(window):
            return None
        return {k: judged[k] for k in self.recent.latest(judged, SHARED_TEXTS, keep=list(window))}

    def _guard_cap(self, budget_left: int, new_pairs: int | None, n_pairs: int) -> int:
        """The guard's validation cap: ``validate_share`` of the pairs rewarded since the
        last cycle (``new_pairs``; default all ``n_pairs``), within the budget left."""
        fresh = n_pairs if new_pairs is None else min(max(new_pairs, 0), n_pairs)
        cap = max(round(self.config.validate_share * fresh), 0)
        return max(min(budget_left, cap), 0) if self.config.has_judge else cap

    def _window(self, judged: TextRewards) -> tuple[TextRewards, list[tuple[str, str]]]:
        """The rewarded texts this cycle learns from (at most the window's, those changed
        most recently: :mod:`tttembed.loop.window`) and the others, which keep the
        served version's query-wise vectors."""
        picked = self.recent.pick(judged)
        if len(picked) == len(judged):
            return judged, []
        inside = set(picked)
        return {k: judged[k] for k in picked}, [k for k in judged if k not in inside]

    def _pay(self, qs: QuerySet, view: ClickView | None) -> JudgePay | UnseenAtFloor:
        """What pays validation pairs: the judge, or without one the click floors."""
        if self.config.has_judge:
            return JudgePay(self.judge, qs)
        return UnseenAtFloor(key_floors(qs.keys, qs.tasks,
                                        view.floors if view is not None else {}))

    def _shared_pay(self, qs: QuerySet, view: ClickView | None, pay: JudgePay | UnseenAtFloor
                    ) -> tuple[FloorOrPay | None, int | None]:
        """With a judge and click rewards, what values the documents the shared parts'
        held-out lists and the new-questions check bring in: the task's unseen floor where
        the rewards are click rates (:class:`~tttembed.loop.nojudge.FloorOrPay`), the
        judge elsewhere; None (``pay`` throughout) without a judge or without clicks. And
        the new check's cap: none (:data:`UNLIMITED`) when the floor covers every query
        (it pays nothing), else None (the judge's)."""
        if not self.config.has_judge or view is None or not view.floors:
            return None, None
        floors = key_floors(qs.keys, qs.tasks, view.floors)
        if not floors:
            return None, None
        got = FloorOrPay(floors, pay)
        return got, UNLIMITED if got.covers(qs.keys) else None

    def _provenance(self, n_pairs: int) -> Any:
        from tttembed.ttt.options import Provenance

        return Provenance(scorer=self.judge.scorer.spec, budget=n_pairs,
                          reward_mapping=getattr(self.judge.scorer, "mapping", ""))

    def _marks(self, qs: QuerySet, rewards: Rewards, pay: JudgePay | UnseenAtFloor,
               view: ClickView | None) -> Rewards:
        """What the promotion check judges on: the rewards learned from and the pairs paid
        (a judge), or the held-out sessions' click rewards (no judge, :attr:`hold_out`)."""
        if not self.hold_out or view is None:
            return {k: {**rewards.get(k, {}), **pay.bought.get(k, {})} for k in qs.keys}
        return {k: dict(view.held.get((t, q), {}))
                for k, t, q in zip(qs.keys, qs.tasks, qs.texts)}

    def _check_cap(self, budget_left: int, pay: JudgePay | UnseenAtFloor, cap: int) -> int:
        return max(min(cap, budget_left - pay.spent), 0) if self.config.has_judge \
            else UNLIMITED

    def _reach(self, left: int, check_cap: int) -> int:
        """Pairs the promotion check may pay beyond its cap to reach ``--min-queries``:
        what the validation share of the judge budget has left (this cycle's guard
        included), within the ``left`` of the budget (none without a judge)."""
        if not self.config.has_judge:
            return 0
        share = int(self.config.validate_share * self.config.judge_budget)
        used = self.store.spent().get("validation", 0)
        return max(min(share - used, left) - check_cap, 0)


def _not_worse(check: PromotionCheck) -> bool:
    """The offline check does not find the candidate worse (its interval does not lie
    below 0; no interval: nothing says worse)."""
    return check.changed > 0 and (check.ci_high is None or check.ci_high >= 0)


__all__ = ["Cycle", "Learner"]
