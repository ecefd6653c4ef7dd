"""The feedback store on PostgreSQL (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``): for
several serve replicas on several machines and the learner sharing one store.

The SQL is :class:`tttembed.loop.store.SQLStore`'s, with ``%s`` placeholders (psycopg 3,
the ``loop`` extra). One connection per store, autocommit off: every call is one
transaction that the base class commits or rolls back; a connection the server dropped
is opened anew on the next call. The schema is created under a transaction-level
advisory lock, so replicas starting at once do not race on ``CREATE TABLE IF NOT
EXISTS`` (which PostgreSQL does not make atomic: the loser fails on a unique index of
``pg_type``).

PostgreSQL text cannot hold NUL characters; the store writes U+FFFD in their place (in
queries, ids and the by-query feedback key alike, so lookups still match).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.loop.store import SCHEMA, SQLStore

#: The key of the advisory lock taken while the schema is created (any constant shared
#: by every process; "tttembed" in ASCII).
SCHEMA_LOCK = 0x7474_7465_6D62_6564
#: The advisory lock that serialises reservations of the judge budget ("spend").
SPEND_LOCK = 0x7370_656E_64
#: The advisory lock that serialises event writes, so the per-session caps hold ("events").
EVENTS_LOCK = 0x6576_656E_7473
CONNECT_TIMEOUT_S = 10
_SECRET_KEYS = {"password", "passfile", "sslpassword"}


def mask_url(url: str) -> str:
    """``url`` with any password (in the user part or the query) written as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = userinfo.partition(":")[0] + ":***@" + hosts
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(k.lower() in _SECRET_KEYS for k, _ in pairs):
        query = urlencode([(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs],
                          quote_via=quote, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def scrub(exc: BaseException, dsn: str) -> str:
    """The driver's message on one line, without the password of ``dsn`` should it quote
    it."""
    text = _one_line(str(exc)) or type(exc).__name__
    try:
        secret = urlsplit(dsn).password
    except ValueError:
        secret = None
    return text.replace(secret, "***") if secret and len(secret) >= 3 else text


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise MissingDependency("psycopg", "loop") from exc
    return psycopg


@lru_cache(maxsize=1)
def _nul_safe_dumper() -> type:
    """A psycopg text dumper for ``str`` that writes U+FFFD for NUL (which PostgreSQL
    text refuses)."""
    from psycopg.types.string import StrDumperUnknown

    class NulSafeStrDumper(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd") if "\x00" in obj else obj)

    return NulSafeStrDumper


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
        psycopg = _import_psycopg()
        from psycopg.conninfo import conninfo_to_dict

        fix = ("check that PostgreSQL runs there and that the host, port, user, password and "
               "database in the URL are right")
        try:
            options = conninfo_to_dict(self._dsn)
        except psycopg.Error as exc:
            raise ConfigError(f"feedback store {self.url} is not a valid PostgreSQL URL: "
                              f"{self._scrub(exc)} (write postgresql://USER:PASSWORD@HOST:PORT"
                              "/DATABASE)") from None
        extra: dict[str, Any] = {}
        if "connect_timeout" not in options:
            extra["connect_timeout"] = max(int(self.connect_timeout), 1)
        try:
            conn = psycopg.connect(self._dsn, autocommit=False, **extra)
        except psycopg.Error as exc:
            raise ConfigError(f"cannot connect to the feedback store {self.url}: "
                              f"{self._scrub(exc)} ({fix})") from None
        conn.adapters.register_dumper(str, _nul_safe_dumper())
        return conn

    def _scrub(self, exc: BaseException) -> str:
        return scrub(exc, self._dsn)

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken):
            # the server dropped it (a restart, an idle timeout): the next call reconnects
            with self._lock:
                if self._conn is conn:
                    self._conn = None
            with suppress(Exception):
                conn.close()
        if not self._schema_ready:
            self._init_schema()
        with super()._tx() as cur:
            yield cur

    #: the text column holding a JSON array, cast for ``json_array_length``
    json_len = "json_array_length(({})::json)"

    def _serialize(self, cur: Any, what: str = "spend") -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)",
                    (EVENTS_LOCK if what == "events" else SPEND_LOCK,))

    def _init_schema(self) -> None:
        with super()._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for sql in SCHEMA:
                cur.execute(sql)
        self._schema_ready = True


def from_spec(rest: str) -> PostgresStore:
    """``postgresql://...`` (or ``postgres://...``): ``rest`` is the spec after the scheme."""
    if not rest.startswith("//"):
        raise ConfigError(f"postgresql:{rest} is not a PostgreSQL URL; write "
                          "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    return PostgresStore("postgresql:" + rest)


__all__ = ["PostgresStore", "from_spec", "mask_url", "scrub"]
