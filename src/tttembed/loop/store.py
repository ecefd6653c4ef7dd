"""The closed loop's feedback store: the traffic log, explicit feedback and the judge's
rewards, shared by every serve replica and the learner.

The rows and the role (:class:`Store`) are in :mod:`tttembed.loop.rows` (re-exported
here); this module holds the SQL (SQLite: :mod:`tttembed.loop.sqlite`). Backends by spec
string, chosen in one place (:func:`tttembed.loop.open.open_store`): a path or
``sqlite:PATH`` (the default, ``DIR/loop.sqlite`` in the registry; WAL mode, any number of readers, one writer at a time) and ``postgresql://...``
(several replicas on several machines, by default the registry's own database;
:mod:`tttembed.loop.postgres`). Both run the same SQL (``?`` placeholders, rewritten for
the driver that wants ``%s``).

Tables:

- ``searches``: one row per served query (``search_id``, task, text, time, the served
  top-k ids as JSON, the version served, ``kind`` search or embeddings, the replica);
- ``feedback``: explicit labels in [0, 1], unique per (search id or query, document):
  a repeated POST stores nothing new;
- ``rewards``: the judge's rewards for (task, query text, document), each committed as it
  arrives (the ledger holds the paid-once record by text hashes; this is the loop's view,
  with ``paid`` (new to the ledger) and ``trusted`` (cleared by the drift audit));
- ``spend``: the judge budget's account: one row per reservation, written *before* the
  judge is asked, in one transaction with the check against the budget
  (:mod:`tttembed.loop.spend`, mixed in), so no learner can pay more than the budget.
- ``click_rewards``: each learning cycle's click rewards for (task, query text,
  document), ``source`` "clicks" (:class:`~tttembed.loop.rows.ClickReward`: the reward,
  its clicks, impressions and variance, the mode and the propensities' basis), upserted
  every cycle; a table of their own, so a judge reward for the same pair is never
  overwritten. ``trusted`` as for judge rewards: False when written while promotions
  are frozen, cleared by :meth:`SQLStore.distrust`; a distrusted row regains trust only
  when a cycle that is not frozen re-estimates it from more impressions than it had;
- ``events``, ``impressions``, ``interventions``: what users did with served results,
  what a client showed when it was not the served list, and the searches whose list was
  randomised (:mod:`tttembed.loop.clickstore`, mixed in; a store older than them gains
  them on opening).

The learner reads traffic incrementally (:meth:`SQLStore.searches_after`,
``feedback_after``, ``rewards_after``: rows by ``(created, key)`` after a cursor, through
an index on ``created``), so one step costs what is new, not the whole history.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from tttembed.core.errors import StoreRefused
from tttembed.loop import schema, tallies
from tttembed.loop.clickstore import ClickSQL
from tttembed.loop.forget import ForgetSQL
from tttembed.loop.prune import PruneSQL
from tttembed.loop.rows import (
    PAGE,
    SPEND_SOURCES,
    START,
    ClickCaps,
    ClickReward,
    Cursor,
    Event,
    EventsStored,
    Feedback,
    Impression,
    RankClicks,
    Reward,
    SearchLog,
    Store,
    cursor_floor,
    query_hash,
)
from tttembed.loop.spend import REASKED_KIND, SpendSQL

_CLICK_REWARD_COLUMNS = ("task, query, doc_id, reward, clicks, impressions, exposure, "
                         "variance, raw, mode, basis, interventions, judge, source, created, "
                         "trusted")
#: An upsert keeps a distrusted row distrusted unless the new estimate is trusted and
#: rests on more impressions than the distrusted one (new evidence).
_CLICK_UPSERT = (
    f"INSERT INTO click_rewards ({_CLICK_REWARD_COLUMNS}, qhash) VALUES "
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task, qhash, doc_id) "
    "DO UPDATE SET reward = excluded.reward, clicks = excluded.clicks, "
    "impressions = excluded.impressions, exposure = excluded.exposure, "
    "variance = excluded.variance, raw = excluded.raw, mode = excluded.mode, "
    "basis = excluded.basis, interventions = excluded.interventions, "
    "judge = excluded.judge, source = excluded.source, created = excluded.created, "
    "trusted = CASE WHEN excluded.trusted = 1 AND (click_rewards.trusted = 1 OR "
    "excluded.impressions > click_rewards.impressions) THEN 1 ELSE 0 END")
#: A table's rows that still have their text (``store forget`` blanks the text of a
#: forgotten user's questions in rows it keeps: :mod:`tttembed.loop.forget`).
_LEARNABLE = "(SELECT * FROM {0} WHERE query <> '') AS {0}"
#: A search row as :func:`_search` reads it (with its intervention, "" when none).
_SEARCH = ("SELECT s.search_id, s.task, s.query, s.created, s.version, s.ids, s.kind, "
           "s.replica, COALESCE(v.kind, '') FROM searches s "
           "LEFT JOIN interventions v ON v.search_id = s.search_id")



class SQLStore(ClickSQL, SpendSQL, PruneSQL, ForgetSQL):
    """The SQL both backends run; subclasses give ``_connect`` and the placeholder (the
    click tables' SQL is :class:`~tttembed.loop.clickstore.ClickSQL`'s, the spend
    account's :class:`~tttembed.loop.spend.SpendSQL`'s)."""

    url = ""
    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Any = None

    # -- plumbing ---------------------------------------------------------------------
    def _connect(self) -> Any:
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            conn = self._conn
            try:
                cur = conn.cursor()
                yield cur
                conn.commit()
            except BaseException as exc:
                with suppress(Exception):  # a lost connection cannot roll back: the
                    conn.rollback()        # server did; the first error is the one to see
                if self._refusal(exc):
                    reason = " ".join(f"{type(exc).__name__}: {exc}".split())
                    raise StoreRefused(f"the feedback store {self.url} refused the write: "
                                       f"{reason} (nothing of this call was kept)") from exc
                raise

    def _refusal(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the database refusing what was written (a row over a limit,
        a constraint, a full disk), not a bug of the caller (SQLite here; PostgreSQL
        overrides)."""
        import sqlite3

        return isinstance(exc, (sqlite3.IntegrityError, sqlite3.DataError)) or (
            isinstance(exc, sqlite3.OperationalError) and ("full" in str(exc)
                                                           or "too big" in str(exc)))

    def _init_schema(self) -> None:
        with self._tx() as cur:
            cur.execute("BEGIN IMMEDIATE")  # a migration is one transaction (schema.py)
            schema.create_schema(cur, self._sql)

    def _serialize(self, cur: Any, what: str = "spend") -> None:
        """Make the transaction of ``cur`` the only writer of ``what`` (the spend account,
        or the events) until it commits (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL
        overrides)."""
        cur.execute("BEGIN IMMEDIATE")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- traffic ----------------------------------------------------------------------
    def log_searches(self, rows: Sequence[SearchLog]) -> None:
        if not rows:
            return
        insert = self._sql("INSERT INTO searches (search_id, task, query, created, version, "
                           "ids, kind, replica, session_id, client_id) VALUES (?, ?, ?, ?, ?, "
                           "?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
        with self._tx() as cur:
            new = []
            for r in rows:  # one by one: the tallies count what was inserted, not retried
                cur.execute(insert, (r.search_id, r.task, r.query, r.created, r.version,
                                     json.dumps(list(r.ids)), r.kind, r.replica,
                                     r.session, r.client))
                if int(cur.rowcount or 0) > 0:
                    new.append((r.version, r.replica))
            tallies.add(cur, self._sql, tallies.SEARCHES, tallies.searches_of(new).items())
            marked = [(r.search_id, r.intervention, r.created) for r in rows if r.intervention]
            if marked:
                cur.executemany(self._sql(
                    "INSERT INTO interventions (search_id, kind, created) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING"), marked)

    def get_search(self, search_id: str) -> SearchLog | None:
        with self._tx() as cur:
            cur.execute(self._sql(f"{_SEARCH} WHERE s.search_id = ?"), (search_id,))
            row = cur.fetchone()
        return None if row is None else _search(row)

    def searches(self, since: float = 0.0) -> list[SearchLog]:
        with self._tx() as cur:
            cur.execute(self._sql(f"{_SEARCH} WHERE s.created >= ? ORDER BY s.created, "
                                  "s.search_id"), (since,))
            rows = cur.fetchall()
        return [_search(r) for r in rows]

    # -- feedback ---------------------------------------------------------------------
    def add_feedback(self, rows: Sequence[Feedback]) -> int:
        """Store each label once (by search id or query, and document): the count new."""
        new = 0
        with self._tx() as cur:
            for f in rows:
                cur.execute(self._sql(
                    "INSERT INTO feedback (fkey, doc_id, task, query, qhash, search_id, "
                    "label, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
                    (f.key, f.doc_id, f.task, f.query, query_hash(f.query), f.search_id,
                     float(f.label),
                     f.created or time.time()))
                new += max(int(cur.rowcount or 0), 0)
        return new

    def feedback(self) -> list[Feedback]:
        with self._tx() as cur:
            cur.execute("SELECT task, query, doc_id, label, search_id, created FROM feedback "
                        "ORDER BY created")
            rows = cur.fetchall()
        return [Feedback(r[0], r[1], r[2], float(r[3]), r[4], float(r[5])) for r in rows
                if r[1]]  # a forgotten text: not learnable

    # -- rewards ----------------------------------------------------------------------
    def add_rewards(self, rows: Sequence[Reward]) -> None:
        if not rows:
            return
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
        with self._tx() as cur:  # one statement: a query's rewards are a handful of rows
            cur.execute(self._sql(
                "INSERT INTO rewards (task, qhash, query, doc_id, reward, created, source, "
                f"paid, trusted) VALUES {values} ON CONFLICT DO NOTHING"),
                [v for r in rows for v in (r.task, query_hash(r.query), r.query, r.doc_id,
                                           _finite(r.reward),
                                           r.created, r.source, int(r.paid), int(r.trusted))])

    def rewards(self, trusted_only: bool = True) -> list[Reward]:
        where = " WHERE trusted = 1" if trusted_only else ""
        with self._tx() as cur:
            cur.execute("SELECT task, query, doc_id, reward, created, source, paid, trusted "
                        f"FROM rewards{where} ORDER BY created")
            rows = cur.fetchall()
        return [_reward(r) for r in rows if r[1]]  # a forgotten text: not learnable

    def distrust(self, since: float) -> int:
        """Clear ``trusted`` on every reward judged, and every click reward estimated, at
        or after ``since`` (drift); the count of rows distrusted."""
        n = 0
        with self._tx() as cur:
            for table in ("rewards", "click_rewards"):
                cur.execute(self._sql(f"UPDATE {table} SET trusted = 0 WHERE created >= ? "
                                      "AND trusted = 1"), (since,))
                n += max(int(cur.rowcount or 0), 0)
        return n

    # -- click rewards ----------------------------------------------------------------
    def add_click_rewards(self, rows: Sequence[ClickReward]) -> int:
        """Upsert a cycle's click rewards (one row per (task, query, doc); trust as the
        module docstring says); the count written."""
        if not rows:
            return 0
        with self._tx() as cur:
            cur.executemany(self._sql(_CLICK_UPSERT), [
                (r.task, r.query, r.doc_id, float(r.reward), int(r.clicks),
                 int(r.impressions), _finite(r.exposure), _finite(r.variance),
                 _finite(r.raw), r.mode, r.basis, int(r.interventions),
                 None if r.judge is None else _finite(r.judge), r.source, float(r.created),
                 int(r.trusted), query_hash(r.query)) for r in rows])
        return len(rows)

    def click_rewards(self, trusted: bool | None = None) -> list[ClickReward]:
        """The stored click rewards (``trusted`` True: trusted ones only, False: the
        distrusted ones only, None: all), by (task, query, doc)."""
        where = "" if trusted is None else f" WHERE trusted = {int(bool(trusted))}"
        with self._tx() as cur:
            cur.execute(f"SELECT {_CLICK_REWARD_COLUMNS} FROM click_rewards{where} "
                        "ORDER BY task, query, doc_id")
            rows = cur.fetchall()
        return [_click_reward(r) for r in rows]

    def click_reward_counts(self) -> dict[str, int]:
        """Stored click rewards: ``click_rewards`` in all, ``click_untrusted`` of them
        (apart from :meth:`counts`, whose keys callers compare whole)."""
        with self._tx() as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(1 - trusted), 0) FROM click_rewards")
            total, untrusted = cur.fetchone()
        return {"click_rewards": int(total), "click_untrusted": int(untrusted)}

    # -- incremental reads ------------------------------------------------------------
    def searches_after(self, cursor: Cursor, limit: int = PAGE) -> list[SearchLog]:
        """Logged searches after ``cursor`` (by created, then search id), oldest first."""
        with self._tx() as cur:
            cur.execute(self._sql(
                f"{_SEARCH} WHERE (s.created, s.search_id) > (?, ?) "
                "ORDER BY s.created, s.search_id LIMIT ?"),
                (cursor_floor(cursor), cursor[1], int(limit)))
            rows = cur.fetchall()
        return [_search(r) for r in rows]

    def feedback_after(self, cursor: Cursor, limit: int = PAGE) -> list[Feedback]:
        """Labels after ``cursor`` (by created, then their key and document)."""
        rows = self._after("SELECT task, query, doc_id, label, search_id, created FROM "
                           f"{_LEARNABLE.format('feedback')}", "fkey || ? || doc_id", 1,
                           cursor, limit)
        return [Feedback(r[0], r[1], r[2], float(r[3]), r[4], float(r[5])) for r in rows]

    def rewards_after(self, cursor: Cursor, limit: int = PAGE) -> list[Reward]:
        """Rewards (trusted or not) after ``cursor`` (by created, then the pair)."""
        rows = self._after("SELECT task, query, doc_id, reward, created, source, paid, "
                           f"trusted FROM {_LEARNABLE.format('rewards')}",
                           "task || ? || query || ? || doc_id", 2, cursor, limit)
        return [_reward(r) for r in rows]

    def _after(self, select: str, key: str, seps: int, cursor: Cursor, limit: int) -> list[Any]:
        """``select``'s rows after ``cursor`` in (created, ``key``) order: ``key`` an SQL
        expression joining the row's key columns with ``seps`` separator parameters
        (compared and ordered alike, so a page boundary inside equal times skips nothing)."""
        sep = ("\x1e",) * seps
        with self._tx() as cur:
            cur.execute(self._sql(f"{select} WHERE created >= ? AND (created > ? OR {key} > ?) "
                                  f"ORDER BY created, {key} LIMIT ?"),
                        (cursor_floor(cursor), cursor_floor(cursor), *sep, cursor[1], *sep,
                         int(limit)))
            return list(cur.fetchall())

    def counts(self) -> dict[str, Any]:
        """Rows by table; searches (``by_version``) from their running counts
        (:mod:`tttembed.loop.tallies`: a read that does not grow with the traffic kept),
        the rest counted (they grow with labels and the judge budget, not with traffic)."""
        with self._tx() as cur:
            by_version = tallies.read(cur, self._sql, tallies.SEARCHES)
            out: dict[str, Any] = {"searches": sum(by_version.values()), "reasked": sum(
                tallies.read(cur, self._sql, REASKED_KIND).values())}
            for name, sql in (("feedback", "SELECT COUNT(*) FROM feedback"),
                              ("rewards", "SELECT COUNT(*) FROM rewards"),
                              ("paid", "SELECT COALESCE(SUM(paid), 0) FROM rewards"),
                              ("untrusted", "SELECT COUNT(*) FROM rewards WHERE trusted = 0")):
                cur.execute(sql)
                out[name] = int(cur.fetchone()[0])
        out["by_version"] = {(v or "raw"): n for v, n in by_version.items()}
        return out


def _reward(r: Sequence[Any]) -> Reward:
    return Reward(r[0], r[1], r[2], float("nan") if r[3] is None else float(r[3]),
                  float(r[4]), r[5], bool(r[6]), bool(r[7]))


def _click_reward(r: Sequence[Any]) -> ClickReward:
    def num(x: Any) -> float:
        return float("nan") if x is None else float(x)

    return ClickReward(r[0], r[1], r[2], float(r[3]), int(r[4]), int(r[5]), num(r[6]),
                       num(r[7]), num(r[8]), r[9], r[10], int(r[11]),
                       None if r[12] is None else float(r[12]), float(r[14]), bool(r[15]),
                       r[13])


def _finite(value: float) -> float | None:
    return None if value != value else float(value)


def _search(row: Sequence[Any]) -> SearchLog:
    return SearchLog(row[0], row[1], row[2], float(row[3]), row[4],
                     tuple(json.loads(row[5])), row[6], row[7], row[8] or "")


__all__ = ["PAGE", "SPEND_SOURCES", "START", "ClickCaps", "ClickReward", "Cursor", "Event",
           "EventsStored", "Feedback", "Impression", "RankClicks", "Reward", "SQLStore",
           "SearchLog", "Store"]
