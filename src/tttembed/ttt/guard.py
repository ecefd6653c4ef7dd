"""The guard (METHOD.md Part 3): judged-diff validation of a shared-scope state.

The rewarded queries are split in folds, stratified by task. For each fold the state is
learned on the other folds; each held-out query is then re-searched over the *whole*
index with its raw vector and with ``unit(x + alpha v)`` for every alpha of
:data:`~tttembed.adapt.crossval.ALPHA_GRID`. The documents of those top-k lists that were
never judged are sent to the same judge, through the ledger (paid once, ever); then every
list is fully judged and the paired ``Delta nDCG@k`` is exact under the judge
(:mod:`tttembed.adapt.validate`). This sees what a re-search brings in, which the
judged-candidates cross-validation (:mod:`tttembed.adapt.crossval`) cannot.

Validation pairs are capped (default 10% of the learning budget). When validating every
held-out query would exceed the cap, the held-out queries are taken in a seeded order
that alternates tasks, as many as the cap pays for; with fewer than :data:`MIN_QUERIES`
of them nothing is paid and the caller falls back to the judged-candidates estimate,
saying so. Query-wise states keep the judged-candidates estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

import numpy as np

from tttembed.adapt.crossval import ALPHA_GRID, N_BOOT, CrossValidation, alpha_values
from tttembed.adapt.optimize import RewardBatch, learn_vectors
from tttembed.adapt.scopes import group_key, make_groups
from tttembed.adapt.validate import alpha_gains, judged_deltas, task_folds
from tttembed.index.base import Index
from tttembed.score.base import Scorer
from tttembed.ttt.queries import BaseRetrieval, QuerySet
from tttembed.ttt.rewards import Corpus, reward_table, score_pairs

#: nDCG cut-off of the validation.
K = 10
#: Default cap on validation pairs, as a share of the learning budget's pairs.
VALIDATE_SHARE = 0.1
#: Fewest held-out queries a judged-diff validation is made on.
MIN_QUERIES = 8


@dataclass(frozen=True)
class Guard:
    """What the guard found: ``evidence`` (None when it did not run: too few queries, or
    the cap bound), the validation pairs it needed and paid, the cap, a note."""

    evidence: CrossValidation | None
    needed: int
    paid: int
    cap: int
    note: str = ""
    p_values: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The state's ``crossval`` record: the evidence plus how it was got."""
        out: dict[str, Any] = self.evidence.as_dict() if self.evidence else {}
        out.update(method="judged-diff", validation_pairs_needed=self.needed,
                   validation_pairs_paid=self.paid, validation_cap=self.cap, note=self.note,
                   p_values=self.p_values)
        return out


@dataclass
class _Heldout:
    rows: list[int] = field(default_factory=list)      # rows of the reward table
    vectors: list[np.ndarray] = field(default_factory=list)  # one (A, d) block per row


def judged_diff(scope: str, queries: QuerySet, base: BaseRetrieval, index: Index,
                rewards: Mapping[str, Mapping[str, float]], scorer: Scorer, corpus: Corpus,
                *, cap: int, objective: str = "kd", folds: int = 5, seed: int = 0,
                k: int = K) -> Guard:
    """Judged-diff validation of a ``global`` or ``task`` state (module docstring)."""
    rng = np.random.default_rng(seed)
    kept, x, zs, rs = reward_table(queries, base, index, rewards)
    tasks = [queries.tasks[i] for i in kept]
    if len(kept) < 2:
        return Guard(None, 0, 0, cap, "fewer than 2 rewarded queries: nothing to hold out")
    held = _adapted_vectors(scope, queries, kept, x, zs, rs, tasks, objective, folds, rng)
    if not held.rows:
        return Guard(None, 0, 0, cap, "no held-out query has a vector learned without it")
    lists = _search_lists(index, x, held, k)
    keys = [queries.keys[kept[r]] for r in held.rows]
    held_tasks = [tasks[r] for r in held.rows]
    todo = _unjudged(keys, lists, rewards)
    take = _within_cap([len(todo.get(key, ())) for key in keys], held_tasks, cap, rng)
    needed = sum(len(d) for d in todo.values())
    if len(take) < MIN_QUERIES:
        return Guard(None, needed, 0, cap, f"validating {MIN_QUERIES} held-out queries "
                     f"needs more new pairs than its cap of {cap:,} (all "
                     f"{len(keys)} would need {needed:,}; raise --validate-budget)")
    keys, lists = [keys[i] for i in take], [lists[i] for i in take]
    held.rows = [held.rows[i] for i in take]
    todo = {key: todo[key] for key in keys if key in todo}
    needed = sum(len(d) for d in todo.values())
    judged = {key: dict(rewards.get(key, {})) for key in keys}
    if needed:
        paid = score_pairs([(q, d) for q, ds in todo.items() for d in ds], queries, corpus,
                           scorer)
        for q, got in paid.items():
            judged[q].update(got)
    return _evidence(scope, folds, seed, keys, lists, judged,
                     np.asarray([tasks[r] for r in held.rows]), k, needed, cap, rng)


