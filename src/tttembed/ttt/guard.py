"""The guard (METHOD.md Part 3): judged-diff validation of a state.

Shared scopes: the rewarded queries are split in folds, stratified by task. For each fold
the state is learned on the other folds; each held-out query is then re-searched over the
*whole* index with its raw vector and with ``unit(x + alpha v)`` for every alpha of
:data:`~tttembed.adapt.crossval.ALPHA_GRID`. A query-wise state applies only to the texts
it was learned from, so it is learned once and each rewarded query re-searched the same
way (in-sample: exactly the queries it will serve). The documents of those top-k lists
that were never judged are sent to the same judge, through the ledger (paid once, ever);
then every list is fully judged and the paired ``Delta nDCG@k`` is exact under the judge
(:mod:`tttembed.ttt.judged`). This sees what a re-search brings in, which the
judged-candidates cross-validation (:mod:`tttembed.adapt.crossval`) cannot.

Validation pairs are capped (default 10% of the learning budget). Past the cap a uniform
random sample of the never-judged documents is paid, the cap split equally by task (a task
needing less leaves the rest to the others: :func:`tttembed.ttt.judged.task_shares`; the
paired test weighs tasks equally, so does the evidence bought for it), and an unpaid one counts the mean
reward of the paid ones of its list, the interval bootstrapping the queries and that
sample together (:func:`tttembed.ttt.judged.sample_pairs`; too small a sample counts the
bound against the change). The judged-candidates estimate decides only where the guard
cannot run (fewer than two rewarded queries), with a note. (Measured before: a
validation on a subset of the held-out queries threw away more gains than even that
fallback; a sample of documents keeps every held-out query.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.adapter import RANK, map_deltas
from tttembed.adapt.crossval import ALPHA_GRID, CrossValidation, alpha_values
from tttembed.adapt.extras import scope_parts
from tttembed.adapt.neighbour import neighbours
from tttembed.adapt.optimize import RewardBatch, learn_vectors
from tttembed.adapt.scopes import group_key, make_groups
from tttembed.adapt.validate import judged_deltas, task_folds
from tttembed.ttt.judged import (
    JudgedLists,
    K,
    Pay,
    Source,
    judge_lists,
    never_judged,
    sample_by_task,
    source_lists,
)
from tttembed.ttt.rewards import reward_table

#: Default cap on validation pairs, as a share of the learning budget's pairs.
VALIDATE_SHARE = 0.1
#: Bump when the guard's choices change for the same inputs (eval cells are keyed by it).
GUARD_VERSION = 7


@dataclass(frozen=True)
class CrossvalRecord:
    """A state's ``crossval`` record, as the guard writes it and ``learn`` reads it back:
    the evidence and how it was got. ``method``: ``judged-diff`` (the guard),
    ``judged-candidates`` (the guard could not run, ``fallback`` says why) or ``""`` (the
    reward cross-validation that was asked for)."""

    evidence: CrossValidation
    method: str = ""
    needed: int = 0
    paid: int = 0
    cap: int = 0
    note: str = ""
    fallback: str = ""
    p_values: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = self.evidence.as_dict()
        if self.method == "judged-diff":
            out.update(method=self.method, validation_pairs_needed=self.needed,
                       validation_pairs_paid=self.paid, validation_cap=self.cap,
                       note=self.note, p_values=self.p_values)
        elif self.method:
            out.update(method=self.method, fallback=self.fallback,
                       validation_pairs_needed=self.needed, validation_pairs_paid=self.paid,
                       validation_cap=self.cap)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrossvalRecord:
        return cls(CrossValidation.from_dict(d), str(d.get("method", "")),
                   int(d.get("validation_pairs_needed", 0)),
                   int(d.get("validation_pairs_paid", 0)), int(d.get("validation_cap", 0)),
                   str(d.get("note", "")), str(d.get("fallback", "")),
                   {str(a): float(p) for a, p in d.get("p_values", {}).items()})


@dataclass(frozen=True)
class Guard:
    """What the guard found: ``evidence`` (None when it did not run: too few queries),
    the validation pairs it needed, the cap, a note, and the judged lists behind it."""

    evidence: CrossValidation | None
    needed: int
    cap: int
    note: str = ""
    p_values: dict[str, float] = field(default_factory=dict)
    judged: JudgedLists | None = field(default=None, repr=False)

    @property
    def paid(self) -> int:
        """Validation pairs paid (a sample of those needed past the cap; none when the
        guard did not run)."""
        return 0 if self.evidence is None or self.judged is None else self.judged.paid

    def record(self) -> CrossvalRecord:
        """The state's ``crossval`` record (the guard ran: ``evidence`` is set)."""
        assert self.evidence is not None
        return CrossvalRecord(self.evidence, "judged-diff", self.needed, self.paid, self.cap,
                              self.note, p_values=self.p_values)


