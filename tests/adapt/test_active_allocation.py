"""The active allocation: nested, deterministic, every pair judged, and its signals do
what the module says (blocks finished, misordered queries deepened, corpus neighbours
reached outside the candidates, each task's least certain queries first)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tttembed.adapt.active import (
    ACTIVE_FIRST,
    active_sequence,
    query_priority,
    uncertainty_order,
    where_pairs_went,
)
from tttembed.adapt.allocate import water_fill_order


def _pools(n_queries=30, depth=40, seed=0):
    rng = np.random.default_rng(seed)
    cands = {f"q{i}": [f"d{j}" for j in rng.permutation(200)[:depth]] for i in range(n_queries)}
    relevant = {(q, c[k]) for q, c in cands.items() for k in rng.choice(depth, 3, replace=False)}
    return cands, relevant


class Judge:
    def __init__(self, relevant):
        self.relevant, self.calls = relevant, []

    def __call__(self, pairs):
        self.calls.append(list(pairs))
        return {p: float(p in self.relevant) for p in pairs}


def _near(asked):
    return {(q, d): [f"x{d}", f"y{d}"] + [f"d{(int(d[1:]) + k) % 200}" for k in (1, 2, 3)]
            for q, d in asked}


def test_budgets_are_nested_prefixes_judged_once_and_deterministic():
    cands, rel = _pools()
    grid = [3, 30, 300, 900]
    judge = Judge(rel)
    seqs = active_sequence(list(cands), cands, grid, judge, neighbours=_near)
    assert [len(s) for s in seqs] == grid
    for small, big in zip(seqs, seqs[1:]):
        assert big[:len(small)] == small
    assert len(set(seqs[-1])) == len(seqs[-1])
    judged = [p for call in judge.calls for p in call]
    assert sorted(judged) == sorted(seqs[-1])  # every pair through the judge, once
    again = active_sequence(list(cands), cands, grid, Judge(rel), neighbours=_near)
    assert again == seqs
    other = active_sequence(list(cands), cands, grid, Judge(set()), neighbours=_near)
    assert other[-1] != seqs[-1]  # the answers steer the sequence


def test_a_started_query_finishes_its_block_and_new_queries_come_in_order():
    cands, rel = _pools()
    order = list(cands)[::-1]
    (seq,) = active_sequence(order, cands, [len(cands) * ACTIVE_FIRST], Judge(rel))
    by_query: dict[str, list[str]] = {}
    for q, d in seq:
        by_query.setdefault(q, []).append(d)
    assert list(by_query) == order  # breadth in the given order, one block each
    assert all(ds == cands[q][:ACTIVE_FIRST] for q, ds in by_query.items())
    (small,) = active_sequence(order, cands, [2 * ACTIVE_FIRST + 1], Judge(rel))
    assert [q for q, _ in small] == [order[0]] * ACTIVE_FIRST + [order[1]] * ACTIVE_FIRST \
        + [order[2]]


def test_misordered_queries_are_deepened_first_and_reach_neighbours_outside_the_pool():
    cands = {"good": [f"g{i}" for i in range(30)], "bad": [f"b{i}" for i in range(30)]}
    rel = {("good", "g0"), ("bad", "b4")}  # bad's best judged document sits at rank 4
    n = 2 * ACTIVE_FIRST + 10
    (seq,) = active_sequence(["good", "bad"], cands, [n], Judge(rel), neighbours=_near)
    count = {q: sum(1 for p, _ in seq if p == q) for q in cands}
    extra = {q: c - ACTIVE_FIRST for q, c in count.items()}
    assert extra["bad"] >= 3 * extra["good"]  # a round may fill up with good's next pairs
    assert ("bad", "xb4") in seq and ("bad", "yb4") in seq  # outside the candidates
    went = where_pairs_went(seq, cands, depth=ACTIVE_FIRST)
    assert went["outside"] >= 2 and went["queries"] == 2
    assert query_priority(cands["bad"], {"b0": 0.0, "b4": 1.0, **{f"b{i}": 0.0 for i in
                          (1, 2, 3)}}) > query_priority(cands["good"], {
                              "g0": 1.0, **{f"g{i}": 0.0 for i in (1, 2, 3, 4)}})


def test_a_budget_past_the_pools_gets_every_pair_they_hold():
    cands = {"a": ["d1", "d2"], "b": ["d3"]}
    (seq,) = active_sequence(["a", "b"], cands, [50], Judge(set()))
    assert sorted(seq) == [("a", "d1"), ("a", "d2"), ("b", "d3")]


def test_uncertainty_order_keeps_each_tasks_slots_and_puts_small_margins_first():
    order = water_fill_order([["a1", "a2", "a3"], ["b1", "b2"]])
    gap = {"a1": 0.3, "a2": 0.1, "a3": 0.2, "b1": 0.0, "b2": 0.5}
    got = uncertainty_order(order, gap)
    assert [t for t, _ in got] == [t for t, _ in order]
    assert [q for t, q in got if t == 0] == ["a2", "a3", "a1"]
    assert [q for t, q in got if t == 1] == ["b1", "b2"]


def test_priority_of_a_query_whose_top_document_is_best_is_the_floor():
    base = [f"d{i}" for i in range(20)]
    top_best = {f"d{i}": float(i == 0) for i in range(ACTIVE_FIRST)}
    assert query_priority(base, top_best) == pytest.approx(0.1 / math.log2(2))
    assert query_priority(base, {}) == 2.0 and query_priority(base, {"d0": 1.0}) == 3.0