def _adapted_vectors(scope: str, queries: QuerySet, kept: Sequence[int], x: np.ndarray,
                     zs: Sequence[np.ndarray], rs: Sequence[np.ndarray], tasks: list[str],
                     objective: str, folds: int, rng: np.random.Generator) -> _Heldout:
    """Each held-out row's adapted query vectors, one per alpha of the grid."""
    texts = [queries.texts[i] for i in kept]
    qids = [queries.qids[i] for i in kept]
    fold = task_folds(tasks, folds, rng)
    out = _Heldout()
    for f in range(folds):
        train = np.flatnonzero(fold != f).tolist()
        if not train:
            continue
        groups = make_groups(scope, [qids[i] for i in train], [tasks[i] for i in train],
                             [texts[i] for i in train])
        o = groups.order()
        batch = RewardBatch.from_ragged(x[train][o], [zs[train[j]] for j in o],
                                        [rs[train[j]] for j in o], groups.index[o],
                                        groups.weights[o])
        res = learn_vectors(batch, len(groups.keys), objective)
        where = {key: g for g, key in enumerate(groups.keys)}
        for i in np.flatnonzero(fold == f).tolist():
            g = where.get(group_key(scope, tasks[i], texts[i]))
            if g is None:
                continue
            alphas = np.array([alpha_values(a, res.n_g[g:g + 1])[0] for a in ALPHA_GRID])
            u = x[i][None, :] + alphas[:, None] * res.vectors[g][None, :]
            out.rows.append(i)
            out.vectors.append(u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12))
    return out


def _search_lists(index: Index, x: np.ndarray, held: _Heldout, k: int
                  ) -> list[list[list[str]]]:
    """Per held-out row: the top-k doc ids for each alpha of the grid (alpha 0 = raw)."""
    stacked = np.concatenate(held.vectors).astype(np.float32)
    _, rows = index.search(stacked, min(k, len(index)))
    per = len(ALPHA_GRID)
    return [[[index.doc_ids[r] for r in rows[i * per + a] if r >= 0] for a in range(per)]
            for i in range(len(held.rows))]


def _within_cap(costs: Sequence[int], tasks: Sequence[str], cap: int,
                rng: np.random.Generator) -> list[int]:
    """Held-out queries to validate, sorted: all of them when they fit ``cap``, else as many
    as fit, taken in a seeded order that alternates tasks."""
    if sum(costs) <= cap:
        return list(range(len(costs)))
    by_task: dict[str, list[int]] = {}
    for i in rng.permutation(len(costs)).tolist():
        by_task.setdefault(tasks[i], []).append(i)
    order = [i for group in zip_longest(*by_task.values()) for i in group if i is not None]
    take, spent = [], 0
    for i in order:
        if spent + costs[i] <= cap:
            take.append(i)
            spent += costs[i]
    return sorted(take)


def _unjudged(keys: Sequence[str], lists: Sequence[Sequence[Sequence[str]]],
              rewards: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, per_alpha in zip(keys, lists):
        known = rewards.get(key, {})
        new = [d for d in dict.fromkeys(d for docs in per_alpha for d in docs) if d not in known]
        if new:
            out[key] = new
    return out


def _evidence(scope: str, folds: int, seed: int, keys: Sequence[str],
              lists: Sequence[Sequence[Sequence[str]]], judged: Mapping[str, Mapping[str, float]],
              tasks: np.ndarray, k: int, needed: int, cap: int,
              rng: np.random.Generator) -> Guard:
    raw = np.zeros(len(keys))
    deltas = np.zeros((len(keys), len(ALPHA_GRID)))
    for q, (key, per_alpha) in enumerate(zip(keys, lists)):
        raw[q], deltas[q] = judged_deltas(per_alpha[0], per_alpha, judged[key], k)
    gains, p = alpha_gains(ALPHA_GRID, deltas, tasks, n_boot=N_BOOT, rng=rng)
    names = list(dict.fromkeys(tasks.tolist()))
    raw_mean = float(np.mean([raw[tasks == t].mean() for t in names]))
    cv = CrossValidation(scope, folds, f"judged-diff ndcg@{k}", len(keys), len(names),
                         raw_mean, gains, seed)
    return Guard(cv, needed, needed, cap, p_values={a: float(v) for a, v in zip(ALPHA_GRID, p)})


__all__ = ["K", "MIN_QUERIES", "VALIDATE_SHARE", "Guard", "judged_diff"]
