"""Scopes: group keys, weights (sum to 1 per group) and alpha."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.scopes import (
    GLOBAL_KEY,
    QUERY_KEY,
    alpha_from_counts,
    group_key,
    make_groups,
    query_digest,
    query_key,
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


def test_query_keys_are_qualified_by_task_and_name_the_text():
    texts = ["what is x", "what is x", "what is y"]
    g = make_groups("query", ["0", "0", "1"], ["fiqa", "scifact", "scifact"], texts)
    d = [query_digest(t) for t in texts]
    assert g.keys == [f"fiqa/#{d[0]}", f"scifact/#{d[0]}", f"scifact/#{d[2]}"]
    np.testing.assert_allclose(g.weights, 1)
    assert g.counts.tolist() == [1, 1, 1]
    assert group_key("query", "fiqa", "x/y") == f"fiqa/#{query_digest('x/y')}"
    assert all(QUERY_KEY.fullmatch(k) for k in g.keys)


def test_query_keys_ignore_ids_and_normalise_text():
    """Ids are file-local: the key depends on the text (NFC, whitespace collapsed) only."""
    assert query_key("t", "caf\u00e9  au\tlait ") == query_key("t", "cafe\u0301 au lait")
    assert query_key("t", "q one") != query_key("t", "q two")
    a = query_keys("query", ["q one", "q two"], ["t", "t"])
    b = query_keys("query", ["q two", "q one"], ["t", "t"])
    assert a == b[::-1]


def test_query_scope_rows_with_one_text_share_a_group():
    g = make_groups("query", ["a", "b", "c"], ["t", "t", "t"], ["same", "same ", "other"])
    assert g.index.tolist() == [0, 0, 1]
    np.testing.assert_allclose(g.weights, [0.5, 0.5, 1])
    assert g.counts.tolist() == [1, 1]  # one text under two ids is one query (alpha 1/2)


def test_a_task_counts_distinct_texts():
    g = make_groups("task", ["a", "b", "c"], ["t", "t", "t"], ["same", "same ", "other"])
    assert g.counts.tolist() == [2]
    assert make_groups("task", ["a", "b"], ["t", "t"]).counts.tolist() == [2]  # no texts


def test_query_scope_needs_texts():
    with pytest.raises(ConfigError, match="keyed by query text"):
        make_groups("query", ["0"], ["t"])


@pytest.mark.parametrize("scope", ["global", "task", "query"])
def test_weights_sum_to_one_per_group(scope):
    rng = np.random.default_rng(0)
    tasks = [f"t{i}" for i in rng.integers(0, 5, size=60)]
    qids = [str(i) for i in range(60)]
    texts = [f"question {i}" for i in range(60)]
    g = make_groups(scope, qids, tasks, texts)
    sums = np.bincount(g.index, weights=g.weights)
    np.testing.assert_allclose(sums, 1)
    assert query_keys(scope, texts, tasks) == [g.keys[i] for i in g.index]


def test_alpha():
    np.testing.assert_allclose(alpha_from_counts([0, 1, 3, 99]), [0, 0.5, 0.75, 0.99])


def test_errors():
    with pytest.raises(ConfigError, match="global, task, query"):
        make_groups("corpus", QIDS, TASKS)
    with pytest.raises(DataError, match="twice"):
        make_groups("query", ["a", "a"], ["t", "t"], ["x", "y"])
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
