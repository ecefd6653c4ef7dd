"""Judged validation, one home (METHOD.md Part 3): re-search the unchanged index, pay the
never-judged documents of the top-k lists within a cap, and measure each list's paired
``Delta nDCG@k`` against a base list under the judge. The guard
(:mod:`tttembed.ttt.guard`), method auto's selection (:mod:`tttembed.ttt.select`) and
the loop's promotion check (:mod:`tttembed.loop.promote`) are policies on it.

- **Pairs** are ``(query key, doc id)`` (:data:`Pair`, as the queries name them,
  :mod:`tttembed.ttt.queries`); a :data:`Pay` pays a list of them
  (through the ledger: paid once, ever) and returns ``{query key: {doc id: reward}}``.
- **Lists**: :func:`top_lists` searches one index; :func:`source_lists` each row in its
  own source's index, one search per source.
- **The cap**: :func:`never_judged` finds what a comparison needs. Past the cap,
  :func:`sample_pairs` pays a uniform random sample of those pairs (an unpaid document
  counts the mean reward of the paid ones of its kind of list,
  :mod:`tttembed.adapt.sampled`); :func:`whole_queries` pays whole queries in a seeded
  random order instead and leaves the others out, so that every Delta it keeps is exact.
- **The difference**: :func:`judge_lists` pays a sample and returns
  :class:`JudgedLists`, whose :meth:`~JudgedLists.overall` and
  :meth:`~JudgedLists.per_task` give the task-balanced mean Delta, its 95% bootstrap
  interval (queries and paid samples resampled together) and sign-flip p-values;
  :func:`exact_gain` gives the same for lists that are fully judged.
- **One test**: :func:`paired_test` gives the mean Delta, its 95% interval and its p from
  one paired bootstrap (the interval lies above 0 exactly when the mean is positive and p
  < 0.05), for a decision that shows what decided; fewer than 2 rows have no interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tttembed.adapt.crossval import N_BOOT, AlphaGain, task_bootstrap
from tttembed.adapt.sampled import (
    OpenParts,
    fill_samples,
    fill_value,
    open_parts,
    sampled_gains,
    task_evidence,
)
from tttembed.adapt.validate import alpha_gains, judged_deltas, sign_flip_p
from tttembed.index.base import Index
from tttembed.index.search import identical_rows, search_excluding
from tttembed.score.base import Scorer
from tttembed.ttt.queries import BaseRetrieval, Pair, QuerySet
from tttembed.ttt.rewards import Corpus, score_plan_pairs
from tttembed.types import Rewards

#: nDCG cut-off of every judged validation.
K = 10
#: Pays reward pairs (through the ledger) -> their rewards ``{query key: {doc id: reward}}``.
Pay = Callable[[list[Pair]], Rewards]
#: One source of queries: the queries, their base retrieval and the index they search.
Source = tuple[QuerySet, BaseRetrieval, Index]
#: What is judged: ``{query key: {doc id: reward}}`` (read only).
Judged = Mapping[str, Mapping[str, float]]
#: Per row, its top-k doc ids by list name.
Lists = Sequence[Mapping[str, Sequence[str]]]


def scorer_pay(queries: QuerySet, corpus: Corpus, scorer: Scorer) -> Pay:
    """The pay function of ``learn``: the scorer, through its ledger."""
    return lambda pairs: score_plan_pairs(pairs, queries, corpus, scorer)


def top_lists(index: Index, vectors: np.ndarray, k: int = K,
              exclude: np.ndarray | None = None) -> list[list[str]]:
    """The top-k doc ids of each query vector in ``index`` (``exclude[i]``: a row left
    out of list i, -1 = none; :func:`tttembed.index.search.search_excluding`)."""
    _, rows = search_excluding(index, np.asarray(vectors, dtype=np.float32),
                               min(k, len(index)), exclude)
    ids = index.doc_ids
    return [[ids[r] for r in row if r >= 0] for row in rows]


def _identical(queries: QuerySet, index: Index, keys: Sequence[str] | None,
               mine: Sequence[int]) -> np.ndarray | None:
    """Per row of ``mine`` (query keys ``task/qid`` in ``keys``), the index row of the
    query's own document where its task drops identical ids; None when none does."""
    if keys is None or not queries.drop_identical:
        return None
    split = [keys[i].split("/", 1) for i in mine]
    return identical_rows(index, [q for _, q in split],
                          [t in queries.drop_identical for t, _ in split])


