from __future__ import annotations

import math

from tttembed.adapt.rerank import direct_rerank, rerank_slots


def test_rewarded_candidates_sorted_inside_their_slots():
    base = ["a", "b", "c", "d", "e"]
    rewards = {"b": 0.1, "d": 0.9, "e": 0.5}
    # slots 1, 3, 4 held rewarded docs; they now hold d, e, b; a and c stay put
    assert rerank_slots(base, rewards) == ["a", "d", "c", "e", "b"]


def test_stable_for_ties_and_missing_rewards_are_unrewarded():
    base = ["a", "b", "c", "d"]
    assert rerank_slots(base, {"a": 0.5, "b": 0.5, "c": math.nan, "d": 0.7}) == ["d", "a", "c", "b"]
    assert rerank_slots(base, {}) == base


def test_direct_rerank_on_runs_keeps_unrewarded_queries_and_does_not_mutate():
    run = {"q1": {"a": 0.9, "b": 0.8, "c": 0.7}, "q2": {"x": 0.5, "y": 0.4}}
    rewards = {"q1": {"a": 0.0, "c": 1.0}}
    snapshot = {q: dict(d) for q, d in run.items()}
    out = direct_rerank(run, rewards)
    assert run == snapshot
    assert [d for d, _ in sorted(out["q1"].items(), key=lambda kv: -kv[1])] == ["c", "b", "a"]
    assert out["q2"] == run["q2"]
    assert sorted(out["q1"].values(), reverse=True) == [0.9, 0.8, 0.7]


def test_ties_in_the_base_run_follow_the_metrics_tie_rule():
    # equal scores: trec_eval (and our metrics) rank doc ids descending, so "b" before "a"
    run = {"q": {"a": 0.5, "b": 0.5, "c": 0.1}}
    out = direct_rerank(run, {"q": {"c": 0.9}})
    assert [d for d, _ in sorted(out["q"].items(), key=lambda kv: -kv[1])] == ["b", "a", "c"]
