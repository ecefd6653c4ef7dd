"""The active allocation: which (query, document) pairs a budget buys, chosen in rounds as
the judge answers. Pure: ids, a judge callable and a neighbour callable; no I/O. The fixed
allocations (the evaluation's water-filling, ``learn``'s plan) are in
:mod:`tttembed.adapt.allocate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tttembed.adapt.allocate import (
    BREADTH_DEPTH,
    Candidates,
    Pair,
    check_candidates,
    order_query_ids,
    positive_int,
)

__all__ = ["ACTIVE_FIRST", "ACTIVE_NEIGHBOURS", "ACTIVE_VERSION", "PairRewards", "Neighbours",
           "active_sequence", "query_priority", "uncertainty_order", "where_pairs_went"]

# One adaptive sequence of pairs built in rounds; budget B is its first B pairs (nested).
# Queries are taken in an order the caller gives (``uncertainty_order``: water-filling's
# task balance, the least certain queries of each task first). After each round the
# judge's answers so far set each query's priority:
#
# * a started query below ``ACTIVE_FIRST`` judged pairs finishes its block first (a KD
#   target needs several candidates: one judged pair gives no signal);
# * a new query comes next, in the given order;
# * a query with ``n`` >= ``ACTIVE_FIRST`` judged pairs is deepened by its *misorder*,
#   ``(1 - 1 / log2(rank of its best-rewarded document + 2)) / log2(n / ACTIVE_FIRST + 1)``,
#   at least ``ACTIVE_FLOOR`` times that discount (a query whose base top document is its
#   best gains least from more of the same ranking);
# * with a corpus graph (GAR: adaptive re-ranking over a corpus graph), a deepened query
#   also offers the ``ACTIVE_NEIGHBOURS`` nearest documents of its best-rewarded one,
#   inside or outside the base top-K, before its next base candidates.
#
# A round takes the offers of the highest priorities (ties: order position, then rank);
# rounds grow with the sequence (``ACTIVE_GROWTH`` of the pairs so far, at least N / 20).

ACTIVE_FIRST = 5
ACTIVE_FLOOR = 0.1
ACTIVE_NEIGHBOURS = 5
ACTIVE_GROWTH = 0.25
ACTIVE_VERSION = 6

#: ``judge(pairs) -> {pair: reward}`` (a missing or NaN reward counts as not judged).
PairRewards = Callable[[list[Pair]], Mapping[Pair, float]]
#: ``neighbours([(query_id, doc_id), ...]) -> {(query_id, doc_id): nearest other documents
#: of that query's corpus, best first}`` (one call a round).
Neighbours = Callable[[Sequence[Pair]], Mapping[Pair, Sequence[str]]]


@dataclass
class _QueryState:
    base: list[str]
    ranks: dict[str, int] = field(default_factory=dict)  # base candidate -> rank
    judged: dict[str, float] = field(default_factory=dict)
    frontier: int = 0              # first base rank not yet taken
    graph: list[str] = field(default_factory=list)
    expanded: set[str] = field(default_factory=set)
    _best: tuple[float, int, str] | None = None  # (reward, -rank, doc) of the best

    def __post_init__(self) -> None:
        self.ranks = self.ranks or {d: r for r, d in enumerate(self.base)}
        for d, r in list(self.judged.items()):
            self.add(d, r)

    def add(self, doc: str, reward: float) -> None:
        self.judged[doc] = reward
        if math.isfinite(reward):
            key = (reward, -self.ranks.get(doc, len(self.base)), doc)
            if self._best is None or key[:2] > self._best[:2]:
                self._best = key

    def best(self) -> str | None:
        return None if self._best is None else self._best[2]

    def priority(self) -> float:
        n = len(self.judged)
        if 0 < n < ACTIVE_FIRST:
            return 3.0
        if n == 0:
            return 2.0
        best = self.best()
        rank = self.ranks.get(best, len(self.base)) if best is not None else 0
        misorder = max(ACTIVE_FLOOR, 1.0 - 1.0 / math.log2(rank + 2))
        return misorder / math.log2(n / ACTIVE_FIRST + 1)


def query_priority(base: Sequence[str], judged: Mapping[str, float]) -> float:
    """The active allocation's priority of more pairs for one query (see above): ``base``
    its candidates in base order, ``judged`` its rewards so far."""
    return _QueryState(list(base), judged=dict(judged)).priority()


def uncertainty_order(order: Sequence[tuple[int, str]], gap: Mapping[str, float]
                      ) -> list[tuple[int, str]]:
    """Water-filling's task-balanced order with each task's queries re-sorted by ``gap``
    ascending (the base score margin of a query's top document over its next ones: a
    small margin, an uncertain top), stable in the water-fill order for ties."""
    slots: dict[int, list[int]] = {}
    for i, (t, _) in enumerate(order):
        slots.setdefault(t, []).append(i)
    out = list(order)
    for t, where in slots.items():
        qs = sorted((order[i][1] for i in where), key=lambda q: gap.get(q, 0.0))
        for i, q in zip(where, qs):
            out[i] = (t, q)
    return out


def _offers(qid: str, st: _QueryState, taken: set[Pair]) -> list[tuple[float, int, Pair]]:
    p = st.priority()
    out = [(p, j - len(st.graph), (qid, d)) for j, d in enumerate(st.graph)
           if (qid, d) not in taken]
    need = ACTIVE_FIRST - len(st.judged) if len(st.judged) < ACTIVE_FIRST else ACTIVE_FIRST
    r = st.frontier
    while r < len(st.base) and need > 0:
        if (qid, st.base[r]) not in taken:
            out.append((p, r, (qid, st.base[r])))
            need -= 1
        r += 1
    return out


def _expand(states: Mapping[str, _QueryState], neighbours: Neighbours | None) -> list[str]:
    """Offer the corpus neighbours of each deepened query's best-rewarded document (once
    a document); returns the queries that were offered some."""
    if neighbours is None:
        return []
    todo: list[Pair] = []
    for qid, st in states.items():
        best = st.best()
        if best is not None and best not in st.expanded and len(st.judged) >= ACTIVE_FIRST:
            st.expanded.add(best)
            todo.append((qid, best))
    found = neighbours(todo) if todo else {}
    for qid, best in todo:
        st = states[qid]
        have = set(st.judged) | set(st.graph)
        near = found.get((qid, best), ())
        st.graph += [d for d in list(near)[:ACTIVE_NEIGHBOURS] if d not in have]
    return [qid for qid, _ in todo]


Offer = tuple[float, int, int, Pair]


def _round(states: dict[str, _QueryState], position: Mapping[str, int], size: int,
           taken: set[Pair], cache: dict[str, list[Offer]]) -> list[Pair]:
    """The next ``size`` pairs. ``cache`` holds each query's offers until the caller drops
    them (a query's offers change only when its own pairs are judged or it gains graph
    neighbours), so a round recomputes the queries the previous one touched."""
    for q, st in states.items():
        if q not in cache:
            cache[q] = [(-p, position[q], rank, pair) for p, rank, pair in _offers(q, st, taken)]
    offers = [o for q in states for o in cache[q]]
    offers.sort()
    out: dict[Pair, None] = {}  # a neighbour that is also a base candidate: offered twice
    for *_, pair in offers:
        if len(out) == size:
            break
        out.setdefault(pair)
    return list(out)


def active_sequence(order: Sequence[tuple[int, str]] | Sequence[str], candidates: Candidates,
                    budgets: Sequence[int], judge: PairRewards, *,
                    neighbours: Neighbours | None = None,
                    depth: int | None = None) -> list[list[Pair]]:
    """One pair list per budget in ``budgets`` (ascending), each a prefix of one adaptive
    sequence (so nested), every pair judged through ``judge`` as the sequence grows. A
    budget larger than what the pools hold gets every pair they hold. Deterministic: the
    same judge answers give the same pairs."""
    qids = order_query_ids(order)
    check_candidates(qids, candidates, depth)
    if not budgets:
        return []
    want = max(positive_int("budget", B) for B in budgets)
    states = {q: _QueryState(list(candidates[q][:depth])) for q in qids}
    position = {q: i for i, q in enumerate(qids)}
    seq: list[Pair] = []
    taken: set[Pair] = set()
    cache: dict[str, list[Offer]] = {}
    while len(seq) < want:
        size = min(want - len(seq), max(math.ceil(len(qids) / 20),
                                        math.ceil(ACTIVE_GROWTH * len(seq)), 1))
        new = _round(states, position, size, taken, cache)
        if not new:
            break
        answers = judge(new)
        for q, d in new:
            st = states[q]
            st.add(d, float(answers.get((q, d), float("nan"))))
            taken.add((q, d))
            while st.frontier < len(st.base) and (q, st.base[st.frontier]) in taken:
                st.frontier += 1
            cache.pop(q, None)
        seq += new
        for q in _expand(states, neighbours):
            cache.pop(q, None)
    return [seq[:B] for B in budgets]


def where_pairs_went(pairs: Sequence[Pair], candidates: Candidates,
                     depth: int = BREADTH_DEPTH) -> dict[str, int]:
    """How a pair list spends itself: queries touched, pairs inside the base top ``depth``,
    deeper in the base candidates, and outside them (corpus neighbours)."""
    ranks = {q: {d: r for r, d in enumerate(c)} for q, c in candidates.items()}
    out = {"queries": len({q for q, _ in pairs}), "top": 0, "deeper": 0, "outside": 0}
    for q, d in pairs:
        r = ranks.get(q, {}).get(d)
        out["outside" if r is None else "top" if r < depth else "deeper"] += 1
    return out
