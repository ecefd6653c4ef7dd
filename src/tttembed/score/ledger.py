"""The reward ledger: every paid (query, document) pair, in SQLite, so no pair is paid twice.

A row is keyed by (scorer key, sha256(query text), sha256(document text)) and holds the
reward (REAL on [0, 1]; NULL = the scorer returned nan, a missing reward) and the time it
was written. The scorer key is the scorer's ``identity`` when it has one (the spec plus
any option that changes rewards, e.g. a Qwen3 instruction or a BM25 corpus fingerprint),
else its ``spec``.

``LedgerScorer`` wraps any Scorer: pairs already in the ledger are served from it; the
others are sent to the inner scorer in chunks of ``chunk_size``, each chunk committed as
soon as it is scored, so a killed process loses at most the chunk in flight. A scorer with
``score_each(query, docs, on_result)`` (the LLM judge) reports every pair as it is
answered and each one is committed at once: a kill or a failed pair loses only the pairs
in flight, never an answered one. A missing (nan) result is recorded and counted as paid;
it is not asked again unless ``retry_missing=True`` (``--retry-missing``). A stored reward
is never overwritten by a missing one.

A corrupt database file (``sqlite3.DatabaseError``) is a ConfigError naming the file and
how to recover.

The database is in WAL mode (``synchronous=NORMAL``: a committed chunk survives the
process being killed; a power cut may lose the last commits): any number of readers, one
writer at a time (others wait up to ``timeout`` seconds). Default location:
``ledger.sqlite`` in :func:`tttembed.core.paths.cache_dir` (``$TTTEMBED_CACHE_DIR``, else
``$XDG_CACHE_HOME/tttembed``, else ``~/.cache/tttembed``). The file is a cache of paid work:
safe to copy; deleting it means paying again.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import BackendError, ConfigError, StateMismatch
from tttembed.core.io import text_digest
from tttembed.core.paths import cache_dir
from tttembed.score.base import Item, Scorer
from tttembed.types import PathLike

SCHEMA_VERSION = 1
_MAX_VARS = 500  # host parameters per SELECT ... IN (...)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS specs (
    id INTEGER PRIMARY KEY,
    spec TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS rewards (
    spec_id INTEGER NOT NULL REFERENCES specs(id),
    query_hash BLOB NOT NULL,
    doc_hash BLOB NOT NULL,
    reward REAL,
    created REAL NOT NULL,
    PRIMARY KEY (spec_id, query_hash, doc_hash)
) WITHOUT ROWID;
"""
_UPSERT = """
INSERT INTO rewards (spec_id, query_hash, doc_hash, reward, created) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (spec_id, query_hash, doc_hash) DO UPDATE
SET reward = excluded.reward, created = excluded.created
WHERE excluded.reward IS NOT NULL OR rewards.reward IS NULL
"""


def default_ledger_path(cache_root: PathLike | None = None) -> Path:
    """``ledger.sqlite`` in :func:`tttembed.core.paths.cache_dir` (``cache_root`` overrides it)."""
    return cache_dir(cache_root) / "ledger.sqlite"


def scorer_key(scorer: Any) -> str:
    """What keys a scorer's rows: its ``identity`` if it has one, else its ``spec``."""
    return str(getattr(scorer, "identity", None) or scorer.spec)


def sqlite_problem(path: Path, exc: sqlite3.DatabaseError, fresh: str,
                   name: str = "ledger.sqlite") -> str:
    """What is wrong with the SQLite file at ``path`` and the fix, after ``path``: a
    folder, a path that cannot be opened (a missing or read-only folder), or a corrupt or
    foreign file (only then is moving it aside the advice; ``fresh`` says what for)."""
    if path.is_dir():
        return (f"is a folder, not a SQLite file: {exc} (give the path of a file, e.g. "
                f"{path / name})")
    if "unable to open" in str(exc):
        return (f"cannot be opened: {exc} (check that its folder exists and is writable, "
                "and the path's permissions)")
    return (f"is unreadable: {exc} (a corrupt or foreign SQLite file; try 'sqlite3 {path} "
            f".recover' into a new file, or move it aside {fresh})")


