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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.allocate import (
    BREADTH_DEPTH,
    TASK_SEED_OFFSET,
    budget_grid,
    nested_schedule,
    water_fill_order,
)
from tttembed.adapt.crossval import ALPHA_GRID, FOLDS
from tttembed.core.errors import ConfigError
from tttembed.evaluation import qdrant_rf as QRF
from tttembed.evaluation.methods import average_prf, reward_rocchio, rocchio_prf
from tttembed.evaluation.metrics import evaluate_per_query
from tttembed.evaluation.quality import reward_quality
from tttembed.index.store import IndexHandle
from tttembed.ttt import (
    BaseRetrieval,
    QuerySet,
    Source,
    adapt_queries,
    learn_state,
    rerank_runs,
    restrict,
    reward_table,
    run_from_arrays,
)

METRICS = ("ndcg@10", "recall@100")
EVAL_DEPTH = 100
SCOPE_METHODS = ("global", "task", "query")
BASELINES = ("direct", "prf-avg", "prf-rocchio", "rw-rocchio")
#: Every baseline ``--baselines`` accepts; ``qdrant-rf`` is opt-in (its fit scores 50 pairs
#: per fitting query: 10,000 per task with a text scorer, see :mod:`.qdrant_rf`).
KNOWN_BASELINES = (*BASELINES, "qdrant-rf")
#: How scope methods set alpha: the rule n/(n+1) (method ``task``) or ``auto`` (``task-auto``).
ALPHA_METHODS = ("rule", "auto")
#: Key of a cell's per-query table holding the alpha ``auto`` chose (not a metric).
ALPHA_CHOSEN = "alpha_chosen"

PerQuery = dict[str, dict[str, float]]  # metric -> {"task/qid": value}
Rewards = dict[str, dict[str, float]]
Cells = Callable[[Mapping[str, Any], Callable[[], PerQuery]], PerQuery]


@dataclass(frozen=True, eq=False)
class TaskData:
    """One task of a workload: its index, evaluated queries, judgments and base retrieval
    (top ``EVAL_DEPTH`` or more); optional learning-only queries (a train split)."""

    name: str
    index: IndexHandle
    corpus: Mapping[str, Mapping[str, str]] = field(repr=False)
    queries: QuerySet = field(repr=False)
    qrels: Mapping[str, Mapping[str, int]] = field(repr=False)
    base: BaseRetrieval = field(repr=False)
    train: QuerySet | None = field(default=None, repr=False)
    train_base: BaseRetrieval | None = field(default=None, repr=False)


@dataclass(frozen=True)
class MethodResult:
    """Per-query metrics of one method in one setting."""

    protocol: str
    method: str
    per_query: PerQuery = field(repr=False)
    b: float = 0.0
    budget: int = 0
    setting: dict[str, Any] = field(default_factory=dict)


def no_cache(parts: Mapping[str, Any], compute: Callable[[], PerQuery]) -> PerQuery:
    return compute()


# --- building blocks ------------------------------------------------------------------

def candidates(work: Sequence[TaskData], depth: int = EVAL_DEPTH) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for td in work:
        out.update(td.base.candidates(td.index, td.queries.keys))
    return {k: v[:depth] for k, v in out.items()}


def task_orders(work: Sequence[TaskData]) -> list[tuple[int, str]]:
    return water_fill_order([td.queries.keys for td in work])


def lazy(rewards_for: Callable[[list], Rewards], pairs: list) -> Callable[[], Rewards]:
    """``rewards_for(pairs)``, asked on first use only (a fully cached run scores nothing)."""
    memo: dict[str, Rewards] = {}

    def get() -> Rewards:
        if "r" not in memo:
            memo["r"] = rewards_for(pairs)
        return memo["r"]
    return get


def _judged(td: TaskData, keep: set[str] | None) -> Mapping[str, Mapping[str, int]]:
    if keep is None:
        return td.qrels
    return {q: g for q, g in td.qrels.items() if f"{td.name}/{q}" in keep}


def run_metrics(td: TaskData, rows: np.ndarray, scores: np.ndarray,
                keep: set[str] | None = None) -> PerQuery:
    run = run_from_arrays(td.queries, td.index, rows, scores).get(td.name, {})
    per = evaluate_per_query(_judged(td, keep), run, METRICS)
    return {m: {f"{td.name}/{q}": v for q, v in vals.items()} for m, vals in per.items()}


def merge(parts: Sequence[PerQuery]) -> PerQuery:
    out: PerQuery = {m: {} for m in METRICS}
    for p in parts:
        for m in METRICS:
            out[m].update(p.get(m, {}))
    return out


def search_metrics(work: Sequence[TaskData], vectors: Callable[[TaskData], np.ndarray],
                   keep: set[str] | None = None) -> PerQuery:
    parts = []
    for td in work:
        scores, rows = td.index.search(vectors(td), EVAL_DEPTH)
        parts.append(run_metrics(td, rows, scores, keep))
    return merge(parts)


