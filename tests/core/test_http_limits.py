"""Concurrency, rate limits, Retry-After and partial results of the HTTP backends, against
real loopback servers that add latency and 429s (and fake clocks for the pacing)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.servers import LocalOpenAIServer, Reply, Sleeps, hash_vectors
from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import JSONClient, RateLimiter, RetryPolicy, map_ordered
from tttembed.embed.cache import CachedEmbedder
from tttembed.embed.openai import OpenAIEmbedder
from tttembed.score.base import Item
from tttembed.score.llm_judge import LLMJudge
from tttembed.score.rerank import RerankScorer


class FakeClock:
    """A clock that only moves when ``sleep`` is called."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# -- the pacing itself -------------------------------------------------------------------

def test_rpm_spaces_request_starts_evenly():
    clock = FakeClock()
    limiter = RateLimiter(rpm=60, clock=clock, sleep=clock.sleep)
    waits = [limiter.acquire() for _ in range(4)]
    assert waits == [0.0, 1.0, 1.0, 1.0]
    clock.now += 10.0  # idle time is not banked as a burst beyond one request
    assert limiter.acquire() == 0.0 and limiter.acquire() == 1.0


def test_tpm_charges_tokens_and_settles_on_the_reported_count():
    clock = FakeClock()
    limiter = RateLimiter(tpm=600, clock=clock, sleep=clock.sleep)
    assert limiter.acquire(100) == 0.0
    assert limiter.acquire(100) == pytest.approx(10.0)  # 100 tokens = 10 s at 600/min
    limiter.settle(+50)  # the server said the last request used 150 tokens
    assert limiter.acquire(10) == pytest.approx(15.0)


def test_pause_holds_everyone_but_not_twice_the_one_who_slept_it():
    clock = FakeClock()
    limiter = RateLimiter(clock=clock, sleep=clock.sleep)
    end = limiter.pause(5.0)
    assert limiter.acquire(slept_until=end) == 0.0
    assert limiter.acquire() == pytest.approx(5.0)
    with pytest.raises(ConfigError, match="rpm must be > 0"):
        RateLimiter(rpm=0)


def test_rpm_through_the_client_on_a_real_server():
    clock = FakeClock()
    with LocalOpenAIServer() as srv:
        client = JSONClient(srv.url, clock=clock, sleep=clock.sleep, rpm=30)
        for _ in range(3):
            client.post("/rerank", {"query": "a", "documents": ["a"]})
        client.close()
    assert clock.sleeps == [2.0, 2.0] and srv.count("/rerank") == 3


# -- requests in flight ------------------------------------------------------------------

def test_embedder_in_flight_never_exceeds_the_bound():
    with LocalOpenAIServer(embed=hash_vectors, latency=0.05) as srv:
        emb = OpenAIEmbedder("m", srv.url, batch_size=1, max_concurrency=3)
        vecs = emb.encode([f"text {i}" for i in range(12)])
        emb.close()
    assert vecs.shape == (12, 16) and srv.count("/embeddings") == 12
    assert 2 <= srv.max_in_flight <= 3


