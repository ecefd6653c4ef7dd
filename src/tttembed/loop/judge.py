"""The background judge: which served (query, document) pairs to pay for next, and paying
them within the budget and the rate, every reward committed as it arrives.

Priority (:func:`pending_pairs`): a query's weight is how often it was served, each time
discounted by its age (half-life ``half_life_s``: recent and repeated queries first),
times the active allocation's priority of the query given its rewards so far
(:func:`tttembed.adapt.active.query_priority`, halved: a query being judged finishes
its first block, a new query comes next, then the queries whose best-rewarded document
the served list ranks low; a query whose top document is its best yields), or, when only
which pairs are judged is known, divided by ``1 + judged / depth``; a pair's is its
query's weight over ``log2(rank + 2)`` of its best served rank (top ranks first). Pairs already judged are skipped. Paying goes through the ledger (a pair the
ledger already holds costs nothing and is not counted against the budget) and each
query's rewards go to the store as soon as they come back (a kill loses nothing paid).
Before the judge is asked, the pairs new to the ledger are reserved in the store's
spend account against the budget and claimed, in one transaction
(:meth:`tttembed.loop.spend.SpendSQL.claim`): a query the budget cannot cover is not
asked at all (:class:`BudgetSpent`), whatever other learners or earlier runs spent, and
a pair another learner has claimed (the state and the chain learner judging the same
texts at once) is left out of this call, not paid twice: its reward is in the ledger for
the next call. A judge call that fails (connection closed, HTTP 500, a
malformed answer) gives its pairs and those of the queries not asked yet back to the
account (a failed call is not spent budget), but those the ledger committed before it,
and ends their claims; so does a store that fails mid-call (a database restart after the
judge answered): what it could not take then is closed by the next call, before it
claims anything (else the learner would skip the pairs it claimed itself, for good, and
the spend would run ahead of the ledger). Nothing here runs on a request's path: the
learner's process calls it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from tttembed.adapt.active import query_priority
from tttembed.core.errors import TTTEmbedError
from tttembed.loop.store import Reward, SearchLog, Store
from tttembed.score.base import Item, Scorer
from tttembed.score.ledger import scorer_key
from tttembed.ttt.rewards import doc_items
from tttembed.types import Triple

log = logging.getLogger("tttembed.loop")


def pending_pairs(searches: Iterable[SearchLog], judged: set[Triple] | Mapping[Triple, float],
                  lists: Callable[[SearchLog], Sequence[str]], *, depth: int, now: float,
                  half_life_s: float = 600.0, per_query: int | None = None) -> list[Triple]:
    """Unjudged pairs of the served lists, best first (module docstring); ``judged`` the
    judged pairs, with their rewards when a mapping; a query with ``per_query`` (default
    ``depth``) pairs judged has none pending: the documents a new version brings into its
    list are judged by the promotion check, which needs them."""
    weight: dict[tuple[str, str], float] = {}
    best_rank: dict[Triple, int] = {}
    served: dict[tuple[str, str], list[str]] = {}
    for s in searches:
        key = (s.task, s.query)
        weight[key] = weight.get(key, 0.0) + 0.5 ** (max(now - s.created, 0.0) / half_life_s)
        docs = list(lists(s))[:depth]
        served.setdefault(key, docs)
        for rank, doc in enumerate(docs):
            t = (s.task, s.query, doc)
            if t not in judged and rank < best_rank.get(t, depth):
                best_rank[t] = rank
    factor = _query_factors(judged, served, depth)
    done = _judged_counts(judged)
    cap = depth if per_query is None else per_query
    scored = [(-weight[(t[0], t[1])] * factor.get((t[0], t[1]), 1.0)
               / math.log2(r + 2), t) for t, r in best_rank.items()
              if done.get((t[0], t[1]), 0) < cap]
    return [t for _, t in sorted(scored)]


def _judged_counts(judged: Iterable[Triple]) -> dict[tuple[str, str], int]:
    done: dict[tuple[str, str], int] = {}
    for task, query, _ in judged:
        done[(task, query)] = done.get((task, query), 0) + 1
    return done


def _query_factors(judged: set[Triple] | Mapping[Triple, float],
                   served: Mapping[tuple[str, str], list[str]], depth: int
                   ) -> dict[tuple[str, str], float]:
    """Each judged query's factor (module docstring): the active priority from its
    rewards, or ``1 / (1 + judged / depth)`` when only the judged pairs are known."""
    if not isinstance(judged, Mapping):
        return {k: 1.0 / (1 + n / depth) for k, n in _judged_counts(judged).items()}
    rewards: dict[tuple[str, str], dict[str, float]] = {}
    for (task, query, doc), r in judged.items():
        rewards.setdefault((task, query), {})[doc] = r
    return {k: query_priority(served.get(k, []), r) / 2 for k, r in rewards.items()}


@dataclass
class Bucket:
    """A token bucket: ``rpm`` pairs a minute, bursts of at most a minute's worth."""

    rpm: float
    tokens: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def take(self, want: int) -> int:
        now = time.monotonic()
        self.tokens = min(self.rpm, self.tokens + self.rpm * (now - self.at) / 60.0)
        self.at = now
        got = int(min(want, math.floor(self.tokens)))
        self.tokens -= got
        return max(got, 0)


