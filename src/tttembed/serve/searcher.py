"""Every index search of the server from one persistent thread, concurrent searches merged
into one index call (the search-side twin of :class:`tttembed.serve.engine.Batcher`).

FAISS parallelises a search with OpenMP, and OpenMP keeps a thread team per calling
thread: searches called from a pool of anyio worker threads make a team per worker, more
threads than cores, and the runtime then stops spin-waiting between parallel regions
(the oversubscription that cost the embeddings route an order of magnitude before it got
its model thread). One search thread is one team, and merging the queued searches into
one ``Index.search`` call per ``k`` amortises the call itself (one scan of a flat index
for the whole batch).

Policy (as the batcher's): searches are taken in arrival order, at most ``max_batch``
query rows a call (a larger request alone); when the previous call merged several
requests (concurrent traffic) the thread first waits up to ``max_wait_ms`` for
``max_batch`` rows; serial traffic never waits, so a lone search is never delayed beyond
``max_wait_ms``. Each request gets the rows of the merged call that are its own, i.e.
what ``index.search(its queries, k)`` returns inside that batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np

from tttembed.index.base import Index

#: Query rows per index call, and how long a search waits for others to join it.
MAX_BATCH = 32
MAX_WAIT_MS = 2.0

Hits = tuple[np.ndarray, np.ndarray]


class _Slot:
    """One request's queries in the queue; ``finish`` runs on the search thread once its
    arrays (or the error) are set."""

    __slots__ = ("queries", "k", "result", "error", "finish")

    def __init__(self, queries: np.ndarray, k: int, finish: Callable[[], object]) -> None:
        self.queries, self.k, self.finish = queries, k, finish
        self.result: Hits | None = None
        self.error: BaseException | None = None

    def hits(self) -> Hits:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class Searcher:
    """``search(queries, k) -> (D, I)`` as :meth:`Index.search`, run on one persistent
    thread that merges concurrent requests (see the module docstring)."""

    def __init__(self, index: Index, max_batch: int = MAX_BATCH,
                 max_wait_ms: float = MAX_WAIT_MS) -> None:
        self.index = index
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max(0.0, float(max_wait_ms)) / 1000.0
        self._queue: list[_Slot] = []
        self._queued = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._merged = False  # the last call merged several requests
        self.calls = 0  # index calls made
        self.merged = 0  # requests answered by a call that served several

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """``(D, I)`` of ``queries``, waiting in this thread."""
        done = threading.Event()
        slot = _Slot(_rows(queries), int(k), done.set)
        self._submit(slot)
        done.wait()
        return slot.hits()

    async def search_async(self, queries: np.ndarray, k: int) -> Hits:
        """``(D, I)`` awaited on the running event loop: no worker thread waits, and the
        search thread wakes the loop once per request."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def finish() -> None:  # on the search thread
            try:
                loop.call_soon_threadsafe(resolve)
            except RuntimeError:  # the loop has closed (the server stopped): nobody waits
                pass

        slot = _Slot(_rows(queries), int(k), finish)
        self._submit(slot)
        await future
        return slot.hits()

    def _submit(self, slot: _Slot) -> None:
        with self._queued:
            self._queue.append(slot)
            self._queued.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="tttembed-search",
                                                daemon=True)
                self._thread.start()

    def _queued_rows(self) -> int:
        return sum(len(s.queries) for s in self._queue)

    def _serve(self) -> None:
        while True:
            with self._queued:
                self._queued.wait_for(lambda: bool(self._queue))
                if self._merged and self.max_wait_s:
                    self._queued.wait_for(lambda: self._queued_rows() >= self.max_batch,
                                          timeout=self.max_wait_s)
                batch = self._take()
            self._merged = len(batch) > 1
            self._run(batch)

    def _take(self) -> list[_Slot]:
        """The queued requests in arrival order, up to ``max_batch`` rows (at least one
        request); called with the queue's lock held."""
        n, count = 0, 0
        for s in self._queue:
            if n and count + len(s.queries) > self.max_batch:
                break
            n += 1
            count += len(s.queries)
        batch, self._queue = self._queue[:n], self._queue[n:]
        return batch

    def _run(self, batch: list[_Slot]) -> None:
        for k in dict.fromkeys(s.k for s in batch):
            slots = [s for s in batch if s.k == k]
            try:
                q = slots[0].queries if len(slots) == 1 else \
                    np.concatenate([s.queries for s in slots])
                scores, rows = self.index.search(q, k)
                self.calls += 1
                self.merged += len(slots) if len(slots) > 1 else 0
                at = 0
                for s in slots:
                    n = len(s.queries)
                    s.result = (scores[at:at + n], rows[at:at + n])
                    at += n
            except BaseException as exc:  # every waiting request gets the error
                for s in slots:
                    s.error = exc
            for s in slots:
                s.finish()


def _rows(queries: np.ndarray) -> np.ndarray:
    q = np.asarray(queries, dtype=np.float32)
    return q.reshape(1, -1) if q.ndim == 1 else q
