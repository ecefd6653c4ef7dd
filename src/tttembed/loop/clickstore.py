"""The store's click tables (mixed into :class:`tttembed.loop.store.SQLStore`, so SQLite
and PostgreSQL run the same SQL):

- ``events``: one row per (search, doc, session, action): a click, a dwell, or any other
  action a client names; a retried POST stores nothing twice (``ON CONFLICT DO NOTHING``
  on that primary key). Each row carries the search's task and query text, and the
  text's digest ``qhash`` that the per-query cap reads through ``events_query`` (never
  the text, which can be longer than an index row: :mod:`tttembed.loop.schema`), and
  the doc's 1-based rank in the search's impression; ``created`` (the server's time)
  orders incremental reads;
- ``impressions``: what a client showed for a search when it was not the served list;
- ``interventions``: searches whose served list was randomised (``randpair:R``), written
  in the same transaction as the search (:meth:`SQLStore.log_searches`).

The schema is :mod:`tttembed.loop.schema`'s: a store written before these tables opens
as it is and gains them. Event writes run serialised (SQLite ``BEGIN IMMEDIATE``, PostgreSQL an
advisory lock of their own), so the caps hold however many replicas post at once.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from tttembed.loop import tallies
from tttembed.loop.clicks.intervention import INTERLEAVE, Intervention
from tttembed.loop.rows import (
    CHAIN_TASK,
    CLICK,
    CTR_WINDOW,
    PAGE,
    ClickCaps,
    Cursor,
    Event,
    EventsStored,
    Impression,
    RankClicks,
    Shown,
    cursor_floor,
    query_hash,
)

_EVENT_COLUMNS = ("search_id, doc_id, action, session_id, client_id, task, query, shown_rank, "
                  "ordinal, dwell_ms, event_time, created")
#: Search ids per ``IN (...)`` list when the events of a page of searches are read.
_CHUNK = 500


class ClickSQL:
    """Events, impressions and interventions; needs the host's ``_tx``, ``_sql``,
    ``_serialize`` and ``_after`` (:class:`tttembed.loop.store.SQLStore`)."""

    #: The SQL of a JSON array's length (PostgreSQL casts the text column first).
    json_len = "json_array_length({})"

    if TYPE_CHECKING:
        def _tx(self) -> AbstractContextManager[Any]: ...
        def _sql(self, sql: str) -> str: ...
        def _serialize(self, cur: Any, what: str = ...) -> None: ...
        def _after(self, select: str, key: str, seps: int, cursor: Cursor,
                   limit: int) -> list[Any]: ...

    # -- writes -----------------------------------------------------------------------
    def add_events(self, rows: Sequence[Event], impressions: Sequence[Impression] = (),
                   caps: ClickCaps = ClickCaps()) -> EventsStored:
        """Store ``impressions`` (each once per search) and ``rows`` in order, each once
        per (search, doc, session, action) and within ``caps``; all in one transaction."""
        if not rows and not impressions:
            return EventsStored()
        now = time.time()
        stored = duplicates = capped = shown = 0
        actions: Counter[str] = Counter()
        with self._tx() as cur:
            self._serialize(cur, "events")
            for imp in impressions:
                cur.execute(self._sql("INSERT INTO impressions (search_id, ids, created) "
                                      "VALUES (?, ?, ?) ON CONFLICT DO NOTHING"),
                            (imp.search_id, json.dumps(list(imp.ids)), imp.created or now))
                shown += max(int(cur.rowcount or 0), 0)
            for e in rows:
                if self._stored(cur, e):
                    duplicates += 1
                elif self._over_cap(cur, e, caps):
                    capped += 1
                else:
                    cur.execute(self._sql(
                        f"INSERT INTO events ({_EVENT_COLUMNS}, qhash) VALUES (?, ?, ?, ?, ?, "
                        "?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
                        (e.search_id, e.doc_id, e.action, e.session, e.client, e.task,
                         e.query, int(e.rank), int(e.ordinal), float(e.dwell_ms),
                         e.at or now, e.created or now, query_hash(e.query)))
                    if int(cur.rowcount or 0) > 0:
                        stored += 1
                        actions[e.action] += 1
            tallies.add(cur, self._sql, tallies.EVENTS,
                        [((a, ""), n) for a, n in actions.items()])
        return EventsStored(stored, duplicates, capped, shown)

    def _stored(self, cur: Any, e: Event) -> bool:
        cur.execute(self._sql("SELECT 1 FROM events WHERE search_id = ? AND doc_id = ? AND "
                              "session_id = ? AND action = ?"),
                    (e.search_id, e.doc_id, e.session, e.action))
        return cur.fetchone() is not None

    def _count(self, cur: Any, where: str, args: tuple[Any, ...]) -> int:
        cur.execute(self._sql(f"SELECT COUNT(*) FROM events WHERE {where}"), args)
        return int(cur.fetchone()[0])

    def _over_cap(self, cur: Any, e: Event, caps: ClickCaps) -> bool:
        same_search = "search_id = ? AND session_id = ?"
        if self._count(cur, same_search, (e.search_id, e.session)) >= caps.events_per_search:
            return True
        if e.action != CLICK:
            return False
        if self._count(cur, f"{same_search} AND action = ?",
                       (e.search_id, e.session, CLICK)) >= caps.per_search:
            return True
        return bool(e.session) and self._count(
            cur, "session_id = ? AND task = ? AND qhash = ? AND action = ?",
            (e.session, e.task, query_hash(e.query), CLICK)) >= caps.per_query

    # -- reads ------------------------------------------------------------------------
    def get_impression(self, search_id: str) -> Impression | None:
        with self._tx() as cur:
            cur.execute(self._sql("SELECT search_id, ids, created FROM impressions WHERE "
                                  "search_id = ?"), (search_id,))
            row = cur.fetchone()
        return None if row is None else Impression(row[0], tuple(json.loads(row[1])),
                                                   float(row[2]))

    def has_events(self, search_id: str) -> bool:
        """Whether any event of ``search_id`` is stored (an impression must come first)."""
        with self._tx() as cur:
            cur.execute(self._sql("SELECT 1 FROM events WHERE search_id = ? LIMIT 1"),
                        (search_id,))
            return cur.fetchone() is not None

    def events_after(self, cursor: Cursor, limit: int = PAGE) -> list[Event]:
        """Events after ``cursor`` by (created, :attr:`Event.key`), oldest first."""
        rows = self._after(f"SELECT {_EVENT_COLUMNS} FROM events",
                           "search_id || ? || doc_id || ? || session_id || ? || action", 3,
                           cursor, limit)
        return [Event(r[0], r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]), int(r[8]),
                      float(r[9]), float(r[10]), float(r[11])) for r in rows]

    def shown_after(self, cursor: Cursor, limit: int = PAGE,
                    before: float | None = None) -> list[Shown]:
        """What was shown, rank by rank, for the searches after ``cursor`` (by created,
        then search id; at most ``limit`` searches, each read whole; only those created
        before ``before``, so their clicks have arrived: pass ``now - CLICK_SETTLE_S``):
        the explicit impression where a client posted one, else the served list; one list
        per session that sent events (one with session "" when none did)."""
        with self._tx() as cur:
            cur.execute(self._sql(
                "SELECT s.search_id, s.task, s.query, s.created, s.version, s.ids, "
                "COALESCE(v.kind, ''), p.ids FROM searches s "
                "LEFT JOIN interventions v ON v.search_id = s.search_id "
                "LEFT JOIN impressions p ON p.search_id = s.search_id "
                "WHERE (s.created, s.search_id) > (?, ?) AND s.created < ? AND s.task <> ? "
                "AND (p.search_id IS NOT NULL OR (s.kind = 'search' AND s.ids <> '[]')) "
                "ORDER BY s.created, s.search_id LIMIT ?"),
                (cursor_floor(cursor), cursor[1], 1e300 if before is None else float(before),
                 CHAIN_TASK, int(limit)))
            searches = cur.fetchall()
            acts = self._events_of(cur, [str(r[0]) for r in searches])
        return [shown for row in searches for shown in _expand(row, acts.get(str(row[0]), []))]

    def _events_of(self, cur: Any, ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for part in _chunks(ids, _CHUNK):
            marks = ", ".join("?" * len(part))
            cur.execute(self._sql("SELECT search_id, doc_id, session_id, action, dwell_ms "
                                  f"FROM events WHERE search_id IN ({marks})"), part)
            for row in cur.fetchall():
                out.setdefault(str(row[0]), []).append(tuple(row))
        return out

    def click_counts_by_rank(self, k: int = 10, window: int = CTR_WINDOW) -> list[RankClicks]:
        """Impressions and clicks at ranks 1..``k`` over the last ``window`` searches (so
        a status read costs the same however much traffic is kept), per impression: a
        list counts once per session that acted on its search (once when none did), as
        the learner reads it (:meth:`shown_after`), so a rank's rate never exceeds 1."""
        lists: dict[int, int] = {}
        with self._tx() as cur:
            floor = self._window_floor(cur, window)
            sessions = ("SELECT e.search_id, COUNT(DISTINCT e.session_id) AS n FROM events e "
                        "JOIN searches w ON w.search_id = e.search_id WHERE w.created >= ? "
                        "GROUP BY e.search_id")
            cur.execute(self._sql(
                f"SELECT {self.json_len.format('COALESCE(p.ids, s.ids)')}, "
                f"SUM(COALESCE(e.n, 1)) FROM searches s "
                "LEFT JOIN impressions p ON p.search_id = s.search_id "
                f"LEFT JOIN ({sessions}) e ON e.search_id = s.search_id "
                "WHERE s.created >= ? AND (s.kind = 'search' OR p.search_id IS NOT NULL) "
                "GROUP BY 1"), (floor, floor))
            for n, count in cur.fetchall():
                lists[int(n)] = lists.get(int(n), 0) + int(count)
            cur.execute(self._sql(
                "SELECT e.shown_rank, COUNT(*) FROM events e JOIN searches s ON "
                "s.search_id = e.search_id WHERE s.created >= ? AND e.action = ? AND "
                "e.shown_rank BETWEEN 1 AND ? GROUP BY e.shown_rank"), (floor, CLICK, int(k)))
            clicks = {int(r): int(n) for r, n in cur.fetchall()}
        return [RankClicks(r, sum(c for n, c in lists.items() if n >= r), clicks.get(r, 0))
                for r in range(1, int(k) + 1)]

    def _window_floor(self, cur: Any, window: int) -> float:
        """The time of the ``window``-th newest search (through the index on ``created``;
        -1e300 when fewer are kept)."""
        cur.execute(self._sql("SELECT created FROM searches ORDER BY created DESC "
                              "LIMIT 1 OFFSET ?"), (max(int(window), 1) - 1,))
        row = cur.fetchone()
        return -1e300 if row is None else float(row[0])

    def unsettled(self, after: float) -> tuple[int, float | None]:
        """Searches served after ``after`` (their clicks still settling) and the time the
        oldest of them was served (None: none)."""
        with self._tx() as cur:
            cur.execute(self._sql("SELECT COUNT(*), MIN(created) FROM searches WHERE "
                                  "kind = 'search' AND created > ?"), (float(after),))
            n, oldest = cur.fetchone()
        return int(n), None if oldest is None else float(oldest)

    def event_counts(self) -> dict[str, int]:
        """Stored events by action (their running counts: :mod:`tttembed.loop.tallies`)."""
        with self._tx() as cur:
            return tallies.read(cur, self._sql, tallies.EVENTS)