def raw_metrics(work: Sequence[TaskData], keep: set[str] | None = None) -> PerQuery:
    return merge([run_metrics(td, td.base.rows[:, :EVAL_DEPTH], td.base.scores[:, :EVAL_DEPTH],
                              keep) for td in work])


def direct_metrics(work: Sequence[TaskData], rewards: Rewards,
                   keep: set[str] | None = None) -> PerQuery:
    """Direct reranking of the base top 100. The slots are the base ranking as every other
    method is evaluated (trec_eval's tie rule: equal scores by doc id, descending), so an
    unrewarded query scores exactly its raw value even where documents tie (CoSQA holds
    thousands of duplicate texts, hence exact ties)."""
    parts = []
    for td in work:
        run = rerank_runs(td.queries, td.index, td.base.rows[:, :EVAL_DEPTH],
                          td.base.scores[:, :EVAL_DEPTH], rewards).get(td.name, {})
        per = evaluate_per_query(_judged(td, keep), run, METRICS)
        parts.append({m: {f"{td.name}/{q}": v for q, v in vals.items()}
                      for m, vals in per.items()})
    return merge(parts)


def prf_metrics(work: Sequence[TaskData], kind: str, keep: set[str] | None = None) -> PerQuery:
    def vec(td: TaskData) -> np.ndarray:
        z = td.index.get_vectors(td.base.rows[:, :10])
        return average_prf(td.base.x, z) if kind == "prf-avg" else rocchio_prf(td.base.x, z)
    return search_metrics(work, vec, keep)


def rw_rocchio_metrics(work: Sequence[TaskData], rewards: Rewards,
                       keep: set[str] | None = None) -> PerQuery:
    def vec(td: TaskData) -> np.ndarray:
        kept, x, zs, rs = reward_table(td.queries, td.base, td.index, rewards)
        out = td.base.x.copy()
        if kept:
            out[kept] = reward_rocchio(x, zs, rs)
        return out
    return search_metrics(work, vec, keep)


def qdrant_rf_metrics(work: Sequence[TaskData], rewards: Rewards,
                      fits: Mapping[str, QRF.TaskFit], keep: set[str] | None = None) -> PerQuery:
    """Qdrant's naive relevance feedback: each rewarded query searches with
    ``a x + sum_pairs conf^b c (z_p - z_n)``, its pairs drawn from its rewarded candidates
    (best with worst, at most 3); queries without rewards keep their vector."""
    def vec(td: TaskData) -> np.ndarray:
        kept, x, zs, rs = reward_table(td.queries, td.base, td.index, rewards)
        out = td.base.x.copy()
        keys = td.queries.keys
        for j, i in enumerate(kept):
            out[i] = QRF.feedback_vector(x[j], zs[j], rs[j], fits[td.name].coef_for(keys[i]))
        return out
    return search_metrics(work, vec, keep)


def number_cell(cells: Cells, parts: Mapping[str, Any],
                compute: Callable[[], dict[str, float]]) -> dict[str, float]:
    """A small table of numbers memoised through ``cells`` (stored under every metric, so
    it is a valid cell)."""
    def table() -> PerQuery:
        got = compute()
        return {m: dict(got) for m in METRICS}
    return dict(cells(parts, table)[METRICS[0]])


def qdrant_fits(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards],
                judge: QRF.Judge | None, cells: Cells) -> dict[str, QRF.TaskFit]:
    """Each task's qdrant-rf coefficients (synthetic with a ``judge``, else cross-fit),
    memoised through ``cells``."""
    out = {}
    for td in work:
        parts = {"p": "fixed", "m": "qdrant-rf-fit", "task": td.name,
                 "src": "synthetic" if judge is not None else "crossfit", "seed": QRF.SEED,
                 "v": QRF.FIT_VERSION}
        got = number_cell(cells, parts, lambda t=td: QRF.to_numbers(  # type: ignore[misc]
            QRF.fit_task(t, rewards_for, judge)))
        out[td.name] = QRF.from_numbers(got, td.queries.keys)
    return out


def state_metrics(work: Sequence[TaskData], state: AdaptState | None,
                  keep: set[str] | None = None) -> PerQuery:
    def vec(td: TaskData) -> np.ndarray:
        return adapt_queries(td.base.x, td.queries, [state] if state is not None else [])
    return search_metrics(work, vec, keep)


def eval_sources(work: Sequence[TaskData]) -> list[Source]:
    return [(td.queries, td.base, td.index) for td in work]


def scope_metrics(work: Sequence[TaskData], scope: str, rewards: Rewards, objective: str = "kd",
                  keep: set[str] | None = None, sources: Sequence[Source] | None = None,
                  alpha: str = "rule") -> PerQuery:
    state = learn_state(scope, sources if sources is not None else eval_sources(work), rewards,
                        objective=objective, alpha=alpha)
    return record_alpha(state_metrics(work, state, keep), state, alpha)


def record_alpha(per: PerQuery, state: AdaptState | None, alpha: str) -> PerQuery:
    """Record the alpha ``auto`` chose (``{ALPHA_CHOSEN: {"0.3": 1.0}}``; ``"0"`` = shrunk to
    the raw vector, ``"none"`` = no state) beside the metrics of the cell (cached with it)."""
    if alpha != "rule":
        per[ALPHA_CHOSEN] = {state.alpha_chosen if state is not None else "none": 1.0}
    return per


