"""The openai: embedder and the shared HTTP retry policy, against a real local server."""

from __future__ import annotations

import email.utils
import logging
import math
import threading
import time
import traceback

import numpy as np
import pytest

from tests import servers
from tests.servers import Reply, Sleeps, closed_port_url
from tttembed.core.backends import create
from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import (
    DEFAULT_BASE_URL,
    RetryPolicy,
    map_ordered,
    retry_after_seconds,
    split_model_url,
)
from tttembed.embed.base import Embedder
from tttembed.embed.openai import OpenAIEmbedder, from_spec
from tttembed.embed.st import SentenceTransformerEmbedder

openai_server = servers.openai_server  # the local OpenAI-compatible server fixture

TEXTS = [
    "The cat sat on the mat.",
    "Photosynthesis turns light into chemical energy.",
    "Paris is the capital of France.",
    "A short one.",
    "Quantum computers use qubits that can be in superposition.",
    "The stock market fell sharply on Monday after the announcement.",
    "How do I bake sourdough bread at home?",
    "Mount Everest is the highest mountain above sea level.",
    "Rust guarantees memory safety without a garbage collector.",
    "The Nile flows north into the Mediterranean Sea.",
]


_MADE: list[OpenAIEmbedder] = []


@pytest.fixture(autouse=True)
def _close_embedders():
    yield
    while _MADE:
        _MADE.pop().close()


def embedder(server, **options) -> OpenAIEmbedder:
    options.setdefault("sleep", Sleeps())
    _MADE.append(from_spec(f"minilm@{server.url}", **options))
    return _MADE[-1]


def inputs(server) -> list[list[str]]:
    return [r.json["input"] for r in server.requests]


# -- vectors ---------------------------------------------------------------------------


def test_vectors_match_local_st_backend(openai_server, minilm):
    emb = embedder(openai_server, batch_size=4, max_concurrency=3, query_prompt="query: ")
    docs = emb.encode(TEXTS, kind="document")
    queries = emb.encode(TEXTS, kind="query")
    local_q = SentenceTransformerEmbedder("bundled:all-MiniLM-L6-v2", query_prompt="query: ",
                                          model=minilm.model).encode(TEXTS, kind="query")
    assert docs.dtype == np.float32 and docs.shape == (len(TEXTS), 384)
    # the server scales rows by 3: unit norms prove client-side normalisation
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(docs, minilm.encode(TEXTS, kind="document"), atol=1e-5)
    np.testing.assert_allclose(queries, local_q, atol=1e-5)
    assert not np.allclose(queries, docs, atol=1e-3)  # the prompt changed the vectors
    sent = [t for batch in inputs(openai_server) for t in batch]
    assert sum(t.startswith("query: ") for t in sent) == len(TEXTS)
    assert emb.dim == 384 and emb.calls == 6
    assert isinstance(emb, Embedder)
    assert emb.identity == f"openai:minilm@{openai_server.url} query_prompt='query: '"


@pytest.mark.parametrize(("n", "batch_size"), [(10, 4), (8, 4), (1, 64), (10, 1)])
def test_batching_sends_ceil_n_over_batch_requests(openai_server, n, batch_size):
    emb = embedder(openai_server, batch_size=batch_size, max_concurrency=2)
    out = emb.encode(TEXTS[:n])
    expected = math.ceil(n / batch_size)
    assert out.shape == (n, 384)
    assert openai_server.count("/embeddings") == expected == emb.calls
    assert sorted(len(b) for b in inputs(openai_server)) == sorted(
        min(batch_size, n - i * batch_size) for i in range(expected))


def test_order_preserved_with_concurrency_and_shuffled_data(openai_server, minilm):
    def reverse(body):
        return {**body, "data": body["data"][::-1]}

    # the first request to arrive is answered last; every response lists data backwards
    openai_server.script(Reply(delay=0.3, mutate=reverse), Reply(mutate=reverse),
                         Reply(mutate=reverse), Reply(mutate=reverse))
    emb = embedder(openai_server, batch_size=3, max_concurrency=4)
    out = emb.encode(TEXTS)
    np.testing.assert_allclose(out, minilm.encode(TEXTS), atol=1e-5)
    assert emb.calls == 4


def test_empty_input_and_dim_probe(openai_server):
    emb = embedder(openai_server)
    assert emb.dim == 384 and emb.calls == 1  # one probe request fixed the dimension
    assert emb.encode([]).shape == (0, 384)
    assert emb.calls == 1