def _corrupt(path: Path, exc: sqlite3.DatabaseError) -> ConfigError:
    return ConfigError(f"reward ledger {path} " + sqlite_problem(
        path, exc, "to start a new ledger, which means paying again"))


class Ledger:
    """SQLite store of paid rewards. Thread-safe; reopens itself after a fork."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 30.0) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._spec_ids: dict[str, int] = {}
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connect()

    # -- connection ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.timeout, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise StateMismatch(
                    f"reward ledger {self.path} has schema version {version}, this tttembed "
                    f"reads version {SCHEMA_VERSION}; use another ledger path")
            if version == 0:  # a new file (readers of an existing one write nothing)
                with conn:
                    conn.executescript(_SCHEMA)
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, exc) from exc
        self._conn, self._pid = conn, os.getpid()
        self._spec_ids = {}
        return conn

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; a corrupt database becomes a ConfigError."""
        with self._lock:
            try:
                yield self._connect()
            except sqlite3.OperationalError as exc:
                if "full" in str(exc):
                    raise ConfigError(f"reward ledger {self.path}: {exc} (free disk space and "
                                      "run again: the pairs committed so far are kept)"
                                      ) from exc
                if "locked" in str(exc) or "busy" in str(exc):
                    raise ConfigError(f"reward ledger {self.path} stayed locked by another "
                                      f"writer for {self.timeout:g} s ({exc}); retry when it "
                                      "ends") from exc
                raise _corrupt(self.path, exc) from exc
            except sqlite3.DatabaseError as exc:
                raise _corrupt(self.path, exc) from exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> Ledger:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spec_id(self, conn: sqlite3.Connection, spec: str, create: bool) -> int | None:
        sid = self._spec_ids.get(spec)
        if sid is None:
            if create:
                with conn:
                    conn.execute("INSERT OR IGNORE INTO specs (spec) VALUES (?)", (spec,))
            row = conn.execute("SELECT id FROM specs WHERE spec = ?", (spec,)).fetchone()
            if row is None:
                return None
            sid = self._spec_ids[spec] = int(row[0])
        return sid

    # -- digest-level API (used by LedgerScorer) -----------------------------------
    def get_digests(self, spec: str, query: bytes, docs: Iterable[bytes]) -> dict[bytes, float]:
        """Stored rewards of the given document digests (nan = recorded as missing)."""
        wanted = list(dict.fromkeys(docs))
        found: dict[bytes, float] = {}
        with self._locked() as conn:
            sid = self._spec_id(conn, spec, create=False)
            if sid is None:
                return found
            for start in range(0, len(wanted), _MAX_VARS):
                part = wanted[start: start + _MAX_VARS]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    "SELECT doc_hash, reward FROM rewards WHERE spec_id = ? AND query_hash = ? "
                    f"AND doc_hash IN ({marks})", (sid, query, *part)).fetchall()
                for doc, reward in rows:
                    found[bytes(doc)] = math.nan if reward is None else float(reward)
        return found

    def put_digests(self, spec: str, query: bytes, docs: Sequence[bytes],
                    rewards: Sequence[float]) -> None:
        """Record rewards (nan = missing) in one committed transaction."""
        if len(docs) != len(rewards):
            raise ValueError(f"{len(docs)} documents but {len(rewards)} rewards")
        now = time.time()
        rows = []
        for doc, r in zip(docs, rewards):
            r = float(r)
            rows.append((query, doc, None if math.isnan(r) else r, now))
        with self._locked() as conn:
            sid = self._spec_id(conn, spec, create=True)
            with conn:
                conn.executemany(_UPSERT, [(sid, *row) for row in rows])

    # -- text-level API -----------------------------------------------------------
    def get_many(self, spec: str, query_text: str, doc_texts: Iterable[str]) -> dict[str, float]:
        """``{sha256(doc text) hex: reward}`` for the pairs already recorded (nan = missing)."""
        found = self.get_digests(spec, text_digest(query_text),
                                 (text_digest(t) for t in doc_texts))
        return {k.hex(): v for k, v in found.items()}

    def put_many(self, spec: str, query_text: str, doc_texts: Sequence[str],
                 rewards: Sequence[float]) -> None:
        self.put_digests(spec, text_digest(query_text), [text_digest(t) for t in doc_texts],
                         list(rewards))

    def count(self, spec: str | None = None) -> int:
        """Number of recorded pairs (for one scorer key, or all)."""
        with self._locked() as conn:
            if spec is None:
                return int(conn.execute("SELECT COUNT(*) FROM rewards").fetchone()[0])
            sid = self._spec_id(conn, spec, create=False)
            if sid is None:
                return 0
            return int(conn.execute("SELECT COUNT(*) FROM rewards WHERE spec_id = ?",
                                    (sid,)).fetchone()[0])

    def specs(self) -> list[str]:
        with self._locked() as conn:
            return [r[0] for r in conn.execute("SELECT spec FROM specs ORDER BY spec")]


