"""Workloads: the queries of one or more tasks, their base retrieval, and rewards.

This is the I/O layer between the BEIR edges (dicts, files, an index, a scorer) and the
pure numerical core in ``tttembed.adapt`` (arrays in, arrays out). Query keys are
``task/qid`` (``tttembed.adapt.scopes.query_key``) so that ids may repeat across tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt.scopes import query_key
from tttembed.errors import ConfigError, DataError
from tttembed.index.search import encode_queries
from tttembed.index.store import IndexHandle

Pair = tuple[str, str]


@dataclass(frozen=True)
class QuerySet:
    """Parallel lists: the task, id and text of every query (order kept)."""

    tasks: tuple[str, ...]
    qids: tuple[str, ...]
    texts: tuple[str, ...]

    @classmethod
    def from_tasks(cls, tasks: Mapping[str, Mapping[str, str]]) -> QuerySet:
        """``{task: {qid: text}}`` -> QuerySet, tasks in the given order."""
        t, q, x = [], [], []
        for name, queries in tasks.items():
            for qid, text in queries.items():
                t.append(name)
                q.append(qid)
                x.append(text)
        return cls(tuple(t), tuple(q), tuple(x))

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def keys(self) -> list[str]:
        return [query_key(t, q) for t, q in zip(self.tasks, self.qids)]

    @property
    def task_names(self) -> list[str]:
        return list(dict.fromkeys(self.tasks))

    def subset(self, keep: Sequence[int]) -> QuerySet:
        return QuerySet(tuple(self.tasks[i] for i in keep), tuple(self.qids[i] for i in keep),
                        tuple(self.texts[i] for i in keep))


@dataclass(frozen=True)
class BaseRetrieval:
    """Base query vectors and top-K candidates (rows into the index) of a QuerySet."""

    x: np.ndarray  # (N, d) float32 unit
    rows: np.ndarray  # (N, K) int64
    scores: np.ndarray  # (N, K) float32

    def candidates(self, index: IndexHandle, keys: Sequence[str]) -> dict[str, list[str]]:
        return {k: [index.doc_ids[r] for r in self.rows[i] if r >= 0]
                for i, k in enumerate(keys)}


def base_retrieval(index: IndexHandle, embedder: Any, queries: QuerySet, k: int,
                   progress: Callable[[int], None] | None = None) -> BaseRetrieval:
    x = encode_queries(embedder, list(queries.texts), progress=progress)
    scores, rows = index.search(x, k)
    return BaseRetrieval(x=x, rows=rows.astype(np.int64), scores=scores)


def run_from_arrays(queries: QuerySet, index: IndexHandle, rows: np.ndarray,
                    scores: np.ndarray) -> dict[str, dict[str, dict[str, float]]]:
    """Per-task BEIR runs ``{task: {qid: {doc: score}}}`` from search arrays."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for i, (task, qid) in enumerate(zip(queries.tasks, queries.qids)):
        out.setdefault(task, {})[qid] = {index.doc_ids[r]: float(s)
                                         for r, s in zip(rows[i], scores[i]) if r >= 0}
    return out


def score_pairs(pairs: Sequence[Pair], queries: QuerySet,
                corpus: Mapping[str, Mapping[str, str]], scorer: Any,
                progress: Callable[[int], None] | None = None) -> dict[str, dict[str, float]]:
    """Rewards ``{query_key: {doc_id: r}}`` for (query_key, doc_id) pairs.

    Pairs of one query are scored in one ``scorer.score`` call (the ledger wrapper pays
    only for new pairs and commits them as they arrive).
    """
    from tttembed.data.beir import doc_text
    from tttembed.score.base import Item

    pos = {k: i for i, k in enumerate(queries.keys)}
    by_query: dict[str, list[str]] = {}
    for key, did in pairs:
        if key not in pos:
            raise DataError(f"reward pair names unknown query {key!r}")
        by_query.setdefault(key, []).append(did)
    out: dict[str, dict[str, float]] = {}
    for key, dids in by_query.items():
        i = pos[key]
        missing = [d for d in dids if d not in corpus]
        if missing:
            raise DataError(f"document {missing[0]!r} is in the index but not in the corpus",
                            fix="give the corpus the index was built from")
        rewards = scorer.score(Item(queries.qids[i], queries.texts[i]),
                               [Item(d, doc_text(corpus[d])) for d in dids])
        out[key] = {d: float(r) for d, r in zip(dids, rewards)}
        if progress is not None:
            progress(len(dids))
    return out


def reward_table(queries: QuerySet, base: BaseRetrieval, index: IndexHandle,
                 rewards: Mapping[str, Mapping[str, float]]
                 ) -> tuple[list[int], np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Rows of rewarded queries (with at least one finite reward), their x, candidate
    vectors z_q and rewards r_q, ready for ``RewardBatch.from_ragged``."""
    row_of = {d: r for r, d in enumerate(index.doc_ids)}
    keys = queries.keys
    kept, zs, rs = [], [], []
    for i, key in enumerate(keys):
        got = rewards.get(key)
        if not got:
            continue
        dids = [d for d, r in got.items() if np.isfinite(r)]
        if not dids:
            continue
        kept.append(i)
        zs.append(np.asarray(index.vectors[[row_of[d] for d in dids]], dtype=np.float32))
        rs.append(np.array([got[d] for d in dids], dtype=np.float64))
    x = base.x[kept] if kept else np.zeros((0, base.x.shape[1]), np.float32)
    return kept, x, zs, rs


def check_corpus_matches(index: IndexHandle, corpus: Mapping[str, Mapping[str, str]]) -> None:
    from tttembed.data.beir import corpus_fingerprint

    if corpus_fingerprint(corpus) != index.manifest.get("corpus_fingerprint"):
        raise ConfigError(f"the corpus given is not the one index {index.path} was built from "
                          "(fingerprints differ); give the same corpus or rebuild the index")
