"""``tttembed learn`` as a function: plan rewards, pay for them once, learn a state.

Data flow: queries -> base vectors and top-K candidates (the unchanged index) -> the
reward plan (``adapt.allocate.plan_rewards``) -> rewards through the ledger (pairs paid
once, ever) -> the reward table -> ``adapt.learn_vectors`` for one scope -> AdaptState.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.adapt import STEPS, AdaptState, RewardBatch, learn_vectors, make_groups, query_keys
from tttembed.adapt.allocate import plan_rewards
from tttembed.adapt.rerank import direct_rerank
from tttembed.adapt.state import apply_states
from tttembed.index.store import IndexHandle
from tttembed.registry import split_spec
from tttembed.workload import (
    BaseRetrieval,
    QuerySet,
    base_retrieval,
    reward_table,
    run_from_arrays,
    score_pairs,
)

Progress = Callable[[str, int], Callable[[int], None]]


@dataclass(frozen=True)
class RewardPlan:
    pairs: list[tuple[str, str]]
    n_queries: int
    avg_budget: float
    depth: int
    in_ledger: int | None = None  # pairs already paid for (None: not checked)

    @property
    def queries_rewarded(self) -> int:
        return len({k for k, _ in self.pairs})


@dataclass
class LearnOutcome:
    state: AdaptState | None
    plan: RewardPlan
    rewards: dict[str, dict[str, float]]
    counts: dict[str, int] = field(default_factory=dict)
    final_loss: np.ndarray | None = None


def build_scorer(spec: str, corpus: Mapping[str, Mapping[str, str]], *,
                 ledger_path: str | Path | None = None, cache_dir: str | Path | None = None,
                 use_ledger: bool = True, **options: Any) -> Any:
    """A scorer from its spec, wrapped in the paid-pair ledger.

    ``bm25`` gets the corpus; ``qrels:`` reads judgments by id and is free, so it is not
    wrapped (the ledger keys pairs by text).
    """
    from tttembed.score.base import get_scorer
    from tttembed.score.ledger import Ledger, LedgerScorer, default_ledger_path

    scheme, _ = split_spec(spec)
    if scheme == "bm25" and "corpus" not in options:
        options["corpus"] = corpus
    scorer = get_scorer(spec, **options)
    if scheme == "qrels" or not use_ledger:
        return scorer
    ledger = Ledger(ledger_path or default_ledger_path(cache_dir))
    return LedgerScorer(scorer, ledger)


def candidate_depth(avg_budget: float, depth: int, n_docs: int) -> int:
    """How many base candidates the plan may reach: ``depth``, or more past full coverage."""
    return max(1, min(n_docs, max(depth, math.ceil(avg_budget))))


def make_plan(queries: QuerySet, base: BaseRetrieval, index: IndexHandle, avg_budget: float,
              depth: int = 10, seed: int = 0) -> RewardPlan:
    cands = base.candidates(index, queries.keys)
    pairs = plan_rewards(queries.keys, cands, avg_budget, depth=depth, seed=seed)
    return RewardPlan(pairs=pairs, n_queries=len(queries), avg_budget=avg_budget, depth=depth)


def count_in_ledger(plan: RewardPlan, queries: QuerySet,
                    corpus: Mapping[str, Mapping[str, str]], scorer: Any) -> int | None:
    """Pairs of the plan already in the ledger (for ``--dry-run``); None without a ledger."""
    from tttembed.data.beir import doc_text
    from tttembed.score.ledger import text_hash

    ledger = getattr(scorer, "ledger", None)
    if ledger is None:
        return None
    texts = dict(zip(queries.keys, queries.texts))
    by_query: dict[str, list[str]] = {}
    for key, did in plan.pairs:
        by_query.setdefault(key, []).append(did)
    found = 0
    for key, dids in by_query.items():
        docs = [doc_text(corpus[d]) for d in dids]
        got = ledger.get_many(scorer.identity, texts[key], docs)
        found += sum(1 for t in docs if text_hash(t) in got)
    return found


def learn_from_rewards(scope: str, queries: QuerySet, base: BaseRetrieval,
                       index: IndexHandle, rewards: Mapping[str, Mapping[str, float]], *,
                       objective: str = "kd", scorer_identity: str = "",
                       reward_mapping: str = "", budget: int = 0,
                       callback: Callable[[int], None] | None = None
                       ) -> tuple[AdaptState | None, np.ndarray | None]:
    """One scope's state from rewards already paid (pure but for the index's vectors)."""
    kept, x, zs, rs = reward_table(queries, base, index, rewards)
    if not kept:
        return None, None
    groups = make_groups(scope, [queries.qids[i] for i in kept],
                         [queries.tasks[i] for i in kept])
    # rows in group order: the optimizer then streams z without a sorted copy
    perm = np.argsort(groups.index, kind="stable")
    batch = RewardBatch.from_ragged(x[perm], [zs[i] for i in perm], [rs[i] for i in perm],
                                    groups.index[perm], groups.weights[perm])
    result = learn_vectors(batch, len(groups.keys), objective, callback=callback)
    state = AdaptState(scope, tuple(groups.keys), result.vectors, result.alpha, result.n_g,
                       identity=index.identity, dim=index.dim, objective=objective,
                       hyperparameters=result.hyperparameters,
                       embedder=str(index.manifest.get("embedder_spec", "")),
                       scorer=scorer_identity, reward_mapping=reward_mapping, budget=budget)
    return state, result.final_loss


def learn(index: IndexHandle, embedder: Any, queries: QuerySet,
          corpus: Mapping[str, Mapping[str, str]], scorer: Any, *, scope: str = "task",
          avg_budget: float = 10.0, depth: int = 10, objective: str = "kd", seed: int = 0,
          dry_run: bool = False, progress: Progress | None = None) -> LearnOutcome:
    """Plan, score (through the ledger) and learn one scope's state."""
    def bar(name: str, total: int) -> Callable[[int], None] | None:
        return progress(name, total) if progress is not None else None

    k = candidate_depth(avg_budget, depth, len(index))
    base = base_retrieval(index, embedder, queries, k, progress=bar("encoding queries",
                                                                      len(queries)))
    plan = make_plan(queries, base, index, avg_budget, depth, seed)
    if dry_run:
        found = count_in_ledger(plan, queries, corpus, scorer)
        plan = RewardPlan(plan.pairs, plan.n_queries, avg_budget, depth, found)
        return LearnOutcome(state=None, plan=plan, rewards={})
    rewards = score_pairs(plan.pairs, queries, corpus, scorer,
                          progress=bar("scoring pairs", len(plan.pairs)))
    counts = {"requested": len(plan.pairs)}
    if hasattr(scorer, "counts"):
        c = scorer.counts()
        counts.update(cached=c.cached, paid=c.paid, missing=c.missing)
    else:
        counts.update(cached=0, paid=len(plan.pairs),
                      missing=sum(1 for r in rewards.values() for v in r.values()
                                  if not np.isfinite(v)))
    opt_bar = bar("optimising", STEPS)
    state, final_loss = learn_from_rewards(
        scope, queries, base, index, rewards, objective=objective,
        scorer_identity=getattr(scorer, "identity", scorer.spec),
        reward_mapping=scorer.mapping, budget=len(plan.pairs),
        callback=None if opt_bar is None else (lambda step: opt_bar(1)))
    return LearnOutcome(state=state, plan=plan, rewards=rewards, counts=counts,
                        final_loss=final_loss)


def adapted_search(index: IndexHandle, queries: QuerySet, x: np.ndarray,
                   states: list[AdaptState], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Re-search the unchanged index with ``unit(x + alpha v)`` (most specific state wins)."""
    keys = {s.scope: query_keys(s.scope, list(queries.qids), list(queries.tasks))
            for s in states}
    xa = apply_states(x, keys, states) if states else x
    scores, rows = index.search(xa, k)
    return scores, rows


def rerank_runs(queries: QuerySet, index: IndexHandle, base: BaseRetrieval,
                rewards: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Direct reranking baseline, per task."""
    runs = run_from_arrays(queries, index, base.rows, base.scores)
    out = {}
    for task, run in runs.items():
        task_rewards = {qid: rewards[f"{task}/{qid}"] for qid in run
                        if f"{task}/{qid}" in rewards}
        out[task] = direct_rerank(run, task_rewards)
    return out