@dataclass(frozen=True)
class LedgerCounts:
    requested: int
    cached: int
    paid: int
    missing: int


class LedgerScorer:
    """A Scorer that pays its inner scorer only for pairs the ledger does not hold yet.

    Counters: ``requested`` pairs asked for; ``cached`` served without paying (from the
    ledger, or a duplicate document text within one call); ``paid`` sent to the inner
    scorer; ``missing`` paid pairs that came back nan. ``score`` may be called from several
    threads at once (the counters are updated under a lock; the ledger has its own).

    ``origin`` is the ``(spec, options)`` the inner scorer was built from, when known
    (:func:`tttembed.ttt.rewards.build_scorer` sets it), so it can be rebuilt elsewhere
    (Ray actors); ``executor`` is where unpaid pairs are scored in bulk before ``score``
    is called per query (None: in this process, by ``score``; see
    :func:`tttembed.execute.score.use_executor`).
    """

    def __init__(self, scorer: Scorer, ledger: Ledger | None = None, *, chunk_size: int = 16,
                 retry_missing: bool = False) -> None:
        if int(chunk_size) < 1:
            raise ConfigError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.inner = scorer
        self.ledger = ledger if ledger is not None else Ledger()
        self.chunk_size = int(chunk_size)
        self.retry_missing = bool(retry_missing)
        self.spec = scorer.spec
        self.mapping = scorer.mapping
        self.identity = scorer_key(scorer)
        self.requested = self.cached = self.paid = self.missing = 0
        self._count_lock = threading.Lock()
        self.origin: tuple[str, dict[str, Any]] | None = None
        self.executor: Any = None
        self._prepaid: set[tuple[bytes, bytes]] = set()  # paid by the executor, unread

    def counts(self) -> LedgerCounts:
        with self._count_lock:
            return LedgerCounts(self.requested, self.cached, self.paid, self.missing)

    def _plan(self, query_text: str, doc_texts: Sequence[str]
              ) -> tuple[bytes, list[bytes], dict[bytes, float], list[tuple[bytes, int]]]:
        """Digests, what the ledger holds, and the (digest, first position) pairs to pay."""
        qd = text_digest(query_text)
        digests = [text_digest(t) for t in doc_texts]
        known = self.ledger.get_digests(self.identity, qd, digests)
        todo: dict[bytes, int] = {}  # digest -> first position, in request order
        for i, dg in enumerate(digests):
            if dg in known and not (self.retry_missing and math.isnan(known[dg])):
                continue
            todo.setdefault(dg, i)
        return qd, digests, known, list(todo.items())

    def known(self, query_text: str, doc_texts: Sequence[str]) -> int:
        """How many of these pairs ``score`` would serve without paying (a dry run)."""
        return len(doc_texts) - len(self._plan(query_text, doc_texts)[3])

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        docs = list(docs)
        out = np.full(len(docs), np.nan, dtype=np.float64)
        qd, digests, known, pending = self._plan(query.text, [d.text for d in docs])
        fresh: dict[bytes, float] = {}
        with self._count_lock:
            self.requested += len(docs)
            self.cached += len(docs) - len(pending) - self._claim(qd, digests)
        for start in range(0, len(pending), self.chunk_size):
            chunk = pending[start: start + self.chunk_size]
            fresh.update(self._pay_chunk(query, qd, [dg for dg, _ in chunk],
                                         [docs[i] for _, i in chunk]))
        for i, dg in enumerate(digests):
            out[i] = fresh[dg] if dg in fresh else known[dg]
        return out

    def _claim(self, qd: bytes, digests: Sequence[bytes]) -> int:
        """Pairs of this call paid by the executor in this run and not read yet: they are
        counted paid, not cached (under the count lock)."""
        if not self._prepaid:
            return 0
        mine = {(qd, dg) for dg in digests} & self._prepaid
        self._prepaid -= mine
        return len(mine)

    def record_prepaid(self, qd: bytes, digests: Sequence[bytes],
                       rewards: Sequence[float]) -> None:
        """Commit pairs paid elsewhere (an executor, e.g. Ray actors) and count them paid;
        the first ``score`` call that reads one does not count it again as cached."""
        self._record(qd, digests, rewards)
        with self._count_lock:
            self._prepaid.update((qd, dg) for dg in digests)

    def _record(self, qd: bytes, digests: Sequence[bytes], rewards: Sequence[float]) -> None:
        """Commit paid pairs and count them (thread-safe)."""
        self.ledger.put_digests(self.identity, qd, digests, rewards)
        with self._count_lock:
            self.paid += len(digests)
            self.missing += sum(1 for r in rewards if math.isnan(r))

    def _pay_chunk(self, query: Item, qd: bytes, digests: list[bytes], docs: list[Item]
                   ) -> dict[bytes, float]:
        """Pay one chunk; pair by pair when the scorer reports each answer (score_each)."""
        each = getattr(self.inner, "score_each", None)
        if each is None:
            rewards = self._pay(query, docs)
            self._record(qd, digests, rewards.tolist())
            return dict(zip(digests, rewards.tolist()))

        def commit(position: int, reward: float) -> None:
            self._record(qd, [digests[position]], [_checked(self.spec, reward)])

        rewards = np.asarray(each(query, docs, commit), dtype=np.float64)
        if rewards.shape != (len(docs),):
            raise BackendError(f"scorer {self.spec} returned shape {rewards.shape} for "
                               f"{len(docs)} documents; a scorer must return (n,)")
        return dict(zip(digests, rewards.tolist()))

    def _pay(self, query: Item, docs: list[Item]) -> np.ndarray:
        rewards = np.asarray(self.inner.score(query, docs), dtype=np.float64)
        if rewards.shape != (len(docs),):
            raise BackendError(f"scorer {self.spec} returned shape {rewards.shape} for "
                               f"{len(docs)} documents; a scorer must return (n,)")
        bad = ~np.isnan(rewards) & ((rewards < 0) | (rewards > 1))
        if bad.any():
            _checked(self.spec, float(rewards[bad][0]))
        return rewards


def _checked(spec: str, reward: float) -> float:
    """``reward`` if it is nan (missing) or in [0, 1]; a BackendError otherwise."""
    reward = float(reward)
    if not math.isnan(reward) and not 0.0 <= reward <= 1.0:
        raise BackendError(f"scorer {spec} returned rewards outside [0, 1] "
                           f"(e.g. {reward!r}); map raw scores to [0, 1]")
    return reward
