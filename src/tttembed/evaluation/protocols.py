"""Evaluation protocols (METHOD.md Part 1): every method on the same rewarded pairs.

A workload is a list of :class:`TaskData` (one index per task: each task has its own
corpus). Allocation is across tasks (task-balanced water-filling, nested budgets, from
:mod:`tttembed.adapt.allocate`); query keys are ``task/qid``, unique across tasks. A global
state is learned from every task's rewards (one embedder, one vector space) and applied to
every task; a task-wise state to its task; a query-wise state to its query.

Each protocol returns :class:`MethodResult` records: per-query nDCG@10 and Recall@100 of
one method at one budget (``B`` pairs, ``b = B / N``), on the queries it is evaluated on.
The expensive part of each record is memoised through ``cells`` (a callable
``cells(key_parts, compute)``; the runner passes an on-disk cache) and rewards are asked
lazily through ``rewards_for(pairs)``, so a run whose records are all cached scores nothing.
The analyses built on this machinery (alpha ablation, breadth vs depth, objective
comparison) live in :mod:`tttembed.evaluation.analyses`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from tttembed.adapt.active import ACTIVE_VERSION
from tttembed.adapt.allocate import (
    BREADTH_DEPTH,
    TASK_SEED_OFFSET,
    budget_grid,
    nested_schedule,
)
from tttembed.core.errors import ConfigError
from tttembed.evaluation import active as A
from tttembed.evaluation.baselines import qdrant_rf as QRF
from tttembed.evaluation.config import DEFAULT_BASELINES, VALIDATION
from tttembed.evaluation.method_cells import (
    Cells,
    MethodResult,
    alpha_method,
    alpha_tag,
    auto_cell,
    auto_tag,
    candidates,
    direct_metrics,
    eval_sources,
    lazy,
    learn_state,
    no_cache,
    number_cell,
    prf_metrics,
    qdrant_fits,
    qdrant_rf_metrics,
    raw_metrics,
    record_alpha,
    rw_rocchio_metrics,
    scope_cell,
    state_metrics,
    task_orders,
)
from tttembed.evaluation.workload import EVAL_DEPTH, PerQuery, TaskData
from tttembed.metrics.quality import reward_quality
from tttembed.ttt import Source, restrict
from tttembed.ttt.options import LearnOptions
from tttembed.types import SCOPES, Rewards

# --- protocols ------------------------------------------------------------------------

def skipped_budgets(work: Sequence[TaskData], budgets: Sequence[float]) -> list[str]:
    """Why each budget the fixed protocol cannot serve is left out (it asks for more pairs
    than the base candidates hold): one note per budget, for console, report.md and
    results.json. Nothing is skipped silently."""
    n = sum(len(td.queries) for td in work)
    available = sum(len(c) for c in candidates(work).values())
    return [f"b = {b:g} skipped in the fixed protocol: it needs B = {B:,} pairs, the top-"
            f"{EVAL_DEPTH} candidates of the {n:,} queries hold only {available:,}"
            for b in budgets if (B := budget_grid(n, [b])[0]) > available]


def _budget_methods(work: Sequence[TaskData], rewards: Callable[[], Rewards], *,
                    scopes: Sequence[str], baselines: Sequence[str], objective: str,
                    alphas: Sequence[str], fits: Mapping[str, QRF.TaskFit],
                    pay: Callable[[list], Rewards] | None = None
                    ) -> list[tuple[str, dict[str, Any], Callable[[], PerQuery]]]:
    """(method, extra cell key, compute) of every method at one budget (same pairs)."""
    todo: list[tuple[str, dict[str, Any], Callable[[], PerQuery]]] = []
    if "direct" in baselines:
        todo.append(("direct", {}, lambda: direct_metrics(work, rewards())))
    if "rw-rocchio" in baselines:
        todo.append(("rw-rocchio", {}, lambda: rw_rocchio_metrics(work, rewards())))
    if "qdrant-rf" in baselines:
        tag = {t: {h: list(f.coef) for h, f in fit.fits.items()} for t, fit in fits.items()}
        todo.append(("qdrant-rf", {"fit": tag, "fv": QRF.FIT_VERSION},
                     lambda: qdrant_rf_metrics(work, rewards(), fits)))
    for scope in scopes:
        for a in alphas:
            todo.append((alpha_method(scope, a), alpha_tag(a),
                         partial(scope_cell, work, scope, rewards, objective, alpha=a,
                                 pay=pay)))
    return todo


def _quality(rewards: Callable[[], Rewards], work: Sequence[TaskData]) -> dict[str, float]:
    return reward_quality(rewards(), {td.name: td.qrels for td in work})


def fixed_population(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                     budgets: Sequence[float], scopes: Sequence[str] = SCOPES,
                     baselines: Sequence[str] = DEFAULT_BASELINES, objective: str = "kd",
                     cells: Cells = no_cache, progress: Callable[[int], None] | None = None,
                     alphas: Sequence[str] = ("rule",), judge: QRF.TextScores | None = None,
                     info: dict[str, Any] | None = None, selects: Sequence[str] = (),
                     allocations: Sequence[str] = ("waterfill",)) -> list[MethodResult]:
    """Learn from ``S_B`` (water-filled, nested), evaluate on all queries, every budget;
    each scope once per alpha method (``alphas``: ``rule``, ``auto``). ``qdrant-rf`` fits
    its coefficients on synthetic document-queries scored by ``judge``, or cross-fits
    without one (:mod:`.qdrant_rf`). ``info``, when given, receives the fitted
    coefficients (``qdrant_rf``) and the reward quality at each budget (``reward_quality``).
    ``allocations`` with ``active``: every TTT method again on the active allocation's
    pairs at the same B, as ``<method>@active`` (:mod:`.active`)."""
    n = sum(len(td.queries) for td in work)
    cands = candidates(work)
    available = sum(len(c) for c in cands.values())
    grid = [B for B in budget_grid(n, budgets) if B <= available]
    schedules = nested_schedule(task_orders(work), cands, grid)
    largest = lazy(rewards_for, schedules[-1] if schedules else [])
    fits = qdrant_fits(work, rewards_for, judge, cells) if "qdrant-rf" in baselines else {}
    if info is not None and fits:
        info["qdrant_rf"] = {t: f.summary() for t, f in fits.items()}

    out = [MethodResult("fixed", "raw", cells({"p": "fixed", "m": "raw"},
                                               lambda: raw_metrics(work)))]
    for kind in ("prf-avg", "prf-rocchio"):
        if kind in baselines:
            out.append(MethodResult("fixed", kind, cells({"p": "fixed", "m": kind},
                                                         partial(prf_metrics, work, kind))))
    for B, pairs in zip(grid, schedules):
        def rewards(p: list = pairs) -> Rewards:
            return restrict(largest(), p)
        todo = _budget_methods(work, rewards, scopes=scopes, baselines=baselines,
                               objective=objective, alphas=alphas, fits=fits, pay=rewards_for)
        for method, extra, compute in todo:
            per = cells({"p": "fixed", "m": method, "B": B, "o": objective, **extra}, compute)
            out.append(MethodResult("fixed", method, per, B / n, B, {"objective": objective}))
        if "auto" in selects:
            per = cells({"p": "fixed", "m": "auto", "B": B, "o": objective, **auto_tag(fits)},
                        partial(auto_cell, work, rewards, rewards_for, fits, objective))
            out.append(auto_result("fixed", per, B / n, B, {"objective": objective}))
        if info is not None:
            q = number_cell(cells, {"p": "fixed", "m": "reward-quality", "B": B, "v": 2},
                            partial(_quality, rewards, work))
            info.setdefault("reward_quality", []).append({"B": B, "b": B / n, **q})
        if progress is not None:
            progress(1)
    if "active" in allocations:
        out += active_rows(work, rewards_for, grid, cands, scopes=scopes, objective=objective,
                           alphas=alphas, cells=cells, info=info)
    return out


def active_rows(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards],
                grid: Sequence[int], cands: Mapping[str, Sequence[str]], *,
                scopes: Sequence[str], objective: str, alphas: Sequence[str], cells: Cells,
                info: dict[str, Any] | None) -> list[MethodResult]:
    """The fixed protocol's ``<method>@active`` rows: each TTT method learned from the
    active allocation's pairs at each budget B of ``grid``."""
    import time

    n = sum(len(td.queries) for td in work)
    t0 = time.perf_counter()
    schedules = A.active_schedules(task_orders(work), cands, grid, rewards_for, work)
    spent = time.perf_counter() - t0
    if info is not None:
        info["active_allocation"] = {"version": ACTIVE_VERSION, "seconds": round(spent, 3),
                                     "budgets": A.spending(schedules, grid, cands)}
    out = []
    for B, pairs in zip(grid, schedules):
        got = lazy(rewards_for, pairs)
        todo = _budget_methods(work, got, scopes=scopes, baselines=(), objective=objective,
                               alphas=alphas, fits={}, pay=rewards_for)
        for method, extra, compute in todo:
            key = {"p": "fixed", "m": method, "B": B, "o": objective, "al": "active",
                   "av": ACTIVE_VERSION, **extra}
            out.append(MethodResult("fixed", method + A.SUFFIX, cells(key, compute), B / n, B,
                                    {"objective": objective, "allocation": "active"}))
    return out