@dataclass
class Table:
    """The reward table over every source: per row its vector, candidates, rewards, task,
    text, id, query key and source."""

    x: np.ndarray
    zs: list[np.ndarray]
    rs: list[np.ndarray]
    tasks: list[str]
    texts: list[str]
    qids: list[str]
    keys: list[str]
    source: list[int]


@dataclass
class _Heldout:
    rows: list[int] = field(default_factory=list)      # rows of the reward table
    vectors: list[np.ndarray] = field(default_factory=list)  # one (A, d) block per row


def judged_diff(scope: str, sources: Sequence[Source],
                rewards: Mapping[str, Mapping[str, float]], pay: Pay, *, cap: int,
                objective: str = "kd", folds: int = 5, seed: int = 0, k: int = K,
                table: Table | None = None, rank: int = RANK) -> Guard:
    """Judged-diff validation of a state (module docstring; a query-wise state is checked
    on the queries it was learned from, which are the ones it applies to). Past the cap
    a random sample of ``cap`` of the new pairs is paid, and the unpaid documents count
    the mean reward of the paid ones of their list. ``table``: the reward table of
    ``sources`` and ``rewards`` when the caller has built it."""
    rng = np.random.default_rng(seed)
    table = table if table is not None else reward_rows(sources, rewards)
    if len(table.keys) < 2 and scope != "query":
        return Guard(None, 0, cap, "fewer than 2 rewarded queries: nothing to hold out")
    held = _adapted_vectors(scope, table, objective, folds, rng, rank)
    if not held.rows:
        return Guard(None, 0, cap, "no held-out query has a vector learned without it")
    keys = [table.keys[r] for r in held.rows]
    tasks = [table.tasks[r] for r in held.rows]
    blocks = np.stack(held.vectors)
    lists = source_lists(sources, [table.source[r] for r in held.rows],
                         {a: blocks[:, j] for j, a in enumerate(ALPHA_GRID)}, k, by_row=True,
                         keys=keys)
    new = [(q, d) for q, ds in never_judged(keys, lists, rewards).items() for d in ds]
    picked = sample_by_task(new, dict(zip(keys, tasks)), cap, rng)
    judged = judge_lists(keys, tasks, lists, rewards, pay, picked, needed=len(new), base="0",
                         names=ALPHA_GRID, k=k)
    raw = np.array([judged_deltas(per["0"], [], j, k)[0] for per, j in zip(lists, judged.judged)])
    gains, p = judged.overall(rng)
    names = list(dict.fromkeys(tasks))
    raw_mean = float(np.mean([raw[np.asarray(tasks) == t].mean() for t in names]))
    metric = f"judged-diff ndcg@{k}" + (" (sampled)" if judged.sampled else "")
    cv = CrossValidation(scope, folds, metric, len(keys), len(names), raw_mean, gains, seed)
    note = "" if not judged.sampled else (
        f"{len(picked):,} of the {len(new):,} never-judged documents of the held-out queries' "
        "lists were paid (a random sample, the cap); the others count the mean reward of "
        "the paid ones of their list (bootstrapped with the queries)")
    return Guard(cv, len(new), cap, note, p, judged)


def reward_rows(sources: Sequence[Source],
                rewards: Mapping[str, Mapping[str, float]]) -> Table:
    """The reward table of every source, one row per rewarded query."""
    parts = []
    for s, (queries, base, index) in enumerate(sources):
        kept, x, zs, rs = reward_table(queries, base, index, rewards)
        parts.append((s, queries, kept, x, zs, rs))
    xs = [p[3] for p in parts]
    return Table(
        x=np.concatenate(xs) if xs else np.zeros((0, 1), np.float32),
        zs=[z for p in parts for z in p[4]], rs=[r for p in parts for r in p[5]],
        tasks=[p[1].tasks[i] for p in parts for i in p[2]],
        texts=[p[1].texts[i] for p in parts for i in p[2]],
        qids=[p[1].qids[i] for p in parts for i in p[2]],
        keys=[p[1].keys[i] for p in parts for i in p[2]],
        source=[p[0] for p in parts for _ in p[2]])


