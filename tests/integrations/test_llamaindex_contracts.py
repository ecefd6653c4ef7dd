"""LlamaIndex has no standard test suite like ``langchain-tests``; these are the contracts
its docs state for a ``BaseRetriever`` (``retrieve`` / ``aretrieve`` take a string or a
``QueryBundle`` and return ``NodeWithScore`` s, ``similarity_top_k`` of them) and a
``BaseEmbedding`` (query and text embeddings, one and in batches of ``embed_batch_size``,
sync and async, usable as a ``VectorStoreIndex``'s ``embed_model``), run the same way for
each class against real served instances."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from tests.serve.conftest import DOCS, QUERIES, TASK
from tests.serve.test_chain_routes import chain_server, chain_setup  # noqa: F401

# ruff: noqa: F811  (the chain server fixtures, imported)

li = pytest.importorskip("tttembed.integrations.llamaindex")
from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

CHAIN_QUESTION = "Who founded the college where the poet Tomas Reed studied?"


@pytest.fixture(params=["search", "chain"])
def make(request, text_server) -> Any:
    """(a retriever factory taking ``similarity_top_k``, a question) for each class."""
    if request.param == "search":
        return (lambda k: li.TTTEmbedRetriever(text_server, task=TASK, similarity_top_k=k),
                QUERIES["q5"])
    url = request.getfixturevalue("chain_server")
    return lambda k: li.TTTEmbedChainRetriever(url, similarity_top_k=k), CHAIN_QUESTION


@pytest.mark.parametrize("k", [1, 3])
def test_retrieve_returns_similarity_top_k_nodes_with_scores(make, k):
    build, question = make
    retriever = build(k)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve(question)
    assert len(nodes) == k and all(isinstance(n, NodeWithScore) for n in nodes)
    assert all(isinstance(n.node, TextNode) and n.node.get_content() for n in nodes)
    scores = [n.score for n in nodes]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)


def test_aretrieve_and_a_query_bundle_answer_as_retrieve(make):
    build, question = make
    retriever = build(3)
    want = [n.node.id_ for n in retriever.retrieve(question)]
    assert [n.node.id_ for n in asyncio.run(retriever.aretrieve(question))] == want
    assert [n.node.id_ for n in retriever.retrieve(QueryBundle(question))] == want
    assert [n.node.id_ for n in asyncio.run(retriever.aretrieve(QueryBundle(question)))] \
        == want


def test_the_embedding_contract_one_and_in_batches_sync_and_async(text_server):
    model = li.TTTEmbedEmbedding(url=text_server, task=TASK, embed_batch_size=2)
    texts = list(DOCS.values())[:5]
    one = model.get_text_embedding(texts[0])
    assert isinstance(one, list) and isinstance(one[0], float) and len(one) == 384
    batch = model.get_text_embedding_batch(texts)  # 3 batches of at most 2
    assert len(batch) == 5 and np.allclose(batch[0], one, atol=1e-6)
    assert np.allclose(asyncio.run(model.aget_text_embedding_batch(texts)), batch, atol=1e-6)
    query = model.get_query_embedding(QUERIES["q2"])
    assert np.allclose(asyncio.run(model.aget_query_embedding(QUERIES["q2"])), query,
                       atol=1e-6)
    assert not np.allclose(query, model.get_text_embedding(QUERIES["q2"]))  # adapted
    assert model.similarity(query, query) == pytest.approx(1.0, abs=1e-5)
    assert li.TTTEmbedEmbedding.class_name() == "TTTEmbedEmbedding"


def test_the_embedding_serves_a_vector_store_index(text_server):
    """As a ``VectorStoreIndex``'s embed_model: documents embedded raw, the query adapted;
    the index's ranking is the server's own ``/v1/search`` ranking."""
    import httpx
    from llama_index.core import Document, VectorStoreIndex

    model = li.TTTEmbedEmbedding(url=text_server, task=TASK)
    docs = [Document(text=t, id_=d) for d, t in DOCS.items()]
    index = VectorStoreIndex.from_documents(docs, embed_model=model)
    nodes = index.as_retriever(similarity_top_k=3).retrieve(QUERIES["q1"])
    got = [n.node.ref_doc_id for n in nodes]
    served = httpx.post(f"{text_server}/v1/search", timeout=60,
                        json={"query": QUERIES["q1"], "task": TASK, "k": 3}).json()
    assert got == served["data"][0]["ids"]
