"""Scopes: group keys, weights (sum to 1 per group) and alpha."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.scopes import (
    GLOBAL_KEY,
    alpha_from_counts,
    group_key,
    make_groups,
    query_keys,
)
from tttembed.core.errors import ConfigError, DataError

QIDS = ["a", "b", "c", "d"]
TASKS = ["fiqa", "scifact", "scifact", "scifact"]


def test_global_weights_average_tasks_first():
    g = make_groups("global", QIDS, TASKS)
    assert g.keys == [GLOBAL_KEY]
    assert g.index.tolist() == [0, 0, 0, 0]
    np.testing.assert_allclose(g.weights, [0.5, 1 / 6, 1 / 6, 1 / 6])
    assert g.counts.tolist() == [4]


def test_task_weights_and_keys():
    g = make_groups("task", QIDS, TASKS)
    assert g.keys == ["fiqa", "scifact"]
    assert g.index.tolist() == [0, 1, 1, 1]
    np.testing.assert_allclose(g.weights, [1, 1 / 3, 1 / 3, 1 / 3])
    assert g.counts.tolist() == [1, 3]


def test_query_keys_are_qualified_by_task():
    g = make_groups("query", ["0", "0", "1"], ["fiqa", "scifact", "scifact"])
    assert g.keys == ["fiqa/0", "scifact/0", "scifact/1"]
    np.testing.assert_allclose(g.weights, 1)
    assert g.counts.tolist() == [1, 1, 1]
    assert group_key("query", "fiqa", "x/y") == "fiqa/x/y"


@pytest.mark.parametrize("scope", ["global", "task", "query"])
def test_weights_sum_to_one_per_group(scope):
    rng = np.random.default_rng(0)
    tasks = [f"t{i}" for i in rng.integers(0, 5, size=60)]
    qids = [str(i) for i in range(60)]
    g = make_groups(scope, qids, tasks)
    sums = np.bincount(g.index, weights=g.weights)
    np.testing.assert_allclose(sums, 1)
    assert query_keys(scope, qids, tasks) == [g.keys[i] for i in g.index]


def test_alpha():
    np.testing.assert_allclose(alpha_from_counts([0, 1, 3, 99]), [0, 0.5, 0.75, 0.99])


def test_errors():
    with pytest.raises(ConfigError, match="global, task, query"):
        make_groups("corpus", QIDS, TASKS)
    with pytest.raises(DataError, match="twice"):
        make_groups("query", ["a", "a"], ["t", "t"])
    with pytest.raises(DataError, match="task name"):
        make_groups("task", ["a"], ["x/y"])
    with pytest.raises(DataError, match="one task per query"):
        make_groups("task", ["a", "b"], ["t"])
    # the same id in two tasks is two queries
    assert make_groups("task", ["a", "a"], ["t", "u"]).counts.tolist() == [1, 1]


def test_empty():
    g = make_groups("global", [], [])
    assert g.keys == [] and g.index.size == 0 and g.weights.size == 0


def test_order_sorts_rows_by_group_stably():
    g = make_groups("task", ["a", "b", "c", "d", "e"], ["x", "y", "x", "y", "x"])
    assert g.order().tolist() == [0, 2, 4, 1, 3]
    assert np.all(np.diff(g.index[g.order()]) >= 0)
