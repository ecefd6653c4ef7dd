"""The guard (METHOD.md Part 3): judged-diff validation of a state.

Shared scopes: the rewarded queries are split in folds, stratified by task. For each fold
the state is learned on the other folds; each held-out query is then re-searched over the
*whole* index with its raw vector and with ``unit(x + alpha v)`` for every alpha of
:data:`~tttembed.adapt.crossval.ALPHA_GRID`. A query-wise state applies only to the texts
it was learned from, so it is learned once and each rewarded query re-searched the same
way (in-sample: exactly the queries it will serve). The documents of those top-k lists
that were never judged are sent to the same judge, through the ledger (paid once, ever);
then every list is fully judged and the paired ``Delta nDCG@k`` is exact under the judge
(:mod:`tttembed.adapt.validate`). This sees what a re-search brings in, which the
judged-candidates cross-validation (:mod:`tttembed.adapt.crossval`) cannot.

Validation pairs are capped (default 10% of the learning budget). Past the cap a uniform
random sample of the never-judged documents is paid, and an unpaid one counts the mean
reward of the paid ones of its list, the interval bootstrapping the queries and that
sample together (:mod:`tttembed.adapt.sampled`; too small a sample counts the bound
against the change). The judged-candidates estimate decides only where the guard cannot
run (fewer than two rewarded queries), with a note. (Measured before: a validation on a
subset of the held-out queries threw away more gains than even that fallback; a sample
of documents keeps every held-out query.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tttembed.adapt.crossval import ALPHA_GRID, N_BOOT, AlphaGain, CrossValidation, alpha_values
from tttembed.adapt.optimize import RewardBatch, learn_vectors
from tttembed.adapt.sampled import OpenParts, fill_samples, fill_value, open_parts, sampled_gains
from tttembed.adapt.scopes import group_key, make_groups
from tttembed.adapt.validate import judged_deltas, sign_flip_p, task_folds
from tttembed.index.base import Index
from tttembed.score.base import Scorer
from tttembed.ttt.queries import BaseRetrieval, QuerySet
from tttembed.ttt.rewards import Corpus, Rewards, reward_table, score_pairs

#: nDCG cut-off of the validation.
K = 10
#: Default cap on validation pairs, as a share of the learning budget's pairs.
VALIDATE_SHARE = 0.1
#: Bump when the guard's choices change for the same inputs (eval cells are keyed by it).
GUARD_VERSION = 4


@dataclass(frozen=True)
class Guard:
    """What the guard found: ``evidence`` (None when it did not run: too few queries, or
    the cap bound), the validation pairs it needed and paid, the cap, a note."""

    evidence: CrossValidation | None
    needed: int
    cap: int
    note: str = ""
    p_values: dict[str, float] = field(default_factory=dict)
    #: per held-out query (rows) and alpha of the grid (columns): Delta nDCG@k under the
    #: judge, the query's task, and the rewards the validation paid (not saved)
    deltas: np.ndarray | None = field(default=None, repr=False)
    tasks: tuple[str, ...] = field(default=(), repr=False)
    bought: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)
    parts: OpenParts | None = field(default=None, repr=False)
    samples: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False)

    paid_sample: int | None = None

    @property
    def paid(self) -> int:
        """Validation pairs paid: all it needed when it ran (a sample of them past the cap,
        with ``sample``), none when it did not."""
        if self.evidence is None:
            return 0
        return self.needed if self.paid_sample is None else self.paid_sample

    def as_dict(self) -> dict[str, Any]:
        """The state's ``crossval`` record: the evidence plus how it was got."""
        out: dict[str, Any] = self.evidence.as_dict() if self.evidence else {}
        out.update(method="judged-diff", validation_pairs_needed=self.needed,
                   validation_pairs_paid=self.paid, validation_cap=self.cap, note=self.note,
                   p_values=self.p_values)
        return out


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


#: One source of queries: the queries, their base retrieval and the index they search.
Source = tuple[QuerySet, BaseRetrieval, Index]
#: Pays reward pairs ``[(query key, doc id)]`` (through the ledger) -> their rewards.
Pay = Callable[[list[tuple[str, str]]], Rewards]


def scorer_pay(queries: QuerySet, corpus: Corpus, scorer: Scorer) -> Pay:
    """The pay function of ``learn``: the scorer, through its ledger."""
    return lambda pairs: score_pairs(pairs, queries, corpus, scorer)


