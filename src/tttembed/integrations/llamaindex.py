"""LlamaIndex classes over a ``tttembed serve`` instance (extra ``llamaindex``):

    >>> from tttembed.integrations.llamaindex import TTTEmbedRetriever
    >>> retriever = TTTEmbedRetriever(url="http://127.0.0.1:8000", task="stdlib-docs",
    ...                               similarity_top_k=5)
    >>> nodes = retriever.retrieve("how do I turn a dict into a JSON string")
    >>> retriever.record_click(nodes[0], session_id="s-42")   # the loop learns from it

* :class:`TTTEmbedRetriever`: ``POST /v1/search``; each ``NodeWithScore`` holds the
  served document (a ``TextNode`` whose ``id_`` is the document id, text from
  ``include``) and its score; the node's metadata ``id``, ``score``, ``rank`` (from 1),
  ``search_id``, ``version`` and ``task``.
* :class:`TTTEmbedChainRetriever`: ``POST /v1/chain/search`` (``serve --chain``), the
  final ranking; metadata also ``hop`` and ``encoder``.
* :class:`TTTEmbedEmbedding`: a ``BaseEmbedding``: text embeddings raw, query embeddings
  adapted for ``task``, through the server's ``/v1/embeddings``. The in-process adapter
  stays :func:`tttembed.integrations.adapters.llamaindex_embedding`.

As LlamaIndex's retrievers, the number of results is ``similarity_top_k`` (constructor
and attribute). Every class takes ``timeout`` (seconds per attempt, default 30) and
``max_retries`` (default 2); ``aretrieve`` and the ``aget_*`` embeddings use
``httpx.AsyncClient``. ``record_click(node, session_id=...)`` / ``record_label(node,
grade)`` (and ``arecord_*``) post what the user did with a returned node to
``/v1/events`` / ``/v1/feedback`` by its ``search_id`` (a server with ``--registry``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.integrations.client import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    Hit,
    ServerClient,
    chain_hits,
    check_include,
    click_event,
    label_body,
    masked_repr_args,
    search_hits,
)

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.callbacks.base import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from pydantic import Field, PrivateAttr
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingDependency("llama-index-core", "llamaindex") from None


def _nodes(hits: list[Hit]) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=h.id, text=h.text, metadata=h.metadata),
                          score=h.score) for h in hits]


def _top_k(value: Any, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}(similarity_top_k=...) must be an integer >= 1, got "
                          f"{value!r}")
    return value


class _Served(BaseRetriever):
    """What both retrievers share: the client, ``similarity_top_k``, feedback."""

    def __init__(self, url: str, *, similarity_top_k: int, api_key_env: str | None,
                 include: Sequence[str], timeout: float, max_retries: int,
                 callback_manager: CallbackManager | None, verbose: bool) -> None:
        owner = type(self).__name__
        self.similarity_top_k = _top_k(similarity_top_k, owner)
        self.include = check_include(include, owner)
        self._client = ServerClient(url, owner=owner, api_key_env=api_key_env,
                                    timeout=timeout, max_retries=max_retries)
        self.url, self.api_key_env = url, api_key_env
        self.timeout, self.max_retries = timeout, max_retries
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def record_click(self, node: NodeWithScore | TextNode, *, session_id: str
                     ) -> dict[str, Any]:
        """Post a click on ``node`` (one this retriever returned) to ``/v1/events``; the
        server's 202 body."""
        event = click_event(_metadata(node), session_id, type(self).__name__)
        return dict(self._client.post("/v1/events", event))

    async def arecord_click(self, node: NodeWithScore | TextNode, *, session_id: str
                            ) -> dict[str, Any]:
        event = click_event(_metadata(node), session_id, type(self).__name__)
        return dict(await self._client.apost("/v1/events", event))

    def record_label(self, node: NodeWithScore | TextNode, grade: float) -> dict[str, Any]:
        """Post a person's label of ``node`` (in [0, 1]) to ``/v1/feedback``."""
        body = label_body(_metadata(node), grade, type(self).__name__)
        return dict(self._client.post("/v1/feedback", body))

    async def arecord_label(self, node: NodeWithScore | TextNode, grade: float
                            ) -> dict[str, Any]:
        body = label_body(_metadata(node), grade, type(self).__name__)
        return dict(await self._client.apost("/v1/feedback", body))


def _metadata(node: NodeWithScore | TextNode) -> dict[str, Any]:
    inner = node.node if isinstance(node, NodeWithScore) else node
    return dict(inner.metadata)


