"""Forget one user (``tttembed store forget STORE --session ID`` / ``--client ID``; mixed
into :class:`tttembed.loop.store.SQLStore`, so SQLite and PostgreSQL run the same SQL).

A user is a session id or a client id, as ``/v1/search`` (``session_id``,
``client_id``) and ``/v1/events`` carry them. Their searches are those logged with the
id, and those the id acted on (a click names its search). In one transaction:

- deleted: those searches, every event of them and every event of the id, their
  impressions, interventions and people's labels (``feedback`` by search id), and the
  click rewards (``click_rewards``) of the texts they asked (re-estimated by the learner
  from the clicks that remain);
- kept, without the text: a paid judgment of one of their questions (``rewards``,
  ``reserved``: the budget bought it) keeps its query's digest and its reward, its text
  is blanked; a label given by query (``feedback`` without a search id) likewise. The
  learner skips a reward without a text (it cannot embed it) until someone asks that
  text again;
- recorded: the forgotten search ids (``forgotten``: random ids, no text) so a running
  learner drops them from its click window (:meth:`ForgetSQL.forgotten_after`), and the
  rows forgotten by table in the ``forgotten`` tallies, so the accounting of what was
  logged (kept + pruned + forgotten) still reconciles.

A registry version's query-wise vectors are keyed by the digest of the text, never the
text (:func:`tttembed.adapt.scopes.query_key`): they stay.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tttembed.core.errors import ConfigError
from tttembed.loop import tallies
from tttembed.loop.rows import Cursor, cursor_floor, query_hash

#: The tallies kind of forgotten rows (key: the table).
FORGOTTEN_KIND = "forgotten"
#: Ids per ``IN (...)`` list.
_CHUNK = 500
#: The longest session or client id the store keeps.
MAX_ID_CHARS = 256


@dataclass(frozen=True)
class Forgotten:
    """A forgotten search: its id, its text's digest, when it was forgotten."""

    search_id: str
    qhash: str
    created: float


@dataclass(frozen=True)
class ForgetReport:
    """What one forget did: ``by`` "session" or "client", the rows deleted by table, the
    texts blanked (rewards, reserved and feedback rows kept with their digest)."""

    by: str
    searches: int
    deleted: dict[str, int]
    blanked: dict[str, int]
    dry_run: bool = False

    @property
    def found(self) -> bool:
        return bool(self.searches or any(self.deleted.values()))

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "searches": self.searches, "deleted": dict(self.deleted),
                "blanked": dict(self.blanked), "dry_run": self.dry_run}


