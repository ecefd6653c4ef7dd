"""The judge budget's account in the feedback store (mixed into
:class:`tttembed.loop.store.SQLStore`, so SQLite and PostgreSQL run the same SQL): the
``spend`` table, one row per reservation (served pairs, validation, drift and audit
re-scores), written *before* the judge is asked, in one transaction with the check
against the budget, so no number of learners, restarts or kills can pay more than it.
Pairs whose judge call failed are given back (:meth:`SpendSQL.release`, a row of
``-pairs``): a failed call is not spent budget.
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from tttembed.loop.rows import SPEND_SOURCES, Share


class SpendSQL:
    """Reserve, count and open the account; needs the host's ``_tx``, ``_sql`` and
    ``_serialize`` (:class:`tttembed.loop.store.SQLStore`)."""

    if TYPE_CHECKING:
        def _tx(self) -> AbstractContextManager[Any]: ...
        def _sql(self, sql: str) -> str: ...
        def _serialize(self, cur: Any, what: str = ...) -> None: ...

    def reserve(self, source: str, want: int, budget: int, *, partial: bool = True,
                share: Share | None = None) -> int:
        """Reserve up to ``want`` judge pairs of ``budget`` for ``source`` before paying
        them: the pairs granted (0 when the budget is spent; with ``partial=False`` all
        of ``want`` or nothing), recorded in the same transaction that checked what is
        left; ``share`` ``(cap, sources)``: also within ``cap`` pairs for those sources
        together (the audits' share of the budget)."""
        if source not in SPEND_SOURCES:
            raise ValueError(f"unknown spend source {source!r}")
        if want <= 0:
            return 0
        with self._tx() as cur:
            self._serialize(cur)
            cur.execute("SELECT COALESCE(SUM(pairs), 0) FROM spend")
            left = int(budget) - int(cur.fetchone()[0])
            if share is not None:
                cap, sources = share
                marks = ", ".join("?" * len(sources))
                cur.execute(self._sql("SELECT COALESCE(SUM(pairs), 0) FROM spend WHERE "
                                      f"source IN ({marks})"), tuple(sources))
                left = min(left, int(cap) - int(cur.fetchone()[0]))
            granted = max(min(int(want), left), 0)
            if not partial and granted < want:
                granted = 0
            if granted:
                cur.execute(self._sql(
                    "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
                    (uuid.uuid4().hex, source, granted, time.time()))
        return granted

    def release(self, source: str, pairs: int) -> None:
        """Give back ``pairs`` reserved for ``source`` whose judge call failed (a failed
        call is not spent budget): one row of ``-pairs``, so the account keeps both."""
        if source not in SPEND_SOURCES:
            raise ValueError(f"unknown spend source {source!r}")
        if pairs <= 0:
            return
        with self._tx() as cur:
            self._serialize(cur)
            cur.execute(self._sql(
                "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
                (uuid.uuid4().hex, source, -int(pairs), time.time()))

    def spent(self) -> dict[str, int]:
        """Pairs reserved so far, by source (the budget's account)."""
        with self._tx() as cur:
            cur.execute("SELECT source, COALESCE(SUM(pairs), 0) FROM spend GROUP BY source")
            return {str(k): int(n) for k, n in cur.fetchall()}

    def open_account(self, paid_before: int) -> None:
        """A store written before the spend account existed: its paid pairs (and the
        re-scores a status file counted) become one ``opening`` row, once."""
        with self._tx() as cur:
            self._serialize(cur)
            cur.execute("SELECT COUNT(*) FROM spend")
            if int(cur.fetchone()[0]):
                return
            cur.execute("SELECT COALESCE(SUM(paid), 0) FROM rewards")
            total = int(cur.fetchone()[0]) + max(int(paid_before), 0)
            if total:
                cur.execute(self._sql(
                    "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
                    (uuid.uuid4().hex, "opening", total, time.time()))


__all__ = ["SpendSQL"]
