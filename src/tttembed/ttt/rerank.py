"""Direct reranking, the baseline: the same reward plan as ``learn``, the rewarded
candidates sorted by reward inside their original slots."""

from __future__ import annotations

from collections.abc import Sequence

from tttembed.core.progress import Progress, stage
from tttembed.embed.base import Embedder
from tttembed.execute.config import ExecutorLike
from tttembed.index.base import Index
from tttembed.index.search import SearchResult
from tttembed.score.base import Scorer
from tttembed.ttt.corpus import CorpusArg
from tttembed.ttt.queries import Queries, as_query_set, base_retrieval
from tttembed.ttt.rewards import candidate_depth, corpus_for_index, make_plan, score_plan_pairs
from tttembed.ttt.search import rerank_runs


def rerank(index: Index, queries: Queries, *, scorer: Scorer | str, budget: float = 10,
           k: int = 100, depth: int = 10, seed: int = 0,
           task: str | Sequence[str] | None = None, split: str = "test",
           embedder: Embedder | None = None, corpus: CorpusArg | None = None,
           progress: Progress | None = None, executor: ExecutorLike = "local",
           ignore_identical_ids: bool | None = None) -> SearchResult:
    """Direct reranking (the baseline): the same reward plan as ``learn``, rewarded
    candidates sorted by reward inside their original slots. ``executor`` and
    ``ignore_identical_ids`` as for :func:`tttembed.ttt.search.search`
    (``result.identical_why`` says each task's rule).

        >>> result = tt.rerank(index, "data/scifact", scorer="bm25", budget=10)
    """
    from tttembed.execute import prepare
    from tttembed.index.embedder import index_embedder
    from tttembed.ttt.scorer import scorer_for

    qs = as_query_set(queries, task, split, ignore_identical_ids, index)
    docs = corpus_for_index(index, corpus, qs.folder)
    sc = scorer_for(scorer, index, docs)
    emb = index_embedder(index, embedder)
    prepare(sc, executor, embedder=emb, texts=qs.texts)
    depth_k = max(int(k), candidate_depth(budget, depth, len(index)))
    base = base_retrieval(index, emb, qs, depth_k,
                          progress=stage(progress, "encoding queries", len(qs)))
    plan = make_plan(qs, base, index, budget, depth, seed)
    rewards = score_plan_pairs(plan.pairs, qs, docs, sc,
                          progress=stage(progress, "scoring pairs", len(plan.pairs)))
    runs = rerank_runs(qs, index, base.rows, base.scores, rewards)
    return SearchResult.from_runs(runs, qs.tasks, qs.qids, index.doc_ids, int(k),
                                  qrels=dict(qs.qrels), identical=sorted(qs.drop_identical),
                                  identical_why=dict(qs.identical_why))
