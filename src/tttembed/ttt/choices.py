"""Method auto's choice rules over evidence already gathered (:mod:`tttembed.ttt.select`
gathers it): a task with too few queries to choose (:func:`too_few`), each task's query
part against its shared part (:func:`query_choices`), a shared part's alpha shrunk where
its evidence says so (:func:`shrunk`), and the query-wise vectors' alpha chosen out of
sample (:func:`query_alphas`). Nothing here pays a judge or searches the index."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tttembed.adapt.crossval import (
    ALPHA_GRID,
    MIN_CHOICE_QUERIES,
    N_BOOT,
    cv_deltas,
    too_few_note,
)
from tttembed.adapt.validate import best_method, task_gains
from tttembed.ttt.guard import Table
from tttembed.ttt.selection import QUERY_LEVEL

#: The query alphas' random stream (fixed: a version bump does not move the draws).
_QUERY_ALPHA_STREAM = 10
#: The rule's n/(n+1) for a query-wise vector (one rewarded query).
_QUERY_RULE = 0.5

Evidence = dict[str, dict[str, dict[str, float]]]


def too_few(evidence: Evidence, query: Mapping[str, str] | None = None) -> list[str]:
    """A note per task whose evidence holds fewer queries than a choice needs
    (:data:`~tttembed.adapt.crossval.MIN_CHOICE_QUERIES`: raw kept there, whatever its
    intervals say; ``query``: the query parts chosen, one taken from every task's
    evidence pooled is said)."""
    out = []
    for t, per in evidence.items():
        n = max((int(e.get("queries", MIN_CHOICE_QUERIES)) for e in per.values()),
                default=MIN_CHOICE_QUERIES)
        if n < MIN_CHOICE_QUERIES:
            part = (query or {}).get(t, "none")
            what = ("raw kept, no part chosen" if part == "none" else
                    f"no shared part chosen; the query part ({part}) taken from every "
                    "task's rewarded queries pooled")
            out.append(f"{t}: {too_few_note(n, what)}")
    return out


def query_choices(evidence: Evidence, pooled: Mapping[str, Mapping[str, float]],
                  served: Mapping[str, Mapping[str, float]] | None = None
                  ) -> tuple[dict[str, str], list[str]]:
    """Each task's query part, and a note per task whose query part came from the pooled
    evidence or lost to its shared part. On a rewarded query the query part replaces the
    shared part, so both are judged on the same re-search against raw (``evidence``: each
    query-level method's gain over raw; ``served``: the shared part's on the same
    queries, none where it is raw) and a query part serves them only where its mean gain
    is above the shared part's: the largest mean among those shown above 0, the rule of
    every other choice. A task whose rewarded queries number at least
    :data:`MIN_CHOICE_QUERIES` chooses on its own evidence. One with fewer cannot (no 95%
    interval from so few), so it takes the method that the evidence pooled over every
    task's rewarded queries (``pooled``: task-balanced, as ``--alpha auto`` pools a
    query-wise state's evidence) shows helps, over at least as many queries, unless its
    own queries' mean gain for that method is below 0 (or the shared part's). A
    query-level method is one procedure in every task (each rewarded query's own vector,
    or Rocchio's or Qdrant's formula on its own rewards), so its evidence pools where a
    shared part's cannot; alone, a task of 2 queries pools only its own and keeps none."""
    out: dict[str, str] = {}
    notes: list[str] = []
    pick = best_method(pooled, "none")
    for t, e in evidence.items():
        own = {m: e[m] for m in QUERY_LEVEL if m in e}
        bar = float((served or {}).get(t, {}).get("gain", 0.0))
        out[t], shown = (best_method({m: g for m, g in own.items() if g["gain"] > bar}, "none"),
                         best_method(own, "none"))
        if out[t] == "none" and shown != "none":
            notes.append(f"{t}: no query part: its shared part gives its rewarded queries "
                         f"{bar:+.4f} over raw, {shown} {own[shown]['gain']:+.4f}")
        n = max((int(g.get("queries", 0)) for g in own.values()), default=0)
        if n >= MIN_CHOICE_QUERIES or pick not in own or own[pick]["gain"] < max(bar, 0):
            continue
        out[t] = pick
        g = pooled[pick]
        notes.append(f"{t}: query part {pick} on every task's {int(g['queries'])} rewarded "
                     f"queries pooled ({g['gain']:+.4f} [{g['ci_low']:+.4f}, "
                     f"{g['ci_high']:+.4f}]; {n} of its own, fewer than the "
                     f"{MIN_CHOICE_QUERIES} a choice needs, mean {own[pick]['gain']:+.4f})")
    return out, notes


