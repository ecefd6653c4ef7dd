"""issue 65 item 1: no index, key or unique constraint of the feedback store holds a
query's text (PostgreSQL refuses an index row over ~2.7 kB: a click on a long question
was a 500), on both backends; a store made by the previous release (its schema in
:mod:`tests.loop.v1_schema`) is migrated on opening, its rows kept."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest

from tests.loop.v1_schema import OLD_SCHEMA
from tttembed.loop.open import open_store
from tttembed.loop.rows import (
    ClickCaps,
    ClickReward,
    Event,
    Feedback,
    Reward,
    SearchLog,
    query_hash,
)
from tttembed.loop.store import Store

LENGTHS = (300, 3000, 6000, 20000)


def _text(n: int, seed: int = 0) -> str:
    """``n`` characters of words that do not compress (random letters)."""
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n))


@pytest.mark.parametrize("n", LENGTHS)
def test_every_row_of_a_long_query_is_stored(store: Store, n: int) -> None:
    """A search, a click, a label by search and by query, a judge reward, a click reward
    and a reservation of an ``n``-character query: each stored once, read back whole."""
    q = _text(n, seed=n)
    store.log_searches([SearchLog("s1", "t", q, 1.0, "v1", ("d1", "d2"))])
    got = store.add_events([Event("s1", "d1", "click", "sess", task="t", query=q, rank=1)],
                           caps=ClickCaps(per_query=1))
    assert got.stored == 1
    capped = store.add_events([Event("s2", "d1", "click", "sess", task="t", query=q,
                                     rank=1)], caps=ClickCaps(per_query=1))
    assert capped.capped == 1  # the per-query cap finds the text by its digest
    labels = [Feedback("t", q, "d1", 1.0, "s1"), Feedback("t", q, "d2", 0.0)]
    assert store.add_feedback(labels) == 2 and store.add_feedback(labels) == 0
    store.add_rewards([Reward("t", q, "d1", 0.8, 2.0)])
    store.add_click_rewards([ClickReward("t", q, "d1", 0.5, 1, 4, created=3.0)])
    store.add_click_rewards([ClickReward("t", q, "d1", 0.6, 2, 8, created=4.0)])
    pairs = [("t", q, "d2")]
    assert store.reserve("judge", 1, 10, partial=False, pairs=pairs) == 1
    store.mark_sent(pairs)
    assert store.recover(lambda t: False) == {"given_back": 0, "spent": 0, "lost": 1}
    assert store.prepaid(pairs) == {("t", q, "d2")}
    assert [s.query for s in store.searches()] == [q]
    assert {(f.query, f.doc_id) for f in store.feedback()} == {(q, "d1"), (q, "d2")}
    assert [(r.query, r.reward) for r in store.rewards()] == [(q, 0.8)]
    assert [(r.query, r.reward) for r in store.click_rewards()] == [(q, 0.6)]
    assert store.event_counts() == {"click": 1}


def _indexed_columns(store: Any) -> set[tuple[str, str]]:
    """(table, column) of every column any index, key or unique constraint holds."""
    out: set[tuple[str, str]] = set()
    with store._tx() as cur:
        if getattr(store, "path", None) is not None:
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in cur.fetchall():
                cur.execute(f"PRAGMA index_list({table})")
                for index in [r[1] for r in cur.fetchall()]:
                    cur.execute(f"PRAGMA index_info({index})")
                    out |= {(table, r[2]) for r in cur.fetchall()}
        else:
            cur.execute("SELECT t.relname, a.attname FROM pg_index i "
                        "JOIN pg_class t ON t.oid = i.indrelid "
                        "JOIN pg_attribute a ON a.attrelid = t.oid AND "
                        "a.attnum = ANY(i.indkey) "
                        "JOIN pg_namespace n ON n.oid = t.relnamespace "
                        "WHERE n.nspname = current_schema()")
            out |= {(str(t), str(c)) for t, c in cur.fetchall()}
    return out


def test_no_index_holds_a_query_text(store: Store) -> None:
    indexed = _indexed_columns(store)
    assert ("events", "qhash") in indexed and ("rewards", "qhash") in indexed
    assert not [tc for tc in indexed if tc[1] == "query"], indexed


def _old_store(spec: str) -> None:
    """Make a store as the previous release did, with a row in each table a query keys."""
    if spec.startswith("postgresql"):
        import psycopg

        conn: Any = psycopg.connect(spec)
        mark = "%s"
    else:
        conn = sqlite3.connect(spec)
        mark = "?"
    cur = conn.cursor()
    for sql in OLD_SCHEMA:
        cur.execute(sql)
    rows = {
        "searches": ("s1", "t", "old q", 1.0, "v1", '["d1", "d2"]', "search", "r1"),
        "feedback": [("s1", "d1", "t", "old q", "s1", 1.0, 2.0),
                     ("q\x1ft\x1fold q", "d2", "t", "old q", "", 0.0, 3.0)],
        "rewards": ("t", "old q", "d1", 0.7, 4.0, "judge", 1, 1),
        "reserved": ("sp1", "judge", "t", "old q", "d2", 1),
        "click_rewards": ("t", "old q", "d1", 0.4, 1, 5, 3.0, 0.01, 0.2, "ips", "harvest",
                          0, None, "clicks", 5.0, 1),
        "events": ("s1", "d1", "sess", "click", "c1", "t", "old q", 1, 1, 0.0, 6.0, 6.0),
    }
    for table, values in rows.items():
        for row in values if isinstance(values, list) else [values]:
            marks = ", ".join([mark] * len(row))
            cur.execute(f"INSERT INTO {table} VALUES ({marks})", row)
    cur.execute("INSERT INTO spend VALUES ('sp1', 'judge', 1, 4.0)")
    conn.commit()
    conn.close()


def test_a_store_of_the_previous_release_is_migrated(spec: str) -> None:
    _old_store(spec)
    store = open_store(spec)
    try:
        assert not [tc for tc in _indexed_columns(store) if tc[1] == "query"]
        assert [(s.search_id, s.query) for s in store.searches()] == [("s1", "old q")]
        assert [(f.doc_id, f.search_id) for f in store.feedback()] == [("d1", "s1"),
                                                                       ("d2", "")]
        # the label by query was re-keyed by digest: the same label again is no new row
        assert store.add_feedback([Feedback("t", "old q", "d2", 0.0),
                                   Feedback("t", "old q", "d1", 1.0, "s1")]) == 0
        assert [(r.query, r.reward) for r in store.rewards()] == [("old q", 0.7)]
        assert [(r.query, r.impressions) for r in store.click_rewards()] == [("old q", 5)]
        store.add_click_rewards([ClickReward("t", "old q", "d1", 0.5, 2, 9, created=7.0)])
        assert [r.impressions for r in store.click_rewards()] == [9]  # upserted, not new
        assert store.recover(lambda t: False) == {"given_back": 0, "spent": 0, "lost": 1}
        assert store.prepaid([("t", "old q", "d2")]) == {("t", "old q", "d2")}
        assert store.add_events([Event("s1", "d2", "click", "sess", task="t",
                                       query="old q", rank=2)],
                                caps=ClickCaps(per_query=1)).capped == 1
        assert store.event_counts() == {"click": 1}
    finally:
        store.close()
    again = open_store(spec)  # a second opening finds it migrated and changes nothing
    try:
        assert len(again.feedback()) == 2 and len(again.rewards()) == 1
    finally:
        again.close()


def test_query_hash_is_the_text_hash_of_the_stored_text() -> None:
    from tttembed.core.serial import text_hash

    assert query_hash("a b") == text_hash("a b") != query_hash("a  b")
    assert query_hash("a\x00b") == text_hash("a\ufffdb")  # as PostgreSQL holds it


def test_a_refused_row_is_store_refused_naming_why(store: Store) -> None:
    """issue 65 item 4: a row the database refuses is StoreRefused with the database's
    reason (a server answers it 503 in one log line), not the driver's error (a 500)."""
    from tttembed.core.errors import StoreRefused

    with store._tx() as cur:  # type: ignore[attr-defined]
        if getattr(store, "path", None) is not None:
            cur.execute("CREATE TRIGGER no_labels BEFORE INSERT ON feedback BEGIN "
                        "SELECT RAISE(ABORT, 'labels are closed'); END")
        else:
            cur.execute("ALTER TABLE feedback ADD CONSTRAINT labels_are_closed "
                        "CHECK (label < 0)")
    with pytest.raises(StoreRefused, match="refused the write.*labels.are.closed"):
        store.add_feedback([Feedback("t", "q", "d1", 1.0, "s1")])
    assert store.feedback() == []  # nothing kept; the store still answers
