"""Adapted search and direct reranking: the last stage of the TTT pipeline.

Adapted search re-searches the unchanged index with ``unit(x + alpha v)``, the most
specific state winning for each query; it reports how many queries each state reached and
refuses states that reach none, or that were learned on another corpus. Direct reranking
(the baseline) sorts the rewarded candidates by reward inside their original slots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tttembed.adapt import AdaptState, apply_states, state_owners
from tttembed.adapt.apply import lookup_keys
from tttembed.adapt.rerank import direct_rerank
from tttembed.core.errors import ConfigError, StateMismatch
from tttembed.core.progress import Progress, stage
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.index.search import SearchResult
from tttembed.ttt.queries import (
    Queries,
    QuerySet,
    Run,
    as_query_set,
    note_own_documents,
    run_from_arrays,
)
from tttembed.types import PathLike


def _keys(queries: QuerySet, states: Sequence[AdaptState]) -> dict[str, list[str]]:
    return lookup_keys(states, queries.texts, queries.tasks)


def applied_counts(queries: QuerySet, states: Sequence[AdaptState]) -> list[int]:
    """How many of ``queries`` each state applies to (the most specific one wins)."""
    owner, _ = state_owners(_keys(queries, states), states, len(queries))
    return np.bincount(owner[owner >= 0], minlength=len(states)).tolist()


def adapt_queries(x: np.ndarray, queries: QuerySet, states: Sequence[AdaptState]) -> np.ndarray:
    """``unit(x + alpha v)`` per query with its most specific state; others unchanged."""
    return apply_states(x, _keys(queries, states), states) if states else x


def check_states(states: Sequence[AdaptState], index: Index, *,
                 allow_foreign: bool = False, fix: str = "") -> None:
    """Refuse states made for another embedder, dimension or corpus than ``index``;
    ``fix``: the way out the message ends with, where the caller has no
    ``--allow-foreign-state`` (``tttembed states add``/``promote``)."""
    for st in states:
        where = st.label
        if st.identity != index.identity or st.dim != index.dim:
            raise StateMismatch(f"{where}: learned for embedder {st.identity!r} (dim {st.dim}), "
                                f"the index {index.path} uses {index.identity!r} (dim "
                                f"{index.dim}); learn a state on this index")
        if not allow_foreign:
            check_same_corpus(where, st.corpus_fingerprint, index, fix=fix)


def check_same_corpus(where: str, fingerprint: str, index: Index, *, fix: str = "") -> None:
    """Refuse a state whose corpus fingerprint differs from the index's, and one that
    cannot prove a match: a manifest (the state's or the index's) without its fingerprint
    is refused, naming the missing field, never trusted."""
    fp = str(index.manifest.get("corpus_fingerprint") or "")
    override = fix or ("learn it on this index, or pass --allow-foreign-state "
                       "(allow_foreign_state=True) to apply it anyway")
    if not fingerprint or not fp:
        missing = f"{where}'s manifest" if not fingerprint else f"index {index.path}'s manifest"
        raise StateMismatch(f"{where}: cannot prove it was learned on the corpus of index "
                            f"{index.path}: {missing} has no corpus_fingerprint; {override}")
    if fingerprint != fp:
        raise StateMismatch(f"{where}: learned on another corpus than index {index.path} "
                            f"(fingerprints differ); {override}")


def check_folder_corpus(folder: Path | None, index: Index) -> None:
    """Refuse to search the queries of a BEIR folder whose corpus.jsonl is not the corpus
    the index was built from (or against an index that records no fingerprint)."""
    if folder is None or not (Path(folder) / "corpus.jsonl").is_file():
        return
    from tttembed.data.beir import corpus_fingerprint
    from tttembed.ttt.corpus import read_corpus

    fp = str(index.manifest.get("corpus_fingerprint") or "")
    override = ("search the index built from this folder, or pass --allow-foreign-corpus "
                "(allow_foreign_corpus=True)")
    if not fp:
        raise StateMismatch(f"{folder}: cannot check its corpus against index {index.path}: "
                            f"the index's manifest has no corpus_fingerprint; {override}")
    if corpus_fingerprint(read_corpus(folder)[0]) != fp:
        raise StateMismatch(f"{folder}: its corpus.jsonl is not the corpus index {index.path} "
                            "was built from (fingerprints differ), so its judgments would "
                            f"score other documents; {override}")


def label_leaks(states: Sequence[AdaptState], queries: QuerySet) -> dict[AdaptState, int]:
    """For each state learned from judgments (a ``qrels``-like scorer), how many of the
    judged queries here rewarded it with their own judgments (by query text)."""
    out = {st: sum(len(q) for q in by_task.values())
           for st, by_task in _leaks(states, queries).items()}
    return {st: n for st, n in out.items() if n}


def leaked_queries(states: Sequence[AdaptState], queries: QuerySet) -> dict[str, list[str]]:
    """``{task: [qid, ...]}``: the judged queries here whose own judgments (by text)
    rewarded one of ``states`` (learned from judgments); metrics on them are no held-out
    result, the others' are."""
    out: dict[str, list[str]] = {}
    for by_task in _leaks(states, queries).values():
        for task, qids in by_task.items():
            out.setdefault(task, [])
            out[task] += [q for q in qids if q not in out[task]]
    return {t: qids for t, qids in out.items() if qids}