def test_the_bound_holds_across_callers_of_one_client():
    """Three threads share one judge with max_concurrency=2: the client's semaphore, not
    only each call's pool, keeps the server at two requests at once."""
    with LocalOpenAIServer(chat=lambda p: "Score: 3", latency=0.05) as srv:
        judge = LLMJudge("m", srv.url, max_concurrency=2)
        docs = [Item(f"d{i}", f"doc {i}") for i in range(4)]
        threads = [threading.Thread(target=judge.score, args=(Item("q", "q"), docs))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        judge.close()
    assert srv.count("/chat/completions") == 12
    assert srv.max_in_flight == 2


def test_rerank_requests_in_flight_are_bounded():
    with LocalOpenAIServer(latency=0.05) as srv:
        sc = RerankScorer("m", srv.url, max_documents_per_request=1, max_concurrency=4)
        sc.score(Item("q", "a b"), [Item(str(i), f"a {i}") for i in range(16)])
        sc.close()
    assert srv.count("/rerank") == 16 and 2 <= srv.max_in_flight <= 4


# -- 429 and Retry-After -----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["embed", "judge", "rerank"])
def test_429_with_retry_after_is_waited_out(backend):
    sleeps = Sleeps()
    with LocalOpenAIServer(embed=hash_vectors, chat=lambda p: "Score: 5") as srv:
        srv.script(Reply(status=429, headers={"Retry-After": "3"}))
        if backend == "embed":
            b = OpenAIEmbedder("m", srv.url, sleep=sleeps)
            assert b.encode(["a b"]).shape == (1, 16)
        elif backend == "judge":
            b = LLMJudge("m", srv.url, sleep=sleeps)
            assert b.score(Item("q", "q"), [Item("d", "d")]).tolist() == [1.0]
        else:
            b = RerankScorer("m", srv.url, sleep=sleeps)
            assert b.score(Item("q", "a"), [Item("d", "a")]).tolist() == [1.0]
        b.close()
    assert sleeps == [3.0] and srv.count() == 2


def test_a_429_pauses_the_other_requests_of_the_client():
    clock = FakeClock()
    with LocalOpenAIServer() as srv:
        srv.script(Reply(status=429, headers={"Retry-After": "4"}))
        client = JSONClient(srv.url, clock=clock, sleep=clock.sleep)
        client.post("/rerank", {"query": "a", "documents": ["a"]})  # 429, waits 4, retries
        assert clock.sleeps == [4.0]
        client.limiter.pause(2.0)  # as another thread's 429 would
        client.post("/rerank", {"query": "a", "documents": ["a"]})
        client.close()
    assert clock.sleeps == [4.0, 2.0]


def test_deadline_bounds_a_request_that_keeps_getting_429():
    sleeps = Sleeps()
    with LocalOpenAIServer() as srv:
        srv.script(*[Reply(status=429, headers={"Retry-After": "2"})] * 6)
        client = JSONClient(srv.url, sleep=sleeps,
                            policy=RetryPolicy(max_retries=5, deadline=5.0))
        with pytest.raises(BackendError, match="total deadline of 5 s is spent"):
            client.post("/rerank", {"query": "a", "documents": ["a"]})
        client.close()
    assert sleeps == [2.0, 2.0] and srv.count() == 3


# -- what arrived before a failure is kept -----------------------------------------------

def test_map_ordered_attaches_the_results_that_arrived():
    def fn(x: int) -> int:
        if x == 3:
            raise ValueError("boom")
        return x * 10

    seen: list[tuple[int, int]] = []
    with pytest.raises(ValueError, match="boom") as info:
        map_ordered(fn, range(6), 1, on_result=lambda i, r: seen.append((i, r)))
    assert info.value.partial_results == {0: 0, 1: 10, 2: 20}  # type: ignore[attr-defined]
    assert seen == [(0, 0), (1, 10), (2, 20)]
    with pytest.raises(ValueError) as info:
        map_ordered(fn, range(4), 4)
    assert info.value.partial_results == {0: 0, 1: 10, 2: 20}  # type: ignore[attr-defined]


def test_embedding_cache_keeps_the_batches_that_arrived(tmp_path):
    texts = [f"text number {i}" for i in range(6)]
    with LocalOpenAIServer(embed=hash_vectors) as srv:
        inner = OpenAIEmbedder("m", srv.url, batch_size=2, max_concurrency=1)
        emb = CachedEmbedder(inner, tmp_path)
        srv.script(Reply(), Reply(), Reply(status=400))  # the third batch fails
        with pytest.raises(BackendError, match="HTTP 400"):
            emb.encode(texts)
        assert len(emb.cache("document")) == 4
        before = srv.count("/embeddings")
        out = emb.encode(texts)
        inner.close()
    assert srv.count("/embeddings") == before + 1  # only the failed batch is asked again
    ref = hash_vectors(texts)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
