"""Running counts of what the store holds, kept in the transaction of each write, so a
status read (``GET /v1/loop``, polled every second by a dashboard or a monitor) costs the
same on the first day and after a million searches.

The ``tallies`` table holds one row per (kind, key, shard): ``searches`` by the version
served (key; "" for raw), ``events`` by action. ``shard`` spreads the writers: each
replica adds its searches to rows of its own (its replica id), so replicas logging at
once never wait on one hot row; events are written under their own lock anyway
(:mod:`tttembed.loop.clickstore`) and use one shard. A write adds exactly the rows it
inserted (a retried batch that inserts nothing adds nothing), in one transaction with
them: a count is never ahead of or behind its table. A store made before the table
gains it on opening, counted from its rows in the schema's transaction
(:func:`backfill`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

TABLE = """CREATE TABLE IF NOT EXISTS tallies (
    kind TEXT NOT NULL, tkey TEXT NOT NULL, shard TEXT NOT NULL, n BIGINT NOT NULL,
    PRIMARY KEY (kind, tkey, shard))"""
SEARCHES = "searches"
EVENTS = "events"
#: The row that says the table was filled from the store's rows (a store made before it).
_DONE = ("tallied", "", "")
_ADD = ("INSERT INTO tallies (kind, tkey, shard, n) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (kind, tkey, shard) DO UPDATE SET n = tallies.n + excluded.n")


def add(cur: Any, sql: Callable[[str], str], kind: str,
        counts: Iterable[tuple[tuple[str, str], int]]) -> None:
    """Add ``counts`` ((key, shard) -> n) to ``kind``'s tallies in the transaction of
    ``cur``, in key order (two writers lock shared rows in one order: no deadlock)."""
    rows = sorted((key, shard, int(n)) for (key, shard), n in counts if n)
    for key, shard, n in rows:
        cur.execute(sql(_ADD), (kind, key, shard, n))


def read(cur: Any, sql: Callable[[str], str], kind: str) -> dict[str, int]:
    """``kind``'s counts by key (summed over shards)."""
    cur.execute(sql("SELECT tkey, SUM(n) FROM tallies WHERE kind = ? GROUP BY tkey"), (kind,))
    return {str(k): int(n) for k, n in cur.fetchall() if int(n)}


def backfill(cur: Any, sql: Callable[[str], str]) -> bool:
    """Count a store's existing searches and events into ``tallies`` once (a store made
    before the table, or a new one: then there is nothing to count); True when it did."""
    cur.execute(sql("SELECT COUNT(*) FROM tallies WHERE kind = ?"), (_DONE[0],))
    if int(cur.fetchone()[0]):
        return False
    cur.execute("SELECT COALESCE(version, ''), replica, COUNT(*) FROM searches "
                "GROUP BY COALESCE(version, ''), replica")
    add(cur, sql, SEARCHES, [((str(v), str(r)), int(n)) for v, r, n in cur.fetchall()])
    cur.execute("SELECT action, COUNT(*) FROM events GROUP BY action")
    add(cur, sql, EVENTS, [((str(a), ""), int(n)) for a, n in cur.fetchall()])
    cur.execute(sql("INSERT INTO tallies (kind, tkey, shard, n) VALUES (?, ?, ?, 1)"), _DONE)
    return True


def searches_of(inserted: Iterable[tuple[str | None, str]]) -> Counter[tuple[str, str]]:
    """The ``searches`` counts of the inserted rows' (version, replica) pairs."""
    return Counter((version or "", replica) for version, replica in inserted)


__all__ = ["EVENTS", "SEARCHES", "TABLE", "add", "backfill", "read", "searches_of"]
