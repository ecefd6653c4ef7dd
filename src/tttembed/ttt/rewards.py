"""Rewards: the reward plan, scorers through the ledger, paid scoring, the reward table.

Pairs are ``(query_key, doc_id)``; rewards ``{query_key: {doc_id: r}}``. A scorer is built
from its spec with what its declared :class:`~tttembed.score.base.Capabilities` ask for
(the corpus, the judgments) and, when cacheable, wrapped in the paid-pair ledger.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.adapt.allocate import plan_rewards
from tttembed.core.errors import ConfigError, DataError
from tttembed.core.progress import Advance
from tttembed.index.base import Index
from tttembed.score.base import Scorer
from tttembed.score.build import build_scorer
from tttembed.ttt.queries import BaseRetrieval, Pair, QuerySet
from tttembed.types import Corpus, PathLike, Rewards


@dataclass(frozen=True)
class RewardPlan:
    """The pairs to score, and how many of them the ledger already holds (None: unknown)."""

    pairs: list[Pair]
    n_queries: int
    budget: float
    depth: int
    in_ledger: int | None = None

    @property
    def queries_rewarded(self) -> int:
        return len({k for k, _ in self.pairs})

    @property
    def to_pay(self) -> int:
        return len(self.pairs) - (self.in_ledger or 0)


def candidate_depth(budget: float, depth: int, n_docs: int) -> int:
    """How many base candidates the plan may reach: ``depth``, or more past full coverage."""
    return max(1, min(n_docs, max(depth, math.ceil(budget))))


def make_plan(queries: QuerySet, base: BaseRetrieval, index: Index, budget: float,
              depth: int = 10, seed: int = 0) -> RewardPlan:
    cands = base.candidates(index, queries.keys)
    pairs = plan_rewards(queries.keys, cands, budget, depth=depth, seed=seed)
    return RewardPlan(pairs=pairs, n_queries=len(queries), budget=budget, depth=depth)


def _by_query(pairs: Sequence[Pair], queries: QuerySet) -> dict[str, list[str]]:
    pos = set(queries.keys)
    out: dict[str, list[str]] = {}
    for key, did in pairs:
        if key not in pos:
            raise DataError(f"reward pair names unknown query {key!r}")
        out.setdefault(key, []).append(did)
    return out


def doc_items(dids: Sequence[str], corpus: Corpus) -> list[Any]:
    """Scorer items (id, text as embedded) of documents ``dids`` of ``corpus``."""
    from tttembed.data.beir import doc_text
    from tttembed.score.base import Item

    missing = [d for d in dids if d not in corpus]
    if missing:
        raise DataError(f"document {missing[0]!r} is in the index but not in the corpus",
                        fix="give the corpus the index was built from")
    return [Item(d, doc_text(corpus[d])) for d in dids]


def count_in_ledger(plan: RewardPlan, queries: QuerySet, corpus: Corpus,
                    scorer: Scorer) -> RewardPlan:
    """The plan with ``in_ledger`` set: pairs a real run would serve from the ledger (the
    same lookup :class:`~tttembed.score.ledger.LedgerScorer` makes; None without one)."""
    ledger = getattr(scorer, "ledger", None)
    if ledger is None:
        return plan
    texts = dict(zip(queries.keys, queries.texts))
    found = 0
    for key, dids in _by_query(plan.pairs, queries).items():
        found += scorer.known(texts[key], [it.text for it in doc_items(dids, corpus)])  # type: ignore[attr-defined]
    return replace(plan, in_ledger=found)


def score_plan_pairs(pairs: Sequence[Pair], queries: QuerySet, corpus: Corpus, scorer: Scorer,
                progress: Advance | None = None) -> Rewards:
    """Rewards for (query_key, doc_id) pairs; one ``scorer.score`` call per query (the
    ledger wrapper pays only for new pairs and commits them as they arrive).

    A ledger scorer with an ``executor`` (:func:`tttembed.execute.score.use_executor`,
    e.g. Ray) pays every unpaid pair there first, in bulk; the calls per query then read
    the ledger. A scorer with ``max_concurrency`` > 1 (the HTTP scorers) gets several
    queries in flight at once (:func:`query_lanes`); its client still bounds the requests
    on the wire to ``max_concurrency``."""
    from tttembed.core.http import map_ordered
    from tttembed.score.base import Item

    pos = {k: i for i, k in enumerate(queries.keys)}
    by_query = _by_query(pairs, queries)
    groups = [(Item(queries.qids[pos[k]], queries.texts[pos[k]]), doc_items(dids, corpus))
              for k, dids in by_query.items()]
    runner = getattr(scorer, "executor", None)
    if runner is not None and groups:
        runner.prefill(scorer, groups)
    lock = threading.Lock()

    def one(g: int) -> np.ndarray:
        rewards = scorer.score(*groups[g])
        if progress is not None:
            with lock:
                progress(len(groups[g][1]))
        return rewards

    lanes = query_lanes(scorer, groups)
    # in parallel, a repeated query text waits for its first one: each pair is paid once
    seen: set[str] = set()
    waves: tuple[list[int], list[int]] = ([], [])
    for g, (query, _) in enumerate(groups):
        waves[lanes > 1 and query.text in seen].append(g)
        seen.add(query.text)
    got: dict[int, np.ndarray] = {}
    for wave in waves:
        got.update(zip(wave, map_ordered(one, wave, lanes)))
    return {k: {d: float(r) for d, r in zip(dids, got[g])}
            for g, (k, dids) in enumerate(by_query.items())}


def query_lanes(scorer: Scorer, groups: Sequence[tuple[Any, Sequence[Any]]]) -> int:
    """Queries scored at once: 1 for a scorer without ``max_concurrency`` (local models);
    else enough queries to keep ``max_concurrency`` requests in flight when each query has
    ``ceil(documents / max_documents)`` requests in flight (the rerank scorer's split; one
    request per pair for the LLM judge; the ledger pays ``chunk_size`` documents at a
    time), at most ``max_concurrency``."""
    inner = getattr(scorer, "inner", scorer)
    limit = int(getattr(inner, "max_concurrency", 1) or 1)
    if limit <= 1 or len(groups) <= 1:
        return 1
    per_request = max(1, int(getattr(inner, "max_documents", 1) or 1))
    docs = max(1, max(len(d) for _, d in groups))
    docs = min(docs, int(getattr(scorer, "chunk_size", docs) or docs))
    per_query = -(-docs // per_request)
    return max(1, min(limit, -(-limit // per_query), len(groups)))


def restrict(rewards: Mapping[str, Mapping[str, float]], pairs: Sequence[Pair]) -> Rewards:
    """The rewards of ``pairs`` only."""
    out: Rewards = {}
    for key, did in pairs:
        out.setdefault(key, {})[did] = rewards[key][did]
    return out


def reward_table(queries: QuerySet, base: BaseRetrieval, index: Index,
                 rewards: Mapping[str, Mapping[str, float]]
                 ) -> tuple[list[int], np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Rows of rewarded queries (with at least one finite reward), their x, candidate
    vectors z_q and rewards r_q, ready for ``RewardBatch.from_ragged``."""
    row_of = {d: r for r, d in enumerate(index.doc_ids)}
    kept, zs, rs = [], [], []
    for i, key in enumerate(queries.keys):
        got = rewards.get(key)
        dids = [d for d, r in got.items() if np.isfinite(r)] if got else []
        if not dids:
            continue
        kept.append(i)
        zs.append(index.get_vectors([row_of[d] for d in dids]))
        rs.append(np.array([got[d] for d in dids], dtype=np.float64))  # type: ignore[index]
    x = base.x[kept] if kept else np.zeros((0, base.x.shape[1]), np.float32)
    return kept, x, zs, rs


