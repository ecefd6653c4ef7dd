"""Which (query, document) pairs get rewards: the evaluation protocol and the user plan.

Pure functions over ids; no I/O. A pair is ``(query_id, doc_id)``; a budget ``B`` is the
exact number of pairs (one pair = one reward), ``b = B / N`` the normalised budget.

**Evaluation protocol** (METHOD.md, "Allocation protocol for evaluation"):

1. ``water_fill_order``: task ``t`` (its position in the fixed task list) orders its
   queries by ``numpy.random.default_rng(1000 + t).permutation(n_t)``; the order then
   cycles through the active tasks, one query from each in turn; exhausted tasks drop out.
2. One fixed sequence of pairs, in phases. Phase 1 (breadth grid): queries in water-fill
   order, each contributing its first 10 candidates in base order. Once every query has
   depth 10, phase 2 extends the queries, again in water-fill order, from depth 10 to 30
   (candidates 11..30 of each query); phase 3 from 30 to 100.
3. Budget ``B`` = the first ``B`` pairs of that sequence, so the last query touched may be
   cut short (``B`` is met exactly), and a bigger budget never drops a pair a smaller one
   had. ``B = 10 N`` is full coverage at depth 10, ``30 N`` at 30, ``100 N`` at 100; a budget
   between ``10 N`` and ``30 N`` gives depth 30 to the first queries in water-fill order and
   depth 10 to the rest (the last extended query may stop in between).

A query with fewer candidates than a depth contributes what it has. Query ids must be
unique across tasks (prefix them with the task name when tasks share ids).

**User plan** (``plan_rewards`` for ``tttembed learn``): one seeded permutation of the
queries; ``B = round(budget * N)`` pairs spread over ``ceil(B / depth)`` queries at
``depth`` each; once every query has ``depth`` candidates, depth grows by one candidate per
query per round (queries in the same permuted order), so every query ends within one
pair of ``B / N``. Also a prefix of one fixed sequence, hence nested in ``budget``.

Rounding: ``round`` here is half-up (``floor(x + 0.5)``), not Python's banker's rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.types import Pair

Candidates = Mapping[str, Sequence[str]]

TASK_SEED_OFFSET = 1000
BREADTH_DEPTH = 10
FULL_COVERAGE_DEPTHS = (30, 100)
NORMALISED_BUDGETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 100.0)

__all__ = [
    "ALLOCATIONS",
    "BREADTH_DEPTH",
    "FULL_COVERAGE_DEPTHS",
    "NORMALISED_BUDGETS",
    "Pair",
    "budget_grid",
    "budget_pairs",
    "check_candidates",
    "nested_schedule",
    "order_query_ids",
    "plan_rewards",
    "positive_int",
    "water_fill_order",
]

#: How a budget is spent: the fixed water-filling (or the user plan), or the active one
#: (:mod:`tttembed.adapt.active`).
ALLOCATIONS = ("waterfill", "active")


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def positive_int(name: str, value: int) -> int:
    """``value`` as an int, or a ConfigError naming ``name`` unless it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def water_fill_order(task_query_ids: Sequence[Sequence[str]]) -> list[tuple[int, str]]:
    """Task-balanced order of all queries as ``(task index, query id)``.

    Task ``t``'s queries follow ``default_rng(1000 + t).permutation(n_t)`` of its base order;
    then one query from each active task in turn, in task order, until all are exhausted.
    """
    seen: set[str] = set()
    permuted: list[list[str]] = []
    for t, qids in enumerate(task_query_ids):
        qids = list(qids)
        for qid in qids:
            if qid in seen:
                raise DataError(
                    f"query id {qid!r} appears twice across tasks; make query ids unique "
                    "(e.g. prefix them with the task name)"
                )
            seen.add(qid)
        perm = np.random.default_rng(TASK_SEED_OFFSET + t).permutation(len(qids))
        permuted.append([qids[i] for i in perm.tolist()])
    order: list[tuple[int, str]] = []
    longest = max((len(p) for p in permuted), default=0)
    for r in range(longest):
        for t, p in enumerate(permuted):
            if r < len(p):
                order.append((t, p[r]))
    return order


def order_query_ids(order: Sequence[tuple[int, str]] | Sequence[str]) -> list[str]:
    """Accept either ``water_fill_order``'s ``(task, qid)`` tuples or bare query ids."""
    return [item if isinstance(item, str) else item[1] for item in order]


def check_candidates(qids: Sequence[str], candidates: Candidates, depth: int | None) -> None:
    """Refuse an order that lists a query twice, a query with no candidate list, or a
    list (its first ``depth``, all when None) that repeats a document."""
    if len(set(qids)) != len(qids):
        raise DataError("the query order lists a query id twice; give each query once")
    for qid in qids:
        if qid not in candidates:
            raise DataError(
                f"query {qid!r} has no candidate list; retrieve candidates for every query"
            )
        head = list(candidates[qid] if depth is None else candidates[qid][:depth])
        if len(set(head)) != len(head):
            raise DataError(
                f"candidate list of query {qid!r} repeats a document id; deduplicate it"
            )


