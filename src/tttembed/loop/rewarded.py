"""What a learning cycle (:mod:`tttembed.loop.learner`) learns from and what pays its
validation pairs: the rewards collected from the store (:func:`collect`) and the judge
that pays (:class:`JudgePay`).

People's labels (``POST /v1/feedback``) win over clicks, clicks over the judge's reward
for the same pair (with a judge and debiased clicks the pair's click reward is the doubly
robust estimate, the judge its direct model: :mod:`tttembed.loop.clicks.feed`); a click
reward the store holds as distrusted (the ``click_rewards`` table, written each cycle by
:meth:`~tttembed.loop.learner.Learner.record_clicks`) is not learned from, nor is any
reward of a question's own document (a corpus document whose text is the question's:
:func:`without_own`). Validation pairs are paid through the same judge and ledger, within
the budget left (:class:`JudgePay`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tttembed.adapt.scopes import query_digest
from tttembed.loop.clicks.feed import ClickFeed, ClickView
from tttembed.loop.judge import BackgroundJudge, BudgetSpent, Triple
from tttembed.loop.rows import CHAIN_TASK
from tttembed.loop.store import Store
from tttembed.ttt.judged import Pair
from tttembed.ttt.queries import QuerySet
from tttembed.types import Rewards

log = logging.getLogger("tttembed.loop")

#: (task, text) -> {doc id: reward}
TextRewards = dict[tuple[str, str], dict[str, float]]


def judge_rewards(store: Store) -> dict[tuple[str, str, str], float]:
    """The trusted finite judge rewards by (task, query text, doc), but the chain
    learner's (task :data:`~tttembed.loop.rows.CHAIN_TASK`: its judge pays for chain
    lists, which teach no state; a task name holds no '/')."""
    return {(r.task, r.query, r.doc_id): r.reward for r in store.rewards(trusted_only=True)
            if np.isfinite(r.reward) and r.task != CHAIN_TASK}


def collect(store: Store, clicks: ClickFeed | None = None, view: ClickView | None = None,
            hold_out: int = 0, corpus: Mapping[str, Mapping[str, str]] | None = None
            ) -> tuple[TextRewards, int, int, ClickView | None]:
    """Trusted finite judge rewards, overlaid with click rewards (``view``, else
    ``clicks``' window now) but those the store distrusts, overlaid with people's labels,
    less each question's own document of ``corpus`` (:func:`without_own`); the counts of
    judge rewards and labels, and the click view."""
    out: TextRewards = {}
    judge = judge_rewards(store)
    for (task, query, doc), reward in judge.items():
        out.setdefault((task, query), {})[doc] = reward
    if view is None and clicks is not None:
        view = clicks.view(judge, hold_out=hold_out)
    if view is not None and view.rewards:
        distrusted = {(r.task, r.query, r.doc_id) for r in store.click_rewards(trusted=False)}
        for (task, query), docs in view.rewards.items():
            kept = {d: r for d, r in docs.items() if (task, query, d) not in distrusted}
            if kept:
                out.setdefault((task, query), {}).update(kept)
    fb = [f for f in store.feedback() if f.task != CHAIN_TASK]  # chain labels: kept only
    for f in fb:
        out.setdefault((f.task, f.query), {})[f.doc_id] = float(f.label)
    return without_own(out, corpus or {}), len(judge), len(fb), view


def without_own(judged: TextRewards, corpus: Mapping[str, Mapping[str, str]]) -> TextRewards:
    """``judged`` less each question's own document: a document of ``corpus`` whose text
    is the question's (:func:`~tttembed.adapt.scopes.query_digest` of both). It is the
    question, not an answer to it (BEIR leaves it out of evaluation,
    ``ignore_identical_ids``). ArguAna's questions are arguments of its corpus: the search
    shows each its own argument first, so that pair's click rate is the best measured in
    the list and, the document irrelevant, the lowest, below every rarely examined pair's
    (shrunk toward the task's mean) and the unseen floor; learned from, it taught the task
    part to move every question away from its own text, which lowered unseen questions'
    nDCG@10 0.3750 -> 0.3076 in a replay of a soak's rewards
    (``benchmarks/replay_soak_rewards.py``, docs/performance.md). A question left with no
    reward is dropped."""
    out: TextRewards = {}
    for (task, text), docs in judged.items():
        me = query_digest(text)
        kept = {d: r for d, r in docs.items()
                if not (d in corpus and query_digest(corpus[d].get("text", "")) == me)}
        if kept:
            out[(task, text)] = kept
    return out


@dataclass
class JudgePay:
    """Pays validation pairs ``(query key, doc)`` of ``queries`` through the judge (a
    :data:`~tttembed.ttt.judged.Pay`): ``spent`` counts those new to the ledger, ``bought``
    keeps every reward. Pairs the budget can no longer cover (another learner on the store
    spent it since this cycle read what was left: :class:`BudgetSpent`) come back unpaid,
    as those another learner is paying do; the check judges without them."""

    judge: BackgroundJudge
    queries: QuerySet
    spent: int = 0
    bought: Rewards = field(default_factory=dict)

    def __call__(self, pairs: list[Pair]) -> Rewards:
        qs = self.queries
        pos = {k: i for i, k in enumerate(qs.keys)}
        triples: list[Triple] = [(qs.tasks[pos[k]], qs.texts[pos[k]], d) for k, d in pairs]
        try:
            got, paid = self.judge.pay(triples, source="validation")
        except BudgetSpent as exc:  # another learner spent it meanwhile: nothing was asked
            log.info("validation: %s", exc)
            return {}
        self.spent += paid
        out: Rewards = {}
        for (k, d), t in zip(pairs, triples):
            if t not in got:  # the other learner is paying it: unpaid here, this time
                continue
            out.setdefault(k, {})[d] = got[t]
            self.bought.setdefault(k, {})[d] = got[t]
        return out


__all__ = ["JudgePay", "TextRewards", "collect", "judge_rewards", "without_own"]
