"""The judge budget's account in the feedback store (mixed into
:class:`tttembed.loop.store.SQLStore`, so SQLite and PostgreSQL run the same SQL): the
``spend`` table, one row per reservation (served pairs, validation, drift and audit
re-scores), written *before* the judge is asked, in one transaction with the check
against the budget, so no number of learners, restarts or kills can pay more than it.
Pairs whose judge call failed are given back (:meth:`SpendSQL.release`, a row of
``-pairs``): a failed call is not spent budget.

A kill (SIGKILL, power loss) between the reservation and the stored answers leaves pairs
reserved that were never sent, and pairs sent whose answer was lost. So each reservation
names its pairs (table ``reserved``), marked sent just before the judge is asked and
settled when their rewards are stored; at the next start :meth:`SpendSQL.recover` gives
back the pairs never sent, counts spent the pairs whose answer the store or the ledger
holds, and keeps the lost ones as paid (``sent = 2``): asked again, they are not charged
again (:meth:`SpendSQL.prepaid`).

Two learners on one store (``serve --learn --chain``: the state and the chain learner)
may judge the same (query text, passage text) at once, under two tasks. So a paid
reservation also *claims* its pairs (:meth:`SpendSQL.claim`, table ``claims``), in the
transaction that checks and reserves the budget, by a key of the judge and the two texts
(what the ledger keys a pair by; the task is not in it: the judge's answer does not
depend on it): a pair another reservation has claimed is skipped, not paid (its reward
is in the ledger for the next call), and one the ledger holds by then is read, not paid.
A claim names its process (:func:`tttembed.core.locks.process_name`) and ends with its
reservation: when the answer is stored (:meth:`SpendSQL.settle`), when the call fails
(:meth:`SpendSQL.unclaim`), and at the next learner's start (:meth:`SpendSQL.recover`),
which releases the claims a kill left as it closes the reservations (those of a learner
that still runs are its own, left as they are): a pair never sent
or answered is free to claim again (the ledger serves an answered one free: a pair the
ledger holds is read whoever claims it), and a lost one is claimed and asked again, not
charged again. Claims of another learner of this host that still runs are kept (it is
paying them); those of a process on another host are released (it cannot be asked).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from tttembed.core.locks import process_alive, process_name
from tttembed.loop import tallies
from tttembed.loop.rows import SPEND_SOURCES, Claimed, Share, query_hash
from tttembed.types import Triple

#: The tallies kind of pairs a kill lost the answer of (key: the source): asked again.
REASKED_KIND = "reasked"

class SpendSQL:
    """Reserve, count and open the account; needs the host's ``_tx``, ``_sql`` and
    ``_serialize`` (:class:`tttembed.loop.store.SQLStore`)."""

    if TYPE_CHECKING:
        def _tx(self) -> AbstractContextManager[Any]: ...
        def _sql(self, sql: str) -> str: ...
        def _serialize(self, cur: Any, what: str = ...) -> None: ...

    def reserve(self, source: str, want: int, budget: int, *, partial: bool = True,
                share: Share | None = None, pairs: Sequence[Triple] = ()) -> int:
        """Reserve up to ``want`` judge pairs of ``budget`` for ``source`` before paying
        them: the pairs granted (0 when the budget is spent; with ``partial=False`` all
        of ``want`` or nothing), recorded in the same transaction that checked what is
        left; ``share`` ``(cap, sources)``: also within ``cap`` pairs for those sources
        together (the audits' share of the budget); ``pairs``: the pairs of a whole
        reservation (``partial=False``), recorded with it for :meth:`recover`."""
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
                sid = uuid.uuid4().hex
                cur.execute(self._sql(
                    "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
                    (sid, source, granted, time.time()))
                if pairs and granted == len(pairs):
                    cur.executemany(self._sql(
                        "INSERT INTO reserved (spend_id, source, task, query, doc_id, qhash, "
                        "sent) VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT DO NOTHING"),
                        [(sid, source, *t, query_hash(t[1])) for t in pairs])
        return granted

    def claim(self, source: str, budget: int, pairs: Sequence[Triple], keys: Sequence[str],
              *, prepaid: Collection[Triple] = (),
              new: Callable[[list[Triple]], list[bool]] | None = None) -> Claimed | None:
        """Claim ``pairs`` (``keys[i]``: the key of ``pairs[i]``, its judge and texts) and
        reserve the budget for them in one transaction (module docstring): those ``new``
        (the ledger, asked under this transaction) says are no longer new are ``held``;
        of the others, those whose key is claimed already are ``taken``, the rest are
        claimed (``mine``) and those not ``prepaid`` reserved, all at once, or nothing
        (None) when the budget cannot cover them."""
        if source not in SPEND_SOURCES:
            raise ValueError(f"unknown spend source {source!r}")
        with self._tx() as cur:
            self._serialize(cur)
            taken = _claimed(cur, self._sql, keys)
            first: dict[str, Triple] = {}
            skipped: list[Triple] = []  # claimed by another reservation (or twice here)
            for t, k in zip(pairs, keys):
                if k in first:
                    skipped.append(t)
                else:
                    first[k] = t
            still = new(list(first.values())) if new is not None else [True] * len(first)
            held = [t for t, n in zip(first.values(), still) if not n]
            mine = {k: t for (k, t), n in zip(first.items(), still) if n and k not in taken}
            skipped += [t for (k, t), n in zip(first.items(), still) if n and k in taken]
            charged = [t for t in mine.values() if t not in prepaid]
            if charged and not self._charge(cur, source, budget, charged):
                return None
            now, me = time.time(), process_name()
            if mine:
                cur.executemany(self._sql(
                    "INSERT INTO claims (ckey, task, qhash, doc_id, owner, created) VALUES "
                    "(?, ?, ?, ?, ?, ?)"), [(k, t[0], query_hash(t[1]), t[2], me, now)
                                            for k, t in mine.items()])
        return Claimed(list(mine.values()), skipped, held)

    def _charge(self, cur: Any, source: str, budget: int, pairs: Sequence[Triple]) -> bool:
        """Reserve ``pairs`` (all of them, named for :meth:`recover`) if the budget left
        covers them, in the transaction of ``cur``: whether it did."""
        cur.execute("SELECT COALESCE(SUM(pairs), 0) FROM spend")
        if int(budget) - int(cur.fetchone()[0]) < len(pairs):
            return False
        sid = uuid.uuid4().hex
        cur.execute(self._sql(
            "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
            (sid, source, len(pairs), time.time()))
        cur.executemany(self._sql(
            "INSERT INTO reserved (spend_id, source, task, query, doc_id, qhash, sent) "
            "VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT DO NOTHING"),
            [(sid, source, *t, query_hash(t[1])) for t in pairs])
        return True

    def unclaim(self, pairs: Sequence[Triple]) -> None:
        """End the claims of ``pairs`` (a failed judge call): free to claim again."""
        self._each(_UNCLAIM, pairs)

    def mark_sent(self, pairs: Sequence[Triple]) -> None:
        """The judge is about to be asked ``pairs`` (their answer may be lost now)."""
        self._each("UPDATE reserved SET sent = 1 WHERE task = ? AND qhash = ? AND "
                   "doc_id = ? AND sent = 0", pairs)  # a lost answer's pair stays paid

    def settle(self, pairs: Sequence[Triple]) -> None:
        """``pairs`` are stored (or given back): their reservation and claim are closed."""
        self._each("DELETE FROM reserved WHERE task = ? AND qhash = ? AND doc_id = ?", pairs,
                   _UNCLAIM)

    def _each(self, sql: str, pairs: Sequence[Triple], *more: str) -> None:
        if pairs:
            with self._tx() as cur:
                for statement in (sql, *more):
                    cur.executemany(self._sql(statement), [_keyed(t) for t in pairs])

    def prepaid(self, pairs: Sequence[Triple]) -> set[Triple]:
        """Those of ``pairs`` paid before a kill lost their answer: not charged again."""
        if not pairs:
            return set()
        with self._tx() as cur:
            cur.execute("SELECT task, query, doc_id FROM reserved WHERE sent = 2")
            lost = {(str(a), str(b), str(c)) for a, b, c in cur.fetchall()}
        return {(t[0], t[1], t[2]) for t in pairs if (t[0], t[1], t[2]) in lost}

    def recover(self, held: Callable[[Triple], bool]) -> dict[str, int]:
        """At a learner's start: close what a kill left open (module docstring). ``held``:
        whether the ledger holds a pair's answer. Returns the pairs ``given_back`` (never
        sent), ``spent`` (answered) and ``lost`` (sent, answer lost: kept as paid)."""
        out = {"given_back": 0, "spent": 0, "lost": 0}
        with self._tx() as cur:
            self._serialize(cur)
            busy = self._running_claims(cur)  # another learner's, paying them now
            cur.execute("SELECT r.source, r.task, r.query, r.doc_id, r.sent, "
                        "w.doc_id IS NOT NULL FROM reserved r LEFT JOIN rewards w ON "
                        "w.task = r.task AND w.qhash = r.qhash AND w.doc_id = r.doc_id "
                        "WHERE r.sent < 2")
            rows = cur.fetchall()
            back: dict[str, int] = {}
            lost: dict[str, int] = {}
            for source, task, query, doc, sent, stored in rows:
                t = (str(task), str(query), str(doc))
                if _keyed(t) in busy:
                    continue
                if stored or held(t):
                    kind, sql = "spent", "DELETE FROM reserved"
                elif int(sent) == 0:
                    kind, sql = "given_back", "DELETE FROM reserved"
                    back[str(source)] = back.get(str(source), 0) + 1
                else:
                    kind, sql = "lost", "UPDATE reserved SET sent = 2"
                    lost[str(source)] = lost.get(str(source), 0) + 1
                out[kind] += 1
                cur.execute(self._sql(f"{sql} WHERE task = ? AND qhash = ? AND doc_id = ?"),
                            _keyed(t))
            for source, n in back.items():
                cur.execute(self._sql(
                    "INSERT INTO spend (id, source, pairs, created) VALUES (?, ?, ?, ?)"),
                    (uuid.uuid4().hex, source, -n, time.time()))
            # the lost ones are asked again (not charged again): the operator sees them
            tallies.add(cur, self._sql, REASKED_KIND, [((src, ""), n)
                                                      for src, n in lost.items()])
            self._release_claims(cur)
        return out

    def _running_claims(self, cur: Any) -> set[tuple[str, str, str]]:
        """(task, query digest, doc) of the claims of another learner of this host that
        still runs: its reservations are its own to settle, not a kill's to close."""
        me = process_name()
        cur.execute("SELECT task, qhash, doc_id, owner FROM claims")
        owners: dict[str, bool] = {}
        out = set()
        for task, qhash, doc, owner in cur.fetchall():
            if owner not in owners:
                owners[owner] = bool(owner != me and process_alive(str(owner)))
            if owners[owner]:
                out.add((str(task), str(qhash), str(doc)))
        return out

    def _release_claims(self, cur: Any) -> None:
        """Release the claims a kill left (module docstring): all of them but those of
        another learner of this host that still runs (it settles them itself)."""
        me = process_name()
        cur.execute("SELECT DISTINCT owner FROM claims")
        for (owner,) in cur.fetchall():
            if owner == me or not process_alive(str(owner)):
                cur.execute(self._sql("DELETE FROM claims WHERE owner = ?"), (owner,))

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


_UNCLAIM = "DELETE FROM claims WHERE task = ? AND qhash = ? AND doc_id = ?"
#: Keys looked up per statement (SQLite's older builds allow 999 parameters).
_CHUNK = 500


def _claimed(cur: Any, sql: Callable[[str], str], keys: Sequence[str]) -> set[str]:
    """Those of ``keys`` claimed already, in the transaction of ``cur``."""
    out: set[str] = set()
    keys = list(dict.fromkeys(keys))
    for at in range(0, len(keys), _CHUNK):
        part = keys[at: at + _CHUNK]
        cur.execute(sql(f"SELECT ckey FROM claims WHERE ckey IN ({', '.join('?' * len(part))})"),
                    tuple(part))
        out.update(str(r[0]) for r in cur.fetchall())
    return out


def _keyed(pair: Triple) -> tuple[str, str, str]:
    """(task, query, doc) as the store keys it: (task, query digest, doc)."""
    return (pair[0], query_hash(pair[1]), pair[2])


__all__ = ["SpendSQL"]
