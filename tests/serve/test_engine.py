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