#: One query of a :meth:`BackgroundJudge.pay`: (task, query, doc ids, their items, whether
#: each is new to the ledger, i.e. paid by this call).
_Planned = tuple[str, str, list[str], Sequence[Item], list[bool]]


class BudgetSpent(TTTEmbedError):
    """The judge budget cannot pay the pairs asked for (nothing of them was asked)."""


class BackgroundJudge:
    """Pays pairs through ``scorer`` (a LedgerScorer) and records them in ``store``,
    within ``budget`` pairs in all (None: no limit) reserved in the store first."""

    def __init__(self, scorer: Scorer, corpus: Mapping[str, Mapping[str, str]],
                 store: Store, budget: int | None = None) -> None:
        self.scorer = scorer
        self.corpus = corpus
        self.store = store
        self.budget = budget
        #: what a failed pay() still has to give back, settle and unclaim, in order
        self._owed: list[Callable[[], None]] = []

    @staticmethod
    def _source(source: str) -> str:
        return source if source in ("judge", "validation") else "judge"

    def _new_to_ledger(self, query: str, items: Sequence[Item],
                       seen: set[tuple[str, str]] | None = None) -> list[bool]:
        """Which pairs the ledger does not hold yet (all of them without a ledger). With
        ``seen`` (the (query, document) texts of one :meth:`pay` so far), a pair whose
        texts another pair of the call has is not new: the ledger keys a pair by its
        texts and pays it once (ArguAna holds documents of one text under two ids)."""
        known = getattr(self.scorer, "known", None)
        out = []
        for it in items:
            if seen is not None and known is not None:
                if (query, it.text) in seen:
                    out.append(False)
                    continue
                seen.add((query, it.text))
            out.append(known is None or int(known(query, [it.text])) == 0)
        return out

    def pay(self, pairs: Sequence[Triple], *, source: str = "judge",
            trusted: bool = True) -> tuple[dict[Triple, float], int]:
        """Rewards of ``pairs`` and how many were new to the ledger (paid). The pairs new
        to the ledger are reserved first, all at once (:class:`BudgetSpent`, nothing
        asked, when the budget cannot cover them); each query's rewards are stored as
        soon as it is answered."""
        by_query: dict[tuple[str, str], list[str]] = {}
        for task, query, doc in pairs:
            docs = by_query.setdefault((task, query), [])
            if doc not in docs:
                docs.append(doc)
        plan: list[_Planned] = []
        seen = set[tuple[str, str]]()
        for (task, query), docs in by_query.items():
            listed = doc_items(docs, self.corpus)
            plan.append((task, query, docs, listed, self._new_to_ledger(query, listed, seen)))
        self._pay_owed()
        try:
            plan, prepaid = self._claim(source, plan)
        except BudgetSpent:
            raise
        except Exception:
            self._owe_reconcile()  # the claim may have committed: what it charged is found
            raise
        out: dict[Triple, float] = {}
        paid = 0
        for at, (task, query, docs, items, new) in enumerate(plan):
            mine = [(task, query, d) for d, n in zip(docs, new) if n]
            try:
                self._mark(mine)
                rewards = np.asarray(self.scorer.score(Item("", query), items),
                                     dtype=np.float64)
                self.store.add_rewards([Reward(task, query, d, float(r), time.time(), source,
                                               paid=n, trusted=trusted)
                                        for d, r, n in zip(docs, rewards, new)])
            except Exception:
                try:
                    self._release(source, plan[at:], prepaid)
                except Exception:  # noqa: BLE001, S110  (the store is down: kept in _owed)
                    pass
                self._owe_reconcile()  # and whatever the store's rows say is still open
                raise
            self._settle(mine)
            paid += sum(new)
            out.update({(task, query, d): float(r) for d, r in zip(docs, rewards)})
        return out, paid

    def _claim(self, source: str, plan: list[_Planned]) -> tuple[list[_Planned], set[Triple]]:
        """Reserve the budget for the pairs of ``plan`` new to the ledger and claim them
        (:meth:`tttembed.loop.spend.SpendSQL.claim`): the plan left to ask (a pair
        another learner is paying is left out: the ledger will hold it; one the ledger
        holds by now is not new) and the pairs paid before (a kill lost their answer:
        claimed again, not charged again; :class:`BudgetSpent` when the budget cannot
        cover the rest)."""
        fresh = [((t, q, d), it.text) for t, q, docs, items, new in plan
                 for d, it, n in zip(docs, items, new) if n]
        if self.budget is None or not fresh:
            return plan, set()
        pairs = [p for p, _ in fresh]
        prepaid = self.store.prepaid(pairs)
        who = scorer_key(self.scorer)
        keys = [hashlib.sha256(json.dumps([who, p[1], text]).encode()).hexdigest()
                for p, text in fresh]
        got = self.store.claim(self._source(source), self.budget, pairs, keys,
                               prepaid=prepaid, new=self._still_new)
        if got is None:
            n = sum(p not in prepaid for p in pairs)
            raise BudgetSpent(f"the judge budget ({self.budget} pairs) cannot pay {n} more "
                              f"pair(s) (for {plan[0][1][:60]!r}, ...); raise --judge-budget "
                              "to judge more")
        mine = set(got.mine)
        texts = dict(fresh)
        skip = {(p[1], texts[p]) for p in got.taken}  # and its other ids of that text
        out: list[_Planned] = []
        for task, query, docs, items, _ in plan:
            keep = [i for i, it in enumerate(items) if (query, it.text) not in skip]
            if keep:
                out.append((task, query, [docs[i] for i in keep], [items[i] for i in keep],
                            [(task, query, docs[i]) in mine for i in keep]))
        return out, prepaid

    def _still_new(self, pairs: list[Triple]) -> list[bool]:
        """Whether the ledger still lacks each pair (asked while claiming them)."""
        return [self._new_to_ledger(q, doc_items([d], self.corpus))[0] for _, q, d in pairs]

    def _mark(self, pairs: Sequence[Triple]) -> None:
        if self.budget is not None:
            self.store.mark_sent(pairs)

    def _settle(self, pairs: Sequence[Triple]) -> None:
        if self.budget is not None:
            self.store.settle(pairs)

    def recover(self) -> dict[str, int]:
        """At start: close the reservations a kill left open (pairs never sent given
        back, answered ones spent, lost ones kept as paid: :meth:`SpendSQL.recover`)."""
        def held(t: Triple) -> bool:
            return not self._new_to_ledger(t[1], doc_items([t[2]], self.corpus))[0]

        return self.store.recover(held)

    def _release(self, source: str, unpaid: Sequence[_Planned], prepaid: set[Triple]) -> None:
        """Give back the reservation of the queries not answered (the failed call and
        those after it), but for pairs the ledger committed before the failure and those
        paid before (``prepaid``: not charged by this reservation)."""
        if self.budget is None:
            return
        back, done, claimed = 0, [], []
        for task, query, docs, items, new in unpaid:
            for d, n, s in zip(docs, new, self._new_to_ledger(query, items)):
                t = (task, query, d)
                if n:
                    claimed.append(t)
                if n and t not in prepaid:
                    back += int(s)
                    done.append(t)
        self._owed += [partial(self.store.release, self._source(source), back),
                       partial(self.store.settle, done),
                       partial(self.store.unclaim, claimed)]  # paid before too: free again
        self._pay_owed()

    def _owe_reconcile(self) -> None:
        """After a call whose claim's outcome is unknown (the store failed during or just
        after it): before the next call, close this learner's own open reservations from
        the store's rows (:meth:`recover`: never sent given back, answered settled),
        as a kill's are at start-up; no call of this learner is in flight then."""
        if self.budget is not None and self._reconcile not in self._owed:
            self._owed.append(self._reconcile)

    def _reconcile(self) -> None:
        self.close_open("a failed call")

    def close_open(self, cause: str) -> None:
        """:meth:`recover`, and say what it closed (``cause``: what left it open)."""
        closed = self.recover()
        if any(closed.values()):
            log.info("reservations %s left open: %d pair(s) never sent given back to the "
                     "budget, %d answered, %d sent with the answer lost (kept as paid: not "
                     "charged again)", cause, closed["given_back"], closed["spent"],
                     closed["lost"])

    def _pay_owed(self) -> None:
        """Close what failed calls left open (module docstring), each step once and in
        order; a step the store cannot take yet (down) raises and waits for the next call."""
        while self._owed:
            self._owed[0]()
            self._owed.pop(0)


__all__ = ["BackgroundJudge", "Bucket", "BudgetSpent", "Triple", "pending_pairs"]
