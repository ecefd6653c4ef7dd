"""The framework classes (``tttembed.integrations.langchain`` / ``.llamaindex``) against
real served instances: they return exactly what the server answers (ids, scores, texts,
search ids), sync and async alike, with ``k`` / ``similarity_top_k`` at construction and
(LangChain) at ``invoke``; clicks and labels reach the feedback store by the document's
``search_id``; a server that never answers fails within the client's ``timeout`` and
``max_retries``, and the error names them; the chain guide says what they take and
return."""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from tests.chain.conftest import DOCS as CHAIN_DOCS
from tests.serve.conftest import DOCS, QUERIES, TASK
from tests.serve.test_chain_routes import chain_server, chain_setup  # noqa: F401
from tttembed.core.errors import BackendError, ConfigError

# ruff: noqa: F811  (the chain server fixtures, imported)

lc = pytest.importorskip("tttembed.integrations.langchain")
li = pytest.importorskip("tttembed.integrations.llamaindex")

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "In which country is the birthplace of the painter Ada Marlow?"


def served(url: str, path: str, body: dict) -> dict:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_langchain_retriever_returns_the_served_search(text_server):
    want = served(text_server, "/v1/search", {"query": QUERIES["q3"], "task": TASK, "k": 5})
    retriever = lc.TTTEmbedRetriever(url=text_server, task=TASK, k=5)
    docs = retriever.invoke(QUERIES["q3"])
    assert [d.id for d in docs] == want["data"][0]["ids"]
    assert [d.metadata["score"] for d in docs] == pytest.approx(want["data"][0]["scores"])
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3, 4, 5]
    assert [d.page_content for d in docs] == [DOCS[d.id] for d in docs]
    assert docs[0].metadata["task"] == TASK and docs[0].metadata["version"] is None
    assert [d.id for d in retriever.invoke(QUERIES["q3"], k=2)] == want["data"][0]["ids"][:2]
    assert [d.id for d in asyncio.run(retriever.ainvoke(QUERIES["q3"], k=3))] \
        == want["data"][0]["ids"][:3]
    # a url ending in /v1 (as OpenAI clients take it) is the same server
    assert [d.id for d in lc.TTTEmbedRetriever(url=text_server + "/v1/", task=TASK, k=5)
            .invoke(QUERIES["q3"])] == want["data"][0]["ids"]


def test_the_retrievers_refuse_bad_k_and_unknown_keywords(text_server):
    retriever = lc.TTTEmbedRetriever(url=text_server, task=TASK)
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        retriever.invoke("a dog", k=0)
    with pytest.raises(ConfigError, match="unknown keyword 'top_k': it takes k"):
        retriever.invoke("a dog", top_k=3)
    with pytest.raises(ConfigError, match=r"TTTEmbedRetriever\(include=...\) names 'body'"):
        lc.TTTEmbedRetriever(url=text_server, include=["body"])
    with pytest.raises(ConfigError, match=r"similarity_top_k=...\) must be an integer"):
        li.TTTEmbedRetriever(text_server, similarity_top_k=0)
    with pytest.raises(ConfigError, match="url=...\\) must start with http"):
        lc.TTTEmbedEmbeddings(url="127.0.0.1:8000")


def test_a_refused_search_raises_the_servers_reason(text_server):
    retriever = lc.TTTEmbedRetriever(url=text_server, task="no-such-task")
    with pytest.raises(BackendError, match="HTTP 404.*unknown task 'no-such-task'"):
        retriever.invoke("a dog")


