"""Method auto (METHOD.md Part 3): per task, the deployable state the evidence says helps.

Two choices per task, each by the paired validation of :mod:`tttembed.adapt.validate`
(the best mean gain whose 95% interval lies above 0, else none):

- **shared** part, for every query of the task: ``raw``, ``global`` or ``task`` (the
  learned vectors, alpha by the rule), validated by the guard's judged diff
  (:func:`tttembed.ttt.guard.judged_diff`: held-out queries re-searched over the whole
  index, the never-judged documents of both top-10 lists paid through the ledger; past
  half the validation cap a random sample of them, :mod:`tttembed.ttt.judged`);
  where the guard cannot run, by the judged-candidates estimate
  (:func:`tttembed.adapt.crossval.cv_deltas`), with a note;
- **query** part, for the rewarded query texts (it wins over the shared part there):
  ``none``, ``query`` (learned query-wise vectors), ``rw-rocchio`` (reward-weighted
  Rocchio) or ``qdrant-rf`` (Qdrant's naive formula), validated the same way on the
  queries it serves: each rewarded query's re-search against raw, beside the list its
  shared part gives it, within the rest of the cap. There the two are alternatives, so
  a query part serves them where it is shown above raw and its mean gain is above the
  shared part's on the same queries (:func:`query_choices`). The query-wise vectors'
  alpha is chosen first, per task and out of sample, by splitting each rewarded
  query's judged candidates
  (:func:`query_alphas`: the reward cross-validation of the query scope, nothing paid);
  the in-sample re-search then judges the query part at that alpha.

``scopes`` limits the parts chosen from (``global``, ``task``, ``query``); a part it
excludes is not learned, validated or paid for.

The result is one ``mixed`` state (:func:`tttembed.ttt.mixed.mixed_state`): task keys
carry the shared part, query keys the query part; every part is an additive query vector
(Rocchio's and Qdrant's vectors ``u`` are stored as ``unit(u) - x`` with alpha 1), so
search, serving, MTEB and the vector databases apply it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.crossval import (
    ALPHA_GRID,
    FOLDS,
    N_BOOT,
    cv_deltas,
)
from tttembed.adapt.qdrant_fit import INIT, fit_on_rewards
from tttembed.adapt.scopes import LEARN_SCOPES
from tttembed.adapt.validate import best_method, task_gains
from tttembed.ttt.choices import (
    SHRINK,
    Evidence,
    query_alphas,
    query_choices,
    shrunk,
    too_few,
)
from tttembed.ttt.guard import Guard, Table, judged_diff, reward_rows
from tttembed.ttt.judged import (
    K,
    Pay,
    Source,
    judge_lists,
    never_judged,
    sample_by_task,
    source_lists,
)
from tttembed.ttt.part_vectors import (
    CoefFor,
    method_vectors,
    query_vector,
    shared_groups,
    shared_vectors,
)
from tttembed.ttt.selection import (
    METHODS,
    NEIGHBOUR,
    QUERY_LEVEL,
    SELECT_VERSION,
    SHARED,
    MethodGain,
    Selection,
)

#: The parts auto chooses from by default: every scope ``learn`` knows.
AUTO_SCOPES: tuple[str, ...] = LEARN_SCOPES
#: The query part's pooled evidence's own stream (the other parts' draws unchanged).
_POOLED_STREAM = 12
_RULE = ALPHA_GRID.index("rule")


def rewards_coef(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]]
                 ) -> tuple[CoefFor, dict[str, list[float]]]:
    """Qdrant's coefficients per task, fitted (the package's procedure) on the judged
    prefix of each rewarded query's base ranking: nothing more is paid."""
    per_task: dict[str, tuple[list, list, list]] = {}
    for queries, base, index in sources:
        for i, key in enumerate(queries.keys):
            got = rewards.get(key, {})
            ids = [index.doc_ids[r] for r in base.rows[i] if r >= 0]
            m = next((j for j, d in enumerate(ids) if not np.isfinite(got.get(d, np.nan))),
                     len(ids))
            if m:
                s, f, v = per_task.setdefault(queries.tasks[i], ([], [], []))
                s.append(base.scores[i, :m])
                f.append(np.array([got[d] for d in ids[:m]]))
                v.append(index.get_vectors(base.rows[i, :m]))
    coefs = {t: fit_on_rewards(*parts).coef for t, parts in per_task.items()}
    return (lambda task, key: coefs.get(task, INIT)), {t: list(c) for t, c in coefs.items()}


def shared_scopes(several_tasks: bool, scopes: Sequence[str] = AUTO_SCOPES
                  ) -> tuple[str, ...]:
    """The shared parts to learn and validate among ``scopes``: ``global``, ``task`` and
    ``adapter``; with one task not ``global`` when ``task`` is allowed (its global state
    is the same vector)."""
    wanted = tuple(s for s in SHARED if s in scopes)
    if not several_tasks and {"global", "task"} <= set(wanted):
        return tuple(s for s in wanted if s != "global")
    return wanted


