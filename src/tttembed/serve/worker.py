"""One persistent thread that merges concurrent requests into batched calls: the one
worker behind the model thread (:class:`tttembed.serve.engine.Batcher`) and the search
thread (:class:`tttembed.serve.searcher.Searcher`).

Policy: requests are taken in arrival order, at most ``max_batch`` rows a call (a larger
request alone); when the previous call merged several requests (concurrent traffic) the
thread first waits up to ``max_wait_ms`` for ``max_batch`` rows; serial traffic never
waits, so a lone request is never delayed beyond ``max_wait_ms``. Requests of one batch
are grouped by key (the embedding kind, the search's ``k``) and each group is one call.
A request waits in its own thread (:meth:`MergingWorker.submit`) or awaits on the running
event loop (:meth:`MergingWorker.submit_async`: the worker wakes the loop once per
request, no worker thread waits).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable, Sized
from typing import Generic, TypeVar

P = TypeVar("P", bound=Sized)  # a request's payload: its rows (texts, query vectors)
K = TypeVar("K", bound=Hashable)  # what a call groups by (the kind, the k)
R = TypeVar("R")  # what the request gets back

#: Rows per call (texts, query vectors), and how long a request waits for others to join.
MAX_BATCH = 32
MAX_WAIT_MS = 2.0


class Slot(Generic[P, K, R]):
    """One request in the queue; ``finish`` runs on the worker thread once its result (or
    the error) is set."""

    __slots__ = ("payload", "key", "result", "error", "finish")

    def __init__(self, payload: P, key: K, finish: Callable[[], object]) -> None:
        self.payload, self.key, self.finish = payload, key, finish
        self.result: R | None = None
        self.error: BaseException | None = None

    def value(self) -> R:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class MergingWorker(Generic[P, K, R]):
    """The queue, the thread and the batching policy (see the module docstring); a use
    says how one group of requests with the same key is answered (:meth:`answer`)."""

    def __init__(self, name: str, max_batch: int, max_wait_ms: float) -> None:
        self.name = name
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max(0.0, float(max_wait_ms)) / 1000.0
        self._queue: list[Slot[P, K, R]] = []
        self._queued = threading.Condition(threading.Lock())
        self._busy = threading.Lock()  # held by the worker thread while it takes and runs
        self._thread: threading.Thread | None = None
        self._merged = False  # the last call merged several requests
        self.calls = 0  # calls made
        self.merged = 0  # requests answered by a call that served several

    def answer(self, key: K, slots: list[Slot[P, K, R]]) -> None:
        """Set ``result`` on every slot of one group (same key) with one call."""
        raise NotImplementedError

    def submit(self, payload: P, key: K) -> R:
        """The request's result, waiting in this thread."""
        done = threading.Event()
        slot: Slot[P, K, R] = Slot(payload, key, done.set)
        self._submit(slot)
        done.wait()
        return slot.value()

    async def submit_async(self, payload: P, key: K) -> R:
        """The request's result, awaited on the running event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def finish() -> None:  # on the worker thread
            try:
                loop.call_soon_threadsafe(resolve)
            except RuntimeError:  # the loop has closed (the server stopped): nobody waits
                pass

        slot: Slot[P, K, R] = Slot(payload, key, finish)
        self._submit(slot)
        await future
        return slot.value()

    def _submit(self, slot: Slot[P, K, R]) -> None:
        with self._queued:
            self._queue.append(slot)
            self._queued.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name,
                                                daemon=True)
                self._thread.start()

    def _queued_rows(self) -> int:
        return sum(len(s.payload) for s in self._queue)

    def _serve(self) -> None:
        while True:
            with self._queued:
                self._queued.wait_for(lambda: bool(self._queue))
                if self._merged and self.max_wait_s:
                    self._queued.wait_for(lambda: self._queued_rows() >= self.max_batch,
                                          timeout=self.max_wait_s)
            with self._busy:
                batch = self._take()
                self._merged = len(batch) > 1
                self._run(batch)

    def _take(self) -> list[Slot[P, K, R]]:
        """The queued requests in arrival order, up to ``max_batch`` rows (at least one
        request)."""
        with self._queued:
            n, count = 0, 0
            for s in self._queue:
                if n and count + len(s.payload) > self.max_batch:
                    break
                n += 1
                count += len(s.payload)
            batch, self._queue = self._queue[:n], self._queue[n:]
        return batch

    def _run(self, batch: list[Slot[P, K, R]]) -> None:
        for key in dict.fromkeys(s.key for s in batch):
            slots = [s for s in batch if s.key == key]
            try:
                self.answer(key, slots)
                self.calls += 1
                self.merged += len(slots) if len(slots) > 1 else 0
            except BaseException as exc:  # every waiting request gets the error
                for s in slots:
                    s.error = exc
            for s in slots:
                s.finish()


__all__ = ["MAX_BATCH", "MAX_WAIT_MS", "MergingWorker", "Slot"]
