"""PostgreSQL plumbing, once, for every table set that lives in a database: the feedback
store (:mod:`tttembed.loop.postgres`), the state registry (:mod:`tttembed.registry.postgres`)
and the loop's coordination rows (:mod:`tttembed.loop.coordination.postgres`).

Here: the driver import (psycopg 3, the ``loop`` extra), a connection with its NUL-safe
text dumper (PostgreSQL text cannot hold NUL: U+FFFD is written in its place), the URL
with its password masked, the driver's message scrubbed of it, and :class:`Database`: one
connection kept across calls, opened anew when the server dropped it, with the retries
its users agree on (:func:`reconnecting`: once more at once after a drop; :func:`retry`:
a write tried again with a growing pause while the database is down).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from tttembed.core.errors import ConfigError, MissingDependency

_SECRET_KEYS = {"password", "passfile", "sslpassword"}
F = TypeVar("F", bound=Callable[..., Any])


def import_psycopg() -> Any:
    """The psycopg module (MissingDependency with the install line when it is absent)."""
    try:
        import psycopg
    except ImportError as exc:
        raise MissingDependency("psycopg", "loop") from exc
    return psycopg


@lru_cache(maxsize=1)
def nul_safe_dumper() -> type:
    """A psycopg text dumper for ``str`` that writes U+FFFD for NUL (which PostgreSQL
    text refuses)."""
    from psycopg.types.string import StrDumperUnknown

    class NulSafeStrDumper(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd") if "\x00" in obj else obj)

    return NulSafeStrDumper


def mask_url(url: str, *, lone_user: bool = False) -> str:
    """``url`` with any password (in the user part or the query) written as ``***``;
    ``lone_user``: a user name given without a password too (an HTTP client sends it as
    basic auth, so it is a credential there)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", url) if lone_user \
            else re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = userinfo.partition(":")[0] + ":***@" + hosts
    elif at and lone_user:
        netloc = "***@" + hosts
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(k.lower() in _SECRET_KEYS for k, _ in pairs):
        query = urlencode([(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs],
                          quote_via=quote, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(exc: BaseException, dsn: str) -> str:
    """The driver's message on one line, without the password of ``dsn`` should it quote
    it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    try:
        secret = urlsplit(dsn).password
    except ValueError:
        secret = None
    return text.replace(secret, "***") if secret and len(secret) >= 3 else text


def dead(conn: Any) -> bool:
    """Whether a connection opened earlier was closed or dropped by the server."""
    return conn is not None and bool(conn.closed or conn.broken)


@dataclass(frozen=True)
class Words:
    """How one user of a database names it in its errors: each a template with ``{url}``
    (the masked URL) and ``{error}`` (the driver's scrubbed message)."""

    invalid: str
    unreachable: str
    lost: str = ""


def connect(dsn: str, words: Words, *, autocommit: bool = False, timeout: float = 10,
            unavailable: type[Exception] = ConfigError) -> Any:
    """A new connection to ``dsn`` (``timeout`` s to connect unless the URL says), its
    text NUL-safe. A URL psycopg cannot read is a ConfigError (``words.invalid``); a
    server that does not answer is ``unavailable`` (``words.unreachable``)."""
    psycopg = import_psycopg()
    from psycopg.conninfo import conninfo_to_dict

    url = mask_url(dsn)
    try:
        options = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise ConfigError(words.invalid.format(url=url, error=scrub(exc, dsn))) from None
    extra = {} if "connect_timeout" in options else {"connect_timeout": max(int(timeout), 1)}
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, **extra)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(words.invalid.format(url=url, error=scrub(exc, dsn))) from None
    except psycopg.Error as exc:
        raise unavailable(words.unreachable.format(url=url, error=scrub(exc, dsn))) from None
    conn.adapters.register_dumper(str, nul_safe_dumper())
    return conn


class Dropped(Exception):
    """Raised (mixed into a user's own unavailable error) when a connection opened earlier
    was found dropped (a restart): worth one more try, at once, on a new one."""


def reconnecting(fn: F) -> F:
    """Run ``fn`` once more, on a new connection, when the one it used had been dropped
    since its last use (the database restarted in between): a caller sees an error only
    while the database is really down."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Dropped:
            return fn(*args, **kwargs)

    return cast(F, wrapper)


def retry(what: str, fn: Callable[[], Any], unavailable: type[Exception],
          log: logging.Logger, *, tries: int = 4, pause: float = 0.5) -> Any:
    """``fn()`` tried again (same arguments) while the database drops it, the pause
    doubled each time (a stale connection: at once), each retry a warning on ``log``.
    Only for a write that is idempotent (a commit may have been lost after it landed)."""
    for attempt in range(tries):
        try:
            return fn()
        except unavailable as exc:
            if attempt == tries - 1:
                raise
            if isinstance(exc, Dropped):
                continue
            log.warning("%s: %s; retrying in %.1f s", what, exc, pause)
            time.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")


class Database:
    """One database at ``dsn`` for one process: a connection kept across transactions,
    opened anew when it was dropped. A call that finds it dropped raises ``dropped`` (to
    :func:`reconnecting`, which tries once more); one that cannot reach the server raises
    ``unavailable``; both say ``words``."""

    def __init__(self, dsn: str, words: Words, *, timeout: float,
                 unavailable: type[Exception], dropped: type[Exception]) -> None:
        self.dsn = dsn
        self.location = mask_url(dsn)
        self.words, self.timeout = words, timeout
        self.unavailable, self.dropped = unavailable, dropped
        self.lock = threading.RLock()
        self._conn: Any = None
        #: the table sets created on it by this process (:meth:`ensure`)
        self._ensured: set[str] = set()

    def connect(self, autocommit: bool = False) -> Any:
        """A new connection of its own (a listener, a session lock)."""
        return connect(self.dsn, self.words, autocommit=autocommit, timeout=self.timeout,
                       unavailable=self.unavailable)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One transaction on the kept connection, committed on success."""
        psycopg = import_psycopg()
        with self.lock:
            if dead(self._conn):
                with suppress(Exception):
                    self._conn.close()
                self._conn = None
            reused = self._conn is not None
            if self._conn is None:
                self._conn = self.connect()
            conn = self._conn
            try:
                with conn.cursor() as cur:
                    yield cur
                conn.commit()
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                with suppress(Exception):
                    conn.close()
                self._conn = None
                kind = self.dropped if reused else self.unavailable
                raise kind(self.words.lost.format(url=self.location,
                                                  error=scrub(exc, self.dsn))) from None
            except BaseException:
                with suppress(Exception):
                    conn.rollback()
                raise

    def ensure(self, name: str, statements: tuple[str, ...], lock: int) -> None:
        """Create the table set ``name`` (``statements``, each idempotent) once per
        process, under the transaction advisory lock ``lock`` (``CREATE TABLE IF NOT
        EXISTS`` is not atomic: replicas starting at once would race)."""
        if name in self._ensured:
            return
        with self.transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            for sql in statements:
                cur.execute(sql)
        self._ensured.add(name)

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.close()
            self._conn = None


__all__ = ["Database", "Dropped", "Words", "connect", "dead", "import_psycopg", "mask_url",
           "nul_safe_dumper", "reconnecting", "retry", "scrub"]
