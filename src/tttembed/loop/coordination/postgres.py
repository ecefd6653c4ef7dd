"""The loop's coordination as rows in a PostgreSQL registry's database (on the registry's
own connection, :class:`tttembed.core.pg.Database`):

    registry_loop       the learner's record and heartbeat (its spend is the store's)
    registry_replicas   each replica's report: what it serves, whether it follows, what
                        it refused
    registry_pointer    its ``candidate`` column: the version under an online test, beside
                        the served version (one row, one ``NOTIFY tttembed_registry``
                        channel: a server wakes on either)

One learner at a time holds the session advisory lock :data:`LEARNER_LOCK` on a
connection of its own; a restart of the database ends that session, so each heartbeat
checks it and takes the lock again (:class:`~.base.LockLost` when another learner took
it first).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from tttembed.core.io import now_utc
from tttembed.core.pg import Database, dead, reconnecting, retry
from tttembed.loop.coordination.base import (
    REPLICA_FRESH_S,
    LockLost,
    another_learner,
    holder,
)
from tttembed.registry.postgres import CHANNEL, RegistryUnavailable

log = logging.getLogger("tttembed.registry")
#: Advisory locks: creating these tables, the one learner.
SCHEMA_LOCK = 0x6C6F_6F70_7461_626C  # "looptabl"
LEARNER_LOCK = 0x6C65_6172_6E65_72  # "learner"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS registry_replicas (name TEXT PRIMARY KEY, "
    "record TEXT NOT NULL, time DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registry_loop (name TEXT PRIMARY KEY, doc TEXT NOT NULL, "
    "time DOUBLE PRECISION NOT NULL)",
)


class PostgresCoordination:
    """The coordination rows of the registry database ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.location = db.location
        self._held: Any = None

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        self.db.ensure("coordination", SCHEMA, SCHEMA_LOCK)
        with self.db.transaction() as cur:
            yield cur

    # -- the learner's record, heartbeat and lock -------------------------------------
    @reconnecting
    def _doc(self, name: str) -> tuple[Any, str]:
        with self._tx() as cur:
            cur.execute("SELECT doc FROM registry_loop WHERE name = %s", (name,))
            row = cur.fetchone()
        if row is None:
            return None, ""
        try:
            return json.loads(row[0]), ""
        except ValueError as exc:
            return None, f"registry {self.location}: the learner's {name} is not JSON ({exc})"

    @reconnecting
    def _put(self, name: str, record: Mapping[str, Any]) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO registry_loop (name, doc, time) VALUES (%s, %s, %s) "
                        "ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc, "
                        "time = EXCLUDED.time", (name, json.dumps(dict(record)), time.time()))

    def read_status(self) -> tuple[dict[str, Any] | None, str]:
        try:
            got, error = self._doc("status")
        except RegistryUnavailable as exc:
            return None, " ".join(str(exc).split())
        if got is not None and not isinstance(got, dict):
            return None, f"registry {self.location}: the loop status is not a JSON object"
        return got, error

    def write_status(self, record: Mapping[str, Any], *, sync: bool = True) -> None:
        self._put("status", record)  # a committed row is durable either way

    def beat(self, record: Mapping[str, Any]) -> None:
        self.check_lock()
        self._put("heartbeat", record)

    def heartbeat(self) -> dict[str, Any] | None:
        try:
            got, _ = self._doc("heartbeat")
        except RegistryUnavailable:
            return None
        return got if isinstance(got, dict) else None

    @contextmanager
    def learner_lock(self) -> Iterator[None]:
        """Hold the session advisory lock :data:`LEARNER_LOCK` while the learner runs (on
        a connection of its own); a second learner gets a ConfigError naming the holder."""
        conn = self._take_lock()
        if conn is None:
            raise another_learner(self.location, self.heartbeat())
        self._held = conn
        try:
            yield
        finally:
            held, self._held = self._held, None
            with suppress(Exception):
                held.close()  # the session ends: the lock is released

    def _take_lock(self) -> Any:
        """A connection holding :data:`LEARNER_LOCK`, or None when another holds it."""
        conn = self.db.connect(autocommit=True)
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LEARNER_LOCK,)).fetchone()
        if got and got[0]:
            return conn
        conn.close()
        return None

    def check_lock(self) -> None:
        """While the learner runs (its heartbeat): a session the database dropped (a
        restart) lost the lock with it, so take it again; :class:`LockLost` when another
        learner took it meanwhile. A database still down is left for the next beat."""
        conn = self._held
        if conn is None:
            return
        try:
            if not dead(conn):
                conn.execute("SELECT 1")
                return
        except Exception:  # noqa: BLE001  (dropped: taken again below)
            pass
        with suppress(Exception):
            conn.close()
        try:
            again = self._take_lock()
        except RegistryUnavailable:
            return
        if again is None:
            self._held = None
            raise LockLost(f"another learner took registry {self.location}'s learner lock "
                           f"while the database restarted ({holder(self.heartbeat())}): "
                           "this learner stops")
        self._held = again

    # -- replicas -------------------------------------------------------------------
    @reconnecting
    def report_replica(self, replica: str, record: Mapping[str, Any]) -> None:
        doc = {"replica": replica, "time": time.time(), **dict(record)}
        with self._tx() as cur:
            cur.execute("INSERT INTO registry_replicas (name, record, time) VALUES "
                        "(%s, %s, %s) ON CONFLICT (name) DO UPDATE SET record = "
                        "EXCLUDED.record, time = EXCLUDED.time",
                        (replica, json.dumps(doc), doc["time"]))

    @reconnecting
    def replicas(self, *, fresh_s: float = REPLICA_FRESH_S) -> list[dict[str, Any]]:
        with self._tx() as cur:
            cur.execute("SELECT record FROM registry_replicas WHERE time >= %s ORDER BY name",
                        (time.time() - fresh_s,))
            rows = cur.fetchall()
        return [r for (text,) in rows if isinstance(r := _loads(text), dict)]

    # -- the candidate --------------------------------------------------------------
    def candidate(self) -> dict[str, Any] | None:
        return self.candidate_checked()[0]

    def candidate_checked(self) -> tuple[dict[str, Any] | None, str]:
        try:
            with self.db.transaction() as cur:
                cur.execute("SELECT candidate FROM registry_pointer WHERE key = 'served'")
                row = cur.fetchone()
        except RegistryUnavailable as exc:
            return None, f"the candidate cannot be read ({' '.join(str(exc).split())})"
        if not row or not row[0]:
            return None, ""
        got = _loads(row[0])
        if isinstance(got, dict) and isinstance(got.get("version"), str):
            return got, ""
        return None, (f"registry {self.location}: the candidate row is not a candidate "
                      "record (no version name)")

    def set_candidate(self, version: str, against: str | None,
                      by: str = "learner") -> dict[str, Any]:
        record = {"version": version, "against": against, "since": now_utc(), "by": by}
        self._set_candidate(json.dumps(record))
        return record

    def clear_candidate(self) -> None:
        self._set_candidate(None)

    def _set_candidate(self, text: str | None) -> None:
        def write() -> None:
            with self.db.transaction() as cur:
                cur.execute("UPDATE registry_pointer SET candidate = %s, updated = %s "
                            "WHERE key = 'served'", (text, time.time()))
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "candidate"))

        retry("naming the candidate", write, RegistryUnavailable, log)

    @reconnecting
    def candidate_mark(self) -> tuple[Any, ...]:
        """What changes when the candidate does: the pointer row's candidate."""
        with self.db.transaction() as cur:
            cur.execute("SELECT candidate FROM registry_pointer WHERE key = 'served'")
            row = cur.fetchone()
        return (row[0] if row else None,)


def _loads(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


__all__ = ["LEARNER_LOCK", "PostgresCoordination"]