class TTTEmbedRetriever(_Served):
    """Nodes from a tttembed server's ``POST /v1/search`` (adapted query vectors, the
    served version's ranking). ``task`` None: the server's one task (or ``_``)."""

    def __init__(self, url: str, *, task: str | None = None, similarity_top_k: int = 4,
                 api_key_env: str | None = None, include: Sequence[str] = ("title", "text"),
                 timeout: float = DEFAULT_TIMEOUT, max_retries: int = DEFAULT_MAX_RETRIES,
                 callback_manager: CallbackManager | None = None,
                 verbose: bool = False) -> None:
        self.task = task
        super().__init__(url, similarity_top_k=similarity_top_k, api_key_env=api_key_env,
                         include=include, timeout=timeout, max_retries=max_retries,
                         callback_manager=callback_manager, verbose=verbose)

    def _body(self, query_bundle: QueryBundle) -> dict[str, Any]:
        k = _top_k(self.similarity_top_k, type(self).__name__)
        return ServerClient.search_body(query_bundle.query_str, self.task, k, self.include)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self._client.post("/v1/search", self._body(query_bundle))
        return _nodes(search_hits(answer, self.include))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = await self._client.apost("/v1/search", self._body(query_bundle))
        return _nodes(search_hits(answer, self.include))


class TTTEmbedChainRetriever(_Served):
    """The final ranking of a tttembed chain server's ``POST /v1/chain/search``
    (``serve --chain``). ``max_hops`` None: the server's default; ``beam`` 1: greedy."""

    def __init__(self, url: str, *, similarity_top_k: int = 4, max_hops: int | None = None,
                 beam: int = 1, api_key_env: str | None = None,
                 include: Sequence[str] = ("title", "text"),
                 timeout: float = DEFAULT_TIMEOUT, max_retries: int = DEFAULT_MAX_RETRIES,
                 callback_manager: CallbackManager | None = None,
                 verbose: bool = False) -> None:
        self.max_hops, self.beam = max_hops, beam
        super().__init__(url, similarity_top_k=similarity_top_k, api_key_env=api_key_env,
                         include=include, timeout=timeout, max_retries=max_retries,
                         callback_manager=callback_manager, verbose=verbose)

    def _body(self, query_bundle: QueryBundle) -> dict[str, Any]:
        k = _top_k(self.similarity_top_k, type(self).__name__)
        return ServerClient.chain_body(query_bundle.query_str, k, self.max_hops, self.beam,
                                       self.include)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self._client.post("/v1/chain/search", self._body(query_bundle))
        return _nodes(chain_hits(answer, self.include))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = await self._client.apost("/v1/chain/search", self._body(query_bundle))
        return _nodes(chain_hits(answer, self.include))


class TTTEmbedEmbedding(BaseEmbedding):
    """A tttembed server's embeddings as a LlamaIndex ``BaseEmbedding``: text embeddings
    raw, query embeddings adapted for ``task`` (None: global states only)."""

    url: str = Field(description="The tttembed server, e.g. http://127.0.0.1:8000.")
    task: str | None = Field(default=None, description="The task queries are adapted for.")
    api_key_env: str | None = Field(default=None, description="The variable holding the "
                                    "server's key.")
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, description="Seconds per attempt.")
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0,
                             description="Retries of a timeout, 429 or 5xx.")
    model_name: str = Field(default="tttembed", description="The name LlamaIndex shows.")

    _client: ServerClient = PrivateAttr()

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())

    def model_post_init(self, context: Any) -> None:
        self._client = ServerClient(self.url, owner=type(self).__name__,
                                    api_key_env=self.api_key_env, timeout=self.timeout,
                                    max_retries=self.max_retries)

    @classmethod
    def class_name(cls) -> str:
        return "TTTEmbedEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._client.embed([query], query=True, task=self.task)[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return (await self._client.aembed([query], query=True, task=self.task))[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._client.embed([text], query=False, task=None)[0]

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return (await self._client.aembed([text], query=False, task=None))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._client.embed(texts, query=False, task=None) if texts else []

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await self._client.aembed(texts, query=False, task=None) if texts else []


#: The LangChain module's spelling, for apps that use both frameworks.
TTTEmbedEmbeddings = TTTEmbedEmbedding

__all__ = ["TTTEmbedChainRetriever", "TTTEmbedEmbedding", "TTTEmbedEmbeddings",
           "TTTEmbedRetriever"]
