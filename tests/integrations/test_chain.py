# ruff: noqa: F811  (the fixtures imported from the serving tests)
"""Chain-mode retrievers (LangChain, LlamaIndex) against a real `serve --chain` instance:
they return the served final ranking, with its text, and carry its search id."""

from __future__ import annotations

import httpx
import pytest

from tests.chain.conftest import CHAINS, DOCS
from tests.serve.test_chain_routes import chain_server, chain_setup  # noqa: F401

CORPUS = {d: {"title": t, "text": x} for d, (t, x) in DOCS.items()}
# the factories are deprecated (test_framework_classes checks they warn once)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def served(url: str, question: str, **body) -> dict:
    r = httpx.post(f"{url}/v1/chain/search", json={"question": question, **body}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_langchain_chain_retriever_returns_the_served_ranking(chain_server):
    pytest.importorskip("langchain_core")
    from langchain_core.retrievers import BaseRetriever

    from tttembed.integrations.chain import langchain_chain_retriever

    retriever = langchain_chain_retriever(chain_server, CORPUS, max_hops=2, top_k=5)
    assert isinstance(retriever, BaseRetriever)
    for _, question, _ in CHAINS:
        want = served(chain_server, question, max_hops=2, top_k=5)
        docs = retriever.invoke(question)
        assert [d.id for d in docs] == [d["id"] for d in want["data"]]
        assert [d.metadata["hop"] for d in docs[:2]] == [0, 1]
        assert docs[0].page_content == f"{DOCS[docs[0].id][0]} {DOCS[docs[0].id][1]}"
        assert len(docs[0].metadata["search_id"]) == 32
        assert docs[0].metadata["encoder"] == "base"


def test_llamaindex_chain_retriever_returns_the_served_ranking(chain_server):
    pytest.importorskip("llama_index.core")
    from llama_index.core.retrievers import BaseRetriever

    from tttembed.integrations.chain import llamaindex_chain_retriever

    retriever = llamaindex_chain_retriever(chain_server, CORPUS, beam=2, top_k=4)
    assert isinstance(retriever, BaseRetriever)
    question = CHAINS[1][1]
    want = served(chain_server, question, beam=2, top_k=4)
    nodes = retriever.retrieve(question)
    assert [n.node.id_ for n in nodes] == [d["id"] for d in want["data"]]
    assert [n.score for n in nodes] == [d["score"] for d in want["data"]]
    assert nodes[0].node.get_content() == f"{DOCS[nodes[0].node.id_][0]} " \
                                         f"{DOCS[nodes[0].node.id_][1]}"


def test_a_refused_request_raises_the_servers_reason(chain_server):
    from tttembed.core.errors import BackendError
    from tttembed.integrations.chain import langchain_chain_retriever

    pytest.importorskip("langchain_core")
    retriever = langchain_chain_retriever(chain_server, CORPUS, top_k=500)
    with pytest.raises(BackendError, match="top_k"):
        retriever.invoke("a question")