def test_dimensions_option_is_sent_and_part_of_identity(openai_server):
    emb = embedder(openai_server, dimensions=128)
    out = emb.encode(TEXTS[:3])
    assert out.shape == (3, 128) and emb.dim == 128
    assert openai_server.requests[0].json["dimensions"] == 128
    assert "dimensions=128" in emb.identity
    assert "dimensions" not in embedder(openai_server).identity
    assert openai_server.requests[0].json["model"] == "minilm"


# -- retries ---------------------------------------------------------------------------


def test_429_then_success_honours_retry_after(openai_server):
    openai_server.script(Reply(429, headers={"Retry-After": "7"}),
                         Reply(429, headers={"Retry-After": "120"}))
    sleeps = Sleeps()
    emb = embedder(openai_server, sleep=sleeps, retry=RetryPolicy(max_delay=30))
    assert emb.encode(TEXTS[:2]).shape == (2, 384)
    assert sleeps == [7.0, 30.0]  # the second hint is capped by max_delay
    assert openai_server.count() == 3 and emb.calls == 1


def test_repeated_500s_fail_after_max_retries_plus_one_attempts(openai_server):
    openai_server.script(*[Reply(500)] * 10)
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=3, base_delay=0.5, max_delay=1.5)
    emb = embedder(openai_server, sleep=sleeps, retry=policy)
    with pytest.raises(BackendError, match=r"after 4 attempts.*HTTP 500") as info:
        emb.encode(TEXTS[:2])
    assert openai_server.count() == 4 and emb.calls == 0
    assert len(sleeps) == 3
    for attempt, slept in enumerate(sleeps):  # full jitter within the exponential cap
        assert 0.0 <= slept <= min(1.5, 0.5 * 2**attempt)
    assert openai_server.url in str(info.value)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_4xx_are_not_retried(openai_server, status):
    openai_server.script(Reply(status, body={"error": {"message": "model 'x' not found"}}))
    sleeps = Sleeps()
    with pytest.raises(BackendError, match=rf"HTTP {status}: .*model 'x' not found"):
        embedder(openai_server, sleep=sleeps).encode(TEXTS[:1])
    assert openai_server.count() == 1 and sleeps == []


def test_timeout_is_retried(openai_server):
    openai_server.script(Reply(delay=2.0))
    sleeps = Sleeps()
    emb = embedder(openai_server, sleep=sleeps, timeout=0.2, max_retries=1)
    assert emb.encode(TEXTS[:2]).shape == (2, 384)
    assert openai_server.count() == 2 and len(sleeps) == 1


def test_server_down_is_a_clear_backend_error_after_retries():
    url = closed_port_url()
    sleeps = Sleeps()
    emb = from_spec(f"m@{url}", sleep=sleeps, max_retries=2)
    with pytest.raises(BackendError, match=r"failed after 3 attempts.*connection failed") as info:
        emb.encode(["hello"])
    assert url in str(info.value) and "server running" in str(info.value)
    assert len(sleeps) == 2


# -- malformed answers -----------------------------------------------------------------


def test_malformed_json_is_a_backend_error(openai_server):
    openai_server.script(Reply(body=b"{not json at all"))
    with pytest.raises(BackendError, match="malformed JSON"):
        embedder(openai_server).encode(TEXTS[:2])
    assert openai_server.count() == 1


def test_wrong_dimension_against_dim_option(openai_server):
    def truncate(body):
        for item in body["data"]:
            item["embedding"] = item["embedding"][:100]
        return body

    openai_server.script(Reply(mutate=truncate))
    with pytest.raises(BackendError, match=r"100-dimensional vectors, expected 384"):
        embedder(openai_server, dim=384).encode(TEXTS[:2])


def test_wrong_dimension_after_first_response_fixed_it(openai_server):
    emb = embedder(openai_server)
    emb.encode(TEXTS[:2])
    openai_server.script(Reply(mutate=lambda b: {**b, "data": [
        {**d, "embedding": d["embedding"] + [0.5]} for d in b["data"]]}))
    with pytest.raises(BackendError, match=r"385-dimensional vectors, expected 384"):
        emb.encode(TEXTS[:2])


def test_wrong_number_of_items(openai_server):
    openai_server.script(Reply(mutate=lambda b: {**b, "data": b["data"][:-1]}))
    with pytest.raises(BackendError, match=r"returned 2 embeddings for 3 inputs"):
        embedder(openai_server).encode(TEXTS[:3])


