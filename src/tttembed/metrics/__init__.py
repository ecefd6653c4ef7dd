"""Ranking metrics (:mod:`.ranking`, trec_eval's rules), paired statistics (:mod:`.stats`)
and reward quality (:mod:`.quality`): pure functions over BEIR dicts and arrays, beside
:mod:`tttembed.evaluation` (ranx's layout)."""

from __future__ import annotations

from tttembed.metrics.ranking import (
    DEFAULT_METRICS,
    evaluated_queries,
    mean_metric,
    mrr_at_k,
    ndcg_at_k,
    per_query_metrics,
    recall_at_k,
    run_metrics,
)
from tttembed.metrics.stats import (
    Comparison,
    aubc,
    compare,
    paired_bootstrap_ci,
    paired_randomization_test,
)

__all__ = ["DEFAULT_METRICS", "Comparison", "aubc", "compare", "evaluated_queries",
           "mean_metric", "mrr_at_k", "ndcg_at_k", "paired_bootstrap_ci",
           "paired_randomization_test", "per_query_metrics", "recall_at_k", "run_metrics"]
