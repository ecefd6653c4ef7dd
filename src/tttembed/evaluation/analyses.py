"""Analyses (METHOD.md Part 1) on the protocols' machinery: alpha ablation, breadth vs
depth at a fixed budget, and the objective comparison.

Each returns :class:`~tttembed.evaluation.protocols.MethodResult` records, memoised through
``cells`` and asking rewards lazily through ``rewards_for(pairs)``, exactly as the
protocols in :mod:`tttembed.evaluation.protocols` do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.allocate import BREADTH_DEPTH, budget_grid, budget_pairs, nested_schedule
from tttembed.evaluation.method_cells import (
    Cells,
    MethodResult,
    alpha_tag,
    candidates,
    direct_cell,
    eval_sources,
    lazy,
    learn_state,
    no_cache,
    scope_cell,
    state_metrics,
    task_orders,
)
from tttembed.evaluation.workload import EVAL_DEPTH, PerQuery, TaskData
from tttembed.ttt.options import LearnOptions
from tttembed.types import SCOPES, Rewards

ALPHAS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
ALPHA_NS = (1, 16, 128, 0)  # 0 = all queries of the task


def with_alpha(state: AdaptState, alpha: float) -> AdaptState:
    """A copy of ``state`` whose every group uses the fixed magnitude ``alpha``."""
    return replace(state, alpha=np.full(len(state.keys), float(alpha)))



def _first_queries(work: Sequence[TaskData], n: int) -> dict[str, list[str]]:
    """Per task, its first ``n`` queries (0 = all) in the seeded order ``1000 + t``; tasks
    with no more than ``n`` queries are left out (their setting would be ``all``)."""
    out: dict[str, list[str]] = {}
    for t, td in enumerate(work):
        keys = td.queries.keys
        if n and len(keys) <= n:
            continue
        perm = np.random.default_rng(1000 + t).permutation(len(keys)).tolist()
        out[td.name] = [keys[i] for i in perm[: (n or len(keys))]]
    return out


def alpha_ablation(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                   ns: Sequence[int] = ALPHA_NS, alphas: Sequence[float] = ALPHAS,
                   depth: int = BREADTH_DEPTH, objective: str = "kd",
                   heldout_eval: bool = False, cells: Cells = no_cache,
                   auto: bool = False) -> list[MethodResult]:
    """Task-wise states from ``n`` rewarded queries per task (0 = all), evaluated with the
    rule ``n/(n+1)`` (method ``alpha=rule``), with every fixed alpha and, with ``auto``,
    with the alpha chosen by reward cross-validation (``alpha=auto``). With
    ``heldout_eval`` only unrewarded queries are evaluated (and ``n = all`` is skipped)."""
    cands = candidates(work, depth)
    total = sum(len(td.queries) for td in work)
    out: list[MethodResult] = []
    for n in ns:
        if heldout_eval and n == 0:
            continue
        chosen = _first_queries(work, n)
        if not chosen:
            continue
        sub = [td for td in work if td.name in chosen]
        s_keys = {k for ks in chosen.values() for k in ks}
        keep = {k for td in sub for k in td.queries.keys} - (s_keys if heldout_eval else set())
        pairs = [(k, d) for k in sorted(s_keys) for d in cands[k]]
        memo: dict[str, AdaptState | None] = {}

        def state(p: list = pairs, m: dict = memo, w: list = sub) -> AdaptState | None:
            if "s" not in m:
                m["s"] = learn_state(eval_sources(w), rewards_for(p),
                                     LearnOptions(scope="task", objective=objective))
            return m["s"]
        for a in ("rule", *alphas, *(("auto",) if auto else ())):
            def compute(a: Any = a, w: list = sub, st: Callable = state,
                        kp: set | None = keep, p: list = pairs) -> PerQuery:
                if a == "auto":
                    return state_metrics(w, learn_state(
                        eval_sources(w), rewards_for(p),
                        LearnOptions(scope="task", objective=objective, alpha="auto"),
                        pay=rewards_for), kp)
                s = st()
                return state_metrics(w, s if a == "rule" or s is None else with_alpha(s, a), kp)
            tag = {"p": "alpha", "n": n, "a": a, "d": depth, "h": heldout_eval, "o": objective,
                   **(alpha_tag(a) if a == "auto" else {})}
            out.append(MethodResult("alpha", f"alpha={a}", cells(tag, compute),
                                    len(pairs) / total, len(pairs),
                                    {"n": n or "all", "alpha": a}))
    return out


def breadth_depth(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                  bs: Sequence[float] = (1.0, 10.0), depths: Sequence[int] = (1, 2, 5, 10, 30, 100),
                  scopes: Sequence[str] = ("task", "query"), objective: str = "kd",
                  cells: Cells = no_cache) -> list[MethodResult]:
    """At fixed ``b = rho * k``: ``B = round(b N)`` pairs spread over water-filled queries
    at depth ``k`` (``rho = B / (k N)`` rewarded fraction), for every ``k >= b``."""
    n = sum(len(td.queries) for td in work)
    cands = candidates(work)
    order = task_orders(work)
    out: list[MethodResult] = []
    for b in bs:
        B = max(1, math.floor(b * n + 0.5))
        for k in depths:
            if k < b or k > EVAL_DEPTH:
                continue
            rw = lazy(rewards_for, budget_pairs(order, cands, B, depth=k, full_depths=()))
            setting = {"b": b, "depth": k, "rho": B / (k * n)}
            tag = {"p": "bd", "B": B, "k": k, "o": objective}
            out.append(MethodResult("breadth-depth", "direct",
                                    cells({**tag, "m": "direct"},
                                          partial(direct_cell, work, rw)),
                                    B / n, B, setting))
            for scope in scopes:
                per = cells({**tag, "m": scope},
                            partial(scope_cell, work, scope, rw, objective))
                out.append(MethodResult("breadth-depth", scope, per, B / n, B, setting))
    return out


def objective_comparison(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                         bs: Sequence[float] = (1.0, 10.0), scopes: Sequence[str] = SCOPES,
                         objectives: Sequence[str] = ("kd", "rkl", "grpo"),
                         cells: Cells = no_cache) -> list[MethodResult]:
    """KD, reverse KL and softmax-GRPO on the same nested pairs (cells shared with the
    fixed-population protocol, so ``kd`` is not learned twice)."""
    n = sum(len(td.queries) for td in work)
    cands = candidates(work)
    grid = budget_grid(n, bs)
    schedules = nested_schedule(task_orders(work), cands, grid)
    out: list[MethodResult] = []
    for B, pairs in zip(grid, schedules):
        rw = lazy(rewards_for, pairs)
        for scope in scopes:
            for obj in objectives:
                per = cells({"p": "fixed", "m": scope, "B": B, "o": obj},
                            partial(scope_cell, work, scope, rw, obj))
                out.append(MethodResult("objectives", scope, per, B / n, B, {"objective": obj}))
    return out
