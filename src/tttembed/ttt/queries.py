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
from tttembed.core.notes import note
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
    #: ``{task: why}``: where each task's rule came from (:func:`identical_rule`).
    identical_why: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_tasks(cls, tasks: Mapping[str, Mapping[str, str]],
                   qrels: Mapping[str, Qrels] | None = None,
                   folder: Path | None = None,
                   drop_identical: Collection[str] = (),
                   identical_why: Mapping[str, str] | None = None) -> QuerySet:
        """``{task: {qid: text}}`` -> QuerySet, tasks in the given order."""
        t, q, x = [], [], []
        for name, queries in tasks.items():
            for qid, text in queries.items():
                t.append(name)
                q.append(qid)
                x.append(text)
        return cls(tuple(t), tuple(q), tuple(x), dict(qrels or {}), folder,
                   frozenset(drop_identical), dict(identical_why or {}))

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
                        self.drop_identical, self.identical_why)


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
                  ignore_identical_ids: bool | None = None,
                  corpus_folder: Path | None = None) -> QuerySet:
    """A QuerySet from one source or several (one task each).

    A BEIR folder gives its ``split``'s queries (task = the folder name) and their qrels;
    a file gives all its queries (task = the file stem); a dict is task ``queries``.
    ``task`` renames the task(s). ``ignore_identical_ids``: leave each query's own
    document (same id) out of its rankings; None = as the task says
    (:func:`identical_rule`: a folder's ``tttembed-task.json``, else the benchmark's
    setting for the task's name, ArguAna and Quora; for a file or dict, the settings of
    ``corpus_folder``, the folder the index's corpus came from, count too)."""
    from tttembed.data.beir import load_task
    from tttembed.data.queries import load_queries

    sources: list[QuerySource] = (
        [queries] if isinstance(queries, (Mapping, str, os.PathLike)) else list(queries))
    if not sources:
        raise ConfigError("give at least one query source")
    by_task: dict[str, dict[str, str]] = {}
    qrels: dict[str, Qrels] = {}
    why: dict[str, str] = {}
    folder = None
    for src, name in zip(sources, _names(task, len(sources))):
        root = None
        if isinstance(src, Mapping):
            key, got = name or DICT_TASK, {str(k): str(v) for k, v in src.items()}
        elif Path(src).is_dir():
            root = Path(src)
            loaded = load_task(root, split=split)
            key, got = name or loaded.name, dict(loaded.queries)
            if loaded.qrels:
                qrels[key] = loaded.qrels
            folder = folder or root
        else:
            key, got = name or Path(src).stem, load_queries(Path(src))
        if key in by_task:
            raise ConfigError(f"two query sources are both named {key!r}; name them with "
                              "--task (task=...)")
        by_task[key] = got
        why[key] = identical_rule(key, ignore_identical_ids, root, corpus_folder)
    drop = [k for k, w in why.items() if w.startswith("on")]
    return QuerySet.from_tasks(by_task, qrels, folder, drop, why)


def identical_rule(task: str, given: bool | None, folder: Path | None = None,
                   corpus_folder: Path | None = None) -> str:
    """Whether a task's rankings leave out the document whose id is the query id, and
    why, as one phrase starting ``on`` or ``off``: the flag given, else a BEIR folder's
    ``tttembed-task.json`` or the benchmark's setting for its name; for a query file or
    dict, the index's corpus folder's ``tttembed-task.json``; then the benchmark's setting
    for the task's name (``--task arguana``), then for the corpus folder's name."""
    from tttembed.data.beir import TASK_SETTINGS, identical_ids_rule

    if given is not None:
        return ("on (--ignore-identical-ids)" if given else "off (--keep-identical-ids)")
    if folder is not None:
        on, why = identical_ids_rule(folder, folder.resolve().name)
        if why != "off":
            where = f"{TASK_SETTINGS} of {folder}" if why == TASK_SETTINGS else why
            return f"{'on' if on else 'off'} ({where})"
    elif corpus_folder is not None and (corpus_folder / TASK_SETTINGS).is_file():
        on, _ = identical_ids_rule(corpus_folder, task)
        return (f"{'on' if on else 'off'} ({TASK_SETTINGS} of the index's corpus folder "
                f"{corpus_folder})")
    if identical_ids_rule(None, task)[0]:
        return f"on (the benchmark's setting for task {task})"
    if folder is None and corpus_folder is not None:
        if identical_ids_rule(None, corpus_folder.resolve().name)[0]:
            return (f"on (the benchmark's setting for {corpus_folder.resolve().name}, the "
                    f"index's corpus folder {corpus_folder})")
    return "off"


def corpus_folder(index: Index) -> Path | None:
    """The folder the index's corpus was read from (its manifest's ``corpus_source``: a
    BEIR folder, or the folder of a corpus.jsonl); None for a dict or a folder gone."""
    src = str(index.manifest.get("corpus_source") or "")
    if not src or src == "<dict>":
        return None
    path = Path(src)
    folder = path if path.is_dir() else path.parent
    return folder if folder.is_dir() else None


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
    """Encode ``queries`` and search their top ``k`` (a note when, with the identical-ids
    rule off, many of them find their own document: :func:`note_own_documents`)."""
    x = encode_queries(embedder, list(queries.texts), progress=progress)
    scores, rows = queries.search(index, x, k)
    note_own_documents(queries, index, rows)
    return BaseRetrieval(x=x, rows=rows.astype(np.int64), scores=scores)


