"""The work behind the routes: encode through an in-memory LRU cache in front of the
index's embedder, adapt with a snapshot, search the index; synchronous (from a worker
thread) or awaited on the event loop (:meth:`Engine.embed_async`).

Every model call runs on one persistent thread (a torch model is not re-entrant, and
torch's OpenMP runtime slows down when several threads call it); concurrent requests are
merged into model batches of at most ``max_batch`` texts, waiting up to ``max_wait_ms``
for others to join while traffic is concurrent, as embedding servers batch
(:class:`Batcher`). Cache hits and the adaptation itself do not touch the model. The
cache holds the embedder's own float32 rows, so a cached vector is the vector.

Every index search runs on one persistent search thread beside the model thread
(:class:`~tttembed.serve.searcher.Searcher`): concurrent searches merged into one index
call with the same batching policy, so FAISS's OpenMP runtime has one thread team.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.embed.base import Embedder, Kind
from tttembed.index.base import Index
from tttembed.serve.searcher import Searcher
from tttembed.serve.worker import MAX_BATCH, MAX_WAIT_MS, MergingWorker, Slot
from tttembed.ttt.snapshot import Snapshot


class Batcher(MergingWorker[list[str], Kind, np.ndarray]):
    """Every model call from one persistent thread, concurrent requests merged.

    A request queues its texts and waits; the model thread takes the queued requests in
    arrival order, at most ``max_batch`` texts a call (one call per kind, duplicates once;
    a larger request alone), and hands each request its rows. When the previous call
    merged several requests (concurrent traffic) it first waits up to ``max_wait_ms`` for
    ``max_batch`` texts; serial traffic never waits (the policy of
    :class:`~tttembed.serve.worker.MergingWorker`).

    One thread, because torch's OpenMP runtime keeps a thread team per calling thread:
    a model called from a pool of worker threads makes several teams, more threads than
    cores, and the runtime then stops spin-waiting between parallel regions (measured:
    one short query 7.2 ms from one thread, 20.5 ms once a second thread had called it).
    """

    def __init__(self, embedder: Embedder, max_batch: int = MAX_BATCH,
                 max_wait_ms: float = MAX_WAIT_MS) -> None:
        super().__init__("tttembed-model", max_batch, max_wait_ms)
        self.embedder = embedder

    def encode(self, texts: list[str], kind: Kind) -> np.ndarray:
        """The rows of ``texts``, waiting in this thread."""
        return self.submit(list(texts), kind)

    async def encode_async(self, texts: list[str], kind: Kind) -> np.ndarray:
        """The rows of ``texts``, awaited on the running event loop: no worker thread
        waits, and the model thread wakes the loop once per batch, not per request."""
        return await self.submit_async(list(texts), kind)

    def answer(self, key: Kind, slots: list[Slot[list[str], Kind, np.ndarray]]) -> None:
        """One model call for the group's texts (all of one kind, each text once), each
        request its own rows."""
        unique = list(dict.fromkeys(t for s in slots for t in s.payload))
        vecs = np.asarray(self.embedder.encode(unique, key), dtype=np.float32)
        row = {t: i for i, t in enumerate(unique)}
        for s in slots:
            s.result = vecs[[row[t] for t in s.payload]]


class LRUEncoder:
    """``encode(texts, kind)`` with a bounded ``(kind, text) -> vector`` cache in front of
    a :class:`Batcher`."""

    def __init__(self, embedder: Embedder, size: int, max_batch: int = MAX_BATCH,
                 max_wait_ms: float = MAX_WAIT_MS) -> None:
        self.embedder = embedder
        self.size = max(0, int(size))
        self._cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.batcher = Batcher(embedder, max_batch, max_wait_ms)
        self.hits = 0
        self.misses = 0

    def encode(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        out, todo = self._lookup(texts, kind)
        if todo:
            self._keep(out, todo, kind, self.batcher.encode(list(todo), kind))
        return out

    async def encode_async(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        out, todo = self._lookup(texts, kind)
        if todo:
            self._keep(out, todo, kind, await self.batcher.encode_async(list(todo), kind))
        return out

    def _lookup(self, texts: Sequence[str], kind: Kind
                ) -> tuple[np.ndarray, dict[str, list[int]]]:
        """Rows filled from the cache, and the positions of each text still to encode."""
        out = np.zeros((len(texts), int(self.embedder.dim)), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        with self._cache_lock:
            for i, t in enumerate(texts):
                v = self._cache.get((kind, t))
                if v is None:
                    todo.setdefault(t, []).append(i)
                else:
                    self._cache.move_to_end((kind, t))
                    out[i] = v
            self.hits += len(texts) - sum(len(v) for v in todo.values())
            self.misses += len(todo)
        return out, todo

    def _keep(self, out: np.ndarray, todo: dict[str, list[int]], kind: Kind,
              vecs: np.ndarray) -> None:
        with self._cache_lock:
            for t, v in zip(todo, vecs):
                out[todo[t]] = v
                if self.size:
                    self._cache[(kind, t)] = v
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)


@dataclass(frozen=True)
class Result:
    """Vectors (or search arrays) plus what the access log and metrics report."""

    vectors: np.ndarray
    hits: dict[str, int]
    generation: int
    scores: np.ndarray | None = None
    rows: np.ndarray | None = None


class Engine:
    def __init__(self, index: Index, embedder: Embedder, cache_size: int,
                 max_batch: int = MAX_BATCH, max_wait_ms: float = MAX_WAIT_MS) -> None:
        self.index = index
        self.embedder = embedder
        self.encoder = LRUEncoder(embedder, cache_size, max_batch, max_wait_ms)
        self.searcher = Searcher(index, max_batch, max_wait_ms)

    def embed(self, texts: Sequence[str], task: str | None, snap: Snapshot) -> Result:
        """Documents (``task`` None): base vectors. Queries: adapted with ``snap``."""
        return _adapted(self.encoder.encode(texts, _kind(task)), texts, task, snap)

    async def embed_async(self, texts: Sequence[str], task: str | None, snap: Snapshot
                          ) -> Result:
        """:meth:`embed` awaited on the event loop (the adaptation runs there too: a few
        vector operations per text)."""
        x = await self.encoder.encode_async(texts, _kind(task))
        return _adapted(x, texts, task, snap)

    def search(self, texts: Sequence[str], task: str, k: int, snap: Snapshot) -> Result:
        """Adapted queries against the unchanged index (as ``tttembed.api.search``)."""
        res = self.embed(texts, task, snap)
        scores, rows = self.searcher.search(res.vectors, min(int(k), len(self.index)))
        return Result(res.vectors, res.hits, res.generation, scores, rows)

    async def search_async(self, texts: Sequence[str], task: str, k: int, snap: Snapshot
                           ) -> Result:
        """:meth:`search` awaited on the event loop: the model rows and the index hits
        awaited from their threads, the adaptation on the loop."""
        res = await self.embed_async(texts, task, snap)
        scores, rows = await self.searcher.search_async(res.vectors,
                                                        min(int(k), len(self.index)))
        return Result(res.vectors, res.hits, res.generation, scores, rows)


def _kind(task: str | None) -> Kind:
    return "document" if task is None else "query"


def _adapted(x: np.ndarray, texts: Sequence[str], task: str | None, snap: Snapshot
             ) -> Result:
    """Documents (``task`` None) as encoded; queries adapted with ``snap``."""
    if task is None:
        return Result(x, {}, snap.generation)
    vectors, hits = snap.adapt(x, texts, task)
    return Result(vectors, hits, snap.generation)
