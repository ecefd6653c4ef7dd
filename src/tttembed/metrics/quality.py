"""Reward quality: how well a scorer's rewards agree with the judgments, on the rewarded
pairs themselves (evaluation only; the methods never see it).

* ``auc``: ROC AUC of the reward against binary relevance (grade > 0; unjudged = 0) over
  the task's rewarded pairs (ties count 1/2: the Mann-Whitney statistic); tasks count
  equally (a task whose pairs hold one class only is left out).
* ``ndcg``: per rewarded query, nDCG of its rewarded candidates ordered by reward (ties
  keep base order; gain = grade, log2 discount, ideal = the same candidates by grade),
  over queries with a relevant rewarded candidate; mean per task, tasks equally.

A user can compute the same two numbers for their own reranker on a few judged queries
and read off where it sits on the reward-quality axis of the sweep.

Two AUCs of one judge, two names (never one bare "AUC"): :data:`REWARD_AUC` is this
module's, over the pairs a budget paid (``eval``'s reward quality); :data:`AUDIT_AUC`
is the reward audit's (:mod:`tttembed.ttt.audit`), over the audited queries' judged
documents and their unjudged base top-10 (``learn --audit``, the loop's ``--audit``).
The pair sets differ, so the same judge and labels can give two different values; each
is printed with its pair set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

#: The AUC of a judge's rewards over the pairs a budget paid (evaluation's reward quality).
REWARD_AUC = "reward AUC"
#: The AUC of a judge's rewards over an audit's pairs (:mod:`tttembed.ttt.audit`).
AUDIT_AUC = "audit AUC"


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """ROC AUC (Mann-Whitney, ties 1/2); nan without both classes."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def ndcg_of_order(rewards: Sequence[float], grades: Sequence[float]) -> float:
    """nDCG of the candidates ordered by reward (stable) against their grades."""
    g = np.maximum(np.asarray(grades, dtype=np.float64), 0.0)
    if g.sum() <= 0:
        return float("nan")
    order = np.argsort(-np.asarray(rewards, dtype=np.float64), kind="stable")
    disc = 1.0 / np.log2(np.arange(2, len(g) + 2))
    return float((g[order] * disc).sum() / (np.sort(g)[::-1] * disc).sum())


def reward_quality(rewards: Mapping[str, Mapping[str, float]],
                   qrels: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, float]:
    """``rewards`` ``{"task/qid": {doc: r}}``; ``qrels`` ``{task: {qid: {doc: grade}}}``."""
    per_task: dict[str, tuple[list[float], list[bool], list[float]]] = {}
    pairs = queries = 0
    for key, got in rewards.items():
        task, qid = key.split("/", 1)
        judged = qrels.get(task, {}).get(qid, {})
        docs = [d for d, r in got.items() if np.isfinite(r)]
        if not docs:
            continue
        grades = [float(judged.get(d, 0)) for d in docs]
        r = [float(got[d]) for d in docs]
        s, y, nd = per_task.setdefault(task, ([], [], []))
        s += r
        y += [g > 0 for g in grades]
        nd.append(ndcg_of_order(r, grades))
        pairs += len(docs)
        queries += 1
    aucs = [auc(s, y) for s, y, _ in per_task.values()]
    ndcgs = [_nanmean(nd) for _, _, nd in per_task.values()]
    return {"auc": _nanmean(aucs), "ndcg": _nanmean(ndcgs), "pairs": float(pairs),
            "queries": float(queries), "tasks": float(len(per_task))}


def reward_pair_set(q: Mapping[str, float]) -> str:
    """The pairs a :data:`REWARD_AUC` was measured on (``q``: :func:`reward_quality`'s
    result, with the budget per query ``b`` when known; an older cached entry may lack
    the query count)."""
    of = f" of {q['queries']:,.0f} queries" if "queries" in q else ""
    at = f" at b={q['b']:g}" if "b" in q else ""
    return (f"the {q['pairs']:,.0f} rewarded pairs{of}{at} (the pairs the budget paid; "
            "unjudged = non-relevant)")


def reward_auc_line(q: Mapping[str, float]) -> str:
    """``reward AUC 0.627 (reward nDCG 0.512) on the 870 rewarded pairs of 87 queries ...``:
    the quantity by its one name, with its pair set."""
    return (f"{REWARD_AUC} {q['auc']:.3f} (reward nDCG {q['ndcg']:.3f}) on "
            f"{reward_pair_set(q)}")


def _nanmean(values: Sequence[float]) -> float:
    """Mean of the finite values (tasks equally); nan when there is none."""
    a = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")
