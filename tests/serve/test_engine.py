"""The encoder behind the routes: concurrent requests merge into one model call, and the
LRU cache returns the embedder's own rows."""

from __future__ import annotations

import threading
import time

import numpy as np

from tttembed.serve.engine import Batcher, LRUEncoder


def test_waiting_requests_merge_into_one_model_call(minilm):
    batcher = Batcher(minilm)
    texts = [["a cat on a mat"], ["dogs bark", "a cat on a mat"], ["fish swim"]]
    out: dict[int, np.ndarray] = {}
    with batcher._model_lock:  # the model is busy: every request has to queue
        threads = [threading.Thread(target=lambda i=i: out.update({i: batcher.encode(
            texts[i], "query")})) for i in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(batcher._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(batcher._queue) == 3
    for t in threads:
        t.join()
    assert batcher.calls == 1
    for i, group in enumerate(texts):
        np.testing.assert_allclose(out[i], minilm.encode(group, "query"), atol=1e-6)


class CountingEmbedder:
    """Records the size of every model call."""

    dim = 4

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def encode(self, texts, kind="document", progress=None):
        self.sizes.append(len(texts))
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], np.float32)


def test_model_batches_hold_at_most_max_batch_texts_in_arrival_order():
    emb = CountingEmbedder()
    batcher = Batcher(emb, max_batch=4, max_wait_ms=0)
    out: dict[int, np.ndarray] = {}
    with batcher._model_lock:
        threads = [threading.Thread(target=lambda i=i: out.update({i: batcher.encode(
            [f"t{i}-{j}" for j in range(3)], "query")})) for i in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(batcher._queue) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    for t in threads:
        t.join()
    assert max(emb.sizes) <= 4 and sum(emb.sizes) == 12  # 3 texts each: one request a call
    for i in range(4):
        assert out[i][:, 0].tolist() == [len(f"t{i}-{j}") for j in range(3)]
    big = Batcher(emb, max_batch=2, max_wait_ms=0).encode([f"x{j}" for j in range(5)], "query")
    assert len(big) == 5 and emb.sizes[-1] == 5  # a larger request goes alone, whole


def test_a_lone_request_waits_at_most_max_wait_ms_for_company():
    emb = CountingEmbedder()
    batcher = Batcher(emb, max_batch=8, max_wait_ms=50)
    t = time.perf_counter()
    batcher.encode(["alone"], "query")
    waited = time.perf_counter() - t
    assert emb.sizes == [1] and waited >= 0.04
    pair = Batcher(emb, max_batch=2, max_wait_ms=5000)  # waits until a second text comes
    second = threading.Thread(target=lambda: time.sleep(0.05) or pair.encode(["b"], "query"))
    second.start()
    pair.encode(["a"], "query")
    second.join()
    assert emb.sizes[1:] == [2]  # the second request joined the first one's model call


def test_lru_cache_serves_repeats_and_stays_bounded(minilm):
    enc = LRUEncoder(minilm, size=2)
    first = enc.encode(["one", "two", "one"], "document")
    np.testing.assert_allclose(first[0], first[2], atol=0)
    assert enc.misses == 2 and enc.batcher.calls == 1
    again = enc.encode(["two"], "document")
    assert enc.hits == 1 and enc.batcher.calls == 1
    np.testing.assert_allclose(again[0], first[1], atol=0)
    enc.encode(["three"], "document")
    assert len(enc._cache) == 2 and ("document", "one") not in enc._cache
    q = enc.encode(["two"], "query")  # another kind: not the document row's cache entry
    assert enc.batcher.calls == 3 and q.shape == (1, 384)
