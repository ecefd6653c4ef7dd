"""The feedback store in one SQLite file (``sqlite:PATH`` or a plain path): one machine,
any number of processes (WAL; one writer at a time, the others wait). The SQL is
:class:`tttembed.loop.store.SQLStore`'s."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tttembed.core.errors import ConfigError
from tttembed.loop.store import SQLStore


class SQLiteStore(SQLStore):
    """The store in one SQLite file (WAL; one writer at a time, others wait)."""

    def __init__(self, path: str | Path, timeout: float = 30.0) -> None:
        super().__init__()
        self.path = Path(path)
        self.url = f"sqlite:{self.path}"
        self.timeout = timeout
        self._init_schema()

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout, check_same_thread=False)
            _wal(conn, self.timeout)
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as exc:
            from tttembed.score.ledger import sqlite_problem

            raise ConfigError(f"feedback store {self.path} " + sqlite_problem(
                self.path, exc, "to start a new store", "loop.sqlite")) from exc
        return conn


def _wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL. Two processes opening a new file at once make this fail at once
    with "database is locked" (the busy timeout does not cover it): try again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def from_spec(rest: str) -> SQLiteStore:
    """``sqlite:PATH``."""
    if not rest:
        raise ConfigError("sqlite: needs a path, e.g. sqlite:/srv/tttembed/loop.sqlite")
    return SQLiteStore(rest)


__all__ = ["SQLiteStore", "from_spec"]