def _leaks(states: Sequence[AdaptState], queries: QuerySet
           ) -> dict[AdaptState, dict[str, list[str]]]:
    from tttembed.adapt.scopes import query_digest
    from tttembed.score.base import uses_labels

    judged = [(task, qid, text) for task, qid, text in
              zip(queries.tasks, queries.qids, queries.texts)
              if qid in queries.qrels.get(task, {})]
    out: dict[AdaptState, dict[str, list[str]]] = {}
    for st in states:
        if st.rewarded and uses_labels(st.scorer):
            mine = set(st.rewarded)
            for task, qid, text in judged:
                if query_digest(text) in mine:
                    out.setdefault(st, {}).setdefault(task, []).append(qid)
    return out


def check_applied(states: Sequence[AdaptState], queries: QuerySet) -> None:
    """A state whose keys match none of the queries (on its own; a more specific state
    may still shadow it) is an error naming both sides' tasks."""
    for st in states:
        if st.method == "auto" and (not len(st.keys) or set(st.tasks) & set(queries.tasks)):
            continue  # method auto: its tasks match (it may keep raw for these texts)
        if len(st.parts.neighbour_rows) and set(st.tasks) & set(queries.tasks):
            continue  # neighbour transfer: its tasks match (it lends to texts near its own)
        if applied_counts(queries, [st])[0] == 0:
            raise ConfigError(f"{st.label} ({st.scope}-wise, tasks {', '.join(st.tasks[:5])}) "
                              f"applies to none of the {len(queries)} queries (tasks "
                              f"{', '.join(queries.task_names)}); {_match_hint(st)}")


def _match_hint(state: AdaptState) -> str:
    hint = "name the queries' task with --task NAME (task= in Python) to match the state"
    if state.scope not in ("query", "mixed"):
        return hint
    return ("a query-wise state applies to a query only when its text is one the state was "
            f"learned on (ids are not compared); search those queries, or {hint}")