def _depth_phases(depth: int, full_depths: Sequence[int]) -> list[int]:
    depth = positive_int("depth", depth)
    phases = [depth]
    for d in full_depths:
        d = positive_int("full-coverage depth", d)
        if d > phases[-1]:
            phases.append(d)
    return phases


def _phase_pairs(
    qids: Sequence[str], candidates: Candidates, phases: Sequence[int]
) -> Iterator[Pair]:
    shallower = 0
    for deeper in phases:
        for qid in qids:
            for doc in candidates[qid][shallower:deeper]:
                yield (qid, doc)
        shallower = deeper


def _available(qids: Sequence[str], candidates: Candidates, depth: int | None) -> int:
    if depth is None:
        return sum(len(candidates[q]) for q in qids)
    return sum(min(len(candidates[q]), depth) for q in qids)


def _check_budget(budget: int, available: int, what: str) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ConfigError(f"budget must be a non-negative integer number of pairs, got {budget!r}")
    if budget > available:
        raise ConfigError(
            f"budget of {budget} pairs exceeds the {available} candidate pairs {what}; "
            "lower the budget or retrieve more candidates per query"
        )
    return int(budget)


def nested_schedule(
    order: Sequence[tuple[int, str]] | Sequence[str],
    candidates: Candidates,
    budgets: Sequence[int],
    depth: int = BREADTH_DEPTH,
    full_depths: Sequence[int] = FULL_COVERAGE_DEPTHS,
) -> list[list[Pair]]:
    """One pair list per budget, each a prefix of the same fixed sequence (so nested).

    The sequence is the module docstring's: depth ``depth`` in water-fill order, then every
    query extended to each deeper ``full_depths`` entry in turn, again in water-fill order.
    ``full_depths=()`` gives pure breadth at ``depth`` (for breadth-vs-depth comparisons).
    """
    qids = order_query_ids(order)
    phases = _depth_phases(depth, full_depths)
    check_candidates(qids, candidates, phases[-1])
    available = _available(qids, candidates, phases[-1])
    checked = [_check_budget(b, available, f"available up to depth {phases[-1]}") for b in budgets]
    if not checked:
        return []
    prefix = list(islice(_phase_pairs(qids, candidates, phases), max(checked)))
    return [prefix[:b] for b in checked]


def budget_pairs(
    order: Sequence[tuple[int, str]] | Sequence[str],
    candidates: Candidates,
    budget: int,
    depth: int = BREADTH_DEPTH,
    full_depths: Sequence[int] = FULL_COVERAGE_DEPTHS,
) -> list[Pair]:
    """The first ``budget`` pairs of the nested sequence (exactly ``budget`` pairs)."""
    return nested_schedule(order, candidates, [budget], depth=depth, full_depths=full_depths)[0]


def budget_grid(n_queries: int, normalised: Sequence[float] = NORMALISED_BUDGETS) -> list[int]:
    """Pair budgets ``B = max(1, round(b * N))`` for the normalised grid, deduplicated, sorted."""
    n = positive_int("n_queries", n_queries)
    grid: set[int] = set()
    for b in normalised:
        if not (math.isfinite(b) and b > 0):
            raise ConfigError(f"normalised budgets must be positive numbers, got {b!r}")
        grid.add(max(1, _round_half_up(b * n)))
    return sorted(grid)


def _plan_sequence(qids: Sequence[str], candidates: Candidates, depth: int) -> Iterator[Pair]:
    for qid in qids:
        for doc in candidates[qid][:depth]:
            yield (qid, doc)
    longest = max((len(candidates[q]) for q in qids), default=0)
    for j in range(depth, longest):
        for qid in qids:
            cands = candidates[qid]
            if j < len(cands):
                yield (qid, cands[j])


def plan_rewards(
    query_ids: Sequence[str],
    candidates: Candidates,
    budget: float,
    depth: int = BREADTH_DEPTH,
    seed: int = 0,
) -> list[Pair]:
    """The pairs to score for ``tttembed learn`` at ``budget`` rewards per query.

    Exactly ``B = round(budget * N)`` pairs: queries in a ``seed``-ed permutation get
    their first ``depth`` candidates (the last one possibly fewer), and past ``N * depth``
    every query gets one more candidate per round. Deterministic; nested in ``budget``.
    """
    qids = list(query_ids)
    depth = positive_int("depth", depth)
    if not (
        isinstance(budget, (int, float, np.floating, np.integer))
        and math.isfinite(budget)
        and budget >= 0
    ):
        raise ConfigError(f"average budget must be a number >= 0, got {budget!r}")
    check_candidates(qids, candidates, None)
    total = _round_half_up(float(budget) * len(qids))
    _check_budget(total, _available(qids, candidates, None), "of all candidate lists")
    perm = np.random.default_rng(seed).permutation(len(qids)).tolist()
    permuted = [qids[i] for i in perm]
    return list(islice(_plan_sequence(permuted, candidates, depth), total))
