"""The store's click tables on both backends (SQLite and a real PostgreSQL from
``tests/pg.py``): events stored once per (search, doc, session, action), the per-session
caps, explicit impressions, interventions logged with their search, the learner's
incremental ``shown_after`` / ``events_after`` reads, click-through by rank, and an old
store (without the click tables) opening and gaining them."""

from __future__ import annotations

import random
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import new_database
from tttembed.loop.open import open_store
from tttembed.loop.pending import Tail
from tttembed.loop.rows import START, ClickCaps, Event, Impression, SearchLog, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        spec = str(tmp_path / "loop.sqlite")
    else:
        spec = new_database(request.getfixturevalue("pg_url"), "c" + uuid.uuid4().hex[:16])
    opened = open_store(spec)
    yield opened
    opened.close()


def _click(sid: str, doc: str, session: str = "u1", rank: int = 1, query: str = "q",
           action: str = "click", **kw: object) -> Event:
    return Event(sid, doc, action, session, task="t", query=query, rank=rank, **kw)


def _log(store: Store, n: int = 3, ids: tuple[str, ...] = ("a", "b", "c", "d"),
         query: str = "q", start: float = 1.0, **kw: object) -> list[SearchLog]:
    rows = [SearchLog(f"s{i}", "t", query, start + i, "v1", ids, **kw) for i in range(n)]
    store.log_searches(rows)
    return rows


def test_an_event_is_stored_once_and_actions_are_kept_apart(store: Store) -> None:
    _log(store, 1)
    first = store.add_events([_click("s0", "b", rank=2), _click("s0", "b", rank=2),
                              _click("s0", "b", rank=2, action="dwell", dwell_ms=900.0),
                              _click("s0", "b", rank=2, action="add_to_cart"),
                              _click("s0", "b", session="u2", rank=2)])
    assert (first.stored, first.duplicates, first.capped) == (4, 1, 0)
    retry = store.add_events([_click("s0", "b", rank=2), _click("s0", "b", session="u2")])
    assert (retry.stored, retry.duplicates) == (0, 2)
    assert store.event_counts() == {"click": 2, "dwell": 1, "add_to_cart": 1}
    events = store.events_after(START)
    assert [(e.action, e.session) for e in events if e.action == "click"] == \
        [("click", "u1"), ("click", "u2")]
    assert all(e.created > 0 and e.at > 0 for e in events)


def test_caps_drop_clicks_past_them_per_search_and_per_query(store: Store) -> None:
    _log(store, 3)
    caps = ClickCaps(per_search=2, per_query=3, events_per_search=50)
    got = store.add_events([_click("s0", d) for d in "abcd"], caps=caps)
    assert (got.stored, got.capped) == (2, 2)
    got = store.add_events([_click("s1", d) for d in "abc"], caps=caps)
    assert (got.stored, got.capped) == (1, 2)  # the query's third click, then capped
    other = store.add_events([_click("s1", "a", session="u9")], caps=caps)
    assert other.stored == 1  # another session has caps of its own
    anonymous = store.add_events([_click(f"s{i}", d, session="") for i in range(3)
                                  for d in "ab"], caps=caps)
    assert anonymous.stored == 6  # anonymous clicks: capped per search only
    dwell = store.add_events([_click("s2", d, action="dwell", session="u5") for d in "abcd"],
                             caps=ClickCaps(events_per_search=3))
    assert (dwell.stored, dwell.capped) == (3, 1)