def test_the_llamaindex_retriever_returns_the_served_search(text_server):
    from llama_index.core.retrievers import BaseRetriever

    want = served(text_server, "/v1/search", {"query": QUERIES["q1"], "task": TASK, "k": 3})
    retriever = li.TTTEmbedRetriever(text_server, task=TASK, similarity_top_k=3)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve(QUERIES["q1"])
    assert [n.node.id_ for n in nodes] == want["data"][0]["ids"]
    assert [n.score for n in nodes] == pytest.approx(want["data"][0]["scores"])
    assert [n.node.get_content() for n in nodes] == [DOCS[n.node.id_] for n in nodes]
    again = asyncio.run(retriever.aretrieve(QUERIES["q1"]))
    assert [n.node.id_ for n in again] == want["data"][0]["ids"]
    retriever.similarity_top_k = 1  # an attribute, as LlamaIndex's retrievers have it
    assert len(retriever.retrieve(QUERIES["q1"])) == 1


def test_the_chain_retrievers_return_the_served_ranking_with_its_texts(chain_server):
    want = served(chain_server, "/v1/chain/search",
                  {"question": QUESTION, "max_hops": 2, "top_k": 5})
    ids = [d["id"] for d in want["data"]]
    retriever = lc.TTTEmbedChainRetriever(url=chain_server, k=5, max_hops=2)
    docs = retriever.invoke(QUESTION)
    assert [d.id for d in docs] == ids
    assert docs[0].page_content == " ".join(CHAIN_DOCS[docs[0].id])
    assert docs[0].metadata["title"] == CHAIN_DOCS[docs[0].id][0]
    assert [d.metadata["hop"] for d in docs[:2]] == [0, 1] and len(docs[0].metadata[
        "search_id"]) == 32
    wider = served(chain_server, "/v1/chain/search",
                   {"question": QUESTION, "max_hops": 3, "beam": 2, "top_k": 3})
    assert [d.id for d in asyncio.run(retriever.ainvoke(QUESTION, k=3, max_hops=3, beam=2))] \
        == [d["id"] for d in wider["data"]]
    nodes = li.TTTEmbedChainRetriever(chain_server, similarity_top_k=5, max_hops=2) \
        .retrieve(QUESTION)
    assert [n.node.id_ for n in nodes] == ids
    assert [n.score for n in nodes] == [d["score"] for d in want["data"]]


def test_the_chain_guide_names_the_framework_retrievers_as_they_are(chain_server):
    """The chain guide's paragraph on LangChain / LlamaIndex: the classes it names exist
    in both modules with the keywords it names, and the metadata keys it lists are on
    every document the retriever returns."""
    text = " ".join((ROOT / "docs" / "guides" / "chain.md").read_text().split())
    assert "From LangChain or LlamaIndex" in text, "the chain guide names no framework"
    para = text[text.index("From LangChain or LlamaIndex"):]
    para = para[:para.index("are deprecated")]
    held = para[para.index("metadata holds"):para.index("; `k`")]
    keys = re.findall(r"`(\w+)`", held)
    assert {"id", "hop", "search_id", "encoder"} <= set(keys), held
    assert "TTTEmbedChainRetriever(" in para and "similarity_top_k" in para, para
    takes = {"langchain": set(lc.TTTEmbedChainRetriever.model_fields),
             "llamaindex": set(inspect.signature(li.TTTEmbedChainRetriever).parameters)}
    assert {"k", "max_hops", "beam"} <= takes["langchain"], takes
    assert {"similarity_top_k", "max_hops", "beam"} <= takes["llamaindex"], takes
    docs = lc.TTTEmbedChainRetriever(url=chain_server, k=3, max_hops=2).invoke(QUESTION)
    assert docs and all(set(keys) <= set(d.metadata) for d in docs), docs[0].metadata


