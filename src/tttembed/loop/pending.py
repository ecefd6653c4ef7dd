"""The learner's incremental view of the store: new rows only, and the pairs to judge next.

:class:`Tail` reads one table after a cursor, re-reading the last :data:`LOOKBACK_S`
seconds (a row committed late, or stamped by a replica whose clock runs behind, is still
seen) and keeping each row once. :class:`PendingQueue` holds what
:func:`tttembed.loop.judge.pending_pairs` computes from the whole history (the same
order: a query's weight, its active-allocation factor, a pair's best served rank), but
is updated from new searches and new rewards only: a query's weight is kept as
``log2(sum 2^(created / half_life))`` (time-decay multiplies every query's weight alike,
so it never reorders them), and a heap gives the next pairs in ``O(log n)``. Its
queries are an LRU of at most ``max_queries``: the least recently served query is
forgotten first (its pairs are no longer offered).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from tttembed.adapt.active import query_priority
from tttembed.loop.rows import (
    CHAIN_TASK,
    PAGE,
    START,
    Cursor,
    Feedback,
    Reward,
    SearchLog,
    Store,
)
from tttembed.types import Triple

T = TypeVar("T")
#: (task, query text)
QueryKey = tuple[str, str]

#: Seconds of rows re-read behind the cursor on every read.
LOOKBACK_S = 30.0
#: Queries the pending queue remembers at most (LRU), and base lists cached.
MAX_QUERIES = 100_000


class Tail(Generic[T]):
    """New rows of one table: ``read(cursor, limit)`` returns rows after ``cursor`` in
    (created, key) order; ``key(row)`` is that (created, key)."""

    def __init__(self, read: Callable[[Cursor, int], list[T]],
                 key: Callable[[T], Cursor], lookback_s: float = LOOKBACK_S) -> None:
        self.read, self.key, self.lookback_s = read, key, lookback_s
        self.cursor: Cursor = START
        self._recent: dict[str, float] = {}
        self.rows = 0

    def new(self) -> list[T]:
        """Rows not returned before (oldest first)."""
        return [row for page in self.pages() for row in page]

    def pages(self) -> Iterator[list[T]]:
        """The rows :meth:`new` returns, a page at a time (a first read of a year of
        traffic never holds it all in memory)."""
        start = START if self.cursor == START else (self.cursor[0] - self.lookback_s, "")
        while True:
            page = self.read(start, PAGE)
            out: list[T] = []
            for row in page:
                created, k = self.key(row)
                if k in self._recent:
                    continue
                self._recent[k] = created
                out.append(row)
                if (created, k) > self.cursor:
                    self.cursor = (created, k)
            self.rows += len(out)
            self._prune()
            if out:
                yield out
            if len(page) < PAGE:
                return
            start = self.key(page[-1])

    def _prune(self) -> None:
        floor = self.cursor[0] - self.lookback_s
        self._recent = {k: c for k, c in self._recent.items() if c >= floor}

    @property
    def size(self) -> int:
        return len(self._recent)


class PendingQueue:
    """Unjudged served pairs, best first, kept up to date from new rows (module docs)."""

    def __init__(self, *, depth: int, half_life_s: float = 600.0,
                 per_query: int | None = None, max_queries: int = MAX_QUERIES) -> None:
        self.depth, self.half_life_s = depth, half_life_s
        self.cap = depth if per_query is None else per_query
        self.max_queries = max_queries
        self._lw: OrderedDict[QueryKey, float] = OrderedDict()
        self._served: dict[QueryKey, tuple[str, ...]] = {}
        self._best: dict[QueryKey, dict[str, int]] = {}
        self.judged: dict[QueryKey, dict[str, float]] = {}
        self._stamp: dict[QueryKey, int] = {}
        self._count: dict[QueryKey, int] = {}
        self._heap: list[tuple[float, Triple, int]] = []
        self._clock = 0
        self.total = 0

    # -- updates ----------------------------------------------------------------------
    def add_searches(self, searches: Iterable[SearchLog],
                     lists: Callable[[SearchLog], Sequence[str]]) -> None:
        touched: set[QueryKey] = set()
        for s in searches:
            key = (s.task, s.query)
            x = s.created / self.half_life_s
            old = self._lw.pop(key, None)
            self._lw[key] = x if old is None else _logaddexp2(old, x)
            docs = tuple(lists(s))[:self.depth]
            self._served.setdefault(key, docs)
            best = self._best.setdefault(key, {})
            for rank, doc in enumerate(docs):
                if rank < best.get(doc, self.depth):
                    best[doc] = rank
            touched.add(key)
        self._evict(touched)
        for key in touched:
            if key in self._lw:
                self._refresh(key)

    def add_judged(self, triples: Iterable[tuple[Triple, float]], *,
                   override: bool = True) -> None:
        """Judged pairs with their rewards; ``override=False`` (people's labels) keeps a
        judge's reward already known for the pair (as the full recomputation does)."""
        touched: set[QueryKey] = set()
        for (task, query, doc), value in triples:
            row = self.judged.setdefault((task, query), {})
            if override or doc not in row:
                row[doc] = value
            touched.add((task, query))
        for key in touched:
            if key in self._lw:
                self._refresh(key)

    def forget(self, digests: set[str]) -> int:
        """Drop the queries whose text's digest is in ``digests``: the count dropped."""
        from tttembed.loop.rows import query_hash

        keys = [k for k in set(self._lw) | set(self.judged) if query_hash(k[1]) in digests]
        for key in keys:
            self._lw.pop(key, None)
            self._served.pop(key, None)
            self._best.pop(key, None)
            self._stamp.pop(key, None)
            self.judged.pop(key, None)
            self.total -= self._count.pop(key, 0)
        return len(keys)

    def _evict(self, keep: set[QueryKey]) -> None:
        while len(self._lw) > self.max_queries:
            key = next(iter(self._lw))
            if key in keep and len(keep) >= self.max_queries:
                break
            self._lw.pop(key)
            self._served.pop(key, None)
            self._best.pop(key, None)
            self._stamp.pop(key, None)
            self.total -= self._count.pop(key, 0)

    def _factor(self, key: QueryKey) -> float:
        rewards = self.judged.get(key)
        if rewards is None:
            return 1.0
        return query_priority(list(self._served.get(key, ())), rewards) / 2

    def _refresh(self, key: QueryKey) -> None:
        """Re-offer ``key``'s pending pairs at its current score (older heap entries of
        it become stale)."""
        self._clock += 1
        self._stamp[key] = stamp = self._clock
        judged = self.judged.get(key, {})
        pending = [] if len(judged) >= self.cap else [
            (d, r) for d, r in self._best.get(key, {}).items() if d not in judged]
        self.total += len(pending) - self._count.get(key, 0)
        self._count[key] = len(pending)
        if not pending:
            return
        factor = self._factor(key)
        lw = self._lw[key] + (math.log2(factor) if factor > 0 else -math.inf)
        for doc, rank in pending:
            score = lw - math.log2(math.log2(rank + 2))
            heapq.heappush(self._heap, (-score, (key[0], key[1], doc), stamp))
        if len(self._heap) > 4 * self.total + 4096:
            self._compact()

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._live(e)]
        heapq.heapify(self._heap)

    def _live(self, entry: tuple[float, Triple, int]) -> bool:
        _, (task, query, doc), stamp = entry
        key = (task, query)
        return self._stamp.get(key) == stamp and doc not in self.judged.get(key, {})

    # -- reading ----------------------------------------------------------------------
    def top(self, n: int) -> list[Triple]:
        """The ``n`` best pending pairs (they stay pending until judged)."""
        got: list[tuple[float, Triple, int]] = []
        while self._heap and len(got) < n:
            entry = heapq.heappop(self._heap)
            if self._live(entry):
                got.append(entry)
        for entry in got:
            heapq.heappush(self._heap, entry)
        return [t for _, t, _ in got]

    def sizes(self) -> dict[str, int]:
        return {"queries": len(self._lw), "judged_queries": len(self.judged),
                "judged_pairs": sum(len(v) for v in self.judged.values()),
                "heap": len(self._heap), "pending": self.total}