def select_methods(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]],
                   pay: Pay, learned: Mapping[str, AdaptState | None], *, cap: int,
                   objective: str = "kd", folds: int = FOLDS, seed: int = 0,
                   coef_for: CoefFor, k: int = K, table: Table | None = None,
                   scopes: Sequence[str] = AUTO_SCOPES, shared_pay: Pay | None = None
                   ) -> Selection:
    """Choose each task's shared and query part (module docstring) among the parts
    ``scopes`` allow (``global``, ``task``: shared parts; ``query``: every query-level
    method); a part not allowed is neither validated nor paid for. ``learned`` holds the
    allowed states (global with several tasks only, task, query) learned on every reward;
    ``table`` the reward table of ``sources`` and ``rewards`` when the caller has built it;
    ``shared_pay``: what pays the shared parts' held-out lists when not ``pay``
    (:func:`tttembed.ttt.distil.learn_auto`)."""
    table = table if table is not None else reward_rows(sources, rewards)
    rng = np.random.default_rng(seed)
    several = len(set(table.tasks)) > 1
    shared_parts, query = shared_scopes(several, scopes), "query" in scopes
    near = NEIGHBOUR in scopes
    sh = _shared_part(sources, rewards, shared_pay or pay, table, shared_parts, cap=cap // (
        (2 if query else 1) * max(len(shared_parts), 1)), objective=objective, folds=folds,
        seed=seed, rng=rng)  # the shared parts share half the cap, the query part the rest
    if not several and {"global", "task"} <= set(scopes):
        sh.notes.insert(0, "one task: the global state is the task-wise one")
    sh.notes += [f"{s}: excluded by the scopes (not learned, validated or paid for)"
                 for s in AUTO_SCOPES if s not in scopes]
    evidence: dict[str, dict[str, dict[str, float]]] = {t: {} for t in dict.fromkeys(table.tasks)}
    for t, got in sh.evidence.items():
        evidence.setdefault(t, {}).update(got)
    shared = {t: best_method({m: e[m] for m in SHARED if m in e}, "raw")
              for t, e in evidence.items()}
    alphas = {t: str(evidence[t][m].get("alpha", "rule")) for t, m in shared.items()
              if m != "raw"}
    qp, qalpha = _QueryPart({}, ""), {}
    if query:
        qalpha = query_alphas(table, objective=objective, folds=folds, seed=seed)
        qp = _query_part(sources, table, sh.merged, pay, shared, alphas, learned,
                         cap=max(cap - sh.spent, 0) // (2 if near else 1), coef_for=coef_for,
                         k=k, rng=rng, query_alpha=qalpha, seed=seed)
    for t, got in qp.evidence.items():
        evidence[t].update(got)
    estimators = {**sh.estimators, **({m: qp.estimator for m in QUERY_LEVEL} if query else {})}
    nb = _Shared()
    if near:
        nb = _shared_part(sources, sh.merged, shared_pay or pay, table, (NEIGHBOUR,),
                          cap=max(cap - sh.spent - qp.paid, 0), objective=objective,
                          folds=folds, seed=seed, rng=rng)
        for t, got in nb.evidence.items():
            evidence.setdefault(t, {}).update(got)
        estimators.update(nb.estimators)
    chosen, pooled_notes = query_choices(evidence, qp.pooled, qp.served)
    notes = sh.notes + qp.notes + nb.notes + too_few(evidence, chosen) + pooled_notes
    return Selection(
        shared=shared, query=chosen,
        evidence=evidence, estimators=estimators, needed=sh.needed + qp.needed + nb.needed,
        paid=sh.spent + qp.paid + nb.spent, cap=cap, notes=tuple(notes),
        neighbour={t: best_method({m: e[m] for m in (NEIGHBOUR,) if m in e}, "none")
                   for t, e in evidence.items()} if near else {},
        shared_alpha=alphas, query_alpha=qalpha)




@dataclass
class _Shared:
    """The shared methods' evidence per task (at the rule's alpha), how each was
    estimated, the validation pairs, the rewards with those bought, notes."""

    evidence: Evidence = field(default_factory=dict)
    estimators: dict[str, str] = field(default_factory=dict)
    spent: int = 0
    needed: int = 0
    notes: list[str] = field(default_factory=list)
    merged: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, got: Evidence) -> None:
        for t, e in got.items():
            self.evidence.setdefault(t, {}).update(e)