def judged_diff(scope: str, sources: Sequence[Source],
                rewards: Mapping[str, Mapping[str, float]], pay: Pay, *, cap: int,
                objective: str = "kd", folds: int = 5, seed: int = 0, k: int = K,
                sample: bool = False, table: Table | None = None) -> Guard:
    """Judged-diff validation of a state (module docstring; a query-wise state is checked
    on the queries it was learned from, which are the ones it applies to). Past
    the cap it does not run, unless ``sample``: then a random sample of ``cap`` of the new
    pairs is paid, and the unpaid documents count the mean reward of the paid ones of
    their list (``--method auto``). ``table``: the reward table of ``sources`` and
    ``rewards`` when the caller has built it."""
    rng = np.random.default_rng(seed)
    table = table if table is not None else reward_rows(sources, rewards)
    if len(table.keys) < 2 and scope != "query":
        return Guard(None, 0, cap, "fewer than 2 rewarded queries: nothing to hold out")
    held = _adapted_vectors(scope, table, objective, folds, rng)
    if not held.rows:
        return Guard(None, 0, cap, "no held-out query has a vector learned without it")
    lists = _search_lists(sources, table, held, k)
    keys = [table.keys[r] for r in held.rows]
    todo = _unjudged(keys, lists, rewards)
    new = [(q, d) for q, ds in todo.items() for d in ds]
    needed = len(new)
    if needed > cap and not sample:
        return Guard(None, needed, cap, f"the validation of {len(keys)} held-out queries "
                     f"needs {needed:,} new pairs, more than its cap of {cap:,} (raise "
                     "--validate-budget)")
    picked = new if needed <= cap else [new[i] for i in sorted(
        rng.choice(needed, size=cap, replace=False).tolist())]
    judged = {key: dict(rewards.get(key, {})) for key in keys}
    bought: dict[str, dict[str, float]] = {}
    if picked:
        for q, got in pay(picked).items():
            judged[q].update(got)
            bought[q] = dict(got)
    tasks = np.asarray([table.tasks[r] for r in held.rows])
    where = {key: row for row, key in enumerate(keys)}
    samples = fill_samples(tasks.tolist(), [dict(zip(ALPHA_GRID, per)) for per in lists],
                           [judged[key] for key in keys], {(where[q], d) for q, d in picked})
    guard = _evidence(scope, folds, seed, keys, lists, judged, tasks, k, needed, cap, rng,
                      samples)
    note = "" if needed <= cap else (
        f"{len(picked):,} of the {needed:,} never-judged documents of the held-out queries' "
        "lists were paid (a random sample, the cap); the others count the mean reward of "
        "the paid ones of their list (bootstrapped with the queries)")
    return replace(guard, bought=bought, note=note, paid_sample=len(picked))


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
                     rng: np.random.Generator) -> _Heldout:
    """Each held-out row's adapted query vectors, one per alpha of the grid. A query-wise
    state applies to the very texts it was learned from: every row is learned once and
    checked in-sample (one "fold")."""
    in_sample = scope == "query"
    fold = np.ones(len(t.tasks), np.int64) if in_sample else task_folds(t.tasks, folds, rng)
    out = _Heldout()
    for f in range(1 if in_sample else folds):
        train = (np.arange(len(t.tasks)) if in_sample else np.flatnonzero(fold != f)).tolist()
        if not train:
            continue
        groups = make_groups(scope, [t.qids[i] for i in train], [t.tasks[i] for i in train],
                             [t.texts[i] for i in train])
        o = groups.order()
        batch = RewardBatch.from_ragged(t.x[train][o], [t.zs[train[j]] for j in o],
                                        [t.rs[train[j]] for j in o], groups.index[o],
                                        groups.weights[o])
        res = learn_vectors(batch, len(groups.keys), objective)
        where = {key: g for g, key in enumerate(groups.keys)}
        for i in (train if in_sample else np.flatnonzero(fold == f).tolist()):
            g = where.get(group_key(scope, t.tasks[i], t.texts[i]))
            if g is None:
                continue
            alphas = np.array([alpha_values(a, res.n_g[g:g + 1])[0] for a in ALPHA_GRID])
            u = t.x[i][None, :] + alphas[:, None] * res.vectors[g][None, :]
            out.rows.append(i)
            out.vectors.append(u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12))
    return out


def _search_lists(sources: Sequence[Source], t: Table, held: _Heldout, k: int
                  ) -> list[list[list[str]]]:
    """Per held-out row: the top-k doc ids for each alpha of the grid (alpha 0 = raw),
    searched in the row's own index."""
    per = len(ALPHA_GRID)
    out: list[list[list[str]]] = [[] for _ in held.rows]
    for s, (_, _, index) in enumerate(sources):
        mine = [j for j, r in enumerate(held.rows) if t.source[r] == s]
        if not mine:
            continue
        stacked = np.concatenate([held.vectors[j] for j in mine]).astype(np.float32)
        _, rows = index.search(stacked, min(k, len(index)))
        for n, j in enumerate(mine):
            out[j] = [[index.doc_ids[r] for r in rows[n * per + a] if r >= 0]
                      for a in range(per)]
    return out


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
              tasks: np.ndarray, k: int, needed: int, cap: int, rng: np.random.Generator,
              samples: Mapping[tuple[str, str], np.ndarray]) -> Guard:
    raw = np.zeros(len(keys))
    A = len(ALPHA_GRID)
    known, opened, open_base = np.zeros((len(keys), A)), np.zeros((len(keys), A)), np.zeros(len(keys))
    for q, (key, per_alpha) in enumerate(zip(keys, lists)):
        raw[q] = judged_deltas(per_alpha[0], [], judged[key], k)[0]
        fb = fill_value(samples.get((str(tasks[q]), "0"), np.zeros(0)), True)
        known[q], opened[q], open_base[q] = open_parts(per_alpha[0], per_alpha, judged[key], k, fb)
    parts = OpenParts(known, opened, open_base, tasks)
    mean, lo, hi, deltas = sampled_gains(parts, ALPHA_GRID, "0", samples, n_boot=N_BOOT, rng=rng)
    p = [sign_flip_p(deltas[:, j], tasks, 2000, rng) for j in range(A)]
    gains = tuple(AlphaGain(a, float(mean[j]), float(lo[j]), float(hi[j]))
                  for j, a in enumerate(ALPHA_GRID))
    names = list(dict.fromkeys(tasks.tolist()))
    raw_mean = float(np.mean([raw[tasks == t].mean() for t in names]))
    metric = f"judged-diff ndcg@{k}" + ("" if needed <= cap else " (sampled)")
    cv = CrossValidation(scope, folds, metric, len(keys), len(names), raw_mean, gains, seed)
    return Guard(cv, needed, cap, p_values={a: float(v) for a, v in zip(ALPHA_GRID, p)},
                 deltas=deltas, tasks=tuple(tasks.tolist()), parts=parts, samples=dict(samples))


__all__ = ["GUARD_VERSION", "K", "VALIDATE_SHARE", "Guard", "Pay", "Source", "Table",
           "judged_diff", "reward_rows", "scorer_pay"]
