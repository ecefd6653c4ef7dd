"""One learning cycle of the closed loop: every trusted reward and every explicit label
-> the candidate (method auto, :func:`tttembed.ttt.distil.learn_auto`: per task the parts
the guard says help among those ``--scope`` allows, query-wise by the query's text; a part
it excludes is not learned or paid for) -> the promotion check against the served version
(:mod:`tttembed.loop.promote`) -> a registered version, promoted only when the check says
it is better and promotions are not frozen.

People's labels (``POST /v1/feedback``) win over the judge's reward for the same pair.
Validation pairs are paid through the same judge and ledger, within the budget left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tttembed.adapt.scopes import query_digest
from tttembed.adapt.state import AdaptState
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.loop.config import LoopConfig
from tttembed.loop.judge import BackgroundJudge, Triple
from tttembed.loop.promote import PromotionCheck, check_promotion
from tttembed.loop.store import Store
from tttembed.registry.versions import Registry, Version
from tttembed.ttt.judged import Pair
from tttembed.ttt.queries import QuerySet, base_retrieval
from tttembed.types import Rewards

#: (task, text) -> {doc id: reward}
TextRewards = dict[tuple[str, str], dict[str, float]]


def collect(store: Store) -> tuple[TextRewards, int, int]:
    """Trusted finite judge rewards overlaid with people's labels; the counts of each."""
    out: TextRewards = {}
    n_judge = 0
    for r in store.rewards(trusted_only=True):
        if np.isfinite(r.reward):
            out.setdefault((r.task, r.query), {})[r.doc_id] = r.reward
            n_judge += 1
    fb = store.feedback()
    for f in fb:
        out.setdefault((f.task, f.query), {})[f.doc_id] = float(f.label)
    return out, n_judge, len(fb)


@dataclass
class JudgePay:
    """Pays validation pairs ``(query key, doc)`` of ``queries`` through the judge (a
    :data:`~tttembed.ttt.judged.Pay`): ``spent`` counts those new to the ledger, ``bought``
    keeps every reward."""

    judge: BackgroundJudge
    queries: QuerySet
    spent: int = 0
    bought: Rewards = field(default_factory=dict)

    def __call__(self, pairs: list[Pair]) -> Rewards:
        qs = self.queries
        pos = {k: i for i, k in enumerate(qs.keys)}
        triples: list[Triple] = [(qs.tasks[pos[k]], qs.texts[pos[k]], d) for k, d in pairs]
        got, paid = self.judge.pay(triples, source="validation")
        self.spent += paid
        out: Rewards = {}
        for (k, d), t in zip(pairs, triples):
            out.setdefault(k, {})[d] = got[t]
            self.bought.setdefault(k, {})[d] = got[t]
        return out


@dataclass(frozen=True)
class Cycle:
    """What a cycle did: the version it registered (None: nothing to learn), whether it
    was promoted, and the pairs it paid for validation."""

    version: Version | None
    promoted: bool
    validation_pairs: int
    reason: str


class Learner:
    """Runs cycles over one index, judge, store and registry."""

    def __init__(self, config: LoopConfig, registry: Registry, store: Store, index: Index,
                 embedder: Embedder, judge: BackgroundJudge) -> None:
        self.config, self.registry, self.store = config, registry, store
        self.index, self.embedder, self.judge = index, embedder, judge

    def _queries(self, judged: TextRewards) -> QuerySet:
        keys = sorted(judged)
        return QuerySet(tuple(t for t, _ in keys), tuple(query_digest(q) for _, q in keys),
                        tuple(q for _, q in keys))

    def served_states(self) -> tuple[str | None, list[AdaptState]]:
        name = self.registry.served()
        if name is None:
            return None, []
        v = self.registry.get(name)
        return name, [v.load()] if v.state_path.exists() else []

    def cycle(self, budget_left: int, *, frozen: bool, trigger: str = "",
              new_pairs: int | None = None) -> Cycle:
        """Learn, check and register one version (module docstring). The validation pays
        at most ``validate_share`` of the ``new_pairs`` rewarded since the last cycle
        (default: of every rewarded pair) for the guard, and as much again for the
        promotion check: what earlier cycles paid stays judged."""
        from tttembed.ttt.distil import learn_auto

        judged, n_judge, n_feedback = collect(self.store)
        if not judged:
            return Cycle(None, False, 0, "no reward yet")
        qs = self._queries(judged)
        base = base_retrieval(self.index, self.embedder, qs, min(self.config.depth,
                                                                   len(self.index)))
        rewards = {k: judged[(t, q)] for k, t, q in zip(qs.keys, qs.tasks, qs.texts)}
        n_pairs = sum(len(r) for r in rewards.values())
        fresh = n_pairs if new_pairs is None else min(max(new_pairs, 0), n_pairs)
        cap = max(min(budget_left, round(self.config.validate_share * fresh)), 0)
        pay = JudgePay(self.judge, qs)
        state = learn_auto([(qs, base, self.index)], rewards, pay, validate_cap=cap,
                           scopes=self.config.scopes, seed=self.config.seed,
                           scorer=self.judge.scorer.spec, budget=n_pairs,
                           reward_mapping=getattr(self.judge.scorer, "mapping", ""))
        parent, served = self.served_states()
        candidate = [state] if state is not None and len(state.keys) else []
        judged_now = {k: {**rewards.get(k, {}), **pay.bought.get(k, {})} for k in qs.keys}
        check = check_promotion(self.index, qs, base.x, judged_now, served, candidate, pay,
                                cap=max(min(cap, budget_left - pay.spent), 0),
                                seed=self.config.seed)
        ok, reason = _verdict(check, frozen, candidate)
        record = {"parent": parent, "evidence": check.as_dict(), "reason": reason,
                  "trigger": trigger, "queries": len(qs),
                  "pairs": {"judged": n_judge, "feedback": n_feedback,
                            "validation": pay.spent},
                  "choice": dict((state.selection or {}).get("choice", {})) if state else {},
                  "scopes": list(self.config.scopes)}
        version = self.registry.register(state, **record)
        if ok:
            self.registry.promote(version.name, by="learner", reason=reason)
        return Cycle(version, ok, pay.spent, reason)


def _verdict(check: PromotionCheck, frozen: bool, candidate: Sequence[AdaptState]
             ) -> tuple[bool, str]:
    if not candidate:
        return False, "refused: the guard kept raw everywhere (no part helps)"
    if not check.changed and check.left_out:
        return False, (f"refused: the validation budget judged none of the {check.left_out} "
                       "queries whose top-10 changes")
    if not check.changed:
        return False, "refused: no query's top-10 changes against the served version"
    shown = (f"Delta nDCG@10 {check.gain:+.4f} [{check.ci_low:+.4f}, {check.ci_high:+.4f}] "
             f"on {check.queries} queries against the served version")
    if not check.better:
        return False, f"refused: {shown}: the interval does not lie above 0"
    if frozen:
        return False, f"refused: promotions are frozen ({shown})"
    return True, f"promoted: {shown}"


__all__ = ["Cycle", "JudgePay", "Learner", "TextRewards", "collect"]
