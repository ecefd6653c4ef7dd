"""Deprecated factories of framework retrievers for chain mode (they keep working for one
release, warning once): use the classes ``TTTEmbedChainRetriever`` of
:mod:`tttembed.integrations.langchain` and :mod:`tttembed.integrations.llamaindex`
(``k`` / ``similarity_top_k``, async, ``timeout``, ``max_retries``, texts from the
server, ``record_click``). The factories ask a ``tttembed serve --chain`` server's
``POST /v1/chain/search`` for each query and return the final ranking as the framework's
documents (nodes).

    >>> from tttembed.integrations.chain import langchain_chain_retriever
    >>> docs = {d["_id"]: d for d in corpus_rows}          # id -> {"title", "text"} or text
    >>> retriever = langchain_chain_retriever("http://127.0.0.1:8000", docs, top_k=5)
    >>> retriever.invoke("Who is the mother of the director of film Polish-Russian War?")

The server answers ids; ``documents`` (the corpus the index was built from, ``{id: text}``
or ``{id: {"title", "text"}}``) gives each its text. Each document's metadata holds its
``id``, ``score`` (the answer's), ``hop`` (its place in the chain, None past it),
``search_id`` (for ``/v1/events`` and ``/v1/feedback``), ``encoder`` and ``version``.
A refused request (4xx) raises :class:`~tttembed.core.errors.BackendError` with the
server's reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.data.beir import doc_text
from tttembed.integrations.client import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, ServerClient

#: The factories that warned already (each warns once per process).
_WARNED: set[str] = set()


def _deprecated(name: str, framework: str) -> None:
    if name in _WARNED:
        return
    _WARNED.add(name)
    warnings.warn(f"tttembed.integrations.chain.{name} is deprecated and goes in the next "
                  f"release: use tttembed.integrations.{framework}.TTTEmbedChainRetriever("
                  "url=..., k=...), which reads the texts from the server", FutureWarning,
                  stacklevel=3)


@dataclass(frozen=True)
class ChainHit:
    """One passage of a chain answer, as the frameworks' documents carry it."""

    id: str
    text: str
    metadata: dict[str, Any]


class ChainClient:
    """``POST /v1/chain/search`` for one base URL: ``hits(question)`` -> the final ranking
    as :class:`ChainHit` s. ``max_hops`` None: the encoder's T. ``api_key_env``: the name
    of the variable holding the server's bearer key (None: no key); ``timeout`` seconds
    per attempt, ``max_retries`` retries of a timeout, 429 or 5xx."""

    def __init__(self, base_url: str, documents: Mapping[str, Any], *,
                 max_hops: int | None = None, beam: int = 1, top_k: int = 10,
                 api_key_env: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = DEFAULT_MAX_RETRIES, owner: str = "ChainClient") -> None:
        self.http = ServerClient(base_url, owner=owner, api_key_env=api_key_env,
                                 timeout=timeout, max_retries=max_retries)
        self.documents = documents
        self.body: dict[str, Any] = {"beam": int(beam), "top_k": int(top_k)}
        if max_hops is not None:
            self.body["max_hops"] = int(max_hops)

    def search(self, question: str) -> dict[str, Any]:
        """The server's answer for ``question``."""
        return dict(self.http.post("/v1/chain/search", {"question": question, **self.body}))

    def hits(self, question: str) -> list[ChainHit]:
        answer = self.search(question)
        hop = {h["id"]: i for i, h in enumerate(answer["hops"])}
        common = {k: answer.get(k) for k in ("search_id", "encoder", "version")}
        return [ChainHit(d["id"], self._text(d["id"]),
                         {"id": d["id"], "score": d["score"], "hop": hop.get(d["id"]),
                          **common})
                for d in answer["data"]]

    def _text(self, doc_id: str) -> str:
        doc = self.documents.get(doc_id)
        if doc is None:
            raise ConfigError(f"the server answered document {doc_id!r}, which `documents` "
                              "lacks: give the corpus the server's index was built from")
        return doc if isinstance(doc, str) else doc_text(doc)


def langchain_chain_retriever(base_url: str, documents: Mapping[str, Any], *,
                              max_hops: int | None = None, beam: int = 1, top_k: int = 10,
                              api_key_env: str | None = None,
                              timeout: float = DEFAULT_TIMEOUT,
                              max_retries: int = DEFAULT_MAX_RETRIES) -> Any:
    """Deprecated: :class:`tttembed.integrations.langchain.TTTEmbedChainRetriever`. A
    LangChain ``BaseRetriever`` over a chain server (``invoke(question)`` -> the final
    ranking as ``Document`` s, best first)."""
    _deprecated("langchain_chain_retriever", "langchain")
    try:
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
    except ImportError:
        raise MissingDependency("langchain-core", "langchain") from None
    client = ChainClient(base_url, documents, max_hops=max_hops, beam=beam, top_k=top_k,
                         api_key_env=api_key_env, timeout=timeout, max_retries=max_retries,
                         owner="langchain_chain_retriever")

    class TTTEmbedChainRetriever(BaseRetriever):
        """Multi-hop chain retrieval by a tttembed server."""

        def _get_relevant_documents(self, query: str, *, run_manager: Any = None
                                    ) -> list[Any]:
            return [Document(page_content=h.text, metadata=h.metadata, id=h.id)
                    for h in client.hits(query)]

    out = TTTEmbedChainRetriever()
    out.__dict__["client"] = client
    return out


def llamaindex_chain_retriever(base_url: str, documents: Mapping[str, Any], *,
                               max_hops: int | None = None, beam: int = 1, top_k: int = 10,
                               api_key_env: str | None = None,
                               timeout: float = DEFAULT_TIMEOUT,
                               max_retries: int = DEFAULT_MAX_RETRIES) -> Any:
    """Deprecated: :class:`tttembed.integrations.llamaindex.TTTEmbedChainRetriever`. A
    LlamaIndex ``BaseRetriever`` over a chain server (``retrieve(question)`` -> the final
    ranking as ``NodeWithScore`` s, best first)."""
    _deprecated("llamaindex_chain_retriever", "llamaindex")
    try:
        from llama_index.core.retrievers import BaseRetriever
        from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    except ImportError:
        raise MissingDependency("llama-index-core", "llamaindex") from None
    client = ChainClient(base_url, documents, max_hops=max_hops, beam=beam, top_k=top_k,
                         api_key_env=api_key_env, timeout=timeout, max_retries=max_retries,
                         owner="llamaindex_chain_retriever")

    class TTTEmbedChainRetriever(BaseRetriever):
        """Multi-hop chain retrieval by a tttembed server."""

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [NodeWithScore(node=TextNode(id_=h.id, text=h.text, metadata=h.metadata),
                                  score=h.metadata["score"])
                    for h in client.hits(query_bundle.query_str)]

    out = TTTEmbedChainRetriever()
    setattr(out, "client", client)  # noqa: B010  (the framework class declares no field)
    return out


__all__ = ["ChainClient", "ChainHit", "langchain_chain_retriever", "llamaindex_chain_retriever"]