def _shared_part(sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]],
                 pay: Pay, table: Table, scopes: Sequence[str], *, cap: int, objective: str,
                 folds: int, seed: int, rng: np.random.Generator) -> _Shared:
    """Each shared scope of ``scopes`` validated by the guard within ``cap`` pairs (task
    first, then global, then adapter, on the rewards with those bought before; the
    neighbour part the same way, on held-out queries)."""
    out = _Shared(merged={k: dict(v) for k, v in rewards.items()})
    for scope in ("task", "global", "adapter", NEIGHBOUR):
        if scope not in scopes:
            continue
        g: Guard = judged_diff(scope, sources, out.merged, pay, cap=cap,
                               objective=objective, folds=folds, seed=seed,
                               table=None if out.spent else table)  # bought pairs: rebuilt
        out.needed += g.needed
        if g.judged is not None:
            got = g.judged.per_task(rng, SHRINK if scope in SHARED else ["rule"])
            out.add({t: {scope: shrunk(e)} for t, e in got.items()})
            out.estimators[scope] = "judged-diff" + ("-sampled" if g.note else "")
            out.spent += g.paid
            for q, paid in g.judged.bought.items():
                out.merged.setdefault(q, {}).update(paid)
            if g.note:
                out.notes.append(f"{scope}: {g.note}")
            continue
        d, t = cv_deltas(table.x, table.zs, table.rs, table.qids, table.tasks, scope,
                         objective=objective, folds=folds, seed=seed)
        out.add(task_gains({scope: d[:, _RULE]}, t.tolist(), n_boot=N_BOOT, rng=rng))
        out.estimators[scope] = "judged-candidates"
        out.notes.append(f"{scope}: {g.note}; the judged-candidates estimate decides")
    return out


@dataclass
class _QueryPart:
    evidence: Evidence
    estimator: str
    needed: int = 0
    paid: int = 0
    notes: list[str] = field(default_factory=list)
    #: Per method: its evidence over every task's rewarded queries (:func:`query_choices`).
    pooled: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Per task whose shared part is kept: that part's gain over raw on the same queries.
    served: dict[str, dict[str, float]] = field(default_factory=dict)


def _query_part(sources: Sequence[Source], table: Table,
                rewards: Mapping[str, Mapping[str, float]], pay: Pay, shared: Mapping[str, str],
                alphas: Mapping[str, str], learned: Mapping[str, AdaptState | None], *,
                cap: int, coef_for: CoefFor, k: int, rng: np.random.Generator,
                query_alpha: Mapping[str, str], seed: int = 0) -> _QueryPart:
    """Each query-level method's Delta on every rewarded row, and the shared part's
    (``served``, where it is not raw): its top-k against the raw list; the never-judged
    documents of those lists, in (row, doc id) order, are sampled at random within
    ``cap`` and paid, the others filled with the mean reward of the paid ones of their
    kind, bootstrapped with the rows
    (:mod:`tttembed.ttt.judged`). The query-wise vectors at each task's ``query_alpha``
    (recorded in their evidence as ``alpha``)."""
    vecs = {"": shared_vectors(table, shared, alphas, learned)}
    vecs.update({m: method_vectors(m, table, learned.get("query"), coef_for, query_alpha)
                 for m in QUERY_LEVEL})
    vecs["raw"] = table.x.astype(np.float32)
    lists = source_lists(sources, table.source, vecs, k,  # per row: {"" or method: ids}
                         keys=table.keys)
    new = [(q, d) for q, ds in never_judged(table.keys, lists, rewards).items()
           for d in sorted(ds)]
    picked = sample_by_task(new, dict(zip(table.keys, table.tasks)), cap, rng,
                            draw_within_cap=True)
    judged = judge_lists(table.keys, table.tasks, lists, rewards, pay, picked,
                         needed=len(new), base="raw", names=("", *QUERY_LEVEL), k=k)
    evidence = judged.per_task(rng)
    served = {t: e.pop("") for t, e in evidence.items() if shared.get(t, "raw") != "raw"}
    for e in evidence.values():
        e.pop("", None)
    gains, p = judged.overall(np.random.default_rng([seed, _POOLED_STREAM]))
    pooled = {g.alpha: {"gain": g.gain, "ci_low": g.ci_low, "ci_high": g.ci_high,
                        "p": p[g.alpha], "queries": float(len(table.keys))} for g in gains
              if g.alpha in QUERY_LEVEL}
    for t, label in query_alpha.items():
        if "query" in evidence.get(t, {}):
            cast(dict[str, Any], evidence[t]["query"])["alpha"] = label
    out = _QueryPart(evidence, "judged-diff" + ("-sampled" if judged.sampled else ""),
                     len(new), len(picked), pooled=pooled if len(set(table.tasks)) > 1 else {},
                     served=served)
    if judged.sampled:
        out.notes.append(f"query part: {len(picked):,} of the {len(new):,} never-judged "
                         "documents its re-searches bring in were paid (a random sample, "
                         "the cap); the others count the mean reward of the paid ones")
    return out


__all__ = ["AUTO_SCOPES", "METHODS", "NEIGHBOUR", "QUERY_LEVEL", "SELECT_VERSION", "SHARED",
           "CoefFor", "MethodGain", "Selection", "query_vector",
           "rewards_coef", "select_methods", "shared_groups", "shared_scopes"]