def test_the_embeddings_are_the_servers_raw_documents_and_adapted_queries(text_server):
    def route(body: dict) -> np.ndarray:
        return np.array([d["embedding"] for d in
                         served(text_server, "/v1/embeddings", body)["data"]])

    texts = [DOCS["d1"], DOCS["d2"]]
    raw = route({"input": texts})
    adapted = route({"input": [QUERIES["q1"]], "input_type": "query", "task": TASK})
    plain = route({"input": [QUERIES["q1"]]})
    assert not np.allclose(adapted, plain)  # the task's states move this query
    emb = lc.TTTEmbedEmbeddings(url=text_server, task=TASK)
    assert np.allclose(emb.embed_documents(texts), raw, atol=1e-6)
    assert np.allclose(emb.embed_query(QUERIES["q1"]), adapted[0], atol=1e-6)
    assert np.allclose(asyncio.run(emb.aembed_query(QUERIES["q1"])), adapted[0], atol=1e-6)
    assert np.allclose(asyncio.run(emb.aembed_documents(texts)), raw, atol=1e-6)
    assert emb.embed_documents([]) == []
    model = li.TTTEmbedEmbedding(url=text_server, task=TASK)
    assert np.allclose(model.get_query_embedding(QUERIES["q1"]), adapted[0], atol=1e-6)
    assert np.allclose(model.get_text_embedding_batch(texts), raw, atol=1e-6)
    assert np.allclose(asyncio.run(model.aget_query_embedding(QUERIES["q1"])), adapted[0],
                       atol=1e-6)
    assert np.allclose(asyncio.run(model.aget_text_embedding(texts[1])), raw[1], atol=1e-6)


def test_clicks_and_labels_reach_the_store_by_search_id(loop_server):
    url, store = loop_server["url"], loop_server["store"]
    retriever = lc.TTTEmbedRetriever(url=url, task=TASK, k=3)
    docs = retriever.invoke(QUERIES["q2"])
    sid = docs[0].metadata["search_id"]
    assert len(sid) == 32 and {d.metadata["search_id"] for d in docs} == {sid}
    assert retriever.record_click(docs[1], session_id="s-1")["stored"] == 1
    assert retriever.record_click(docs[1], session_id="s-1")["duplicates"] == 1  # a retry
    assert asyncio.run(retriever.arecord_label(docs[0], 1))["stored"] == 1
    nodes = li.TTTEmbedRetriever(url, task=TASK, similarity_top_k=3).retrieve(QUERIES["q4"])
    li_retriever = li.TTTEmbedRetriever(url, task=TASK)
    assert li_retriever.record_label(nodes[2], 0.5)["stored"] == 1
    assert asyncio.run(li_retriever.arecord_click(nodes[0], session_id="s-2"))["stored"] == 1
    clicks = {(e.search_id, e.doc_id, e.session) for e in store.events_after((-1e18, ""))}
    assert clicks == {(sid, docs[1].id, "s-1"),
                      (nodes[0].node.metadata["search_id"], nodes[0].node.id_, "s-2")}
    labels = {(f.search_id, f.doc_id, f.label) for f in store.feedback()}
    assert labels == {(sid, docs[0].id, 1.0),
                      (nodes[2].node.metadata["search_id"], nodes[2].node.id_, 0.5)}
    with pytest.raises(ConfigError, match=r"record_label\(grade=...\) must be a number in"):
        retriever.record_label(docs[0], 2)
    with pytest.raises(ConfigError, match=r"record_click\(session_id=...\) must be"):
        retriever.record_click(docs[0], session_id="")


def test_feedback_on_a_document_without_search_id_says_why(text_server):
    docs = lc.TTTEmbedRetriever(url=text_server, task=TASK, k=1).invoke("a dog")
    assert docs[0].metadata["search_id"] is None  # no --registry: searches are not logged
    with pytest.raises(ConfigError, match="carries no search_id.*--registry"):
        lc.TTTEmbedRetriever(url=text_server).record_click(docs[0], session_id="s")