def source_lists(sources: Sequence[Source], row_source: Sequence[int],
                 vectors: Mapping[str, np.ndarray], k: int = K, *, by_row: bool = False,
                 keys: Sequence[str] | None = None) -> list[dict[str, list[str]]]:
    """Per row and list name (``vectors[name]``: one query vector per row): the top-k doc
    ids in the index of the row's source (``row_source[row]``), one search per source;
    with the rows' query ``keys``, a query's own document is left out where its task
    drops identical ids. The search stacks the vectors list by list, or row by row with
    ``by_row``: FAISS's scores can move in the last bit with a vector's place in the
    batch (BLAS), and the published studies were made with the guard's lists stacked row
    by row and method auto's query part list by list, so each keeps its order."""
    out: list[dict[str, list[str]]] = [{} for _ in row_source]
    names = list(vectors)
    for s, (queries, _, index) in enumerate(sources):
        mine = [i for i, src in enumerate(row_source) if src == s]
        if not mine:
            continue
        parts = [vectors[m][mine] for m in names]
        stacked = (np.stack(parts, axis=1).reshape(len(mine) * len(names), -1) if by_row
                   else np.concatenate(parts))
        own = _identical(queries, index, keys, mine)
        if own is not None:
            own = np.repeat(own, len(names)) if by_row else np.tile(own, len(names))
        got = top_lists(index, stacked, k, own)
        for j, m in enumerate(names):
            for n, i in enumerate(mine):
                out[i][m] = got[n * len(names) + j if by_row else j * len(mine) + n]
    return out


def never_judged(keys: Sequence[str], lists: Lists, judged: Judged) -> dict[str, list[str]]:
    """Per query key (in order; none where nothing is new): the documents of its lists
    that ``judged`` holds no reward for, each once, in order of first appearance."""
    out: dict[str, list[str]] = {}
    for key, per in zip(keys, lists):
        known = judged.get(key, {})
        new = [d for d in dict.fromkeys(d for docs in per.values() for d in docs)
               if d not in known]
        if new:
            out[key] = new
    return out


def sample_pairs(pairs: Sequence[Pair], cap: int, rng: np.random.Generator, *,
                 draw_within_cap: bool = False) -> list[Pair]:
    """``pairs`` when they fit in ``cap``, else a uniform random sample of ``cap`` of them
    (in their order). ``draw_within_cap``: draw the sample even when all fit (method
    auto's query part always has: the generator's state after it, which its bootstrap
    uses, depends on the draw)."""
    if len(pairs) > cap or draw_within_cap:
        size = max(min(cap, len(pairs)), 0)
        return [pairs[i] for i in sorted(rng.choice(len(pairs), size=size,
                                                    replace=False).tolist())]
    return list(pairs)


def task_shares(need: Mapping[str, int], cap: int) -> dict[str, int]:
    """The validation cap split by task (tasks weigh equally in the paired test, so they
    do in the evidence bought for it): every task an equal share, a task that needs less
    takes what it needs and the rest is split among the others (water-filling); the
    pairs a division leaves over go to the tasks in their order."""
    shares = {t: 0 for t in need}
    left, open_ = max(cap, 0), [t for t in need if need[t] > 0]
    while left > 0 and open_:
        each, extra = divmod(left, len(open_))
        for i, t in enumerate(open_):
            shares[t] += min(each + (1 if i < extra else 0), need[t] - shares[t])
        left = max(cap, 0) - sum(shares.values())
        open_ = [t for t in open_ if shares[t] < need[t]]
    return shares


def sample_by_task(pairs: Sequence[Pair], task_of: Mapping[str, str], cap: int,
                   rng: np.random.Generator, *, draw_within_cap: bool = False) -> list[Pair]:
    """:func:`sample_pairs` with the cap split by the task of each pair's query
    (:func:`task_shares`): one task's many new documents (a large or very different task)
    cannot take the evidence the small tasks need. With one task it is
    :func:`sample_pairs`, draw for draw."""
    groups: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(pairs):
        groups.setdefault(task_of.get(q, ""), []).append(i)
    if len(groups) <= 1 or (len(pairs) <= cap and not draw_within_cap):
        return sample_pairs(pairs, cap, rng, draw_within_cap=draw_within_cap)
    shares = task_shares({t: len(ix) for t, ix in groups.items()}, cap)
    picked: list[int] = []
    for t, ix in groups.items():
        size = min(shares[t], len(ix))
        picked += [ix[j] for j in rng.choice(len(ix), size=size, replace=False).tolist()]
    return [pairs[i] for i in sorted(picked)]