def alpha_method(scope: str, alpha: str) -> str:
    """A scope method's name: the scope for the rule (unchanged), ``task-auto`` etc."""
    return scope if alpha == "rule" else f"{scope}-{alpha}"


def alpha_tag(alpha: str) -> dict[str, Any]:
    """What an alpha adds to a cell's key: nothing for the rule (cached cells keep their
    key), the cross-validation settings for ``auto``."""
    if alpha == "rule":
        return {}
    if alpha != "auto":
        raise ConfigError(f"unknown alpha method {alpha!r}; choose from {', '.join(ALPHA_METHODS)}")
    return {"a": alpha, "folds": FOLDS, "cv": "ndcg", "grid": list(ALPHA_GRID)}


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
                    alphas: Sequence[str], fits: Mapping[str, QRF.TaskFit]
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
                         lambda s=scope, a=a: scope_metrics(  # type: ignore[misc]
                             work, s, rewards(), objective, alpha=a)))
    return todo


def fixed_population(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards], *,
                     budgets: Sequence[float], scopes: Sequence[str] = SCOPE_METHODS,
                     baselines: Sequence[str] = BASELINES, objective: str = "kd",
                     cells: Cells = no_cache, progress: Callable[[int], None] | None = None,
                     alphas: Sequence[str] = ("rule",), judge: QRF.Judge | None = None,
                     info: dict[str, Any] | None = None) -> list[MethodResult]:
    """Learn from ``S_B`` (water-filled, nested), evaluate on all queries, every budget;
    each scope once per alpha method (``alphas``: ``rule``, ``auto``). ``qdrant-rf`` fits
    its coefficients on synthetic document-queries scored by ``judge``, or cross-fits
    without one (:mod:`.qdrant_rf`). ``info``, when given, receives the fitted
    coefficients (``qdrant_rf``) and the reward quality at each budget (``reward_quality``)."""
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
                                                         lambda k=kind: prf_metrics(work, k))))  # type: ignore[misc]
    for B, pairs in zip(grid, schedules):
        def rewards(p: list = pairs) -> Rewards:
            return restrict(largest(), p)
        todo = _budget_methods(work, rewards, scopes=scopes, baselines=baselines,
                               objective=objective, alphas=alphas, fits=fits)
        for method, extra, compute in todo:
            per = cells({"p": "fixed", "m": method, "B": B, "o": objective, **extra}, compute)
            out.append(MethodResult("fixed", method, per, B / n, B, {"objective": objective}))
        if info is not None:
            q = number_cell(cells, {"p": "fixed", "m": "reward-quality", "B": B, "v": 1},
                            lambda r=rewards: reward_quality(  # type: ignore[misc]
                                r(), {td.name: td.qrels for td in work}))
            info.setdefault("reward_quality", []).append({"B": B, "b": B / n, **q})
        if progress is not None:
            progress(1)
    return out


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
            alphas: Sequence[str] = ("rule",)) -> list[MethodResult]:
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
    setting = {"fraction": fraction, "depth": depth, "train": use_train,
               "evaluated": len(u_keys)}
    tag = {"p": "heldout", "f": fraction, "d": depth, "t": use_train, "o": objective}
    out = [MethodResult("heldout", "raw", cells({**tag, "m": "raw"},
                                                 lambda: raw_metrics(work, u_keys)), 0.0, 0,
                        setting)]
    for kind in ("prf-avg", "prf-rocchio"):
        out.append(MethodResult("heldout", kind, cells({**tag, "m": kind},
                                                        lambda k=kind: prf_metrics(work, k, u_keys)),  # type: ignore[misc]
                                0.0, 0, setting))
    for scope in scopes:
        for a in alphas:
            per = cells({**tag, "m": alpha_method(scope, a), "B": B, **alpha_tag(a)},
                        lambda s=scope, a=a: scope_metrics(work, s, rw(), objective,  # type: ignore[misc]
                                                           u_keys, sources, alpha=a))
            out.append(MethodResult("heldout", alpha_method(scope, a), per, B / n, B, setting))
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
                                                      lambda t=td: raw_metrics([t])),  # type: ignore[misc]
                                setting={"held_out": td.name}))

        def compute(t: TaskData = td, o: list = others, a: str = "rule") -> PerQuery:
            state = learn_state("global", eval_sources(o), rw(), objective=objective, alpha=a)
            return record_alpha(state_metrics([t], state), state, a)
        B = sum(len(cands[k]) for o in others for k in o.queries.keys)
        for a in alphas:
            m = alpha_method("global", a)
            out.append(MethodResult("loto", m, cells({**tag, "m": m, **alpha_tag(a)},
                                                     lambda c=compute, a=a: c(a=a)),  # type: ignore[misc]
                                    B / sum(len(o.queries) for o in others), B,
                                    {"held_out": td.name}))
    return out
