from __future__ import annotations

import copy
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tttembed.adapt.allocate import (
    NORMALISED_BUDGETS,
    budget_grid,
    budget_pairs,
    nested_schedule,
    plan_rewards,
    water_fill_order,
)
from tttembed.core.errors import ConfigError, DataError


def _tasks(sizes):
    return [[f"t{t}q{i}" for i in range(n)] for t, n in enumerate(sizes)]


def _candidates(qids, depth=100):
    return {q: [f"{q}d{j}" for j in range(depth)] for q in qids}


# --- water-filling order --------------------------------------------------------------


def test_water_fill_order_uses_task_seeds_and_cycles():
    tasks = _tasks([4, 1, 3])
    order = water_fill_order(tasks)
    perms = [
        np.random.default_rng(1000 + t).permutation(len(q)).tolist() for t, q in enumerate(tasks)
    ]
    expected = [
        (0, tasks[0][perms[0][0]]), (1, tasks[1][0]), (2, tasks[2][perms[2][0]]),
        (0, tasks[0][perms[0][1]]), (2, tasks[2][perms[2][1]]),
        (0, tasks[0][perms[0][2]]), (2, tasks[2][perms[2][2]]),
        (0, tasks[0][perms[0][3]]),
    ]  # fmt: skip
    assert order == expected


def test_water_fill_order_pins_the_seed_1000_permutation():
    # Pinned: numpy's default_rng(1000).permutation(5); guards against a silent seed change.
    order = water_fill_order([["a", "b", "c", "d", "e"]])
    perm = np.random.default_rng(1000).permutation(5).tolist()
    assert [q for _, q in order] == [["a", "b", "c", "d", "e"][i] for i in perm]
    assert [q for _, q in order] != ["a", "b", "c", "d", "e"]


def test_water_fill_order_rejects_repeated_query_ids():
    with pytest.raises(DataError, match="unique"):
        water_fill_order([["a", "b"], ["b"]])


def test_empty_tasks_are_skipped():
    order = water_fill_order([[], ["x"], []])
    assert order == [(1, "x")]
    assert water_fill_order([]) == []


# --- budgets and depth schedule ---------------------------------------------------------


def test_breadth_then_full_coverage_depths():
    tasks = _tasks([3, 2])
    order = water_fill_order(tasks)
    qids = [q for _, q in order]
    cands = _candidates(qids)
    n = len(qids)
    # 25 pairs: two full queries at depth 10, the third cut to 5 (budget met exactly).
    pairs = budget_pairs(order, cands, 25)
    assert pairs == [(q, d) for q in qids[:2] for d in cands[q][:10]] + [
        (qids[2], d) for d in cands[qids[2]][:5]
    ]
    # 10N is full coverage at depth 10.
    full10 = budget_pairs(order, cands, 10 * n)
    assert Counter(q for q, _ in full10) == {q: 10 for q in qids}
    # Between 10N and 30N: queries extended to depth 30 in water-fill order.
    mid = budget_pairs(order, cands, 10 * n + 25)
    depth = Counter(q for q, _ in mid)
    assert [depth[q] for q in qids] == [30, 15, 10, 10, 10]  # +20, then +5
    assert mid[: 10 * n] == full10
    # 30N and 100N are full coverage at 30 and 100.
    assert set(Counter(q for q, _ in budget_pairs(order, cands, 30 * n)).values()) == {30}
    assert set(Counter(q for q, _ in budget_pairs(order, cands, 100 * n)).values()) == {100}
    # Within a query, pairs come in base candidate order.
    for q in qids:
        assert [d for qq, d in budget_pairs(order, cands, 100 * n) if qq == q] == cands[q]


def test_pure_breadth_at_another_depth_for_breadth_vs_depth():
    order = water_fill_order(_tasks([4]))
    qids = [q for _, q in order]
    cands = _candidates(qids)
    pairs = budget_pairs(order, cands, 60, depth=30, full_depths=())
    assert Counter(q for q, _ in pairs) == {qids[0]: 30, qids[1]: 30}
    with pytest.raises(ConfigError, match="exceeds"):
        budget_pairs(order, cands, 4 * 30 + 1, depth=30, full_depths=())


def test_bare_query_ids_are_accepted_as_order():
    cands = _candidates(["a", "b"])
    assert budget_pairs(["b", "a"], cands, 11)[-1] == ("a", "a" + "d0")


def test_short_candidate_lists_contribute_what_they_have():
    cands = {"a": ["x", "y"], "b": [f"b{j}" for j in range(40)]}
    pairs = budget_pairs(["a", "b"], cands, 12)
    assert pairs == [("a", "x"), ("a", "y")] + [("b", f"b{j}") for j in range(10)]
    assert len(budget_pairs(["a", "b"], cands, 32)) == 32
    with pytest.raises(ConfigError, match="exceeds"):
        budget_pairs(["a", "b"], cands, 43)


def test_budget_errors():
    cands = _candidates(["a"])
    with pytest.raises(ConfigError):
        budget_pairs(["a"], cands, -1)
    with pytest.raises(ConfigError):
        budget_pairs(["a"], cands, 5, depth=0)
    with pytest.raises(DataError, match="no candidate list"):
        budget_pairs(["a", "zz"], cands, 5)
    with pytest.raises(DataError, match="repeats"):
        budget_pairs(["a"], {"a": ["x", "x"]}, 1)
    with pytest.raises(DataError, match="twice"):
        budget_pairs(["a", "a"], cands, 1)
    assert budget_pairs(["a"], cands, 0) == []


