"""The status reads of ``GET /v1/loop`` (searches by version, events by action,
click-through by rank) cost the same however much traffic the store keeps: running counts
kept in each write's transaction, exact through retries, several writers and a store made
before them; click-through read over the newest searches only. Both backends."""

from __future__ import annotations

import threading
from pathlib import Path

from tttembed.loop.open import open_store
from tttembed.loop.rows import Event, Impression, SearchLog, Store
from tttembed.serve.events import click_status


def _searches(n: int, start: float = 1.0, version: str | None = "v1", replica: str = "r1",
              prefix: str = "s") -> list[SearchLog]:
    return [SearchLog(f"{prefix}{i}", "t", f"q{i % 7}", start + i, version, ("a", "b", "c"),
                      replica=replica) for i in range(n)]


def _click(sid: str, doc: str = "a", rank: int = 1, action: str = "click") -> Event:
    return Event(sid, doc, action, "u1", task="t", query="q", rank=rank)


def test_counts_are_exact_through_retries_versions_and_replicas(store: Store) -> None:
    batch = _searches(5) + _searches(2, 10.0, None, "r2", "raw")
    store.log_searches(batch)
    store.log_searches(batch[:3])  # a retried batch inserts nothing and counts nothing
    counts = store.counts()
    assert counts["searches"] == 7
    assert counts["by_version"] == {"v1": 5, "raw": 2}
    store.add_events([_click("s0"), _click("s0"), _click("s1", action="dwell")])
    store.add_events([_click("s0")])  # a duplicate
    assert store.event_counts() == {"click": 1, "dwell": 1}


def test_replicas_logging_at_once_are_all_counted(spec: str, store: Store) -> None:
    per, replicas = 60, 4
    stores = [open_store(spec) for _ in range(replicas)]

    def log(s: Store, r: int) -> None:
        for i in range(0, per, 3):  # batches of three, two versions each
            s.log_searches([SearchLog(f"r{r}-{j}", "t", "q", float(j), f"v{j % 2}", ("a",),
                                      replica=f"r{r % 2}") for j in range(i, i + 3)])

    threads = [threading.Thread(target=log, args=(s, r)) for r, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    counts = store.counts()
    assert counts["searches"] == per * replicas
    assert counts["by_version"] == {"v0": per * replicas // 2, "v1": per * replicas // 2}


def test_a_store_made_before_the_counts_counts_its_rows_on_opening(spec: str) -> None:
    first = open_store(spec)
    first.log_searches(_searches(4) + _searches(3, 20.0, "v2", prefix="x"))
    first.add_events([_click("s0"), _click("s1"), _click("s2", action="dwell")])
    with first._tx() as cur:  # noqa: SLF001  (the previous release had no tallies)
        cur.execute("DROP TABLE tallies")
    first.close()
    again = open_store(spec)
    try:
        assert again.counts()["by_version"] == {"v1": 4, "v2": 3}
        assert again.event_counts() == {"click": 2, "dwell": 1}
        again.log_searches(_searches(1, 50.0, prefix="new"))
        assert again.counts()["searches"] == 8
    finally:
        again.close()
    reopened = open_store(spec)  # counted once, not at every opening
    try:
        assert reopened.counts()["searches"] == 8
    finally:
        reopened.close()


def test_click_through_reads_the_newest_searches_only(store: Store) -> None:
    store.log_searches(_searches(6))
    store.add_events([_click("s0"), _click("s1", "b", rank=2), _click("s5")],
                     [Impression("s4", ("a", "b", "c", "d"))])
    newest = store.click_counts_by_rank(4, window=2)  # s4 (its impression of 4) and s5
    assert [(r.impressions, r.clicks) for r in newest] == [(2, 1), (2, 0), (2, 0), (1, 0)]
    every = store.click_counts_by_rank(4, window=100)
    assert [(r.impressions, r.clicks) for r in every] == [(6, 2), (6, 1), (6, 0), (1, 0)]
    status = click_status(store)
    assert status["clicks"] == 3 and status["ctr_window_searches"] == 10_000


def _vm_steps(store: Store, read: object) -> int:
    """SQLite virtual-machine steps (in hundreds) that ``read()`` runs: the cost of a
    read in work done, not in time."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    with store._tx() as cur:  # noqa: SLF001  (the store's own connection)
        conn = cur.connection
    conn.set_progress_handler(tick, 100)
    try:
        read()  # type: ignore[operator]
    finally:
        conn.set_progress_handler(None, 100)
    return steps[0]


def test_a_status_read_costs_the_same_on_a_store_twenty_times_larger(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "loop.sqlite"))
    try:
        def reads() -> None:
            store.counts()
            store.event_counts()
            store.click_counts_by_rank(10, window=200)

        cost = []
        for size in (1_000, 20_000):
            done = store.counts()["searches"]
            rows = _searches(size - done, 1.0 + done, prefix=f"z{size}-")
            store.log_searches(rows)
            store.add_events([_click(r.search_id) for r in rows[::5]])
            cost.append(_vm_steps(store, reads))
        assert cost[1] <= 2 * cost[0], cost
    finally:
        store.close()


def test_the_dashboard_says_what_click_through_is_read_over() -> None:
    from tttembed.serve.dashboard import render_dashboard

    ranks = [{"rank": 1, "impressions": 10, "clicks": 2, "ctr": 0.2}]
    page = render_dashboard({"clicks": {"events": 2, "clicks": 2, "ctr_by_rank": ranks,
                                        "ctr_window_searches": 10_000}})
    assert "rates over the newest 10,000 searches" in page
    assert "rates over" not in render_dashboard({"clicks": {"ctr_by_rank": ranks}})