def _adapted_vectors(scope: str, t: Table, objective: str, folds: int,
                     rng: np.random.Generator, rank: int = RANK) -> _Heldout:
    """Each held-out row's adapted query vectors, one per alpha of the grid. A query-wise
    state applies to the very texts it was learned from: every row is learned once and
    checked in-sample (one "fold"). An adapter applies its task's map; neighbour
    transfer lends a held-out query the vectors of its rewarded neighbours in the other
    folds (a query without one keeps its raw vector at every alpha)."""
    in_sample = scope == "query"
    fold = np.ones(len(t.tasks), np.int64) if in_sample else task_folds(t.tasks, folds, rng)
    out = _Heldout()
    for f in range(1 if in_sample else folds):
        train = (np.arange(len(t.tasks)) if in_sample else np.flatnonzero(fold != f)).tolist()
        if not train:
            continue
        held = train if in_sample else np.flatnonzero(fold == f).tolist()
        for i, block in _fold_vectors(scope, t, train, held, objective, rank):
            out.rows.append(i)
            out.vectors.append(block)
    return out


def _fold_vectors(scope: str, t: Table, train: list[int], held: list[int], objective: str,
                  rank: int) -> list[tuple[int, np.ndarray]]:
    """Learn ``scope`` on rows ``train``; each row of ``held`` with a vector, and its
    unit query vectors, one per alpha of the grid."""
    groups = make_groups(scope, [t.qids[i] for i in train], [t.tasks[i] for i in train],
                         [t.texts[i] for i in train])
    o = groups.order()
    batch = RewardBatch.from_ragged(t.x[train][o], [t.zs[train[j]] for j in o],
                                    [t.rs[train[j]] for j in o], groups.index[o],
                                    groups.weights[o])
    res = learn_vectors(batch, len(groups.keys), objective)
    first = np.flatnonzero(np.r_[True, groups.index[o][1:] != groups.index[o][:-1]])
    res, parts = scope_parts(scope, batch, res, t.x[train][o][first], objective, rank=rank)
    x = t.x[held].astype(np.float32)
    if scope == "neighbour":
        mix, evidence, hit = neighbours(x, np.array([t.tasks[i] for i in held], dtype=str),
                                        groups.keys, res.vectors, res.n_g, parts)
        return [(i, _unit_block(x[j], mix[j], _grid(evidence[j]) if hit[j] else None))
                for j, i in enumerate(held)]
    where = {key: g for g, key in enumerate(groups.keys)}
    out = []
    for j, i in enumerate(held):
        g = where.get(group_key(scope, t.tasks[i], t.texts[i]))
        if g is None:
            continue
        v = res.vectors[g] + map_deltas(x[j:j + 1], parts, np.array([g]))[0]
        out.append((i, _unit_block(x[j], v, np.array([
            alpha_values(a, res.n_g[g:g + 1])[0] for a in ALPHA_GRID]))))
    return out


def _grid(evidence: float) -> np.ndarray:
    """Every alpha of the grid for a neighbour mix of ``evidence`` (the rule:
    ``n / (n + 1)``)."""
    return np.array([evidence / (evidence + 1.0) if a == "rule" else float(a)
                     for a in ALPHA_GRID])


def _unit_block(x: np.ndarray, v: np.ndarray, alphas: np.ndarray | None) -> np.ndarray:
    """``unit(x + a v)`` for every alpha ``a`` of the grid (``x`` at each when None)."""
    a = np.zeros(len(ALPHA_GRID)) if alphas is None else alphas
    u = x[None, :] + a[:, None] * v[None, :]
    return u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)


__all__ = ["GUARD_VERSION", "VALIDATE_SHARE", "CrossvalRecord", "Guard", "Pay", "Table",
           "judged_diff", "reward_rows"]
