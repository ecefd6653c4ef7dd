"""The rerank: scorer against a real local rerank server (Cohere/vLLM and TEI shapes)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from tests.servers import LocalOpenAIServer, Reply, overlap_scores
from tttembed.core.backends import known_schemes
from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import HttpLimits
from tttembed.score.base import Item, Scorer, capabilities, get_scorer
from tttembed.score.ledger import Ledger, LedgerScorer
from tttembed.score.qwen3 import DEFAULT_INSTRUCTION, PREFIX, SUFFIX
from tttembed.score.rerank import RerankScorer

QUERY = Item("q1", "capital of france")
DOCS = [Item("d0", "paris is the capital of france"), Item("d1", "bananas are yellow"),
        Item("d2", "the capital city"), Item("d3", "france in summer"),
        Item("d4", "capital of france and of paris")]
EXPECTED = overlap_scores(QUERY.text, [d.text for d in DOCS])


@pytest.fixture(params=["cohere", "tei"])
def server(request: pytest.FixtureRequest) -> Iterator[LocalOpenAIServer]:
    with LocalOpenAIServer(rerank_api=request.param) as srv:
        yield srv


def base_url(srv: LocalOpenAIServer) -> str:
    """vLLM/Cohere are addressed with their /v1 base; TEI at its root."""
    return srv.url if srv.rerank_api == "cohere" else srv.url.removesuffix("/v1")


def make(srv: LocalOpenAIServer, **options) -> RerankScorer:
    return get_scorer(f"rerank:my-reranker@{base_url(srv)}", **options)  # type: ignore[return-value]


def test_registered_cacheable_and_a_scorer():
    assert "rerank" in known_schemes("scorer")
    caps = capabilities("rerank:m@http://127.0.0.1:1")
    assert caps.cacheable and not caps.needs_corpus and not caps.uses_labels
    assert HttpLimits(concurrency=4, rpm=30).options("rerank:m@http://127.0.0.1:1") == {
        "max_concurrency": 4, "rpm": 30}


@pytest.mark.parametrize("api", ["auto", "explicit"])
def test_both_shapes_score_all_candidates_in_one_request(server, api):
    sc = make(server, api=server.rerank_api if api == "explicit" else "auto")
    assert isinstance(sc, Scorer)
    out = sc.score(QUERY, DOCS)
    np.testing.assert_allclose(out, EXPECTED)
    assert server.count("/rerank") == 1
    sent = server.requests[0]
    assert sent.path == ("/v1/rerank" if server.rerank_api == "cohere" else "/rerank")
    assert sent.json["query"] == QUERY.text
    field = "documents" if server.rerank_api == "cohere" else "texts"
    assert sent.json[field] == [d.text for d in DOCS]
    if server.rerank_api == "cohere":
        assert sent.json["model"] == "my-reranker" and sent.json["top_n"] == len(DOCS)
    assert sc.api == server.rerank_api


def test_auto_detects_from_the_first_answer_then_sends_one_shape(server):
    sc = make(server)
    sc.score(QUERY, DOCS[:2])
    sc.score(QUERY, DOCS[2:])
    first, second = server.requests[0].json, server.requests[1].json
    assert "documents" in first and "texts" in first
    other = "texts" if server.rerank_api == "cohere" else "documents"
    assert other not in second


def test_split_by_max_documents_per_request_keeps_order(server):
    sc = make(server, max_documents_per_request=2, max_concurrency=3)
    np.testing.assert_allclose(sc.score(QUERY, DOCS), EXPECTED)
    assert server.count("/rerank") == 3  # 2 + 2 + 1 documents


def test_raw_logits_need_sigmoid():
    logits = [2.0, -1.0, 0.0]
    with LocalOpenAIServer(rerank=lambda q, d: logits[: len(d)]) as srv:
        with pytest.raises(BackendError, match=r"outside \[0, 1\].*sigmoid=true"):
            make(srv).score(QUERY, DOCS[:3])
        sc = make(srv, sigmoid=True)
        np.testing.assert_allclose(sc.score(QUERY, DOCS[:3]),
                                   [1 / (1 + math.exp(-x)) for x in logits])
        assert sc.mapping == "sigmoid(score)" and "sigmoid=true" in sc.identity


def test_malformed_answers_fail_clearly():
    with LocalOpenAIServer() as srv:
        srv.script(Reply(body={"results": [{"index": 0, "relevance_score": 0.5}]}))
        with pytest.raises(BackendError, match="1 results for the 2 documents sent"):
            make(srv).score(QUERY, DOCS[:2])
        srv.script(Reply(body={"data": []}))
        with pytest.raises(BackendError, match="neither"):
            make(srv).score(QUERY, DOCS[:2])
        srv.script(Reply(body=[{"index": 7, "score": 0.5}]))
        with pytest.raises(BackendError, match="malformed results"):
            make(srv).score(QUERY, DOCS[:2])


def test_qwen3_template_is_applied_client_side():
    with LocalOpenAIServer() as srv:
        make(srv, template="qwen3").score(QUERY, DOCS[:2])
        sent = srv.requests[0].json
    assert sent["query"] == f"{PREFIX}<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: {QUERY.text}\n"
    assert sent["documents"] == [f"<Document>: {d.text}{SUFFIX}" for d in DOCS[:2]]
    implied = RerankScorer("m", "http://127.0.0.1:1", instruction=DEFAULT_INSTRUCTION)
    assert implied.template == "qwen3" and implied.identity == "rerank:m@http://127.0.0.1:1 template=qwen3"
    other = RerankScorer("m", "http://127.0.0.1:1", instruction="find code")
    assert other.identity.endswith("template=qwen3 instruction='find code'")
    with pytest.raises(ConfigError, match="template"):
        RerankScorer("m", "http://127.0.0.1:1", template="nope")
    with pytest.raises(ConfigError, match="api must be one of"):
        RerankScorer("m", "http://127.0.0.1:1", api="voyage")


def test_key_from_env_never_in_identity(monkeypatch):
    monkeypatch.setenv("RERANK_API_KEY", "sk-secret-123")
    with LocalOpenAIServer() as srv:
        sc = make(srv)
        sc.score(QUERY, DOCS[:1])
        assert srv.requests[0].headers["authorization"] == "Bearer sk-secret-123"
    for text in (sc.identity, repr(sc), repr(sc.client)):
        assert "sk-secret" not in text
    assert sc.identity == f"rerank:my-reranker@{srv.url}"


def test_ledger_commits_each_answered_request_and_a_rerun_pays_nothing(tmp_path):
    with LocalOpenAIServer() as srv:
        ledger = Ledger(tmp_path / "ledger.sqlite")
        sc = LedgerScorer(make(srv, max_documents_per_request=2, max_concurrency=1), ledger)
        srv.script(Reply(), Reply(status=400))  # the second request fails, not retried
        with pytest.raises(BackendError, match="HTTP 400"):
            sc.score(QUERY, DOCS)
        assert sc.paid == 2  # the first request's two pairs are committed
        np.testing.assert_allclose(sc.score(QUERY, DOCS), EXPECTED)
        assert srv.count("/rerank") == 2 + 2  # the rerun paid the three others only
        sent = [len(r.json["documents"]) for r in srv.requests[2:]]
        assert sent == [2, 1]
        calls = srv.count()
        np.testing.assert_allclose(sc.score(QUERY, DOCS), EXPECTED)
        assert srv.count() == calls
        ledger.close()
