"""The TTT pipeline, once: query set + base retrieval (:mod:`.queries`), reward plan and
paid scoring (:mod:`.rewards`), learning a state (:mod:`.learn`), adapted search and
direct reranking (:mod:`.search`). ``tttembed.api`` and ``tttembed.evaluation`` both call it.
"""

from __future__ import annotations

from tttembed.ttt.distil import Source, learn_state
from tttembed.ttt.learn import LearnOutcome, learn_outcome, learn_with, pair_counts
from tttembed.ttt.options import LearnOptions
from tttembed.ttt.queries import (
    BaseRetrieval,
    QuerySet,
    base_retrieval,
    query_sources,
    run_from_arrays,
)
from tttembed.ttt.rewards import (
    RewardPlan,
    Rewards,
    build_scorer,
    candidate_depth,
    check_corpus_matches,
    corpus_for_index,
    count_in_ledger,
    make_plan,
    restrict,
    reward_table,
    score_plan_pairs,
)
from tttembed.ttt.search import (
    adapt_queries,
    adapted_search,
    applied_counts,
    check_applied,
    check_states,
    rerank_runs,
    trec_order,
)

__all__ = ["BaseRetrieval", "LearnOptions", "LearnOutcome", "QuerySet", "RewardPlan", "Rewards",
           "Source", "adapt_queries", "adapted_search", "applied_counts", "base_retrieval",
           "build_scorer", "candidate_depth", "check_applied", "check_corpus_matches",
           "check_states", "corpus_for_index", "count_in_ledger", "learn_outcome", "learn_state",
           "learn_with", "make_plan", "pair_counts", "query_sources", "rerank_runs", "restrict",
           "reward_table", "run_from_arrays", "score_plan_pairs", "trec_order"]
