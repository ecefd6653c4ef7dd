"""A replica's traffic log: the searches it serves go to the feedback store as they are
answered. While the store cannot be written (the database restarting, or unreachable at
start) they wait in memory, bounded (past ``cap`` the oldest are dropped and counted, for
good), and a timer thread writes them every ``retry_s`` seconds without waiting for the
next search; :meth:`TrafficLog.close` (on shutdown) writes what is left once more, and
says in one log line how many are lost when it cannot. A search never fails because its
log cannot be written.

The timer thread runs only while something waits (or the store has not answered yet); it
has a start (the first failed write), a stop (:meth:`TrafficLog.close`) and reports how
it stands in :meth:`TrafficLog.status` (``log_error``, ``unlogged``, ``unlogged_dropped``)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

log = logging.getLogger("tttembed.serve")
#: Searches kept in memory while the store cannot be written, and the pause between tries.
UNLOGGED_MAX = 100_000
LOG_RETRY_S = 1.0
#: Seconds after a search during which its id, not found in the store, is answered with
#: a 503 (retry) instead of a 404: the replica that answered it may hold it still
#: (its store write failed) and write it shortly, so an event or a label posted to
#: another replica meanwhile is not lost.
UNWRITTEN_S = 300.0


def new_search_id() -> str:
    """A search id: 32 hex digits, the time in milliseconds (12) then 20 random ones, so
    any replica tells a search answered moments ago from an unknown id
    (:func:`answered_recently`)."""
    return f"{int(time.time() * 1000):012x}{uuid.uuid4().hex[:20]}"


def answered_recently(search_id: str, within: float = UNWRITTEN_S) -> float | None:
    """Seconds since :func:`new_search_id` made ``search_id`` when at most ``within``
    (a minute of clock skew between replicas allowed), else None (an older id, or not
    one of ours)."""
    if len(search_id) != 32:
        return None
    try:
        ms = int(search_id[:12], 16)
    except ValueError:
        return None
    age = time.time() - ms / 1000.0
    return max(age, 0.0) if -60.0 <= age <= within else None


class TrafficLog:
    """The buffer and its timer in front of ``store.log_searches`` (module docstring)."""

    def __init__(self, store: Any, *, cap: int = UNLOGGED_MAX,
                 retry_s: float = LOG_RETRY_S) -> None:
        self.store, self.cap, self.retry_s = store, max(int(cap), 1), float(retry_s)
        self.pending: list[Any] = []
        self.dropped = 0
        self.error: str | None = None
        self._trimmed = 0  # rows dropped so far (to match a batch written meanwhile)
        self._lock = threading.Lock()  # the buffer and the thread handle
        self._write = threading.Lock()  # one flush at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def probe(self) -> None:
        """Try the store once (at start): unreachable, it is reported (``log_error``,
        ``/healthz`` degraded) and the timer tries it again until it answers."""
        if not self.flush():
            self._start()

    def log(self, rows: list[Any]) -> None:
        """Write ``rows``, or hold them while the store cannot be written."""
        with self._lock:
            if self.error is not None or self.pending:
                self._hold(rows)
                self._start_locked()
                return
        try:
            self.store.log_searches(rows)
        except Exception as exc:  # noqa: BLE001  (the search is answered anyway)
            self._failed(exc)
            with self._lock:
                self._hold(rows)
                self._start_locked()

    def flush(self) -> bool:
        """Write what is held (with nothing held, a cheap read checks that the store
        answers); True when the store answered and nothing is left."""
        with self._write:
            with self._lock:
                batch, trimmed = list(self.pending), self._trimmed
            try:
                if batch:
                    self.store.log_searches(batch)
                else:
                    self.store.get_search("")  # reachable again?
            except Exception as exc:  # noqa: BLE001  (kept, tried again)
                self._failed(exc)
                return False
            with self._lock:
                del self.pending[:max(len(batch) - (self._trimmed - trimmed), 0)]
                if self.error is not None:
                    log.info("searches logged again (%d kept meanwhile)", len(batch))
                self.error = None
                return not self.pending

    def holds(self, search_id: str) -> bool:
        """Whether the search ``search_id`` waits here, answered and not written yet."""
        with self._lock:
            return any(getattr(row, "search_id", None) == search_id for row in self.pending)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"log_error": self.error, "unlogged": len(self.pending),
                    "unlogged_dropped": self.dropped}

    def close(self) -> None:
        """Stop the timer and write what is held once more; what cannot be written is
        counted as dropped and named in one log line."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(self.retry_s + 30)
        if self.pending and not self.flush():
            with self._lock:
                lost, self.pending = len(self.pending), []
                self.dropped += lost
            log.error("%d searches were not logged: the feedback store cannot be written "
                      "(%s)", lost, self.error)

    def _hold(self, rows: list[Any]) -> None:
        self.pending.extend(rows)
        over = len(self.pending) - self.cap
        if over > 0:
            del self.pending[:over]
            self.dropped += over
            self._trimmed += over

    def _failed(self, exc: BaseException) -> None:
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        if self.error is None:
            log.error("cannot log searches (kept in memory, retried every %g s): %s",
                      self.retry_s, error)
        self.error = error

    def _start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._run, name="tttembed-traffic-log",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self.retry_s
        while not self._stop.wait(wait):
            if self.flush():
                with self._lock:
                    if not self.pending and self.error is None:
                        self._thread = None
                        return
            wait = self.retry_s if self.error is not None else 0.0


__all__ = ["LOG_RETRY_S", "UNLOGGED_MAX", "UNWRITTEN_S", "TrafficLog", "answered_recently",
           "new_search_id"]
