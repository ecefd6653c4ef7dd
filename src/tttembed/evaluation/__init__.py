"""Evaluation: pure metrics and paired statistics (protocols and reports live beside them)."""

from __future__ import annotations

from tttembed.evaluation.metrics import (
    DEFAULT_METRICS,
    evaluate,
    evaluate_per_query,
    evaluated_queries,
    mean_metric,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
)
from tttembed.evaluation.stats import (
    Comparison,
    aubc,
    compare,
    paired_bootstrap_ci,
    paired_randomization_test,
)

__all__ = [
    "DEFAULT_METRICS",
    "Comparison",
    "aubc",
    "compare",
    "evaluate",
    "evaluate_per_query",
    "evaluated_queries",
    "mean_metric",
    "mrr_at_k",
    "ndcg_at_k",
    "paired_bootstrap_ci",
    "paired_randomization_test",
    "recall_at_k",
]
