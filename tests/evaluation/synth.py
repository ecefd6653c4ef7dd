"""Synthetic workloads for the protocol tests: random unit vectors, real FAISS indexes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tttembed.evaluation.protocols import EVAL_DEPTH, TaskData
from tttembed.index.store import load_index, write_index
from tttembed.ttt.queries import QuerySet


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def make_task(root: Path, name: str, seed: int, n_docs: int = 60, n_queries: int = 12,
              dim: int = 16, noise: float = 1.2) -> TaskData:
    """Each query has 3 relevant documents near a hidden topic; the query vector is a
    noisy view of the topic, so raw retrieval is imperfect and rewards can help."""
    rng = np.random.default_rng(seed)
    shift = unit(rng.normal(size=dim))  # a task-wide direction shared by relevant docs
    topics = unit(rng.normal(size=(n_queries, dim)))
    docs = unit(rng.normal(size=(n_docs, dim)))
    qrels: dict[str, dict[str, int]] = {}
    for q in range(n_queries):
        rel = rng.choice(n_docs, size=3, replace=False)
        for j in rel:
            docs[j] = unit(topics[q] + 0.3 * rng.normal(size=dim) + 0.8 * shift)
        qrels[f"q{q}"] = {f"{name}-d{j}": 1 for j in rel}
    x = unit(topics + noise * rng.normal(size=(n_queries, dim)) / np.sqrt(dim))
    doc_ids = [f"{name}-d{j}" for j in range(n_docs)]
    path = write_index(root / name, doc_ids, docs, embedder_identity="synthetic",
                       embedder_spec="synthetic", corpus_fingerprint="0" * 64, overwrite=True)
    index = load_index(path)
    queries = QuerySet.from_tasks({name: {f"q{q}": f"query {q}" for q in range(n_queries)}})
    scores, rows = index.search(x, EVAL_DEPTH)
    from tttembed.ttt.queries import BaseRetrieval

    corpus = {d: {"title": "", "text": d} for d in doc_ids}
    return TaskData(name, index, corpus, queries, qrels,
                    BaseRetrieval(x, rows.astype(np.int64), scores))


def make_work(root: Path, sizes: tuple[int, ...] = (12, 8)) -> list[TaskData]:
    return [make_task(root, f"t{i}", seed=10 + i, n_queries=n) for i, n in enumerate(sizes)]


class QrelsRewards:
    """A perfect reward model from the synthetic judgments; records every call's pairs."""

    def __init__(self, work: list[TaskData]) -> None:
        self.judged = {f"{td.name}/{q}": g for td in work for q, g in td.qrels.items()}
        self.calls: list[list[tuple[str, str]]] = []

    def __call__(self, pairs):
        pairs = list(pairs)
        self.calls.append(pairs)
        out: dict[str, dict[str, float]] = {}
        for key, did in pairs:
            out.setdefault(key, {})[did] = float(self.judged.get(key, {}).get(did, 0))
        return out