def _expand(row: Sequence[Any], acts: list[tuple[Any, ...]]) -> Iterator[Shown]:
    """One search's rows: each rank of its impression, per session that acted on it.
    Their strings are interned: the learner's click window holds up to a million of these
    records, and one text asked many times (a long question: kilobytes) or one document
    shown in many lists is then one string in memory, not one per record."""
    sid, created, kind = str(row[0]), float(row[3]), row[6]
    task, query, version = (sys.intern(str(v)) for v in (row[1], row[2], row[4] or "raw"))
    served, explicit = row[5], row[7]
    ids = [sys.intern(str(d)) for d in json.loads(explicit if explicit is not None else served)]
    sessions = sorted({sys.intern(str(a[2])) for a in acts}) or [""]
    for session in sessions:
        mine = [a for a in acts if a[2] == session]
        clicked = {a[1] for a in mine if a[3] == CLICK}
        dwell: dict[str, float] = {}
        for a in mine:
            dwell[a[1]] = max(dwell.get(a[1], 0.0), float(a[4]))
        test, teams = _interleaved(str(kind), len(ids))
        for rank, doc in enumerate(ids, 1):
            yield Shown(sid, task, query, doc, rank, doc in clicked,
                        teams[rank - 1] if test else version, session, bool(kind),
                        dwell.get(doc, 0.0), created, test)


def _interleaved(kind: str, n: int) -> tuple[str, str]:
    """(candidate, teams) of an ``interleave:V:TEAMS`` intervention of ``n`` ranks, else
    ("", "")."""
    done = Intervention.parse(kind)
    if done is not None and done.kind == INTERLEAVE and len(done.teams) == n:
        return done.candidate, done.teams
    return "", ""


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


__all__ = ["ClickSQL"]