#: The alphas a shared part may be shrunk to (the guard's grid without 0): its vector
#: times a smaller alpha where the evidence says the rule's is too much.
SHRINK: tuple[str, ...] = tuple(a for a in ALPHA_GRID if a != "0")


def shrunk(per_alpha: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """One shared part's evidence in one task: the alpha of :data:`SHRINK` with the
    largest mean gain among those whose interval lies above 0 (the rule's on a tie, the
    rule's when none does), its evidence and ``alpha``: the n/(n+1) rule generalised to
    a shrinkage chosen by the same held-out judged evidence as the part itself."""
    names = ["rule", *(a for a in per_alpha if a != "rule")]
    best = best_method({a: per_alpha[a] for a in names if a in per_alpha}, "rule")
    return {**per_alpha[best], "alpha": best}


def query_alphas(table: Table, *, objective: str, folds: int, seed: int) -> dict[str, str]:
    """Per task, the alpha of the query-wise vectors, chosen out of sample: each rewarded
    query's judged candidates are split in folds, its vector learned on the others
    orders the held-out ones (:func:`tttembed.adapt.crossval.cv_deltas`, scope
    ``query``; nothing is paid). The evidence is one-sided: the vector serves the query
    it was learned from, whose top 10 holds mostly the candidates it learned on, so
    held-out candidates understate what more alpha gives and overstate what less gives.
    So the rule's n/(n+1) (0.5) is left downward only for an alpha of :data:`SHRINK`
    that orders them better than the rule's (the largest mean gain over it whose 95%
    interval, paired per query, lies above 0), and upward for a larger alpha whose mean
    beats the rule's and whose own gain over raw has its interval above 0 (the vectors
    are shown to help, and more of them helps more). Noise never moves the rule, and
    weak evidence that the vectors help never lowers their alpha. A task whose queries
    have fewer than two judged candidates keeps the rule. The in-sample re-search of the
    query part cannot make this choice: scored against the rewards it was learned from,
    more alpha always looks better. Its own random stream (``seed``), so the other
    parts' draws are unchanged."""
    d, tasks = cv_deltas(table.x, table.zs, table.rs, table.qids, table.tasks, "query",
                         objective=objective, folds=folds, seed=seed)
    if not len(d):
        return {}
    col = {a: d[:, ALPHA_GRID.index(a)] for a in SHRINK}
    rng = np.random.default_rng([seed, _QUERY_ALPHA_STREAM])
    per = task_gains({a: col[a] - col["rule"] for a in SHRINK if a != "rule"},
                     tasks.tolist(), n_boot=N_BOOT, rng=rng)
    up = [a for a in SHRINK if a != "rule" and float(a) > _QUERY_RULE]
    raw = task_gains({a: col[a] for a in up}, tasks.tolist(), n_boot=N_BOOT, rng=rng)
    out = {t: best_method(e, "rule") for t, e in per.items()}
    for t, choice in out.items():
        if choice == "rule":
            out[t] = best_method({a: raw[t][a] for a in up if per[t][a]["gain"] > 0}, "rule")
    return out


__all__ = ["SHRINK", "Evidence", "query_alphas", "query_choices", "shrunk", "too_few"]
