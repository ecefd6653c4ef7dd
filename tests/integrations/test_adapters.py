"""In-process framework adapters: queries adapted exactly as ``tttembed.api.search``
adapts them, documents raw."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.conftest import QUERIES, TASK
from tests.serve.test_serve import expected_adapted


def test_langchain_embeddings_adapt_queries_only(setup, minilm):
    pytest.importorskip("langchain_core")
    from langchain_core.embeddings import Embeddings

    from tttembed.integrations.adapters import langchain_embeddings

    emb = langchain_embeddings(minilm, [setup["task"], setup["query"]], task=TASK,
                               queries={TASK: QUERIES})
    assert isinstance(emb, Embeddings)
    learned = [k.split("/", 1)[1] for k in emb.adapter.snapshot.states[1].names]
    for text, qid in ((QUERIES[learned[0]], learned[0]), ("a pet that can talk", "x")):
        want = expected_adapted(setup, minilm, [text], TASK, ["task", "query"], [qid])[0]
        np.testing.assert_allclose(emb.embed_query(text), want, atol=1e-6)
    docs = ["Cats sleep all day.", "Dogs bark."]
    np.testing.assert_allclose(emb.embed_documents(docs), minilm.encode(docs, "document"),
                               atol=1e-6)
    raw = langchain_embeddings(minilm, [setup["task"]], task="_")  # no global state
    np.testing.assert_allclose(raw.embed_query("a pet that can talk"),
                               minilm.encode(["a pet that can talk"], "query")[0], atol=1e-6)


def test_adapter_refuses_a_state_of_another_embedder(setup, minilm):
    from dataclasses import replace

    from tttembed.api import StateMismatch, load_state
    from tttembed.integrations.adapters import QueryAdapter

    foreign = replace(load_state(setup["task"]), identity="st:other-model")
    with pytest.raises(StateMismatch):
        QueryAdapter(minilm, [foreign])


def test_llamaindex_embedding_adapts_queries_only(setup, minilm):
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from tttembed.integrations.adapters import llamaindex_embedding

    emb = llamaindex_embedding(minilm, [setup["task"]], task=TASK)
    assert isinstance(emb, BaseEmbedding)
    text = "a pet that can talk"
    want = expected_adapted(setup, minilm, [text], TASK, ["task"])[0]
    np.testing.assert_allclose(emb.get_query_embedding(text), want, atol=1e-6)
    np.testing.assert_allclose(emb.get_text_embedding(text),
                               minilm.encode([text], "document")[0], atol=1e-6)
    docs = ["Cats sleep all day.", "Dogs bark."]
    np.testing.assert_allclose(emb.get_text_embedding_batch(docs),
                               minilm.encode(docs, "document"), atol=1e-6)


def test_adapters_take_a_spec_string_and_a_single_state_as_mteb_model_does(setup, minilm):
    """A spec string (as mteb_model takes it) and one state path (not only a list) work in
    the in-process adapters: the same vectors as with the embedder object."""
    pytest.importorskip("langchain_core")
    from tttembed.integrations.adapters import langchain_embeddings

    by_spec = langchain_embeddings("st:bundled:all-MiniLM-L6-v2", str(setup["task"]), task=TASK)
    by_object = langchain_embeddings(minilm, [setup["task"]], task=TASK)
    text = "which pet talks like a person"
    np.testing.assert_allclose(by_spec.embed_query(text), by_object.embed_query(text),
                               atol=1e-5)
