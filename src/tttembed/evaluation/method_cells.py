"""The building blocks of the evaluation protocols: the per-query metrics of each method on them (one protocol cell:
raw, direct reranking, PRF, reward-weighted Rocchio, Qdrant's relevance feedback, a
learned state), and how cells are keyed and memoised. The protocols that combine them are
in :mod:`tttembed.evaluation.protocols`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.allocate import water_fill_order
from tttembed.adapt.crossval import ALPHA_GRID, FOLDS
from tttembed.core.errors import ConfigError
from tttembed.evaluation.baselines import qdrant_rf as QRF
from tttembed.evaluation.baselines.prf import average_prf, reward_rocchio, rocchio_prf
from tttembed.evaluation.config import ALPHA_CHOSEN, CELL_METRICS, CHOICE, VALIDATION
from tttembed.evaluation.workload import EVAL_DEPTH, PerQuery, TaskData
from tttembed.metrics.ranking import per_query_metrics
from tttembed.ttt import (
    Source,
    adapt_queries,
    learn_state,
    rerank_runs,
    reward_table,
    run_from_arrays,
)
from tttembed.ttt.distil import learn_auto
from tttembed.ttt.guard import GUARD_VERSION, Pay
from tttembed.ttt.options import LearnOptions
from tttembed.ttt.select import SELECT_VERSION
from tttembed.types import ALPHA_MODES, Rewards

Cells = Callable[[Mapping[str, Any], Callable[[], PerQuery]], PerQuery]


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


def cell_metrics(td: TaskData, rows: np.ndarray, scores: np.ndarray,
                keep: set[str] | None = None) -> PerQuery:
    run = run_from_arrays(td.queries, td.index, rows, scores).get(td.name, {})
    per = per_query_metrics(_judged(td, keep), run, CELL_METRICS)
    return {m: {f"{td.name}/{q}": v for q, v in vals.items()} for m, vals in per.items()}


def merge(parts: Sequence[PerQuery]) -> PerQuery:
    out: PerQuery = {m: {} for m in CELL_METRICS}
    for p in parts:
        for m in CELL_METRICS:
            out[m].update(p.get(m, {}))
    return out


def search_metrics(work: Sequence[TaskData], vectors: Callable[[TaskData], np.ndarray],
                   keep: set[str] | None = None) -> PerQuery:
    parts = []
    for td in work:
        scores, rows = td.queries.search(td.index, vectors(td), EVAL_DEPTH)
        parts.append(cell_metrics(td, rows, scores, keep))
    return merge(parts)


def raw_metrics(work: Sequence[TaskData], keep: set[str] | None = None) -> PerQuery:
    return merge([cell_metrics(td, td.base.rows[:, :EVAL_DEPTH], td.base.scores[:, :EVAL_DEPTH],
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
        per = per_query_metrics(_judged(td, keep), run, CELL_METRICS)
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
        return {m: dict(got) for m in CELL_METRICS}
    return dict(cells(parts, table)[CELL_METRICS[0]])


def qdrant_fits(work: Sequence[TaskData], rewards_for: Callable[[list], Rewards],
                judge: QRF.TextScores | None, cells: Cells) -> dict[str, QRF.TaskFit]:
    """Each task's qdrant-rf coefficients (synthetic with a ``judge``, else cross-fit),
    memoised through ``cells``."""
    out = {}
    for td in work:
        parts = {"p": "fixed", "m": "qdrant-rf-fit", "task": td.name,
                 "src": "synthetic" if judge is not None else "crossfit", "seed": QRF.SEED,
                 "v": QRF.FIT_VERSION}
        got = number_cell(cells, parts, partial(_fit_numbers, td, rewards_for, judge))
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
                  alpha: str = "rule", pay: Pay | None = None) -> PerQuery:
    """Per-query metrics of one scope's state; ``alpha="auto"`` with ``pay`` (the judge,
    through the ledger) is chosen by the guard, as ``tttembed learn --alpha auto``."""
    state = learn_state(sources if sources is not None else eval_sources(work), rewards,
                        LearnOptions(scope=scope, objective=objective, alpha=alpha), pay=pay)
    return record_alpha(state_metrics(work, state, keep), state, alpha)


def scope_cell(work: Sequence[TaskData], scope: str, rewards: Callable[[], Rewards],
               objective: str = "kd", keep: set[str] | None = None,
               sources: Sequence[Source] | None = None, alpha: str = "rule",
               pay: Pay | None = None) -> PerQuery:
    """:func:`scope_metrics` with the rewards fetched only when the cell is computed (a
    cached cell pays nothing): the body of a protocol cell, bound with ``partial``."""
    return scope_metrics(work, scope, rewards(), objective, keep, sources, alpha=alpha,
                         pay=pay)


def direct_cell(work: Sequence[TaskData], rewards: Callable[[], Rewards]) -> PerQuery:
    """:func:`direct_metrics` with the rewards fetched when the cell is computed."""
    return direct_metrics(work, rewards())


def _fit_numbers(td: TaskData, rewards_for: Callable[[list], Rewards],
                 judge: QRF.TextScores | None) -> dict[str, float]:
    return QRF.to_numbers(QRF.fit_task(td, rewards_for, judge))


def record_alpha(per: PerQuery, state: AdaptState | None, alpha: str) -> PerQuery:
    """Record the alpha ``auto`` chose (``{ALPHA_CHOSEN: {"0.3": 1.0}}``; ``"0"`` = shrunk to
    the raw vector, ``"none"`` = no state) and the guard's validation pairs
    (``{VALIDATION: {"paid": n, "cap": c}}``, when it ran) beside the metrics of the cell
    (cached with it)."""
    if alpha != "rule":
        per[ALPHA_CHOSEN] = {state.alpha_chosen if state is not None else "none": 1.0}
        record = (state.crossval or {}) if state is not None else {}
        if "validation_cap" in record:
            per[VALIDATION] = {"paid": float(record.get("validation_pairs_paid", 0)),
                               "cap": float(record["validation_cap"]),
                               "guard": float(record.get("method") == "judged-diff")}
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
        raise ConfigError(f"unknown alpha method {alpha!r}; choose from {', '.join(ALPHA_MODES)}")
    return {"a": alpha, "folds": FOLDS, "cv": "ndcg", "grid": list(ALPHA_GRID),
            "guard": GUARD_VERSION}


def auto_cell(work: Sequence[TaskData], rewards: Callable[[], Rewards], pay: Pay,
              fits: Mapping[str, QRF.TaskFit], objective: str = "kd",
              keep: set[str] | None = None, sources: Sequence[Source] | None = None
              ) -> PerQuery:
    """Method auto (``--select auto``), as ``tttembed learn --method auto``: per task the
    deployable state the validation says helps (Qdrant's coefficients those of the
    ``qdrant-rf`` row when it runs, else fitted on the rewards); its choice per task
    (:data:`CHOICE`) and validation pairs (:data:`VALIDATION`) beside the metrics."""
    coef_for = (lambda task, key: fits[task].coef_for(key)) if fits else None
    state = learn_auto(sources if sources is not None else eval_sources(work), rewards(), pay,
                       objective=objective, coef_for=coef_for)
    per = state_metrics(work, state, keep)
    sel = (state.selection or {}) if state is not None else {}
    per[CHOICE] = {f"{t}={c}": 1.0 for t, c in sel.get("choice", {}).items()} or {"none": 1.0}
    per[VALIDATION] = {"paid": float(sel.get("validation_pairs_paid", 0)),
                       "cap": float(sel.get("validation_cap", 0)),
                       "guard": float("judged-diff" in sel.get("estimators", {}).values())}
    return per


def auto_tag(fits: Mapping[str, QRF.TaskFit]) -> dict[str, Any]:
    """What method auto adds to a cell's key."""
    tag: dict[str, Any] = {"sel": SELECT_VERSION, "guard": GUARD_VERSION, "folds": FOLDS}
    if fits:
        tag["fit"] = {t: {h: list(f.coef) for h, f in fit.fits.items()} for t, fit in fits.items()}
        tag["fv"] = QRF.FIT_VERSION
    return tag
