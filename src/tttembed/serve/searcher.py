"""Every index search of the server from one persistent thread, concurrent searches merged
into one index call (the search-side twin of :class:`tttembed.serve.engine.Batcher`).

FAISS parallelises a search with OpenMP, and OpenMP keeps a thread team per calling
thread: searches called from a pool of anyio worker threads make a team per worker, more
threads than cores, and the runtime then stops spin-waiting between parallel regions
(the oversubscription that cost the embeddings route an order of magnitude before it got
its model thread). One search thread is one team, and merging the queued searches into
one ``Index.search`` call per ``k`` amortises the call itself (one scan of a flat index
for the whole batch).

Policy (the batcher's, one :class:`~tttembed.serve.worker.MergingWorker`): searches are
taken in arrival order, at most ``max_batch`` query rows a call (a larger request alone);
when the previous call merged several requests (concurrent traffic) the thread first
waits up to ``max_wait_ms`` for ``max_batch`` rows; serial traffic never waits, so a lone
search is never delayed beyond ``max_wait_ms``. Each request gets the rows of the merged
call that are its own, i.e. what ``index.search(its queries, k)`` returns inside that
batch.
"""

from __future__ import annotations

import numpy as np

from tttembed.index.base import Index
from tttembed.serve.worker import MAX_BATCH, MAX_WAIT_MS, MergingWorker, Slot

Hits = tuple[np.ndarray, np.ndarray]


class Searcher(MergingWorker[np.ndarray, int, Hits]):
    """``search(queries, k) -> (D, I)`` as :meth:`Index.search`, run on one persistent
    thread that merges concurrent requests (see the module docstring)."""

    def __init__(self, index: Index, max_batch: int = MAX_BATCH,
                 max_wait_ms: float = MAX_WAIT_MS) -> None:
        super().__init__("tttembed-search", max_batch, max_wait_ms)
        self.index = index

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """``(D, I)`` of ``queries``, waiting in this thread."""
        return self.submit(_rows(queries), int(k))

    async def search_async(self, queries: np.ndarray, k: int) -> Hits:
        """``(D, I)`` awaited on the running event loop: no worker thread waits, and the
        search thread wakes the loop once per request."""
        return await self.submit_async(_rows(queries), int(k))

    def answer(self, key: int, slots: list[Slot[np.ndarray, int, Hits]]) -> None:
        """One index call for the group's queries (all of one ``k``), each request its
        own rows of it."""
        q = slots[0].payload if len(slots) == 1 else np.concatenate([s.payload for s in slots])
        scores, rows = self.index.search(q, key)
        at = 0
        for s in slots:
            n = len(s.payload)
            s.result = (scores[at:at + n], rows[at:at + n])
            at += n


def _rows(queries: np.ndarray) -> np.ndarray:
    q = np.asarray(queries, dtype=np.float32)
    return q.reshape(1, -1) if q.ndim == 1 else q
