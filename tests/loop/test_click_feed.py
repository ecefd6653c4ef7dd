"""The learner's click feed through a real SQLite store: simulated searches and clicks
logged as the server logs them, read incrementally, turned into propensities and rewards
(relevant documents above irrelevant ones, debiased unlike the naive rate), bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.loop.clicks.conftest import Tiny
from tttembed.loop.clicks import simulate as sim
from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.open import open_store
from tttembed.loop.rows import Event, SearchLog, Shown


def _log(store: object, shown: list[Shown], start: float) -> None:
    searches: dict[str, list[Shown]] = {}
    for s in shown:
        searches.setdefault(s.search_id, []).append(s)
    rows = [SearchLog(sid, ss[0].task, ss[0].query, start + ss[0].created, ss[0].ranker,
                      tuple(x.doc_id for x in sorted(ss, key=lambda x: x.rank)))
            for sid, ss in searches.items()]
    store.log_searches(rows)  # type: ignore[attr-defined]
    events = [Event(s.search_id, s.doc_id, "click", s.session, task=s.task, query=s.query,
                    rank=s.rank) for s in shown if s.clicked]
    for i in range(0, len(events), 500):
        store.add_events(events[i:i + 500])  # type: ignore[attr-defined]


def _traffic(tiny: Tiny, n: int, seed: int) -> list[Shown]:
    traffic = tiny.traffic({"v1": tiny.ranker(1), "v2": tiny.ranker(2), "v3": tiny.ranker(3)})
    users = sim.Population({"pbm": sim.PositionBased(eta=1.0, noise=0.05, top=2.0)}, {"pbm": 1.0},
                           sessions=5000)
    return sim.simulate(traffic, users, n, np.random.default_rng(seed))


def test_the_feed_reads_new_searches_once_and_debiases(tmp_path: Path) -> None:
    tiny = Tiny(queries=40)
    store = open_store(str(tmp_path / "loop.sqlite"))
    first = _traffic(tiny, 3000, 0)
    _log(store, first, 1000.0)
    feed = ClickFeed(store, settle_s=0.0)
    assert feed.refresh() == sum(s.clicked for s in first)
    assert feed.refresh() == 0  # nothing new: nothing read twice
    assert len(feed.window) == len(first)

    view = feed.view()
    theta = np.array(view.propensities.theta)
    assert view.propensities.method == "harvest"
    assert abs(theta[1] - 0.5) < 0.15 and theta[4] < theta[1]  # true 1/r: 0.5, 0.2
    grade = {(tiny.queries[q], d): g for q, docs in tiny.qrels.items() for d, g in docs.items()}
    by_grade: dict[float, list[float]] = {}
    for (_, text), docs in view.rewards.items():
        for d, r in docs.items():
            by_grade.setdefault(grade[(text, d)], []).append(r)
    assert np.mean(by_grade[2.0]) > np.mean(by_grade[0.0]) + 0.2

    naive = ClickFeed(store, settle_s=0.0, mode="naive")
    naive.refresh()
    naive_view = naive.view()
    low = [r for (_, text), docs in naive_view.rewards.items() for d, r in docs.items()
           if grade[(text, d)] == 2.0]
    assert np.mean(low) < np.mean(by_grade[2.0]) - 0.05  # clicks / impressions, not exposure

    second = [Shown(f"n{s.search_id}", s.task, s.query, s.doc_id, s.rank, s.clicked, s.ranker,
                    s.session, s.explored, 0.0, s.created) for s in _traffic(tiny, 200, 1)]
    _log(store, second, 5000.0)
    assert feed.refresh() == sum(s.clicked for s in second)
    store.close()


def test_the_window_is_bounded(tmp_path: Path) -> None:
    tiny = Tiny(queries=10)
    store = open_store(str(tmp_path / "loop.sqlite"))
    _log(store, _traffic(tiny, 300, 2), 1000.0)
    feed = ClickFeed(store, settle_s=0.0, max_shown=500)
    feed.refresh()
    assert len(feed.window) == 500
    assert feed.clicks > 0
    store.close()


def test_unsettled_searches_wait(tmp_path: Path) -> None:
    import time

    tiny = Tiny(queries=5)
    store = open_store(str(tmp_path / "loop.sqlite"))
    _log(store, _traffic(tiny, 20, 3), time.time())
    feed = ClickFeed(store, settle_s=3600.0)
    feed.refresh()
    assert not feed.window  # their clicks may still come
    assert feed.view().pairs == 0
    store.close()


def test_held_out_sessions_are_not_learned_from(tmp_path: Path) -> None:
    """Without a judge (issue 62) one session in k is held out: its click rewards are the
    promotion check's (``held``), and the rewards learned from come from the other
    sessions only (a query text's rewards change when its held-out clicks are removed)."""
    from tttembed.ttt.judged import text_folds

    tiny = Tiny(queries=40)
    store = open_store(str(tmp_path / "loop.sqlite"))
    shown = _traffic(tiny, 3000, 1)
    _log(store, shown, 1000.0)
    feed = ClickFeed(store, settle_s=0.0)
    feed.refresh()
    whole, split = feed.view(), feed.view(hold_out=5)
    assert not whole.held and split.held
    fold = text_folds([s.session or s.search_id for s in feed.window], 5)
    held_keys = {(s.task, s.query) for s, f in zip(feed.window, fold) if not f and s.clicked}
    assert set(split.held) <= {(s.task, s.query) for s, f in zip(feed.window, fold) if not f}
    assert held_keys and set(split.held) & held_keys
    learned = {(s.task, s.query, s.doc_id) for s, f in zip(feed.window, fold) if f}
    assert all((t, q, d) in learned for (t, q), docs in split.rewards.items() for d in docs)
    assert split.rewards != whole.rewards


def test_the_propensities_read_only_the_newest_records(tmp_path: Path, monkeypatch) -> None:
    """Bounded cycles (issue 62): the propensity estimate, half a soak cycle's time, reads
    at most ``max_estimate`` shown records, the newest."""
    import tttembed.loop.clicks.feed as feed_mod

    tiny = Tiny(queries=40)
    store = open_store(str(tmp_path / "loop.sqlite"))
    _log(store, _traffic(tiny, 3000, 2), 1000.0)
    feed = ClickFeed(store, settle_s=0.0, max_estimate=500)
    feed.refresh()
    seen: list[int] = []
    real = feed_mod.estimate

    def counting(shown, *a, **kw):
        seen.append(len(shown))
        return real(shown, *a, **kw)

    monkeypatch.setattr(feed_mod, "estimate", counting)
    feed.view()
    assert seen == [500] and len(feed.window) > 500


def test_the_window_holds_one_copy_of_each_text_and_id(store: object) -> None:
    """The learner's click window holds up to a million records (ten per search): a long
    question asked many times, or a document shown in many lists, is one string in memory,
    not one per record, and a record carries no per-instance dict. Before: 556 bytes a
    record with 3,000-character questions (each record held its own copies)."""
    import tracemalloc

    texts = [f"{i} " + "a long question " * 190 for i in range(20)]  # ~3,000 characters
    rows = [SearchLog(f"s{i}", "t", texts[i % 20], 1000.0 + i, "v1",
                      tuple(f"doc-{(i * 7 + r) % 300}" for r in range(10)))
            for i in range(2000)]
    store.log_searches(rows)  # type: ignore[attr-defined]
    feed = ClickFeed(store, settle_s=0.0)  # type: ignore[arg-type]
    # only what this test's own call allocates: a thread another test left running
    # (the full suite's order) allocates too, but never below this file's frames
    tracemalloc.start(64)
    try:
        feed.refresh()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, __file__, all_frames=True)])
    finally:
        tracemalloc.stop()
    used = sum(stat.size for stat in snapshot.statistics("filename"))
    shown = list(feed.window)
    assert len(shown) == 20_000
    assert not hasattr(shown[0], "__dict__")
    for field in ("query", "doc_id"):  # each distinct value one object
        values = [getattr(s, field) for s in shown]
        assert len({id(v) for v in values}) == len(set(values)), field
    assert 0 < used / len(shown) < 250, f"{used / len(shown):.0f} bytes a record"
