"""Query sets and their base retrieval: the first stage of the TTT pipeline.

A :class:`QuerySet` holds the task, id and text of every query (query keys are
``task/qid``, so ids may repeat across tasks; query-wise states key queries by text,
:func:`tttembed.adapt.scopes.query_key`).
:func:`query_sources` turns what a user gives (a ``{qid: text}`` dict, a query file, a
BEIR folder, or several of them) into one QuerySet plus the judgments a folder holds.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.core.progress import Advance
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.index.search import encode_queries, identical_rows, search_excluding
from tttembed.types import Pair, Qrels, Run

#: One query source: ``{qid: text}``, a query file, or a BEIR folder.
QuerySource = Union[Mapping[str, str], str, os.PathLike]
#: Task name of a ``{qid: text}`` dict given without ``task``.
DICT_TASK = "queries"


@dataclass(frozen=True)
class QuerySet:
    """Parallel tuples: the task, id and text of every query (order kept), and the
    judgments of tasks that came with them (a BEIR folder's qrels)."""

    tasks: tuple[str, ...]
    qids: tuple[str, ...]
    texts: tuple[str, ...]
    qrels: Mapping[str, Qrels] = field(default_factory=dict, repr=False, compare=False)
    folder: Path | None = field(default=None, compare=False)  # first BEIR folder (its corpus)
    #: Tasks whose rankings leave out the document whose id is the query id (BEIR's
    #: ``ignore_identical_ids``): every search of these queries skips it.
    drop_identical: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def from_tasks(cls, tasks: Mapping[str, Mapping[str, str]],
                   qrels: Mapping[str, Qrels] | None = None,
                   folder: Path | None = None,
                   drop_identical: Collection[str] = ()) -> QuerySet:
        """``{task: {qid: text}}`` -> QuerySet, tasks in the given order."""
        t, q, x = [], [], []
        for name, queries in tasks.items():
            for qid, text in queries.items():
                t.append(name)
                q.append(qid)
                x.append(text)
        return cls(tuple(t), tuple(q), tuple(x), dict(qrels or {}), folder,
                   frozenset(drop_identical))

    def identical(self, index: Index) -> np.ndarray | None:
        """Per query, the index row to leave out of its rankings (the document whose id
        is the query id, in a task of ``drop_identical``; -1 = none); None when no task
        drops identical ids."""
        if not self.drop_identical:
            return None
        return identical_rows(index, self.qids, [t in self.drop_identical for t in self.tasks])

    def search(self, index: Index, vectors: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """Search ``index`` with one vector per query (``index.search``, each query's own
        document left out where its task says so)."""
        return search_excluding(index, vectors, k, self.identical(index))

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def keys(self) -> list[str]:
        """``task/qid`` of every query: how reward pairs name it inside one run."""
        return [f"{t}/{q}" for t, q in zip(self.tasks, self.qids)]

    @property
    def task_names(self) -> list[str]:
        return list(dict.fromkeys(self.tasks))

    def subset(self, keep: Sequence[int]) -> QuerySet:
        return QuerySet(tuple(self.tasks[i] for i in keep), tuple(self.qids[i] for i in keep),
                        tuple(self.texts[i] for i in keep), self.qrels, self.folder,
                        self.drop_identical)


def _names(task: str | Sequence[str] | None, n: int) -> list[str | None]:
    if task is None:
        return [None] * n
    names = [task] if isinstance(task, str) else list(task)
    if len(names) != n:
        raise ConfigError(f"give one task name per query source ({n} sources, "
                          f"{len(names)} names)")
    return list(names)


def query_sources(queries: QuerySource | Sequence[QuerySource], *,
                  task: str | Sequence[str] | None = None,
                  split: str | None = "test",
                  ignore_identical_ids: bool | None = None) -> QuerySet:
    """A QuerySet from one source or several (one task each).

    A BEIR folder gives its ``split``'s queries (task = the folder name) and their qrels;
    a file gives all its queries (task = the file stem); a dict is task ``queries``.
    ``task`` renames the task(s). ``ignore_identical_ids``: leave each query's own
    document (same id) out of its rankings; None = as the folder says
    (:func:`tttembed.data.beir.identical_ids_rule`; a file or dict: off)."""
    from tttembed.data.beir import load_task
    from tttembed.data.queries import load_queries

    sources: list[QuerySource] = (
        [queries] if isinstance(queries, (Mapping, str, os.PathLike)) else list(queries))
    if not sources:
        raise ConfigError("give at least one query source")
    by_task: dict[str, dict[str, str]] = {}
    qrels: dict[str, Qrels] = {}
    drop: set[str] = set()
    folder = None
    for src, name in zip(sources, _names(task, len(sources))):
        identical = bool(ignore_identical_ids)
        if isinstance(src, Mapping):
            key, got = name or DICT_TASK, {str(k): str(v) for k, v in src.items()}
        elif Path(src).is_dir():
            loaded = load_task(Path(src), split=split)
            key, got = name or loaded.name, dict(loaded.queries)
            if ignore_identical_ids is None:
                identical = loaded.ignore_identical_ids
            if loaded.qrels:
                qrels[key] = loaded.qrels
            folder = folder or Path(src)
        else:
            key, got = name or Path(src).stem, load_queries(Path(src))
        if identical:
            drop.add(key)
        if key in by_task:
            raise ConfigError(f"two query sources are both named {key!r}; name them with "
                              "--task (task=...)")
        by_task[key] = got
    return QuerySet.from_tasks(by_task, qrels, folder, drop)


@dataclass(frozen=True)
class BaseRetrieval:
    """Base query vectors and top-K candidates (rows into the index) of a QuerySet."""

    x: np.ndarray  # (N, d) float32 unit
    rows: np.ndarray  # (N, K) int64
    scores: np.ndarray  # (N, K) float32

    def candidates(self, index: Index, keys: Sequence[str]) -> dict[str, list[str]]:
        return {k: [index.doc_ids[r] for r in self.rows[i] if r >= 0]
                for i, k in enumerate(keys)}


def base_retrieval(index: Index, embedder: Embedder, queries: QuerySet, k: int,
                   progress: Advance | None = None) -> BaseRetrieval:
    x = encode_queries(embedder, list(queries.texts), progress=progress)
    scores, rows = queries.search(index, x, k)
    return BaseRetrieval(x=x, rows=rows.astype(np.int64), scores=scores)


def run_from_arrays(queries: QuerySet, index: Index, rows: np.ndarray,
                    scores: np.ndarray) -> dict[str, dict[str, dict[str, float]]]:
    """Per-task BEIR runs ``{task: {qid: {doc: score}}}`` from search arrays."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for i, (task, qid) in enumerate(zip(queries.tasks, queries.qids)):
        out.setdefault(task, {})[qid] = {index.doc_ids[r]: float(s)
                                         for r, s in zip(rows[i], scores[i]) if r >= 0}
    return out


__all__ = ["DICT_TASK", "BaseRetrieval", "Pair", "QuerySet", "QuerySource", "Qrels", "Run",
           "base_retrieval", "query_sources", "run_from_arrays"]


#: What the API takes as queries: one source or several (one task each).
Queries = Union[QuerySource, Sequence[QuerySource]]


def as_query_set(queries: Queries | QuerySet, task: str | Sequence[str] | None = None,
                 split: str | None = "test",
                 ignore_identical_ids: bool | None = None) -> QuerySet:
    """``queries`` as a QuerySet (a QuerySet is returned as it is, unless
    ``ignore_identical_ids`` sets its tasks' rule)."""
    if isinstance(queries, QuerySet):
        if ignore_identical_ids is None:
            return queries
        from dataclasses import replace

        return replace(queries, drop_identical=frozenset(
            queries.task_names if ignore_identical_ids else ()))
    return query_sources(queries, task=task, split=split,
                         ignore_identical_ids=ignore_identical_ids)
