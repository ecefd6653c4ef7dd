"""The feedback store's schema (both backends run it) and the migration of a store made
by an earlier release.

No index, key or unique constraint holds a query's text: PostgreSQL refuses an index row
over ~2.7 kB (``index row size ... exceeds btree version 4 maximum 2704``), and RAG
questions are longer. A row that a query keys holds the text's digest in ``qhash``
(:func:`tttembed.loop.rows.query_hash`, the sha256 of the text) and the text itself in
``query``, a column that is never indexed; a label given by query is keyed
``q\\x1fTASK\\x1f#DIGEST`` (:attr:`tttembed.loop.rows.Feedback.key`).

A store made before ``qhash`` (the tables ``feedback``, ``rewards``, ``reserved``,
``click_rewards``, ``events`` without it) is migrated on opening, in the transaction that
creates the schema (PostgreSQL: under the schema's advisory lock, so one replica
migrates and the others find it done): each such table's rows are read, the table is
dropped and made anew, and the rows are written back with their digests. Replicas of
the earlier release cannot write to a migrated store: upgrade them together.

The running counts a status read takes (:mod:`tttembed.loop.tallies`) are counted from a
store's rows once, when a store made before them first opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tttembed.loop import tallies
from tttembed.loop.rows import query_hash

TABLES = (
    """CREATE TABLE IF NOT EXISTS searches (
        search_id TEXT PRIMARY KEY, task TEXT NOT NULL, query TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, version TEXT, ids TEXT NOT NULL,
        kind TEXT NOT NULL, replica TEXT NOT NULL,
        session_id TEXT NOT NULL DEFAULT '', client_id TEXT NOT NULL DEFAULT '')""",
    """CREATE TABLE IF NOT EXISTS feedback (
        fkey TEXT NOT NULL, doc_id TEXT NOT NULL, task TEXT NOT NULL, query TEXT NOT NULL,
        qhash TEXT NOT NULL, search_id TEXT NOT NULL, label DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL, PRIMARY KEY (fkey, doc_id))""",
    """CREATE TABLE IF NOT EXISTS rewards (
        task TEXT NOT NULL, qhash TEXT NOT NULL, doc_id TEXT NOT NULL, query TEXT NOT NULL,
        reward DOUBLE PRECISION, created DOUBLE PRECISION NOT NULL, source TEXT NOT NULL,
        paid INTEGER NOT NULL, trusted INTEGER NOT NULL,
        PRIMARY KEY (task, qhash, doc_id))""",
    """CREATE TABLE IF NOT EXISTS spend (
        id TEXT PRIMARY KEY, source TEXT NOT NULL, pairs INTEGER NOT NULL,
        created DOUBLE PRECISION NOT NULL)""",
    # the pairs of each open reservation (spend.py): sent 0 before the judge is asked,
    # 1 once it is, 2 when a kill lost its answer (paid: not charged again)
    """CREATE TABLE IF NOT EXISTS reserved (
        spend_id TEXT NOT NULL, source TEXT NOT NULL, task TEXT NOT NULL,
        qhash TEXT NOT NULL, doc_id TEXT NOT NULL, query TEXT NOT NULL,
        sent INTEGER NOT NULL, PRIMARY KEY (task, qhash, doc_id))""",
    # the pairs being paid, one row per (judge, query text, passage text) digest (spend.py:
    # a pair two learners judge at once under two tasks is claimed, and paid, once)
    """CREATE TABLE IF NOT EXISTS claims (
        ckey TEXT PRIMARY KEY, task TEXT NOT NULL, qhash TEXT NOT NULL,
        doc_id TEXT NOT NULL, owner TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS click_rewards (
        task TEXT NOT NULL, qhash TEXT NOT NULL, doc_id TEXT NOT NULL, query TEXT NOT NULL,
        reward DOUBLE PRECISION NOT NULL, clicks INTEGER NOT NULL,
        impressions INTEGER NOT NULL, exposure DOUBLE PRECISION, variance DOUBLE PRECISION,
        raw DOUBLE PRECISION, mode TEXT NOT NULL, basis TEXT NOT NULL,
        interventions INTEGER NOT NULL, judge DOUBLE PRECISION, source TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, trusted INTEGER NOT NULL,
        PRIMARY KEY (task, qhash, doc_id))""",
    """CREATE TABLE IF NOT EXISTS interventions (
        search_id TEXT PRIMARY KEY, kind TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS impressions (
        search_id TEXT PRIMARY KEY, ids TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS events (
        search_id TEXT NOT NULL, doc_id TEXT NOT NULL, session_id TEXT NOT NULL,
        action TEXT NOT NULL, client_id TEXT NOT NULL, task TEXT NOT NULL,
        query TEXT NOT NULL, qhash TEXT NOT NULL, shown_rank INTEGER NOT NULL,
        ordinal INTEGER NOT NULL, dwell_ms DOUBLE PRECISION NOT NULL,
        event_time DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (search_id, doc_id, session_id, action))""",
    # the search ids ``store forget`` removed and their texts' digests (no text): a
    # running learner drops them from its click window and its judge queue (:mod:`tttembed.loop.forget`)
    """CREATE TABLE IF NOT EXISTS forgotten (
        search_id TEXT PRIMARY KEY, qhash TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    tallies.TABLE,
)
INDEXES = (
    "CREATE INDEX IF NOT EXISTS searches_created ON searches (created)",
    "CREATE INDEX IF NOT EXISTS claims_pair ON claims (task, qhash, doc_id)",
    # the learner's cursor: (created, search_id) in index order, whatever the statistics
    "CREATE INDEX IF NOT EXISTS searches_cursor ON searches (created, search_id)",
    "CREATE INDEX IF NOT EXISTS rewards_created ON rewards (created)",
    "CREATE INDEX IF NOT EXISTS feedback_created ON feedback (created)",
    "CREATE INDEX IF NOT EXISTS click_rewards_created ON click_rewards (created)",
    "CREATE INDEX IF NOT EXISTS events_created ON events (created)",
    # the per-query click cap (clickstore.py): by the query's digest, never its text
    "CREATE INDEX IF NOT EXISTS events_query ON events (session_id, task, qhash)",
    # retention prunes by time (:mod:`tttembed.loop.prune`)
    "CREATE INDEX IF NOT EXISTS impressions_created ON impressions (created)",
    "CREATE INDEX IF NOT EXISTS interventions_created ON interventions (created)",
    "CREATE INDEX IF NOT EXISTS forgotten_created ON forgotten (created)",
    # ``store forget``: a user's searches and events, indexed only where an id is given
    "CREATE INDEX IF NOT EXISTS searches_session ON searches (session_id) "
    "WHERE session_id <> ''",
    "CREATE INDEX IF NOT EXISTS searches_client ON searches (client_id) "
    "WHERE client_id <> ''",
    "CREATE INDEX IF NOT EXISTS events_client ON events (client_id) WHERE client_id <> ''",
)
#: Columns a later release added to a table (an earlier store gains them on opening).
ADDED = {"searches": ("session_id TEXT NOT NULL DEFAULT ''",
                      "client_id TEXT NOT NULL DEFAULT ''")}
#: The tables whose rows a query keys, and the columns an earlier release gave them.
KEYED = {
    "feedback": ("fkey", "doc_id", "task", "query", "search_id", "label", "created"),
    "rewards": ("task", "query", "doc_id", "reward", "created", "source", "paid",
                "trusted"),
    "reserved": ("spend_id", "source", "task", "query", "doc_id", "sent"),
    "click_rewards": ("task", "query", "doc_id", "reward", "clicks", "impressions",
                      "exposure", "variance", "raw", "mode", "basis", "interventions",
                      "judge", "source", "created", "trusted"),
    "events": ("search_id", "doc_id", "session_id", "action", "client_id", "task", "query",
               "shown_rank", "ordinal", "dwell_ms", "event_time", "created"),
}
_BY_QUERY = "q\x1f"


def create_schema(cur: Any, sql: Callable[[str], str]) -> dict[str, int]:
    """Create the schema in the transaction of ``cur`` (``sql`` adapts placeholders),
    migrating the tables an earlier release made: the rows migrated, by table."""
    for statement in TABLES:
        cur.execute(statement)
    migrated = {}
    for table, columns in KEYED.items():
        if not _has_digest(cur, table):
            migrated[table] = _migrate(cur, sql, table, columns)
    for table, columns in ADDED.items():
        _add_columns(cur, table, columns)
    _check_version(cur, sql)
    for statement in INDEXES:
        cur.execute(statement)
    tallies.backfill(cur, sql)
    return migrated


#: The schema this release writes (kept in ``tallies`` as kind "schema"): 2 added
#: retention (``searches.session_id``/``client_id``, ``forgotten``). A store a later
#: release made (a higher number) is refused, never written by rules it does not know.
SCHEMA_VERSION = 2


def _check_version(cur: Any, sql: Callable[[str], str]) -> None:
    from tttembed.core.errors import StoreRefused

    cur.execute(sql("SELECT MAX(n) FROM tallies WHERE kind = ? AND tkey = ?"),
                ("schema", "version"))
    row = cur.fetchone()
    found = int(row[0]) if row and row[0] is not None else 0
    if found > SCHEMA_VERSION:
        raise StoreRefused(f"this feedback store was made by a later tttembed (schema "
                           f"{found}; this release knows {SCHEMA_VERSION}): upgrade "
                           "tttembed to read or prune it (nothing was changed)")
    if found < SCHEMA_VERSION:
        cur.execute(sql("DELETE FROM tallies WHERE kind = ? AND tkey = ?"),
                    ("schema", "version"))
        cur.execute(sql("INSERT INTO tallies (kind, tkey, shard, n) VALUES (?, ?, ?, ?)"),
                    ("schema", "version", "", SCHEMA_VERSION))


def _add_columns(cur: Any, table: str, columns: tuple[str, ...]) -> None:
    cur.execute(f"SELECT * FROM {table} LIMIT 0")
    have = {str(d[0]).lower() for d in cur.description}
    for column in columns:
        if column.split()[0] not in have:
            cur.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


def _has_digest(cur: Any, table: str) -> bool:
    cur.execute(f"SELECT * FROM {table} LIMIT 0")
    return "qhash" in {str(d[0]).lower() for d in cur.description}


def _migrate(cur: Any, sql: Callable[[str], str], table: str,
             columns: tuple[str, ...]) -> int:
    """Read ``table``'s rows, make it anew (the new statement of :data:`TABLES`) and
    write them back with the digest of their query (a label by query re-keyed)."""
    names = ", ".join(columns)
    cur.execute(f"SELECT {names} FROM {table}")
    rows = [dict(zip(columns, r)) for r in cur.fetchall()]
    cur.execute(f"DROP TABLE {table}")
    cur.execute(next(s for s in TABLES if f" {table} (" in s))
    for row in rows:
        row["qhash"] = query_hash(str(row["query"]))
        if table == "feedback" and not row["search_id"]:
            row["fkey"] = f"{_BY_QUERY}{row['task']}\x1f#{row['qhash']}"
    if rows:
        keys = (*columns, "qhash")
        marks = ", ".join("?" * len(keys))
        cur.executemany(sql(f"INSERT INTO {table} ({', '.join(keys)}) VALUES ({marks}) "
                            "ON CONFLICT DO NOTHING"), [[r[k] for k in keys] for r in rows])
    return len(rows)


__all__ = ["ADDED", "INDEXES", "SCHEMA_VERSION", "KEYED", "TABLES", "create_schema"]