@pytest.mark.parametrize("body", [
    {"object": "list"},
    {"data": [{"index": 0, "embedding": "oops"}]},
    {"data": [{"index": 5, "embedding": [0.1, 0.2]}]},
    {"data": [{"index": 0, "embedding": [float("nan"), 1.0]}]},
])
def test_malformed_embedding_payloads(openai_server, body):
    openai_server.script(Reply(body=body))
    with pytest.raises(BackendError, match="embeddings"):
        embedder(openai_server).encode(TEXTS[:1])


# -- API key ---------------------------------------------------------------------------


def test_api_key_sent_as_bearer_and_never_leaked(openai_server, monkeypatch, caplog):
    secret = "sk-test-SECRET-4242"
    monkeypatch.setenv("TTT_TEST_KEY", secret)
    emb = embedder(openai_server, api_key_env="TTT_TEST_KEY")
    emb.encode(TEXTS[:1])
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {secret}"
    echo = {"error": {"message": f"Incorrect API key provided: {secret}"}}
    openai_server.script(Reply(500, body=echo), Reply(401, body=echo))
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendError, match="HTTP 401") as info:
        emb.encode(TEXTS[:1])
    text = "".join(traceback.format_exception(info.value))
    assert "TTT_TEST_KEY" in str(info.value)  # names the variable, not its value
    for shown in (str(info.value), repr(info.value), text, repr(emb), repr(emb.client),
                  emb.identity, emb.spec, caplog.text):
        assert secret not in shown
    assert "HTTP 500" in caplog.text  # the retry was logged, redacted


def test_no_key_means_no_authorization_header(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder(openai_server).encode(TEXTS[:1])
    assert "authorization" not in openai_server.requests[0].headers


# -- spec and registry -----------------------------------------------------------------


def test_registry_creates_the_http_embedder(openai_server):
    emb = create("embedder", f"openai:m@{openai_server.url}", sleep=Sleeps())
    _MADE.append(emb)
    assert isinstance(emb, OpenAIEmbedder)
    assert emb.spec == f"openai:m@{openai_server.url}"
    assert emb.encode(["a", "b"], kind="query").shape == (2, 384)
    assert openai_server.requests[0].path == "/v1/embeddings"


@pytest.mark.parametrize(("rest", "model", "url"), [
    ("text-embedding-3-small", "text-embedding-3-small", DEFAULT_BASE_URL),
    ("m@http://127.0.0.1:8000/v1/", "m", "http://127.0.0.1:8000/v1"),
    ("org/model@v2@https://host/v1", "org/model@v2", "https://host/v1"),
    ("model@v2", "model@v2", DEFAULT_BASE_URL),
])
def test_split_model_url(rest, model, url):
    assert split_model_url(rest, "openai") == (model, url)


def test_bad_specs_and_options():
    with pytest.raises(ConfigError, match="model name"):
        from_spec("@http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="batch_size"):
        from_spec("m@http://127.0.0.1:1/v1", batch_size=0)
    with pytest.raises(ConfigError, match="disagree"):
        from_spec("m", dimensions=64, dim=128)
    with pytest.raises(ConfigError, match="max_retries"):
        RetryPolicy(max_retries=-1)


# -- shared HTTP helpers ---------------------------------------------------------------


def test_retry_after_parsing():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 10, usegmt=True)
    assert retry_after_seconds(date, now=now) == pytest.approx(10.0)
    assert retry_after_seconds(email.utils.formatdate(now - 60, usegmt=True), now=now) == 0.0


def test_retry_after_http_date_is_honoured(openai_server):
    date = email.utils.formatdate(time.time() + 3600, usegmt=True)
    openai_server.script(Reply(503, headers={"Retry-After": date}))
    sleeps = Sleeps()
    embedder(openai_server, sleep=sleeps, retry=RetryPolicy(max_delay=12)).encode(["x"])
    assert sleeps == [12.0]


def test_map_ordered_keeps_order_and_bounds_concurrency():
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def work(i: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.01 * (8 - i))  # later items finish first
        with lock:
            state["now"] -= 1
        return i * i

    assert map_ordered(work, list(range(8)), max_concurrency=3) == [i * i for i in range(8)]
    assert 1 < state["peak"] <= 3


def test_map_ordered_raises_the_first_error():
    def work(i: int) -> int:
        if i == 2:
            raise BackendError("boom")
        return i

    with pytest.raises(BackendError, match="boom"):
        map_ordered(work, range(5), max_concurrency=2)