def test_inputs_not_mutated():
    tasks = _tasks([3, 2])
    order = water_fill_order(tasks)
    cands = _candidates([q for t in tasks for q in t])
    before = (copy.deepcopy(tasks), copy.deepcopy(cands))
    nested_schedule(order, cands, [1, 50, 500])
    plan_rewards([q for t in tasks for q in t], cands, 3.0)
    assert (tasks, cands) == before


def test_budget_grid():
    assert budget_grid(12_263) == sorted(
        {max(1, int(b * 12_263 + 0.5)) for b in NORMALISED_BUDGETS}
    )
    assert budget_grid(12_263)[-1] == 1_226_300
    assert budget_grid(10) == [1, 2, 5, 10, 20, 50, 100, 300, 1000]  # 0.01..0.1 all -> 1
    assert budget_grid(2, [0.25, 0.75]) == [1, 2]  # half-up rounding: 0.5 -> 1, 1.5 -> 2
    with pytest.raises(ConfigError):
        budget_grid(0)
    with pytest.raises(ConfigError):
        budget_grid(5, [0.0])


# --- property tests ---------------------------------------------------------------------

task_sizes = st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(sizes=task_sizes, data=st.data())
def test_nested_exact_balanced_unique(sizes, data):
    tasks = _tasks(sizes)
    order = water_fill_order(tasks)
    qids = [q for _, q in order]
    n = len(qids)
    cands = _candidates(qids)
    budgets = sorted(
        data.draw(st.lists(st.integers(min_value=0, max_value=100 * n), min_size=1, max_size=6))
    )
    schedule = nested_schedule(order, cands, budgets)
    assert schedule == nested_schedule(order, cands, budgets)  # deterministic
    task_of = {q: t for t, q in order}
    for budget, pairs in zip(budgets, schedule):
        assert len(pairs) == budget  # exactly the budget
        assert len(set(pairs)) == len(pairs)  # no duplicate pair
        assert all(d in cands[q] for q, d in pairs)
        if budget <= 10 * n:
            # Breadth phase: selected queries per task differ by at most 1 among tasks
            # that still have unselected queries.
            chosen = Counter(task_of[q] for q in {q for q, _ in pairs})
            active = [t for t, size in enumerate(sizes) if chosen[t] < size]
            counts = [chosen[t] for t in active]
            if counts:
                assert max(counts) - min(counts) <= 1
                # an exhausted task never ran more than one query ahead of the active ones
                exhausted = [size for t, size in enumerate(sizes) if size and t not in active]
                assert all(size <= max(counts) + 1 for size in exhausted)
    for smaller, bigger in pairwise(schedule):
        assert bigger[: len(smaller)] == smaller  # nested prefixes


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=30),
    lengths_seed=st.integers(min_value=0, max_value=10_000),
    budgets=st.lists(st.floats(min_value=0, max_value=12), min_size=1, max_size=5),
    depth=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=3),
)
def test_plan_rewards_properties(n, lengths_seed, budgets, depth, seed):
    qids = [f"q{i}" for i in range(n)]
    lengths = np.random.default_rng(lengths_seed).integers(12, 40, size=n).tolist()
    cands = {q: [f"{q}d{j}" for j in range(m)] for q, m in zip(qids, lengths)}
    plans = [plan_rewards(qids, cands, b, depth=depth, seed=seed) for b in sorted(budgets)]
    for b, pairs in zip(sorted(budgets), plans):
        assert len(pairs) == int(np.floor(b * n + 0.5))
        assert len(set(pairs)) == len(pairs)
        per_query = Counter(q for q, _ in pairs)
        assert len(per_query) == min(n, -(-len(pairs) // depth))  # ceil(B / depth) queries
        if len(pairs) >= n * depth:  # past full breadth: depths within one of each other
            assert max(per_query.values()) - min(per_query.values()) <= 1
        for q in per_query:  # each query's pairs are its first candidates, in order
            assert [d for qq, d in pairs if qq == q] == cands[q][: per_query[q]]
    for smaller, bigger in pairwise(plans):
        assert bigger[: len(smaller)] == smaller
    assert plans == [plan_rewards(qids, cands, b, depth=depth, seed=seed) for b in sorted(budgets)]


def test_plan_rewards_seed_changes_queries_and_errors():
    qids = [f"q{i}" for i in range(50)]
    cands = _candidates(qids, 20)
    a = plan_rewards(qids, cands, 1.0, seed=0)
    b = plan_rewards(qids, cands, 1.0, seed=1)
    assert len(a) == len(b) == 50
    assert {q for q, _ in a} != {q for q, _ in b}
    assert plan_rewards(qids, cands, 0) == []
    with pytest.raises(ConfigError, match="exceeds"):
        plan_rewards(qids, cands, 20.5)
    with pytest.raises(ConfigError):
        plan_rewards(qids, cands, -1.0)
    with pytest.raises(ConfigError):
        plan_rewards(qids, cands, float("nan"))
