"""The feedback store on PostgreSQL (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``): for
several serve replicas on several machines and the learner sharing one store.

The SQL is :class:`tttembed.loop.store.SQLStore`'s, with ``%s`` placeholders (psycopg 3,
the ``loop`` extra). One connection per store, autocommit off: every call is one
transaction that the base class commits or rolls back; a connection the server dropped
is opened anew on the next call. The schema is created under a transaction-level
advisory lock, so replicas starting at once do not race on ``CREATE TABLE IF NOT
EXISTS`` (which PostgreSQL does not make atomic: the loser fails on a unique index of
``pg_type``).

PostgreSQL text cannot hold NUL characters; the store writes U+FFFD in their place
(:mod:`tttembed.core.pg`, the plumbing it shares with the registry; in
queries, ids and the by-query feedback key alike, so lookups still match).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from tttembed.core.errors import ConfigError, StoreUnavailable
from tttembed.core.pg import Words, connect, dead, import_psycopg, mask_url, scrub
from tttembed.loop import schema
from tttembed.loop.store import SQLStore

#: The key of the advisory lock taken while the schema is created (any constant shared
#: by every process; "tttembed" in ASCII).
SCHEMA_LOCK = 0x7474_7465_6D62_6564
#: The advisory lock that serialises reservations of the judge budget ("spend").
SPEND_LOCK = 0x7370_656E_64
#: The advisory lock that serialises event writes, so the per-session caps hold ("events").
EVENTS_LOCK = 0x6576_656E_7473
#: The advisory lock one pruner holds per batch ("prune"): another skips, never waits.
PRUNE_LOCK = 0x7072_756E_65
CONNECT_TIMEOUT_S = 10
WORDS = Words(
    invalid="feedback store {url} is not a valid PostgreSQL URL: {error} (write "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE)",
    unreachable="cannot connect to the feedback store {url}: {error} (check that "
                "PostgreSQL runs there and that the host, port, user, password and "
                "database in the URL are right)",
    lost="lost the feedback store {url}: {error} (nothing of this call was kept; check "
         "that PostgreSQL runs there: the next call connects anew)")


class PostgresStore(SQLStore):
    """The store in one PostgreSQL database (any number of replicas and processes)."""

    placeholder = "%s"

    def __init__(self, url: str, connect_timeout: float = CONNECT_TIMEOUT_S, *,
                 lazy: bool = False) -> None:
        super().__init__()
        self._dsn = url
        self.url = mask_url(url)
        self.connect_timeout = connect_timeout
        self._schema_ready = False
        try:
            self._init_schema()
        except ConfigError:
            if not lazy:
                raise
            # a replica started while the database is down: every call tries again (and
            # creates the schema first) until it answers

    def _connect(self) -> Any:
        return connect(self._dsn, WORDS, timeout=self.connect_timeout,
                       unavailable=StoreUnavailable)

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        if dead(self._conn):
            # the server dropped it (a restart, an idle timeout): this call reconnects
            self._drop(self._conn)
        psycopg = import_psycopg()
        try:
            if not self._schema_ready:
                self._init_schema()
            with super()._tx() as cur:
                yield cur
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            conn = self._conn
            if not dead(conn):
                raise  # a live connection's error (a serialization failure): as it is
            self._drop(conn)
            raise StoreUnavailable(WORDS.lost.format(url=self.url,
                                                error=scrub(exc, self._dsn))) from None

    def _drop(self, conn: Any) -> None:
        """Forget ``conn``, the kept connection the server dropped (the next call opens
        a new one)."""
        with self._lock:
            if self._conn is conn:
                self._conn = None
        with suppress(Exception):
            conn.close()

    def _refusal(self, exc: BaseException) -> bool:
        """A row over a limit (``ProgramLimitExceeded``), a value or constraint the
        database refuses, a full disk (``InsufficientResources``)."""
        psycopg = import_psycopg()
        errors = psycopg.errors
        return isinstance(exc, (psycopg.DataError, psycopg.IntegrityError,
                                errors.ProgramLimitExceeded, errors.InsufficientResources))

    #: the text column holding a JSON array, cast for ``json_array_length``
    json_len = "json_array_length(({})::json)"

    def _serialize(self, cur: Any, what: str = "spend") -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)",
                    (EVENTS_LOCK if what == "events" else SPEND_LOCK,))

    def _try_prune_lock(self, cur: Any) -> bool:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,))
        return bool(cur.fetchone()[0])

    def _table_bytes(self, cur: Any) -> dict[str, int]:
        """Each table's bytes with its indexes and TOAST (``pg_total_relation_size``)."""
        from tttembed.loop.prune import TABLES

        out = {}
        for table in TABLES:
            cur.execute("SELECT pg_total_relation_size(to_regclass(%s))", (table,))
            size = cur.fetchone()[0]
            if size is not None:
                out[table] = int(size)
        return out

    def vacuum(self) -> None:
        """``VACUUM`` the pruned tables on a connection of its own (autocommit: VACUUM
        cannot run in a transaction), so no search waits on the store's connection."""
        from tttembed.loop.prune import PRUNED

        conn = self._connect()
        try:
            conn.autocommit = True
            conn.execute(f"VACUUM (ANALYZE) {', '.join(PRUNED)}")
        finally:
            with suppress(Exception):
                conn.close()

    def _init_schema(self) -> None:
        with super()._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            schema.create_schema(cur, self._sql)
        self._schema_ready = True


def from_spec(rest: str, *, lazy: bool = False) -> PostgresStore:
    """``postgresql://...`` (or ``postgres://...``): ``rest`` is the spec after the scheme;
    ``lazy``: opened while the database does not answer yet (:class:`PostgresStore`)."""
    if not rest.startswith("//"):
        raise ConfigError(f"postgresql:{rest} is not a PostgreSQL URL; write "
                          "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    return PostgresStore("postgresql:" + rest, lazy=lazy)


__all__ = ["PostgresStore", "from_spec"]