def auto_result(protocol: str, per: PerQuery, b: float, B: int, setting: dict[str, Any]
                ) -> MethodResult:
    """Method auto's row: at its learning budget's b, its B counting the validation pairs
    it paid."""
    paid = int(per.get(VALIDATION, {}).get("paid", 0))
    return MethodResult(protocol, "auto", per, b, B + paid, setting)


def heldout_split(work: Sequence[TaskData], fraction: float = 0.8) -> tuple[set[str], set[str]]:
    """``S`` = the first ``ceil(fraction * n_t)`` queries of each task in its seeded order
    (``default_rng(TASK_SEED_OFFSET + t)``, as the water-filling uses); ``U`` the rest."""
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"held-out fraction must lie in (0, 1), got {fraction}")
    s: set[str] = set()
    for t, td in enumerate(work):
        keys = td.queries.keys
        perm = np.random.default_rng(TASK_SEED_OFFSET + t).permutation(len(keys))
        s.update(keys[i] for i in perm[: math.ceil(fraction * len(keys))].tolist())
    all_keys = {k for td in work for k in td.queries.keys}
    return s, all_keys - s


def heldout(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
            fraction: float = 0.8, depth: int = BREADTH_DEPTH,
            scopes: Sequence[str] = ("global", "task"), objective: str = "kd",
            use_train: bool = False, cells: Cells = no_cache,
            alphas: Sequence[str] = ("rule",), selects: Sequence[str] = (),
            fits: Mapping[str, QRF.TaskFit] | None = None) -> list[MethodResult]:
    """Learn from ``S`` at ``depth``, evaluate only ``U = E \\ S`` (every judged query of a
    task when ``use_train`` and the task has learning-only train queries). Query-wise
    states, direct reranking and reward Rocchio leave unseen queries as they are (they
    equal raw there), so only shared scopes and the label-free PRF are reported."""
    s_keys, u_keys = heldout_split(work, fraction)
    pairs: list[tuple[str, str]] = []
    sources: list[Source] = []
    for td in work:
        if use_train and td.train is not None and td.train_base is not None:
            keys = set(td.queries.keys)  # learn from train queries only: evaluate them all
            s_keys -= keys
            u_keys |= keys
            cands = td.train_base.candidates(td.index, td.train.keys)
            pairs += [(k, d) for k in td.train.keys for d in cands[k][:depth]]
            sources.append((td.train, td.train_base, td.index))
        else:
            cands = td.base.candidates(td.index, td.queries.keys)
            pairs += [(k, d) for k in td.queries.keys if k in s_keys for d in cands[k][:depth]]
            sources.append((td.queries, td.base, td.index))
    n = sum(len(td.queries) for td in work)
    B = len(pairs)
    rw = lazy(rewards_for, pairs)
    trained = sum(1 for td in work if use_train and td.train is not None)
    setting: dict[str, Any] = {"fraction": fraction, "depth": depth, "train": use_train,
                               "evaluated": len(u_keys)}
    if trained == len(work):  # every task learns from its train split: no fraction
        setting = {"learned from": "train split", "depth": depth, "evaluated": len(u_keys)}
    tag = {"p": "heldout", "f": fraction, "d": depth, "t": use_train, "o": objective}
    out = [MethodResult("heldout", "raw", cells({**tag, "m": "raw"},
                                                 lambda: raw_metrics(work, u_keys)), 0.0, 0,
                        setting)]
    for kind in ("prf-avg", "prf-rocchio"):
        out.append(MethodResult("heldout", kind, cells({**tag, "m": kind},
                                                        partial(prf_metrics, work, kind, u_keys)),
                                0.0, 0, setting))
    for scope in scopes:
        for a in alphas:
            per = cells({**tag, "m": alpha_method(scope, a), "B": B, **alpha_tag(a)},
                        partial(scope_cell, work, scope, rw, objective, u_keys, sources,
                                alpha=a, pay=rewards_for))
            out.append(MethodResult("heldout", alpha_method(scope, a), per, B / n, B, setting))
    if "auto" in selects:
        per = cells({**tag, "m": "auto", "B": B, **auto_tag(fits or {})},
                    partial(auto_cell, work, rw, rewards_for, fits or {}, objective, u_keys,
                            sources))
        out.append(auto_result("heldout", per, B / n, B, setting))
    return out


