"""The learner's incremental view: the pending queue gives the order the whole-history
computation gives, the tail reads each row once (late rows included), and a step never
reads a whole table."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.loop.judge import pending_pairs
from tttembed.loop.pending import PendingQueue, Tail
from tttembed.loop.sqlite import SQLiteStore
from tttembed.loop.store import Feedback, Reward, SearchLog


def _traffic(seed: int, n: int = 300) -> tuple[list[SearchLog], dict]:
    rng = np.random.default_rng(seed)
    queries = [f"query {i}" for i in range(25)]
    docs = [f"d{i}" for i in range(40)]
    now = 1_700_000_000.0
    logs = []
    for i in range(n):
        q = queries[min(int(rng.zipf(1.5)) - 1, len(queries) - 1)]
        ids = tuple(rng.choice(docs, 10, replace=False))
        logs.append(SearchLog(f"s{i:04d}", "t", q, now - 3600 * rng.random(), None, ids))
    logs.sort(key=lambda s: (s.created, s.search_id))
    judged = {("t", q, d): float(rng.random() < 0.3) for q in queries[:12]
              for d in rng.choice(docs, int(rng.integers(1, 12)), replace=False)}
    return logs, judged


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_incremental_queue_orders_pairs_as_the_full_recomputation(seed):
    logs, judged = _traffic(seed)
    full = pending_pairs(logs, judged, lambda s: s.ids, depth=10, now=1_700_000_100.0)
    queue = PendingQueue(depth=10)
    half = len(logs) // 2  # in two batches, the judged pairs in between
    queue.add_searches(logs[:half], lambda s: s.ids)
    queue.add_judged(judged.items())
    queue.add_searches(logs[half:], lambda s: s.ids)
    assert queue.total == len(full)
    assert queue.top(len(full) + 5) == full
    assert queue.top(7) == full[:7]


def test_a_judged_pair_leaves_the_queue_and_labels_do_not_override_rewards():
    logs, _ = _traffic(3, 50)
    queue = PendingQueue(depth=10)
    queue.add_searches(logs, lambda s: s.ids)
    first = queue.top(1)[0]
    queue.add_judged([(first, 0.7)])
    assert first not in queue.top(10_000)
    queue.add_judged([(first, 1.0)], override=False)  # a person's label after the judge
    assert queue.judged[first[:2]][first[2]] == 0.7


def test_the_queue_forgets_the_least_recently_served_query_first():
    queue = PendingQueue(depth=3, max_queries=2)
    for i, q in enumerate(["a", "b", "a", "c"]):
        queue.add_searches([SearchLog(f"s{i}", "t", q, float(i), None, ("x", "y"))],
                           lambda s: s.ids)
    assert {t[1] for t in queue.top(100)} == {"a", "c"}
    assert queue.total == 4 and queue.sizes()["queries"] == 2


def test_the_tail_reads_each_row_once_and_a_late_row_within_the_lookback(tmp_path):
    store = SQLiteStore(tmp_path / "s.sqlite")
    tail: Tail[SearchLog] = Tail(store.searches_after, lambda s: (s.created, s.search_id),
                                 lookback_s=10.0)
    store.log_searches([SearchLog(f"s{i}", "t", "q", 100.0 + i, None, ("d",))
                        for i in range(5)])
    assert [s.search_id for s in tail.new()] == [f"s{i}" for i in range(5)]
    assert tail.new() == []
    # committed late with an older time (a replica's clock behind, a slow commit)
    store.log_searches([SearchLog("late", "t", "q", 97.0, None, ("d",)),
                        SearchLog("new", "t", "q", 110.0, None, ("d",))])
    assert sorted(s.search_id for s in tail.new()) == ["late", "new"]
    assert tail.new() == [] and tail.rows == 7


def test_the_tails_page_through_every_table(tmp_path, monkeypatch):
    import tttembed.loop.store as store_mod

    monkeypatch.setattr(store_mod, "PAGE", 3)
    import tttembed.loop.pending as pending_mod

    monkeypatch.setattr(pending_mod, "PAGE", 3)
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.add_rewards([Reward("t", f"q{i}", "d", 0.5, 50.0, "judge") for i in range(7)])
    store.add_feedback([Feedback("t", f"q{i}", "d", 1.0, "", 60.0) for i in range(7)])
    rewards = Tail(store.rewards_after, lambda r: (r.created, f"{r.task}\x1e{r.query}\x1e"
                                                   f"{r.doc_id}"))
    labels = Tail(store.feedback_after, lambda f: (f.created, f"{f.key}\x1e{f.doc_id}"))
    assert len(rewards.new()) == 7 and len(labels.new()) == 7
    assert rewards.new() == [] and labels.new() == []


def test_the_budget_account_reserves_at_most_the_budget(tmp_path):
    store = SQLiteStore(tmp_path / "s.sqlite")
    assert store.reserve("judge", 8, 10) == 8
    assert store.reserve("drift", 5, 10) == 2
    assert store.reserve("audit", 3, 10) == 0
    assert store.reserve("validation", 1, 11, partial=False) == 1
    assert store.reserve("judge", 2, 12, partial=False) == 0
    assert store.spent() == {"judge": 8, "drift": 2, "validation": 1}
    with pytest.raises(ValueError):
        store.reserve("coffee", 1, 100)