def check_corpus_matches(index: Index, corpus: Corpus) -> None:
    from tttembed.data.beir import corpus_fingerprint

    if corpus_fingerprint(corpus) != index.manifest.get("corpus_fingerprint"):
        raise ConfigError(f"the corpus given is not the one index {index.path} was built from "
                          "(fingerprints differ); give the same corpus or rebuild the index")


def corpus_for_index(index: Index, corpus: PathLike | Corpus | None = None,
                     folder: Path | None = None) -> dict[str, dict[str, str]]:
    """The corpus the index was built from: ``corpus`` (a dict, BEIR folder or
    corpus.jsonl), the queries' BEIR folder, or the manifest's source; checked against the
    index's corpus fingerprint."""
    from tttembed.ttt.corpus import read_corpus

    if isinstance(corpus, Mapping):
        docs = {k: dict(v) for k, v in corpus.items()}
    else:
        candidates = [corpus, folder]
        src = index.manifest.get("corpus_source")
        if src and src != "<dict>" and Path(src).exists():
            candidates.append(Path(src))
        path = next((Path(p) for p in candidates if p is not None), None)
        if path is None:
            raise ConfigError("this scorer needs the document texts: give --corpus (a BEIR "
                              "folder or corpus.jsonl; corpus= in Python)")
        docs = read_corpus(path)[0]
    check_corpus_matches(index, docs)
    return docs


__all__ = ["Corpus", "RewardPlan", "Rewards", "build_scorer", "candidate_depth",
           "check_corpus_matches", "corpus_for_index", "count_in_ledger", "doc_items", "make_plan",
           "query_lanes", "restrict", "reward_table", "score_plan_pairs"]
