"""``learn --allocation active``: the active allocation (:mod:`tttembed.adapt.active`)
over one index, judged through the scorer's ledger round by round, and the corpus
neighbour graph it walks (shared with the evaluation's ``<method>@active`` rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tttembed.adapt.active import (
    ACTIVE_NEIGHBOURS,
    active_sequence,
    uncertainty_order,
)
from tttembed.index.base import Index
from tttembed.ttt.queries import BaseRetrieval, Pair, QuerySet
from tttembed.types import Rewards

Graph = Callable[[Sequence[str]], Mapping[str, Sequence[str]]]


def index_graph(index: Index, k: int = ACTIVE_NEIGHBOURS) -> Graph:
    """``graph(doc_ids)``: each document's ``k`` nearest other documents of ``index`` (inner
    product of the stored vectors, the index's own search), read from the corpus k-NN
    graph kept beside the index (built once on first use: :mod:`tttembed.index.knn_graph`)."""
    from tttembed.index.knn_graph import index_graph_rows

    row_of: dict[str, int] = {}
    table: list[np.ndarray] = []

    def graph(docs: Sequence[str]) -> Mapping[str, Sequence[str]]:
        if not row_of:
            row_of.update((d, r) for r, d in enumerate(index.doc_ids))
            table.append(index_graph_rows(index, k).rows)
        have = [d for d in docs if d in row_of]
        ids = index.doc_ids
        near = table[0][[row_of[d] for d in have]].tolist() if have else []
        return {d: [ids[r] for r in hit if r >= 0] for d, hit in zip(have, near)}
    return graph


def score_gaps(keys: Sequence[str], base: BaseRetrieval) -> dict[str, float]:
    """Each query's base score margin: its top document's score minus the mean of its next
    four (label-free: the embedding scores only)."""
    s = np.asarray(base.scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        return {}
    gap = s[:, 0] - s[:, 1:5].mean(axis=1)
    return dict(zip(keys, gap.tolist()))


def judge_through(pay: Callable[[list[Pair]], Rewards], keep: Rewards | None = None
                  ) -> Callable[[list[Pair]], dict]:
    """The allocation's judge from a pay function (``{query: {doc: reward}}``); every
    answer is also merged into ``keep`` when given."""
    def judge(pairs: list[Pair]) -> dict[Pair, float]:
        got = pay(pairs)
        if keep is not None:
            for q, docs in got.items():
                keep.setdefault(q, {}).update(docs)
        return {(q, d): float(got.get(q, {}).get(d, float("nan"))) for q, d in pairs}
    return judge


def active_pairs(queries: QuerySet, base: BaseRetrieval, index: Index, n_pairs: int,
                 pay: Callable[[list[Pair]], Rewards], seed: int = 0
                 ) -> tuple[list[Pair], Rewards]:
    """``n_pairs`` pairs chosen by the active allocation for ``learn`` and their rewards:
    the queries in one seeded permutation (as the water-fill plan), least certain first;
    every pair paid through ``pay`` as the rounds go."""
    keys = list(queries.keys)
    rewards: Rewards = {}
    if n_pairs <= 0 or not keys:
        return [], rewards
    perm = np.random.default_rng(seed).permutation(len(keys))
    order = uncertainty_order([(0, keys[i]) for i in perm.tolist()], score_gaps(keys, base))
    cands = base.candidates(index, keys)
    graph = index_graph(index)
    def neighbours(asked: Sequence[Pair]) -> Mapping[Pair, Sequence[str]]:
        near = graph(list(dict.fromkeys(d for _, d in asked)))
        return {(q, d): near.get(d, ()) for q, d in asked}
    (pairs,) = active_sequence(order, cands, [n_pairs], judge_through(pay, rewards),
                               neighbours=neighbours)
    return pairs, rewards
