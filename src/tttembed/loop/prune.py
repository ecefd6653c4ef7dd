"""Retention's SQL (mixed into :class:`tttembed.loop.store.SQLStore`, so SQLite and
PostgreSQL run the same statements): delete the traffic tables' rows older than a cutoff
in small batches, and say what the store holds (``tttembed store stats``).

Pruning deletes at most ``batch`` rows per statement and transaction (oldest first,
through the index on ``created``), so a replica logging a search waits at most one
short batch. On PostgreSQL a pruner takes a transaction advisory lock with
``pg_try_advisory_xact_lock``: a second pruner (another replica, the learner) that
finds it held skips that batch instead of waiting or deleting the same rows; on SQLite
writers are serialised anyway and a batch whose rows another pruner deleted deletes
nothing. Every row deleted is added to the ``pruned`` tallies (by table) in the same
transaction: ``kept + pruned`` is every row ever logged, which the soak's accounting
checks. What is never pruned, and why: :mod:`tttembed.loop.retention`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tttembed.loop import tallies

#: The tables retention prunes, and the key columns a batch is chosen by.
PRUNED = {
    "events": "search_id, doc_id, session_id, action",
    "impressions": "search_id",
    "interventions": "search_id",
    "searches": "search_id",
}
#: Every table of the store, in the order ``store stats`` lists them.
TABLES = ("searches", "events", "impressions", "interventions", "feedback", "rewards",
          "click_rewards", "reserved", "claims", "spend", "tallies", "forgotten")
#: Tables with a ``created`` column (their oldest and newest rows, their growth).
TIMED = ("searches", "events", "impressions", "interventions", "feedback", "rewards",
         "click_rewards", "claims", "spend", "forgotten")
#: The tallies kind of pruned rows (key: the table).
PRUNED_KIND = "pruned"


@dataclass(frozen=True)
class PruneReport:
    """One prune: the rows deleted (or, ``dry_run``, that would be) by table, the cutoff
    (epoch seconds), the seconds it took, and whether another pruner held the lock for
    some batch (``skipped``)."""

    cutoff: float
    rows: Mapping[str, int]
    dry_run: bool = False
    seconds: float = 0.0
    skipped: int = 0

    @property
    def total(self) -> int:
        return sum(self.rows.values())

    def to_dict(self) -> dict[str, Any]:
        return {"cutoff": self.cutoff, "rows": dict(self.rows), "total": self.total,
                "dry_run": self.dry_run, "seconds": round(self.seconds, 3),
                "skipped_batches": self.skipped}


@dataclass(frozen=True)
class TableStats:
    rows: int
    bytes: int | None
    oldest: float | None = None
    newest: float | None = None
    last_hour: int | None = None

    def to_dict(self) -> dict[str, Any]:
        per_hour = None
        if self.last_hour is not None and self.bytes is not None and self.rows:
            per_hour = int(self.bytes * self.last_hour / self.rows)
        return {"rows": self.rows, "bytes": self.bytes, "oldest": self.oldest,
                "newest": self.newest, "rows_last_hour": self.last_hour,
                "bytes_per_hour": per_hour}


@dataclass(frozen=True)
class StoreStats:
    """What a store holds: per table, and the rows pruned and forgotten so far."""

    url: str
    tables: Mapping[str, TableStats]
    pruned: Mapping[str, int] = field(default_factory=dict)
    forgotten: Mapping[str, int] = field(default_factory=dict)
    at: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(t.bytes or 0 for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.url, "at": self.at, "bytes": self.bytes,
                "tables": {n: t.to_dict() for n, t in self.tables.items()},
                "pruned": dict(self.pruned), "forgotten": dict(self.forgotten)}


class PruneSQL:
    """Needs the host's ``_tx``, ``_sql`` (:class:`tttembed.loop.store.SQLStore`);
    backends give :meth:`_try_prune_lock`, :meth:`_table_bytes` and :meth:`vacuum`."""

    if TYPE_CHECKING:
        url: str

        def _tx(self) -> AbstractContextManager[Any]: ...
        def _sql(self, sql: str) -> str: ...

    # -- backend hooks (SQLite here; PostgreSQL overrides) ------------------------------
    def _try_prune_lock(self, cur: Any) -> bool:
        """Make this transaction the one pruner (SQLite: take the write lock now)."""
        cur.execute("BEGIN IMMEDIATE")
        return True

    def _table_bytes(self, cur: Any) -> dict[str, int]:
        """Bytes each table takes with its indexes (SQLite: ``dbstat``; without it the
        file's pages, shared out by rows)."""
        cur.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN "
                    "('table', 'index')")
        owner = {str(n): str(t) for n, t in cur.fetchall()}
        try:
            cur.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        except Exception:  # noqa: BLE001 - dbstat not compiled in: no per-table bytes
            return {}
        out: dict[str, int] = {}
        for name, size in cur.fetchall():
            table = owner.get(str(name), str(name))
            out[table] = out.get(table, 0) + int(size or 0)
        return out

    def vacuum(self) -> None:
        """Give back what a prune deleted (SQLite reuses freed pages: nothing to do)."""

    # -- pruning ----------------------------------------------------------------------
    def prune(self, cutoff: float, *, batch: int = 2000, dry_run: bool = False,
              max_batches: int | None = None) -> PruneReport:
        """Delete the rows of :data:`PRUNED` created before ``cutoff``, ``batch`` rows a
        transaction (``max_batches`` per table at most: None, until none is left)."""
        start = time.monotonic()
        rows: dict[str, int] = {}
        skipped = 0
        for table, key in PRUNED.items():
            if dry_run:
                rows[table] = self._older(table, cutoff)
                continue
            done = n = 0
            while max_batches is None or n < max_batches:
                got = self._prune_batch(table, key, cutoff, batch)
                n += 1
                if got is None:
                    skipped += 1
                    break
                done += got
                if got < batch:
                    break
            rows[table] = done
        if not dry_run and any(rows.values()):
            self.vacuum()
        return PruneReport(cutoff, rows, dry_run, time.monotonic() - start, skipped)

    def _older(self, table: str, cutoff: float) -> int:
        with self._tx() as cur:
            cur.execute(self._sql(f"SELECT COUNT(*) FROM {table} WHERE created < ?"),
                        (float(cutoff),))
            return int(cur.fetchone()[0])

    def _prune_batch(self, table: str, key: str, cutoff: float, batch: int) -> int | None:
        """One batch of ``table``'s oldest rows before ``cutoff`` deleted: the count
        (None: another pruner holds the lock)."""
        with self._tx() as cur:
            if not self._try_prune_lock(cur):
                return None
            pick = (f"SELECT {key} FROM {table} WHERE created < ? ORDER BY created "
                    "LIMIT ?")
            where = f"({key}) IN ({pick})" if "," in key else f"{key} IN ({pick})"
            cur.execute(self._sql(f"DELETE FROM {table} WHERE {where}"),
                        (float(cutoff), int(batch)))
            n = max(int(cur.rowcount or 0), 0)
            tallies.add(cur, self._sql, PRUNED_KIND, [((table, ""), n)])
            return n

    def pruned(self) -> dict[str, int]:
        """Rows pruned so far, by table (every replica's and learner's prunes)."""
        return self.tally(PRUNED_KIND)

    def tally(self, kind: str) -> dict[str, int]:
        """The running counts of ``kind`` (:mod:`tttembed.loop.tallies`), by key."""
        with self._tx() as cur:
            return tallies.read(cur, self._sql, kind)

    # -- what is stored ---------------------------------------------------------------
    def stats(self, now: float | None = None) -> StoreStats:
        """Rows and bytes per table, the oldest and newest row, the rows of the last
        hour; the rows pruned and forgotten so far (``tttembed store stats``)."""
        from tttembed.loop.forget import FORGOTTEN_KIND

        now = time.time() if now is None else now
        out: dict[str, TableStats] = {}
        with self._tx() as cur:
            sizes = self._table_bytes(cur)
            for table in TABLES:
                cur.execute(f"SELECT COUNT(*) FROM {table}")
                n = int(cur.fetchone()[0])
                oldest = newest = last = None
                if table in TIMED:
                    cur.execute(self._sql(f"SELECT MIN(created), MAX(created), "
                                          "COALESCE(SUM(CASE WHEN created >= ? THEN 1 ELSE "
                                          f"0 END), 0) FROM {table}"), (now - 3600.0,))
                    lo, hi, recent = cur.fetchone()
                    oldest = None if lo is None else float(lo)
                    newest = None if hi is None else float(hi)
                    last = int(recent)
                out[table] = TableStats(n, sizes.get(table), oldest, newest, last)
            pruned = tallies.read(cur, self._sql, PRUNED_KIND)
            forgotten = tallies.read(cur, self._sql, FORGOTTEN_KIND)
        return StoreStats(self.url, out, pruned, forgotten, now)


__all__ = ["PRUNED", "PRUNED_KIND", "PruneReport", "PruneSQL", "StoreStats", "TableStats"]