def whole_queries(keys: Sequence[str], need: Mapping[str, Sequence[str]], cap: int,
                  rng: np.random.Generator) -> list[str]:
    """Query keys in a seeded random order, each kept while all it needs (``need[key]``,
    none when absent) still fits in ``cap``; the others are left out, never half paid."""
    kept, spent = [], 0
    for i in rng.permutation(len(keys)):
        n = len(need.get(keys[i], ()))
        if spent + n > cap:
            continue
        kept.append(keys[i])
        spent += n
    return kept


def pay_into(judged: dict[str, dict[str, float]], pay: Pay, pairs: list[Pair]) -> Rewards:
    """Pay ``pairs`` (nothing when there are none), add their rewards to ``judged`` and
    return them."""
    bought: Rewards = {}
    if pairs:
        for q, got in pay(pairs).items():
            judged.setdefault(q, {}).update(got)
            bought[q] = dict(got)
    return bought


@dataclass(frozen=True)
class JudgedLists:
    """Rows' lists, judged: the rewards of each row (``judged``, with those paid), the
    never-judged pairs the comparison needed and how many were paid, and the sampled
    decomposition of each list of ``names`` against the ``base`` list (``parts`` and the
    paid ``samples`` that fill the unpaid documents, :mod:`tttembed.adapt.sampled`)."""

    names: tuple[str, ...]
    base: str
    parts: OpenParts
    samples: dict[tuple[str, str], np.ndarray]
    judged: tuple[dict[str, float], ...]
    needed: int
    paid: int
    bought: Rewards = field(default_factory=dict)

    @property
    def sampled(self) -> bool:
        """Whether some needed pair was left unpaid (the cap)."""
        return self.paid < self.needed

    def overall(self, rng: np.random.Generator, n_boot: int = N_BOOT
                ) -> tuple[tuple[AlphaGain, ...], dict[str, float]]:
        """Per list: the task-balanced mean Delta with its 95% bootstrap interval, and
        the two-sided sign-flip p-values."""
        mean, lo, hi, deltas = sampled_gains(self.parts, self.names, self.base, self.samples,
                                             n_boot=n_boot, rng=rng)
        p = [sign_flip_p(deltas[:, j], self.parts.tasks, 2000, rng)
             for j in range(len(self.names))]
        gains = tuple(AlphaGain(n, float(mean[j]), float(lo[j]), float(hi[j]))
                      for j, n in enumerate(self.names))
        return gains, {n: float(v) for n, v in zip(self.names, p)}

    def per_task(self, rng: np.random.Generator, names: Sequence[str] | None = None,
                 n_boot: int = N_BOOT) -> dict[str, dict[str, dict[str, float]]]:
        """Per task and list (``names``, default all): mean Delta, interval, p, queries."""
        names = self.names if names is None else tuple(names)
        parts = self.parts.columns([self.names.index(n) for n in names])
        return task_evidence(parts, names, self.base, self.samples, n_boot=n_boot, rng=rng)


def judge_lists(keys: Sequence[str], tasks: Sequence[str], lists: Lists, rewards: Judged,
                pay: Pay, picked: list[Pair], *, needed: int, base: str,
                names: Sequence[str], k: int = K) -> JudgedLists:
    """Pay ``picked`` (the sample of the ``needed`` never-judged pairs within the cap) and
    judge every row's ``lists`` (``lists[row][base]`` the base list) under ``rewards``
    plus what was paid."""
    judged = {key: dict(rewards.get(key, {})) for key in keys}
    bought = pay_into(judged, pay, picked)
    row_of = {key: row for row, key in enumerate(keys)}
    rows = tuple(judged[key] for key in keys)
    samples = fill_samples(list(tasks), lists, rows, {(row_of[q], d) for q, d in picked})
    n = len(names)
    known, opened, open_base = np.zeros((len(rows), n)), np.zeros((len(rows), n)), np.zeros(len(rows))
    fills = {(t, m): fill_value(samples.get((t, m), np.zeros(0)), m == base)
             for t in set(tasks) for m in (base, *names)}  # each kind's fill, once
    for row, per in enumerate(lists):
        known[row], opened[row], open_base[row] = open_parts(
            per[base], [per[m] for m in names], rows[row], k, fills[tasks[row], base],
            _open_fills(per, base, names, rows[row], {m: fills[tasks[row], m] for m in names},
                        k))
    parts = OpenParts(known, opened, open_base, np.asarray(tasks))
    return JudgedLists(tuple(names), base, parts, samples, rows, needed, len(picked), bought)