def leave_one_task_out(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                       depth: int = BREADTH_DEPTH, objective: str = "kd",
                       cells: Cells = no_cache, alphas: Sequence[str] = ("rule",)
                       ) -> list[MethodResult]:
    """For each task: a global state from the other tasks' rewards (every query at
    ``depth``), evaluated on the held-out task. Needs two tasks or more."""
    if len(work) < 2:
        raise ConfigError("leave-one-task-out needs at least two tasks")
    cands = candidates(work, depth)
    rw = lazy(rewards_for, [(k, d) for k, ds in cands.items() for d in ds])
    out: list[MethodResult] = []
    for td in work:
        others = [o for o in work if o is not td]
        tag = {"p": "loto", "held": td.name, "d": depth, "o": objective}
        out.append(MethodResult("loto", "raw", cells({**tag, "m": "raw"},
                                                      partial(raw_metrics, [td])),
                                setting={"held_out": td.name}))

        def compute(t: TaskData = td, o: list = others, a: str = "rule") -> PerQuery:
            state = learn_state(eval_sources(o), rw(),
                                LearnOptions(scope="global", objective=objective, alpha=a),
                                pay=rewards_for)
            return record_alpha(state_metrics([t], state), state, a)
        B = sum(len(cands[k]) for o in others for k in o.queries.keys)
        for a in alphas:
            m = alpha_method("global", a)
            out.append(MethodResult("loto", m, cells({**tag, "m": m, **alpha_tag(a)},
                                                     partial(compute, a=a)),
                                    B / sum(len(o.queries) for o in others), B,
                                    {"held_out": td.name}))
    return out
