"""Rewards -> one state: the optimizer for one scope (:func:`learn_state`, with the
guard's or the cross-validation's alpha) and the per-part choice of ``method auto``
(:func:`learn_auto`). Callers bring the rewards; :mod:`tttembed.ttt.learn` pays for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tttembed.adapt import (
    AdaptState,
    RewardBatch,
    learn_vectors,
    make_groups,
)
from tttembed.adapt.batch import LearnResult
from tttembed.adapt.crossval import (
    ALPHA_GRID,
    FOLDS,
    CrossValidation,
    alpha_label,
    alpha_values,
    cross_validate,
)
from tttembed.adapt.extras import scope_parts
from tttembed.adapt.parts import StateParts
from tttembed.adapt.scopes import Groups, check_scope, sharing
from tttembed.adapt.validate import best_method
from tttembed.core.errors import ConfigError
from tttembed.index.base import Index
from tttembed.ttt.guard import (
    VALIDATE_SHARE,
    CrossvalRecord,
    Guard,
    Table,
    judged_diff,
    reward_rows,
)
from tttembed.ttt.judged import Pay, Source
from tttembed.ttt.mixed import mixed_state
from tttembed.ttt.options import LearnOptions, Provenance
from tttembed.ttt.select import (
    AUTO_SCOPES,
    NEIGHBOUR,
    CoefFor,
    rewards_coef,
    select_methods,
    shared_scopes,
)


def _fingerprint(indexes: Sequence[Index]) -> str:
    prints = {str(ix.manifest.get("corpus_fingerprint", "")) for ix in indexes}
    return prints.pop() if len(prints) == 1 else ""


def _group_ids(groups: Groups, qids: Sequence[str], tasks: Sequence[str]) -> tuple[str, ...]:
    """The ``task/qid`` of each group's first query: how reports name query-wise groups
    (the keys are text digests)."""
    first: dict[int, str] = {}
    for g, q, t in zip(groups.index.tolist(), qids, tasks):
        first.setdefault(g, f"{t}/{q}")
    return tuple(first[g] for g in range(len(groups.keys)))


def _rewarded(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]]
              ) -> tuple[str, ...]:
    """Text digests of the queries with at least one finite reward, sorted."""
    from tttembed.adapt.scopes import query_digest

    return tuple(sorted({query_digest(text) for qs, _, _ in sources
                         for key, text in zip(qs.keys, qs.texts)
                         if any(np.isfinite(v) for v in rewards.get(key, {}).values())}))


def learn_state(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]],
                options: LearnOptions = LearnOptions(), *, crossval: bool = False,
                callback: Callable[[int], None] | None = None, pay: Pay | None = None,
                validate_cap: int | None = None, table: Table | None = None,
                provenance: Provenance = Provenance()) -> AdaptState | None:
    """``options.scope``'s state from rewards already paid, over one or more sources,
    learned as one batched problem (None when no query has a finite reward), with
    ``options``' objective, alpha, folds, seed and rank
    (:class:`~tttembed.ttt.options.LearnOptions`). ``provenance`` fills the state's
    scorer, reward_mapping and budget fields.

    ``alpha``: ``"rule"`` (``n_g / (n_g + 1)``, the default: vectors and alphas exactly as
    without cross-validation), a fixed number in [0, 1], or ``"auto"`` (chosen by reward
    cross-validation, :mod:`tttembed.adapt.crossval`). ``crossval`` runs the ``folds``-fold
    cross-validation (seeded ``seed``; ``folds`` 0 counts as the default) for any alpha
    and records it in the state (``auto`` always runs it); ``callback`` then also sees its
    optimizer steps.

    With ``pay`` (it pays reward pairs through the ledger), ``auto`` is chosen by the
    guard instead (:mod:`tttembed.ttt.guard`: held-out queries, or for a query-wise state
    its own queries, re-searched and the difference judged), paying at most
    ``validate_cap`` pairs (default a tenth of the rewarded pairs; past it a random sample
    of the never-judged documents); where the guard cannot run, the judged-candidates
    estimate decides, and ``state.crossval`` says why. ``table``: the sources' reward
    table, when the caller has built it (:func:`~tttembed.ttt.guard.reward_rows`)."""
    scope, objective, asked = options.scope, options.objective, options.alpha
    folds, seed, rank = options.folds or FOLDS, options.seed, options.rank
    table = table if table is not None else reward_rows(sources, rewards)
    if not table.keys:
        return None
    x, zs, rs, qids, tasks = table.x, table.zs, table.rs, table.qids, table.tasks
    groups, res, parts = _learn_groups(scope, table, objective, callback, rank=rank, seed=seed)
    guard = None
    if asked == "auto" and pay is not None:
        cap = validate_cap if validate_cap is not None else round(
            VALIDATE_SHARE * sum(len(r) for r in rs))
        guard = judged_diff(scope, sources, rewards, pay, cap=cap, objective=objective,
                            folds=folds, seed=seed, table=table, rank=rank)
    guarded = guard is not None and guard.evidence is not None
    cv = None  # the judged-candidates estimate: asked for, or what auto falls back to
    if crossval or (asked == "auto" and not guarded):
        cv = cross_validate(x, zs, rs, qids, tasks, scope, objective=objective, folds=folds,
                            seed=seed, callback=callback)
    chosen, alphas = _chosen_alphas(scope, asked, guard, cv, res, groups.keys, seed)
    index = sources[-1][2]
    query_ids = _group_ids(groups, qids, tasks) if sharing(scope) == "query" else ()
    return AdaptState(scope, tuple(groups.keys), res.vectors, alphas, res.n_g,
                      identity=index.identity, dim=index.dim, objective=objective,
                      hyperparameters=res.hyperparameters,
                      embedder=str(index.manifest.get("embedder_spec", "")),
                      corpus_fingerprint=_fingerprint([s[2] for s in sources]),
                      final_loss=res.final_loss, alpha_asked=alpha_label(asked),
                      alpha_chosen=chosen, crossval=_crossval_record(cv, guard), parts=parts,
                      scorer=provenance.scorer, reward_mapping=provenance.reward_mapping,
                      budget=provenance.budget, rewarded=_rewarded(sources, rewards),
                      query_ids=query_ids)


def _chosen_alphas(scope: str, asked: str | float, guard: Guard | None, cv: CrossValidation | None,
                   res: LearnResult, keys: Sequence[str], seed: int) -> tuple[str, np.ndarray]:
    """The alpha label and each group's alpha: the guard's choice (per task on a state of
    several tasks: :func:`task_alphas`), else the judged-candidates estimate's, else as
    asked."""
    if guard is not None and guard.evidence is not None:
        chosen = guard.evidence.auto()
    else:
        chosen = cv.auto() if asked == "auto" and cv is not None else alpha_label(asked)
    alphas = res.alpha if chosen == "rule" else alpha_values(chosen, res.n_g)
    judged = guard.judged if guard is not None and guard.evidence is not None else None
    per_task = task_alphas(judged.per_task(np.random.default_rng(seed), ALPHA_GRID)
                           if judged is not None and sharing(scope) == "task" else {}, keys)
    if not per_task:
        return chosen, alphas
    same = len(set(per_task.values())) == 1  # one alpha for all: its label, as pooled
    label = next(iter(per_task.values())) if same else "; ".join(
        f"{t} {a}" for t, a in per_task.items())
    return label, np.array(
        [res.alpha[g] if a == "rule" else alpha_values(a, res.n_g[g:g + 1])[0]
         for g, a in enumerate(per_task.values())])


def task_alphas(evidence: Mapping[str, Mapping[str, Mapping[str, float]]],
                keys: Sequence[str]) -> dict[str, str]:
    """``alpha auto`` on a state of several tasks (task-wise or adapter): each task's
    alpha chosen on its own held-out queries (the guard's judged lists, per task): the
    alpha of the grid with the largest mean gain whose interval lies above 0, else ``"0"``
    (raw for that task). A pooled choice lets the tasks that gain carry one that loses
    (measured: task-auto -3.94* on CoSQA's unseen questions beside five tasks). Empty with
    one task (the pooled choice is that task's) or when a task has no evidence."""
    if len(keys) < 2 or any(k not in evidence for k in keys):
        return {}
    return {k: best_method({a: evidence[k][a] for a in ALPHA_GRID
                            if a != "0" and a in evidence[k]}, "0") for k in keys}


def _learn_groups(scope: str, table: Table, objective: str,
                  callback: Callable[[int], None] | None, *, rank: int, seed: int
                  ) -> tuple[Groups, LearnResult, StateParts]:
    """The groups of ``scope`` over the reward table, their vectors learned as one batched
    problem, and what an adapter or neighbour state adds (:func:`scope_parts`)."""
    x, zs, rs = table.x, table.zs, table.rs
    groups = make_groups(scope, table.qids, table.tasks, table.texts)
    perm = groups.order()  # rows in group order: the optimizer streams z without a copy
    batch = RewardBatch.from_ragged(x[perm], [zs[i] for i in perm], [rs[i] for i in perm],
                                    groups.index[perm], groups.weights[perm])
    res = learn_vectors(batch, len(groups.keys), objective, callback=callback)
    res, parts = scope_parts(scope, batch, res, x[perm][_firsts(groups.index[perm])],
                             objective, rank=rank, seed=seed)
    return groups, res, parts


def _firsts(index: np.ndarray) -> np.ndarray:
    """The first row of each group in rows sorted by group."""
    return np.flatnonzero(np.r_[True, index[1:] != index[:-1]]) if len(index) else index


def learn_auto(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]],
               pay: Pay, *, objective: str = "kd", folds: int = FOLDS, seed: int = 0,
               validate_cap: int | None = None, coef_for: CoefFor | None = None,
               scopes: Sequence[str] | None = None,
               provenance: Provenance = Provenance(),
               shared_pay: Pay | None = None) -> AdaptState | None:
    """``--method auto``: per task, the deployable state the validation says helps
    (:mod:`tttembed.ttt.select`), as one ``mixed`` state (None when no query has a finite
    reward). ``pay`` pays the guard's validation pairs (at most ``validate_cap``, default a
    tenth of the rewarded pairs); ``coef_for`` gives Qdrant's coefficients (default:
    fitted on the rewards, :func:`~tttembed.ttt.select.rewards_coef`); ``scopes`` limits
    the choice to those parts (``global``, ``task``, ``adapter``, ``query``,
    ``neighbour``; default all): a part it excludes is not learned, validated or paid
    for. ``provenance`` fills the state's scorer, reward_mapping and budget fields.
    ``shared_pay``: what pays the shared parts' held-out lists instead of ``pay`` (the
    loop's :class:`~tttembed.loop.nojudge.FloorOrPay` where its rewards are click rates)."""
    allowed = _allowed(scopes)
    table = reward_rows(sources, rewards)
    if not table.keys:
        return None
    cap = validate_cap if validate_cap is not None else round(
        VALIDATE_SHARE * sum(len(r) for r in table.rs))
    coefficients: dict[str, list[float]] = {}
    if coef_for is None:
        coef_for, coefficients = rewards_coef(sources, rewards)
    learn = (*shared_scopes(len(set(table.tasks)) > 1, allowed),
             *(("query",) if "query" in allowed else ()))
    def options(scope: str) -> LearnOptions:
        return LearnOptions(scope=scope, objective=objective, seed=seed)

    learned = {scope: learn_state(sources, rewards, options(scope), table=table)
               for scope in learn}
    if NEIGHBOUR in allowed:  # the query-wise vectors, with their texts' embeddings
        learned[NEIGHBOUR] = learn_state(sources, rewards, options(NEIGHBOUR), table=table)
    chosen = select_methods(sources, rewards, pay, learned, cap=cap, objective=objective,
                            folds=folds, seed=seed, coef_for=coef_for, table=table,
                            scopes=allowed, shared_pay=shared_pay)
    template = next(s for s in (learned.get("task"), *learned.values()) if s is not None)
    return mixed_state(replace(chosen, coefficients=coefficients), learned, table, coef_for,
                       template, provenance)


def _allowed(scopes: Sequence[str] | None) -> tuple[str, ...]:
    """The parts ``learn_auto`` may choose from (every scope by default)."""
    if scopes is None:
        return AUTO_SCOPES
    allowed = tuple(check_scope(s) for s in scopes)
    if not allowed:
        raise ConfigError(f"give at least one scope to choose from ({', '.join(AUTO_SCOPES)})")
    return allowed


def _crossval_record(cv: CrossValidation | None, guard: Guard | None) -> dict[str, Any] | None:
    """The state's ``crossval`` record: the guard's when it ran, else the judged-candidates
    estimate's (with why the guard did not run)."""
    if guard is not None and guard.evidence is not None:
        return guard.record().as_dict()
    if cv is None:
        return None
    if guard is None:
        return cv.as_dict()
    return CrossvalRecord(cv, "judged-candidates", guard.needed, 0, guard.cap,
                          fallback=guard.note).as_dict()


__all__ = ["Source", "learn_auto", "learn_state"]
