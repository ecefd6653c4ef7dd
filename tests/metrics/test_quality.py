"""Reward quality: the eval's "reward AUC" is named apart from the audit's "audit AUC" and
printed with its own pair set (the rewarded pairs of the budget)."""

from __future__ import annotations

import pytest

from tttembed.metrics.quality import reward_auc_line, reward_quality


def test_reward_quality_counts_its_pairs_and_queries_and_names_its_pair_set():
    rewards = {"t/q1": {"a": 0.9, "b": 0.1, "c": 0.2}, "t/q2": {"a": 0.3, "d": 0.8}}
    qrels = {"t": {"q1": {"a": 1}, "q2": {"d": 2}}}
    q = reward_quality(rewards, qrels)
    assert q["auc"] == pytest.approx(1.0) and q["pairs"] == 5 and q["queries"] == 2
    line = reward_auc_line({**q, "b": 2.5})
    assert line.startswith("reward AUC 1.000")
    assert ("on the 5 rewarded pairs of 2 queries at b=2.5 (the pairs the budget paid; "
            "unjudged = non-relevant)") in line
    assert "audit AUC" not in line


def test_a_cached_entry_without_a_query_count_still_prints():
    line = reward_auc_line({"auc": 0.627, "ndcg": 0.5, "pairs": 870.0, "b": 10.0})
    assert line.startswith("reward AUC 0.627") and "on the 870 rewarded pairs at b=10" in line