@pytest.fixture
def silent_server() -> Iterator[SimpleNamespace]:
    """A server that accepts connections and never answers: its ``url`` and ``held`` (the
    connections it accepted)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{sock.getsockname()[1]}", held=held)
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        sock.close()


@pytest.mark.parametrize("make", [
    lambda url, **kw: lc.TTTEmbedRetriever(url=url, **kw).invoke("q"),
    lambda url, **kw: asyncio.run(lc.TTTEmbedChainRetriever(url=url, **kw).ainvoke("q")),
    lambda url, **kw: lc.TTTEmbedEmbeddings(url=url, **kw).embed_query("q"),
    lambda url, **kw: li.TTTEmbedRetriever(url, **kw).retrieve("q"),
    lambda url, **kw: asyncio.run(li.TTTEmbedChainRetriever(url, **kw).aretrieve("q")),
    lambda url, **kw: li.TTTEmbedEmbedding(url=url, **kw).get_text_embedding("q"),
], ids=["lc-search", "lc-chain-async", "lc-embeddings", "li-search", "li-chain-async",
        "li-embedding"])
def test_a_server_that_never_answers_fails_within_timeout_and_retries(silent_server, make):
    """Two attempts (two connections), each ended by its timeout: read from the server and
    the error, not a wall clock (a 2.6 s bound here failed under load: issue 77)."""
    with pytest.raises(BackendError) as err:
        make(silent_server.url, timeout=0.3, max_retries=1)
    for _ in range(300):  # the accept thread polls every 0.1 s: let it catch up
        if len(silent_server.held) >= 2:
            break
        time.sleep(0.05)
    assert len(silent_server.held) == 2, silent_server.held
    message = str(err.value)
    assert "failed after 2 attempts: timed out after 0.3 s" in message, message
    assert "(timeout=..., max_retries=...): now timeout=0.3 s per attempt, max_retries=1" \
        in message, message
    assert "TTTEmbed" in message and "deadline" not in message and "--" not in message


def test_the_old_factories_work_and_warn_once(chain_server, chain_setup):
    from tttembed.integrations import chain

    corpus = {d: {"title": t, "text": x} for d, (t, x) in CHAIN_DOCS.items()}
    chain._WARNED.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = chain.langchain_chain_retriever(chain_server, corpus, top_k=3, timeout=20)
        chain.langchain_chain_retriever(chain_server, corpus, top_k=3)
        chain.llamaindex_chain_retriever(chain_server, corpus, top_k=3)
    said = [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]
    assert len(said) == 2, said
    assert "langchain_chain_retriever is deprecated" in said[0]
    assert "langchain.TTTEmbedChainRetriever(url=..., k=...)" in said[0]
    assert "llamaindex_chain_retriever is deprecated" in said[1]
    assert len(first.invoke(QUESTION)) == 3


def test_the_key_is_sent_from_the_variable_api_key_env_names(setup, minilm, monkeypatch):
    from tests.serve.conftest import make_app, running

    monkeypatch.setenv("TTT_FRAMEWORK_KEY", "s3cret-key")
    with running(make_app(setup, minilm, api_key_env="TTT_FRAMEWORK_KEY")) as url:
        keyed = lc.TTTEmbedEmbeddings(url=url, task=TASK, api_key_env="TTT_FRAMEWORK_KEY")
        assert len(keyed.embed_query(QUERIES["q1"])) == 384
        assert len(li.TTTEmbedEmbedding(url=url, api_key_env="TTT_FRAMEWORK_KEY")
                   .get_text_embedding("a dog")) == 384
        with pytest.raises(BackendError, match=r"HTTP 401.*set TTTEmbedEmbeddings\("
                                               r"api_key_env=...\)") as err:
            lc.TTTEmbedEmbeddings(url=url).embed_query("a dog")
        assert "s3cret-key" not in str(err.value)
    monkeypatch.delenv("TTT_FRAMEWORK_KEY")
    with pytest.raises(ConfigError, match=r"api_key_env='TTT_FRAMEWORK_KEY'\): "
                                          r"\$TTT_FRAMEWORK_KEY is not set"):
        lc.TTTEmbedRetriever(url="http://127.0.0.1:1", api_key_env="TTT_FRAMEWORK_KEY")
