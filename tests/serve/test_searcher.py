"""The search thread behind ``/v1/search``: concurrent searches merge into one index call,
a lone search waits at most ``max_wait_ms``, and every request gets what a direct FAISS
call gives."""

from __future__ import annotations

import asyncio
import threading
import time

import faiss
import numpy as np
import pytest

from tests.serve.conftest import WaitLog
from tttembed.serve.searcher import Searcher


def unit(rng: np.random.Generator, n: int, d: int = 16) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class GatedIndex:
    """A flat FAISS index that records each call's size and, while ``gate`` is clear,
    blocks its calls (so that other searches have to queue)."""

    def __init__(self, docs: np.ndarray) -> None:
        self.flat = faiss.IndexFlatIP(docs.shape[1])
        self.flat.add(docs)
        self.sizes: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __len__(self) -> int:
        return int(self.flat.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.sizes.append(len(queries))
        self.entered.set()
        self.gate.wait(30)
        return self.flat.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def wait_until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert cond()


def queue_behind_busy_call(searcher: Searcher, index: GatedIndex, groups: list[np.ndarray],
                           k: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """A first search blocks inside the index; ``groups`` queue behind it; then the gate
    opens. Returns each group's (D, I)."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    index.gate.clear()
    index.entered.clear()  # an earlier call set it: wait for this first call to block
    first = threading.Thread(target=lambda: out.update({-1: searcher.search(groups[0], k)}))
    first.start()
    assert index.entered.wait(30)
    threads = [threading.Thread(target=lambda i=i, g=g: out.update(
        {i: searcher.search(g, k)})) for i, g in enumerate(groups)]
    for n, t in enumerate(threads, 1):  # one at a time: the queue keeps this order
        t.start()
        wait_until(lambda n=n: len(searcher._queue) == n)
    index.gate.set()
    for t in [first, *threads]:
        t.join(30)
    return out


def test_concurrent_searches_merge_into_one_index_call_with_direct_results():
    rng = np.random.default_rng(0)
    index = GatedIndex(unit(rng, 200))
    searcher = Searcher(index, max_batch=32, max_wait_ms=0)
    groups = [unit(rng, n) for n in (1, 3, 2)]
    out = queue_behind_busy_call(searcher, index, groups, k=7)
    assert index.sizes == [1, 6]  # the blocked call, then the three queued ones at once
    assert searcher.calls == 2 and searcher.merged == 3
    stacked = np.concatenate(groups)
    d_all, i_all = index.flat.search(stacked, 7)  # the same call, made directly
    at = 0
    for i, g in enumerate(groups):
        d, r = out[i]
        assert r.shape == (len(g), 7)
        np.testing.assert_array_equal(r, i_all[at:at + len(g)])
        np.testing.assert_array_equal(d, d_all[at:at + len(g)])
        d1, r1 = index.flat.search(g, 7)  # and each request's own direct call
        np.testing.assert_array_equal(r, r1)
        np.testing.assert_allclose(d, d1, atol=1e-6)
        at += len(g)


def test_merged_calls_hold_at_most_max_batch_rows_and_one_call_per_k():
    rng = np.random.default_rng(1)
    index = GatedIndex(unit(rng, 50))
    searcher = Searcher(index, max_batch=4, max_wait_ms=0)
    groups = [unit(rng, 3) for _ in range(3)]
    queue_behind_busy_call(searcher, index, groups, k=5)
    assert index.sizes == [3, 3, 3, 3]  # 3 + 3 > 4: never merged past max_batch
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    index.gate.clear()
    index.entered.clear()
    first = threading.Thread(target=lambda: out.update({0: searcher.search(groups[0], 2)}))
    first.start()
    assert index.entered.wait(30)
    ks = (2, 9, 2)
    threads = [threading.Thread(target=lambda i=i: out.update(
        {i + 1: searcher.search(groups[i][:1], ks[i])})) for i in range(3)]
    for n, t in enumerate(threads, 1):
        t.start()
        wait_until(lambda n=n: len(searcher._queue) == n)
    index.gate.set()
    for t in [first, *threads]:
        t.join(30)
    assert index.sizes[4:] == [3, 2, 1]  # the first, then k=2 (two rows) and k=9 apart
    for i in range(3):
        d, r = out[i + 1]
        d1, r1 = index.flat.search(groups[i][:1], ks[i])
        np.testing.assert_array_equal(r, r1)
        np.testing.assert_allclose(d, d1, atol=1e-6)


def test_a_lone_search_is_not_delayed_beyond_max_wait_ms():
    """Read from the worker's own waits (no wall clock: issue 77 trust round 6): serial
    traffic never waits; after a merged call a lone search waits once, for at most
    max_wait_ms, then runs alone; the search after it is serial again."""
    rng = np.random.default_rng(2)
    index = GatedIndex(unit(rng, 100))
    wait_ms = 300.0
    searcher = Searcher(index, max_batch=32, max_wait_ms=wait_ms)
    log = searcher._queued = WaitLog()
    q = unit(rng, 1)
    searcher.search(q, 3)  # serial traffic: no wait at all
    assert log.waits == []
    queue_behind_busy_call(searcher, index, [unit(rng, 1), unit(rng, 1)], k=3)
    assert searcher._merged and log.waits == []  # the next one waits for company
    d, r = searcher.search(q, 3)  # alone: waits at most max_wait_ms, then runs
    assert log.waits == [(wait_ms / 1000, False)]
    np.testing.assert_array_equal(r, index.flat.search(q, 3)[1])
    searcher.search(q, 3)  # that call was alone: serial again, no wait
    assert log.waits == [(wait_ms / 1000, False)]


def test_search_async_gives_the_direct_faiss_results():
    rng = np.random.default_rng(3)
    index = GatedIndex(unit(rng, 300))
    searcher = Searcher(index, max_batch=8, max_wait_ms=1.0)
    queries = [unit(rng, 1) for _ in range(20)]

    async def run() -> list[tuple[np.ndarray, np.ndarray]]:
        return list(await asyncio.gather(*(searcher.search_async(q, 10) for q in queries)))

    got = asyncio.run(run())
    assert searcher.calls < len(queries)  # concurrent: merged
    for q, (d, r) in zip(queries, got):
        d1, r1 = index.flat.search(q, 10)
        np.testing.assert_array_equal(r, r1)
        np.testing.assert_allclose(d, d1, atol=1e-6)


def test_an_index_error_reaches_every_request_of_the_call_and_the_thread_survives():
    rng = np.random.default_rng(4)
    index = GatedIndex(unit(rng, 20))
    searcher = Searcher(index, max_wait_ms=0)
    real, down = index.search, [True]

    def flaky(q, k):
        if down[0]:
            raise RuntimeError("index down")
        return real(q, k)
    index.search = flaky  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="index down"):
        searcher.search(unit(rng, 1), 3)
    down[0] = False
    d, r = searcher.search(unit(rng, 1), 3)
    assert r.shape == (1, 3)


def test_engine_searches_through_the_search_thread(minilm, tmp_path):
    from tttembed.index.store import build_index, load_index
    from tttembed.serve.engine import Engine
    from tttembed.ttt.snapshot import RAW_ONLY, Snapshot

    docs = {f"d{i}": {"title": "", "text": t} for i, t in enumerate(
        ["cats sit on mats", "dogs bark at night", "fish swim in rivers", "birds fly south"])}
    index = load_index(build_index(docs, minilm, tmp_path / "index"))
    engine = Engine(index, minilm, cache_size=16)
    res = engine.search(["a cat"], RAW_ONLY, 2, Snapshot(0, (), (), {}))
    res2 = asyncio.run(engine.search_async(["a dog"], RAW_ONLY, 2, Snapshot(0, (), (), {})))
    assert engine.searcher.calls == 2
    for text, got in (("a cat", res), ("a dog", res2)):
        d, r = index.search(minilm.encode([text], "query"), 2)
        np.testing.assert_array_equal(got.rows, r)
        np.testing.assert_allclose(got.scores, d, atol=1e-6)
