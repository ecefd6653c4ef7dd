"""Learning a state: the one definition, used by ``tttembed learn``, the Python API and
the evaluation harness.

Data flow: queries -> base vectors and top-K candidates (the unchanged index) -> the
reward plan -> rewards through the ledger (pairs paid once, ever) -> the reward table ->
``adapt.learn_vectors`` for one scope -> AdaptState.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tttembed.adapt import STEPS, AdaptState, RewardBatch, learn_vectors, make_groups
from tttembed.core.progress import Progress, stage
from tttembed.embed.base import Embedder
from tttembed.index.store import IndexHandle
from tttembed.score.base import Scorer
from tttembed.ttt.queries import BaseRetrieval, QuerySet, base_retrieval
from tttembed.ttt.rewards import (
    Corpus,
    RewardPlan,
    Rewards,
    candidate_depth,
    count_in_ledger,
    make_plan,
    reward_table,
    score_pairs,
)

#: One source of rewarded queries: the queries, their base retrieval, the index they
#: were retrieved from (each task of an evaluation has its own index).
Source = tuple[QuerySet, BaseRetrieval, IndexHandle]


def _fingerprint(indexes: Sequence[IndexHandle]) -> str:
    prints = {str(ix.manifest.get("corpus_fingerprint", "")) for ix in indexes}
    return prints.pop() if len(prints) == 1 else ""


def learn_state(scope: str, sources: Sequence[Source], rewards: Mapping[str, Mapping[str, float]],
                *, objective: str = "kd", callback: Callable[[int], None] | None = None,
                **meta: Any) -> AdaptState | None:
    """One scope's state from rewards already paid, over one or more sources, learned as
    one batched problem (None when no query has a finite reward). ``meta`` fills the
    state's scorer, reward_mapping and budget fields."""
    xs: list[np.ndarray] = []
    zs: list[np.ndarray] = []
    rs: list[np.ndarray] = []
    qids: list[str] = []
    tasks: list[str] = []
    for queries, base, index in sources:
        kept, x, z, r = reward_table(queries, base, index, rewards)
        xs.append(x)
        zs.extend(z)
        rs.extend(r)
        qids.extend(queries.qids[i] for i in kept)
        tasks.extend(queries.tasks[i] for i in kept)
    if not qids:
        return None
    groups = make_groups(scope, qids, tasks)
    perm = groups.order()  # rows in group order: the optimizer streams z without a copy
    batch = RewardBatch.from_ragged(np.concatenate(xs)[perm], [zs[i] for i in perm],
                                    [rs[i] for i in perm], groups.index[perm],
                                    groups.weights[perm])
    res = learn_vectors(batch, len(groups.keys), objective, callback=callback)
    index = sources[-1][2]
    return AdaptState(scope, tuple(groups.keys), res.vectors, res.alpha, res.n_g,
                      identity=index.identity, dim=index.dim, objective=objective,
                      hyperparameters=res.hyperparameters,
                      embedder=str(index.manifest.get("embedder_spec", "")),
                      corpus_fingerprint=_fingerprint([s[2] for s in sources]),
                      final_loss=res.final_loss, **meta)


@dataclass(frozen=True)
class LearnOutcome:
    """A state (None when nothing was learned), its plan, rewards and pair counts."""

    state: AdaptState | None
    plan: RewardPlan
    rewards: Rewards = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def pair_counts(scorer: Scorer, plan: RewardPlan, rewards: Rewards) -> dict[str, int]:
    """requested / cached (served from the ledger) / paid / missing pairs of one run."""
    counts = getattr(scorer, "counts", None)
    if counts is not None:
        c = counts()
        return {"requested": len(plan.pairs), "cached": c.cached, "paid": c.paid,
                "missing": c.missing}
    missing = sum(1 for r in rewards.values() for v in r.values() if not np.isfinite(v))
    return {"requested": len(plan.pairs), "cached": 0, "paid": len(plan.pairs),
            "missing": missing}


def learn(index: IndexHandle, embedder: Embedder, queries: QuerySet, corpus: Corpus,
          scorer: Scorer, *, scope: str = "task", avg_budget: float = 10.0, depth: int = 10,
          objective: str = "kd", seed: int = 0, dry_run: bool = False,
          progress: Progress | None = None) -> LearnOutcome:
    """Plan, score (through the ledger) and learn one scope's state."""
    k = candidate_depth(avg_budget, depth, len(index))
    base = base_retrieval(index, embedder, queries, k,
                          progress=stage(progress, "encoding queries", len(queries)))
    plan = make_plan(queries, base, index, avg_budget, depth, seed)
    if dry_run:
        return LearnOutcome(state=None, plan=count_in_ledger(plan, queries, corpus, scorer))
    rewards = score_pairs(plan.pairs, queries, corpus, scorer,
                          progress=stage(progress, "scoring pairs", len(plan.pairs)))
    counts = pair_counts(scorer, plan, rewards)
    step = stage(progress, "optimising", STEPS)
    state = learn_state(scope, [(queries, base, index)], rewards, objective=objective,
                        callback=lambda _: step(1),
                        scorer=getattr(scorer, "identity", None) or scorer.spec,
                        reward_mapping=scorer.mapping, budget=len(plan.pairs))
    if state is not None:
        state = replace(state, pairs=counts)
    return LearnOutcome(state=state, plan=plan, rewards=rewards, counts=counts)


__all__ = ["LearnOutcome", "Source", "learn", "learn_state", "pair_counts"]