def _logaddexp2(a: float, b: float) -> float:
    hi, lo = (a, b) if a >= b else (b, a)
    return hi + math.log2(1.0 + 2.0 ** (lo - hi))


class LRU(Generic[T]):
    """A bounded mapping (least recently used out first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[object, T] = OrderedDict()

    def get(self, key: object, make: Callable[[], T]) -> T:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = self._items[key] = make()
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)




class Traffic:
    """The store's new rows, read incrementally into a :class:`PendingQueue`; how many
    rewards and labels it has read (its counts, without a COUNT over the tables)."""

    def __init__(self, store: Store, queue: PendingQueue,
                 lists: Callable[[SearchLog], Sequence[str]]) -> None:
        self.queue, self.lists = queue, lists
        self.searches: Tail[SearchLog] = Tail(store.searches_after,
                                              lambda s: (s.created, s.search_id))
        self.feedback: Tail[Feedback] = Tail(store.feedback_after, _feedback_key)
        self.rewards: Tail[Reward] = Tail(store.rewards_after, _reward_key)
        self.forgotten: Tail[Any] = Tail(store.forgotten_after,
                                         lambda f: (f.created, f.search_id))

    def update(self) -> None:
        gone = {f.qhash for page in self.forgotten.pages() for f in page}
        if gone:  # ``store forget``: the user's questions leave the judge's queue
            self.queue.forget(gone)
        for rewards in self.rewards.pages():
            self.queue.add_judged(((r.task, r.query, r.doc_id), r.reward) for r in rewards)
        for labels in self.feedback.pages():
            self.queue.add_judged((((f.task, f.query, f.doc_id), float(f.label))
                                   for f in labels), override=False)
        for searches in self.searches.pages():  # chain searches: no state learns from them
            self.queue.add_searches([s for s in searches if s.task != CHAIN_TASK], self.lists)

    @property
    def rewarded(self) -> int:
        """Rewards and labels read so far (every row of both tables, once)."""
        return self.rewards.rows + self.feedback.rows

    def sizes(self) -> dict[str, int]:
        return {**self.queue.sizes(), "recent_rows": self.searches.size + self.feedback.size
                + self.rewards.size}


def _feedback_key(f: Feedback) -> Cursor:
    return f.created, f"{f.key}\x1e{f.doc_id}"


def _reward_key(r: Reward) -> Cursor:
    return r.created, f"{r.task}\x1e{r.query}\x1e{r.doc_id}"


__all__ = ["LOOKBACK_S", "LRU", "MAX_QUERIES", "PendingQueue", "Tail", "Traffic"]