def test_shown_after_expands_impressions_sessions_and_interventions(store: Store) -> None:
    _log(store, 1)
    store.log_searches([SearchLog("x", "t", "q", 5.0, None, ("b", "a", "c"),
                                  intervention="randpair:1"),
                        SearchLog("e", "t", "q", 6.0, None, (), kind="embeddings"),
                        SearchLog("m", "t", "q", 7.0, None, (), kind="embeddings")])
    assert store.get_search("x").intervention == "randpair:1"
    assert store.get_search("s0").intervention == ""
    store.add_events([_click("s0", "c", rank=3), _click("s0", "c", action="dwell", rank=3,
                                                         dwell_ms=1500.0),
                      _click("s0", "a", session="u2")],
                     [Impression("m", ("c", "a"))])
    shown = store.shown_after(START)
    by = {(s.search_id, s.session, s.rank): s for s in shown}
    assert len(shown) == 4 + 4 + 3 + 2  # s0 per session, x, m (its impression); e none
    assert by[("s0", "u1", 3)].clicked and by[("s0", "u1", 3)].dwell_ms == 1500.0
    assert not by[("s0", "u1", 1)].clicked and by[("s0", "u2", 1)].clicked
    assert [by[("x", "", r)].doc_id for r in (1, 2, 3)] == ["b", "a", "c"]
    assert by[("x", "", 1)].explored and by[("x", "", 1)].ranker == "raw"
    assert not by[("s0", "u1", 1)].explored and by[("s0", "u1", 1)].ranker == "v1"
    assert [by[("m", "", r)].doc_id for r in (1, 2)] == ["c", "a"]
    assert store.shown_after(START, before=5.0) == [s for s in shown if s.search_id == "s0"]
    assert store.get_impression("m") == Impression("m", ("c", "a"), store.get_impression(
        "m").created) and store.get_impression("s0") is None
    assert store.has_events("s0") and not store.has_events("x")


def test_the_learner_tails_shown_rows_page_by_page_reading_each_once(store: Store,
                                                                       monkeypatch) -> None:
    import tttembed.loop.pending as pending

    rng = random.Random(3)
    rows = [SearchLog(f"s{i:03d}", "t", f"q{i % 7}", float(i // 4), None,
                      tuple(rng.sample("abcdef", 3))) for i in range(60)]
    store.log_searches(rows)
    monkeypatch.setattr(pending, "PAGE", 7)  # pages end inside equal times
    tail = Tail(store.shown_after, lambda s: (s.created, f"{s.search_id}\x1f{s.session}"
                                                            f"\x1f{s.rank:04d}"))
    first = tail.new()
    assert len(first) == 180 and len({(s.search_id, s.rank) for s in first}) == 180
    assert tail.new() == []  # nothing new: nothing re-read
    store.log_searches([SearchLog("z", "t", "q", 99.0, None, ("a", "b"))])
    assert [(s.search_id, s.rank) for s in tail.new()] == [("z", 1), ("z", 2)]


def test_click_through_by_rank_counts_served_lists_and_impressions(store: Store) -> None:
    _log(store, 3, ids=("a", "b", "c"))
    store.log_searches([SearchLog("long", "t", "q", 9.0, None, tuple("abcdef")),
                        SearchLog("emb", "t", "q", 9.5, None, (), kind="embeddings")])
    store.add_events([_click("s0", "a", rank=1), _click("s1", "a", rank=1),
                      _click("s2", "b", rank=2), _click("s2", "c", rank=3, action="dwell")],
                     [Impression("long", ("f", "e"))])
    counts = store.click_counts_by_rank(4)
    assert [(c.rank, c.impressions, c.clicks) for c in counts] == \
        [(1, 4, 2), (2, 4, 1), (3, 3, 0), (4, 0, 0)]
    assert counts[0].ctr == 0.5 and counts[3].ctr is None


def test_concurrent_writers_keep_the_caps(store: Store) -> None:
    _log(store, 1, ids=tuple("abcdefgh"))
    caps = ClickCaps(per_search=3)
    stores = [open_store(store.url) for _ in range(4)]  # four replicas at once

    def post(s: Store, docs: str) -> None:
        for d in docs:
            s.add_events([_click("s0", d)], caps=caps)

    threads = [threading.Thread(target=post, args=(s, docs))
               for s, docs in zip(stores, ("ab", "cd", "ef", "gh"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert store.event_counts() == {"click": 3}


def test_an_old_store_opens_and_gains_the_click_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("""CREATE TABLE searches (
        search_id TEXT PRIMARY KEY, task TEXT NOT NULL, query TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, version TEXT, ids TEXT NOT NULL,
        kind TEXT NOT NULL, replica TEXT NOT NULL)""")
    conn.execute("INSERT INTO searches VALUES ('old', 't', 'q', 1.0, NULL, '[\"a\", \"b\"]', "
                 "'search', '')")
    conn.commit()
    conn.close()
    store = open_store(str(path))
    try:
        assert store.get_search("old") == SearchLog("old", "t", "q", 1.0, None, ("a", "b"))
        assert [s.doc_id for s in store.shown_after(START)] == ["a", "b"]
        assert store.add_events([_click("old", "b", rank=2)]).stored == 1
        assert [c.clicks for c in store.click_counts_by_rank(2)] == [0, 1]
    finally:
        store.close()
