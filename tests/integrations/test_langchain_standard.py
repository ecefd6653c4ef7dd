"""LangChain's own standard tests (``langchain-tests``) for the three classes of
``tttembed.integrations.langchain``, against real served instances on 127.0.0.1: the
serving tests' pets index (``/v1/search``, ``/v1/embeddings``) and the chain tests' tiny
multi-hop index (``serve --chain``). No standard test is skipped or overridden (the
suite's own ``test_no_overrides_DO_NOT_OVERRIDE`` checks that)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import (  # noqa: E402
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests  # noqa: E402

from tests.serve.conftest import QUERIES, TASK  # noqa: E402
from tests.serve.test_chain_routes import chain_server, chain_setup  # noqa: E402, F401
from tttembed.integrations.langchain import (  # noqa: E402
    TTTEmbedChainRetriever,
    TTTEmbedEmbeddings,
    TTTEmbedRetriever,
)

# ruff: noqa: F811  (the server fixtures, imported)


class TestTTTEmbedRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _served(self, text_server: str) -> None:
        self.url = text_server

    @property
    def retriever_constructor(self) -> type[TTTEmbedRetriever]:
        return TTTEmbedRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"url": self.url, "task": TASK, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return QUERIES["q1"]


class TestTTTEmbedChainRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _served(self, chain_server: str) -> None:
        self.url = chain_server

    @property
    def retriever_constructor(self) -> type[TTTEmbedChainRetriever]:
        return TTTEmbedChainRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"url": self.url, "k": 2, "max_hops": 2}

    @property
    def retriever_query_example(self) -> str:
        return "In which country is the birthplace of the painter Ada Marlow?"


class TestTTTEmbedEmbeddings(EmbeddingsIntegrationTests):
    @pytest.fixture(autouse=True)
    def _served(self, text_server: str) -> None:
        self.url = text_server

    @property
    def embeddings_class(self) -> type[TTTEmbedEmbeddings]:
        return TTTEmbedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"url": self.url, "task": TASK}


class TestTTTEmbedEmbeddingsUnit(EmbeddingsUnitTests):
    """Construction only (no request is made): the fast tier."""

    @property
    def embeddings_class(self) -> type[TTTEmbedEmbeddings]:
        return TTTEmbedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"url": "http://127.0.0.1:8000", "task": TASK}

    @property
    def init_from_env_params(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        """The key is read from the variable ``api_key_env`` names."""
        return ({"TTT_TEST_KEY": "secret"},
                {"url": "http://127.0.0.1:8000", "api_key_env": "TTT_TEST_KEY"},
                {"api_key_env": "TTT_TEST_KEY", "url": "http://127.0.0.1:8000"})