def _open_fills(per: Mapping[str, Sequence[str]], base: str, names: Sequence[str],
                judged: Mapping[str, float], fill: Mapping[str, float], k: int) -> list[float]:
    """The fill (``fill[name]``: its kind's) of every unpaid document of the compared lists
    (each once, the first list naming it; the base list's own are counted by
    :func:`open_parts`): they join the
    ideal DCG, so that no filled list scores above it. Without them a row whose judged
    rewards are small (one judged document at b = 1) turns a list of unpaid documents
    into a normalised gain far above 1 (measured: +27.5 nDCG@10 for a state that lost
    -7.06 on Cranfield's questions)."""
    seen = set(per[base][:k]) | set(judged)
    out: list[float] = []
    for m in names:
        for d in per[m][:k]:
            if d not in seen:
                seen.add(d)
                out.append(fill[m])
    return out


def exact_gain(base: Sequence[Sequence[str]], other: Sequence[Sequence[str]],
               judged: Sequence[Mapping[str, float]], tasks: Sequence[str],
               rng: np.random.Generator, *, k: int = K) -> tuple[AlphaGain, float]:
    """Fully judged lists: the task-balanced mean of the exact ``Delta nDCG@k`` of
    ``other[q]`` against ``base[q]`` (``judged[q]`` every reward), its 95% bootstrap
    interval and sign-flip p (fewer than two rows: the mean, no interval, p 1)."""
    deltas = np.array([judged_deltas(b, [o], j, k)[1][0] for b, o, j in zip(base, other, judged)])
    if len(deltas) < 2:
        return AlphaGain("", float(deltas.mean()) if len(deltas) else 0.0, 0.0, 0.0), 1.0
    (g,), p = alpha_gains([""], deltas[:, None], np.asarray(tasks), n_boot=N_BOOT, rng=rng)
    return g, float(p[0])


#: The two-sided level of :func:`paired_test`'s decision (its interval is 1 - ALPHA).
ALPHA = 0.05


@dataclass(frozen=True)
class PairedTest:
    """One paired test of ``n`` rows' Delta: the task-balanced mean ``gain``, its
    ``1 - ALPHA`` bootstrap interval (None with fewer than 2 rows: no interval) and the
    two-sided p of the same bootstrap distribution."""

    n: int
    gain: float
    ci_low: float | None
    ci_high: float | None
    p: float

    @property
    def better(self) -> bool:
        """The interval lies above 0 (same as: gain > 0 and p < ALPHA)."""
        return self.ci_low is not None and self.ci_low > 0


def exact_deltas(base: Sequence[Sequence[str]], other: Sequence[Sequence[str]],
                 judged: Sequence[Mapping[str, float]], *, k: int = K) -> np.ndarray:
    """Per row, the exact ``Delta nDCG@k`` of ``other`` against ``base`` (fully judged)."""
    return np.array([judged_deltas(b, [o], j, k)[1][0] for b, o, j in zip(base, other, judged)],
                    dtype=np.float64)


def text_folds(texts: Sequence[str], folds: int) -> np.ndarray:
    """Each text's fold (0 .. folds - 1) by a hash of the text: the same text always in
    the same fold, so a fold's questions are held out by text."""
    import hashlib

    return np.array([int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "big") % folds
                     for t in texts], dtype=np.int64)


def paired_test(deltas: np.ndarray, tasks: Sequence[str], rng: np.random.Generator, *,
                n_boot: int = N_BOOT) -> PairedTest:
    """:class:`PairedTest` of ``deltas`` (one per row; tasks weighted equally): interval
    and p come from the same bootstrap of the mean, so they never disagree."""
    d = np.asarray(deltas, dtype=np.float64).reshape(-1)
    if len(d) < 2:
        return PairedTest(len(d), float(d.mean()) if len(d) else 0.0, None, None, 1.0)
    mean, boot = task_bootstrap(d[:, None], np.asarray(tasks), n_boot, rng)
    b = np.asarray(boot, dtype=np.float64).reshape(-1)
    lo, hi = np.percentile(b, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    tail = min(float((b <= 0).mean()), float((b >= 0).mean()))
    p = 1.0 if np.all(b == 0) else min(1.0, max(2 * tail, 1.0 / n_boot))
    return PairedTest(len(d), float(np.asarray(mean).reshape(-1)[0]), float(lo), float(hi), p)


__all__ = ["ALPHA", "K", "JudgedLists", "PairedTest", "exact_deltas", "paired_test", "Judged", "Lists", "Pair", "Pay", "Source", "exact_gain",
           "judge_lists", "never_judged", "pay_into", "sample_by_task", "sample_pairs", "scorer_pay", "source_lists",
           "task_shares", "text_folds", "top_lists", "whole_queries"]