#: More than this many queries finding their own document, with the rule off, is said.
OWN_DOCUMENT_FEW = 3


def own_documents(queries: QuerySet, index: Index, rows: np.ndarray) -> dict[str, int]:
    """Per task whose identical-ids rule is off (not by ``--keep-identical-ids``): how many
    of its queries find in their list ``rows`` their own document: the one whose id is the
    query id *and* whose text is the query's (ids alone collide by coincidence, as CISI's
    "1", "2", ... do; tasks with none left out). With no corpus to read the texts from,
    none is counted."""
    asked = {t for t, why in queries.identical_why.items() if "--keep-identical-ids" in why}
    skip = queries.drop_identical | asked
    ids = index.doc_ids  # a look-up per retrieved row: no id -> row map of the whole index
    hits = [i for i, (task, qid, row) in enumerate(zip(queries.tasks, queries.qids,
                                                       np.asarray(rows).tolist()))
            if task not in skip and any(r >= 0 and ids[r] == qid for r in row)]
    if len(hits) <= OWN_DOCUMENT_FEW:  # too few to say, whatever their texts
        return {}
    docs = _corpus_texts(queries, index)
    out: dict[str, int] = {}
    for i in hits:
        doc = docs.get(queries.qids[i])
        if doc is not None and _same_text(queries.texts[i], doc):
            out[queries.tasks[i]] = out.get(queries.tasks[i], 0) + 1
    return out


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _same_text(query: str, doc: Mapping[str, str]) -> bool:
    """Whether the query is the document's text (ArguAna: the text without its title) or
    its title and text."""
    q = _norm(query)
    return bool(q) and q in (_norm(doc.get("text", "")),
                             _norm(f"{doc.get('title', '')} {doc.get('text', '')}"))


def _corpus_texts(queries: QuerySet, index: Index) -> Mapping[str, Mapping[str, str]]:
    """The documents of the queries' BEIR folder or of the index's recorded source; empty
    when neither can be read (nothing is then said)."""
    from tttembed.core.errors import TTTEmbedError
    from tttembed.data.beir import load_corpus

    source = index.manifest.get("corpus_source")
    for path in (queries.folder, Path(source) if source and source != "<dict>" else None):
        if path is None:
            continue
        path = path / "corpus.jsonl" if path.is_dir() else path
        if path.is_file():
            try:
                return load_corpus(path)
            except (TTTEmbedError, OSError):
                continue
    return {}


def note_own_documents(queries: QuerySet, index: Index, rows: np.ndarray) -> None:
    """With the rule off, more than :data:`OWN_DOCUMENT_FEW` queries that find their own
    document (a query that is also a document of the corpus, as in ArguAna: same id, same
    text) are said in one note (:func:`tttembed.core.notes.note`): the count and the flag."""
    found = own_documents(queries, index, rows)
    if sum(found.values()) <= OWN_DOCUMENT_FEW:
        return
    size = {t: queries.tasks.count(t) for t in found}
    where = "; ".join(f"{n:,} of {size[t]:,} queries of {t}" for t, n in found.items())
    k = np.asarray(rows).shape[1] if np.asarray(rows).ndim == 2 else 0
    note(f"{where} find their own document (the one whose id is the query id) in their top "
         f"{k}, and ignore_identical_ids is off: BEIR and MTEB leave it out where queries "
         "are documents of the corpus (ArguAna, Quora); --ignore-identical-ids "
         "(ignore_identical_ids=True) leaves it out, --keep-identical-ids keeps it without this "
         "note")


def run_from_arrays(queries: QuerySet, index: Index, rows: np.ndarray,
                    scores: np.ndarray) -> dict[str, dict[str, dict[str, float]]]:
    """Per-task BEIR runs ``{task: {qid: {doc: score}}}`` from search arrays."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for i, (task, qid) in enumerate(zip(queries.tasks, queries.qids)):
        out.setdefault(task, {})[qid] = {index.doc_ids[r]: float(s)
                                         for r, s in zip(rows[i], scores[i]) if r >= 0}
    return out


__all__ = ["DICT_TASK", "BaseRetrieval", "Pair", "QuerySet", "QuerySource", "Qrels", "Run",
           "base_retrieval", "corpus_folder", "identical_rule", "query_sources",
           "run_from_arrays"]


#: What the API takes as queries: one source or several (one task each).
Queries = Union[QuerySource, Sequence[QuerySource]]


def as_query_set(queries: Queries | QuerySet, task: str | Sequence[str] | None = None,
                 split: str | None = "test",
                 ignore_identical_ids: bool | None = None,
                 index: Index | None = None) -> QuerySet:
    """``queries`` as a QuerySet (a QuerySet is returned as it is, unless
    ``ignore_identical_ids`` sets its tasks' rule); ``index``: the one searched (its
    corpus folder's settings count, :func:`identical_rule`)."""
    if isinstance(queries, QuerySet):
        if ignore_identical_ids is None:
            return queries
        from dataclasses import replace

        why = identical_rule("", ignore_identical_ids)
        return replace(queries, drop_identical=frozenset(
            queries.task_names if ignore_identical_ids else ()),
            identical_why=dict.fromkeys(queries.task_names, why))
    return query_sources(queries, task=task, split=split,
                         ignore_identical_ids=ignore_identical_ids,
                         corpus_folder=None if index is None else corpus_folder(index))