def check_id(value: str, what: str) -> str:
    """A session or client id as stored (a string of 1 to :data:`MAX_ID_CHARS`)."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise ConfigError(f"{what} must be a non-empty string of at most {MAX_ID_CHARS} "
                          "characters")
    return value


class ForgetSQL:
    """Needs the host's ``_tx``, ``_sql`` and ``_serialize``."""

    if TYPE_CHECKING:
        def _tx(self) -> AbstractContextManager[Any]: ...
        def _sql(self, sql: str) -> str: ...
        def _serialize(self, cur: Any, what: str = ...) -> None: ...

    def forget(self, *, session: str | None = None, client: str | None = None,
               dry_run: bool = False) -> ForgetReport:
        """Forget the user ``session`` or ``client`` (exactly one; module docstring)."""
        if (session is None) == (client is None):
            raise ConfigError("name exactly one user to forget: --session ID or --client ID")
        by, uid = ("session", session) if session is not None else ("client", client)
        column = f"{by}_id"
        check_id(str(uid), f"--{by}")
        with self._tx() as cur:
            self._serialize(cur, "events")  # no event of the user lands half-way
            asked = self._user_searches(cur, column, str(uid))
            ids, texts = set(asked), set(asked.values()) - {""}
            deleted = self._delete(cur, column, str(uid), ids, texts, count_only=dry_run)
            blanked = self._blank(cur, {query_hash(t) for t in texts}, count_only=dry_run)
            if not dry_run:
                now = time.time()
                cur.executemany(self._sql(
                    "INSERT INTO forgotten (search_id, qhash, created) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING"),
                    [(i, query_hash(t), now) for i, t in sorted(asked.items())])
                tallies.add(cur, self._sql, FORGOTTEN_KIND,
                            [((t, ""), n) for t, n in deleted.items()])
        return ForgetReport(by, len(ids), deleted, blanked, dry_run)

    def _user_searches(self, cur: Any, column: str, uid: str) -> dict[str, str]:
        """The user's searches (logged with the id, or acted on by it): id -> text."""
        cur.execute(self._sql(f"SELECT search_id, query FROM searches WHERE {column} = ?"),
                    (uid,))
        rows = cur.fetchall()
        cur.execute(self._sql(f"SELECT DISTINCT search_id, query FROM events WHERE "
                              f"{column} = ?"), (uid,))
        rows += cur.fetchall()
        return {str(r[0]): str(r[1] or "") for r in rows}

    def _delete(self, cur: Any, column: str, uid: str, ids: set[str], texts: set[str], *,
                count_only: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        verb = "SELECT COUNT(*) FROM" if count_only else "DELETE FROM"

        def run(table: str, where: str, args: Sequence[Any]) -> None:
            cur.execute(self._sql(f"{verb} {table} WHERE {where}"), tuple(args))
            n = int(cur.fetchone()[0]) if count_only else max(int(cur.rowcount or 0), 0)
            out[table] = out.get(table, 0) + n

        # the user's own events first (then those of their searches that remain)
        run("events", f"{column} = ?", (uid,))
        for chunk in _chunks(sorted(ids)):
            marks = ", ".join("?" * len(chunk))
            for table in ("events", "impressions", "interventions", "feedback", "searches"):
                run(table, f"search_id IN ({marks})", chunk)
        for chunk in _chunks(sorted(query_hash(t) for t in texts)):
            marks = ", ".join("?" * len(chunk))
            run("click_rewards", f"qhash IN ({marks})", chunk)
        return out

    def _blank(self, cur: Any, digests: set[str], *, count_only: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        for chunk in _chunks(sorted(digests)):
            marks = ", ".join("?" * len(chunk))
            for table in ("rewards", "reserved", "feedback"):
                where = f"qhash IN ({marks}) AND query <> ''"
                if count_only:
                    cur.execute(self._sql(f"SELECT COUNT(*) FROM {table} WHERE {where}"),
                                tuple(chunk))
                    n = int(cur.fetchone()[0])
                else:
                    cur.execute(self._sql(f"UPDATE {table} SET query = '' WHERE {where}"),
                                tuple(chunk))
                    n = max(int(cur.rowcount or 0), 0)
                out[table] = out.get(table, 0) + n
        return out

    def forgotten_after(self, cursor: Cursor, limit: int = 10_000) -> list[Forgotten]:
        """Forgotten searches after ``cursor`` (by time, then id): what a running
        learner drops from its click window and its judge queue."""
        with self._tx() as cur:
            cur.execute(self._sql(
                "SELECT search_id, qhash, created FROM forgotten WHERE created >= ? AND "
                "(created > ? OR search_id > ?) ORDER BY created, search_id LIMIT ?"),
                (cursor_floor(cursor), cursor_floor(cursor), cursor[1], int(limit)))
            return [Forgotten(str(i), str(h), float(c)) for i, h, c in cur.fetchall()]


def forgotten_key(f: Forgotten) -> Cursor:
    """A forgotten row's place in :meth:`ForgetSQL.forgotten_after`'s order."""
    return f.created, f.search_id


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield list(items[i:i + _CHUNK])


__all__ = ["FORGOTTEN_KIND", "MAX_ID_CHARS", "ForgetReport", "ForgetSQL", "Forgotten", "check_id",
           "forgotten_key"]