def adapted_search(index: Index, queries: QuerySet, x: np.ndarray,
                   states: Sequence[AdaptState], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Re-search the unchanged index with ``unit(x + alpha v)`` (most specific state wins;
    each query's own document left out where its task drops identical ids)."""
    return queries.search(index, adapt_queries(x, queries, states), k)


def trec_order(run: Mapping[str, float]) -> dict[str, float]:
    """A query's run re-listed in trec_eval's order (score desc, then doc id desc)."""
    by_id = sorted(run.items(), key=lambda kv: kv[0], reverse=True)
    return dict(sorted(by_id, key=lambda kv: -kv[1]))


def rerank_runs(queries: QuerySet, index: Index, rows: np.ndarray, scores: np.ndarray,
                rewards: Mapping[str, Mapping[str, float]]) -> dict[str, Run]:
    """Direct reranking baseline, per task: each base run (in trec_eval's order, so equal
    scores rank as the metrics read them) with its rewarded slots sorted by reward."""
    out: dict[str, Run] = {}
    for task, run in run_from_arrays(queries, index, rows, scores).items():
        base = {q: trec_order(r) for q, r in run.items()}
        task_rewards = {q: rewards[f"{task}/{q}"] for q in base if f"{task}/{q}" in rewards}
        out[task] = direct_rerank(base, task_rewards)
    return out


def search(index: Index, queries: Queries, *, k: int = 100,
           states: Sequence[AdaptState | PathLike] = (),
           task: str | Sequence[str] | None = None, split: str = "test",
           embedder: Embedder | None = None, allow_foreign_state: bool = False,
           allow_foreign_corpus: bool = False, batch_size: int = 256,
           progress: Progress | None = None,
           ignore_identical_ids: bool | None = None) -> SearchResult:
    """Search with raw or adapted query vectors (``unit(x + alpha v)``; the most specific
    state wins per query: query > task > global). The index never changes.

    ``result.applied`` maps each state to the number of queries it was applied to; a state
    that applies to none, or was learned on another corpus (unless
    ``allow_foreign_state``), is an error; so is a BEIR folder whose corpus.jsonl is not
    the index's corpus (its judgments would score other documents; unless
    ``allow_foreign_corpus``). ``ignore_identical_ids``: leave out of each query's list
    the document whose id is the query id (BEIR's convention; None = as the task says: a
    BEIR folder's ``tttembed-task.json`` or the index's corpus folder's, else on for a task
    named ArguAna or Quora, ``task="arguana"`` for a query file too:
    :func:`tttembed.ttt.queries.identical_rule`); ``result.identical`` names the tasks
    where it was applied, ``result.identical_why`` where each task's rule came from.

        >>> result = tt.search(index, {"q1": "0-dimensional biomaterials"}, k=10)
        >>> adapted = tt.search(index, "data/scifact", states=["vectors.npz"])
    """
    import time

    from tttembed.adapt.state import load_state
    from tttembed.index.embedder import index_embedder
    from tttembed.index.search import encode_queries

    loaded = [s if isinstance(s, AdaptState) else load_state(s) for s in states]
    check_states(loaded, index, allow_foreign=allow_foreign_state)
    qs = as_query_set(queries, task, split, ignore_identical_ids, index)
    if not allow_foreign_corpus:
        check_folder_corpus(qs.folder, index)
    emb = index_embedder(index, embedder)
    check_applied(loaded, qs)
    counts = applied_counts(qs, loaded)
    t0 = time.perf_counter()
    x = encode_queries(emb, list(qs.texts), batch_size,
                       progress=stage(progress, "encoding queries", len(qs)))
    t1 = time.perf_counter()
    scores, rows = adapted_search(index, qs, x, loaded, min(int(k), len(index)))
    note_own_documents(qs, index, rows)
    return SearchResult(qids=list(qs.qids), scores=scores, rows=rows, doc_ids=index.doc_ids,
                        timings={"encode_s": t1 - t0, "search_s": time.perf_counter() - t1},
                        tasks=list(qs.tasks), qrels=dict(qs.qrels),
                        applied=dict(zip(loaded, counts)), leaked=label_leaks(loaded, qs),
                        leak_qids=leaked_queries(loaded, qs),
                        identical=sorted(qs.drop_identical),
                        identical_why=dict(qs.identical_why))


__all__ = ["adapt_queries", "adapted_search", "applied_counts", "check_applied",
           "check_states", "rerank_runs", "search", "trec_order"]
