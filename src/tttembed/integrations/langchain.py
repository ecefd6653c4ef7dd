"""LangChain classes over a ``tttembed serve`` instance (extra ``langchain``):

    >>> from tttembed.integrations.langchain import TTTEmbedRetriever
    >>> retriever = TTTEmbedRetriever(url="http://127.0.0.1:8000", task="stdlib-docs", k=5)
    >>> docs = retriever.invoke("how do I turn a dict into a JSON string", k=3)
    >>> retriever.record_click(docs[0], session_id="s-42")   # the loop learns from it

* :class:`TTTEmbedRetriever`: ``POST /v1/search``; each ``Document`` holds the served
  document's text (``include``: title and text by default) and in its metadata ``id``,
  ``score``, ``rank`` (from 1), ``search_id``, ``version`` and ``task``.
* :class:`TTTEmbedChainRetriever`: ``POST /v1/chain/search`` (a ``serve --chain``
  server); the final ranking, metadata also ``hop`` and ``encoder``.
* :class:`TTTEmbedEmbeddings`: ``embed_documents`` raw, ``embed_query`` adapted for
  ``task``, through the server's ``/v1/embeddings``. The in-process adapter (no server)
  stays :func:`tttembed.integrations.adapters.langchain_embeddings`.

``k`` is a constructor field and an ``invoke`` keyword, as LangChain's retrievers take
it. Every class takes ``timeout`` (seconds per attempt, default 30) and ``max_retries``
(default 2); ``ainvoke`` / ``aembed_*`` use ``httpx.AsyncClient``. ``record_click`` /
``record_label`` (and ``arecord_*``) post what the user did with a returned document to
``/v1/events`` / ``/v1/feedback`` by its ``search_id`` (a server with ``--registry``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.integrations.client import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    Hit,
    ServerClient,
    chain_hits,
    check_include,
    check_max_retries,
    check_timeout,
    click_event,
    label_body,
    masked_repr_args,
    search_hits,
)

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingDependency("langchain-core", "langchain") from None


def _documents(hits: list[Hit]) -> list[Document]:
    return [Document(page_content=h.text, metadata=h.metadata, id=h.id) for h in hits]


def _k(value: Any, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}: k must be an integer >= 1 (the documents to return), "
                          f"got {value!r}")
    return value


def _strict_k(cls: type, value: Any) -> int:
    """``k`` as given to a constructor: refused as ``invoke`` refuses it (no ``"3"``, no
    ``True``), before pydantic would coerce it."""
    return _k(value, cls.__name__)


def _strict_timeout(cls: type, value: Any) -> float:
    return check_timeout(value, cls.__name__)


def _strict_max_retries(cls: type, value: Any) -> int:
    return check_max_retries(value, cls.__name__)


def _no_extra(kwargs: dict[str, Any], owner: str, takes: str) -> None:
    if kwargs:
        raise ConfigError(f"{owner}.invoke got unknown keyword {sorted(kwargs)[0]!r}: it "
                          f"takes {takes}")


class _Feedback:
    """``record_click`` / ``record_label`` for a retriever with a ``_client``."""

    _client: ServerClient
    url: str
    include: list[str]
    api_key_env: str | None
    timeout: float
    max_retries: int

    def model_post_init(self, context: Any) -> None:
        """Both retrievers: the ``include`` fields checked, the one client built."""
        self.include = check_include(self.include, type(self).__name__)
        self._client = ServerClient(self.url, owner=type(self).__name__,
                                    api_key_env=self.api_key_env, timeout=self.timeout,
                                    max_retries=self.max_retries)

    def record_click(self, document: Document, *, session_id: str) -> dict[str, Any]:
        """Post a click on ``document`` (one this retriever returned) to ``/v1/events``;
        the server's 202 body."""
        event = click_event(document.metadata, session_id, type(self).__name__)
        return dict(self._client.post("/v1/events", event))

    async def arecord_click(self, document: Document, *, session_id: str) -> dict[str, Any]:
        event = click_event(document.metadata, session_id, type(self).__name__)
        return dict(await self._client.apost("/v1/events", event))

    def record_label(self, document: Document, grade: float) -> dict[str, Any]:
        """Post a person's label of ``document`` (in [0, 1]) to ``/v1/feedback``."""
        body = label_body(document.metadata, grade, type(self).__name__)
        return dict(self._client.post("/v1/feedback", body))

    async def arecord_label(self, document: Document, grade: float) -> dict[str, Any]:
        body = label_body(document.metadata, grade, type(self).__name__)
        return dict(await self._client.apost("/v1/feedback", body))


class TTTEmbedRetriever(_Feedback, BaseRetriever):
    """Documents from a tttembed server's ``POST /v1/search`` (adapted query vectors,
    the served version's ranking)."""

    url: str
    """The server, e.g. ``http://127.0.0.1:8000``."""
    task: str | None = None
    """The task the query is adapted for (None: the server's one task, or ``_``)."""
    k: int = Field(default=4, ge=1)
    """Documents to return (also an ``invoke`` keyword)."""
    api_key_env: str | None = None
    """The environment variable holding the server's key (``serve --api-key-env``)."""
    include: list[str] = Field(default_factory=lambda: ["title", "text"])
    """Document fields that make ``page_content`` (title and text by default)."""
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    """Seconds one attempt may take."""
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)
    """Retries of a timeout, connection error, 429 or 5xx."""

    _client: ServerClient = PrivateAttr()
    _check_k = field_validator("k", mode="before")(_strict_k)
    _check_timeout = field_validator("timeout", mode="before")(_strict_timeout)
    _check_retries = field_validator("max_retries", mode="before")(_strict_max_retries)

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())

    def _body(self, query: str, k: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        _no_extra(kwargs, type(self).__name__, "k")
        n = _k(self.k if k is None else k, type(self).__name__)
        return ServerClient.search_body(query, self.task, n, self.include)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, **kwargs: Any) -> list[Document]:
        answer = self._client.post("/v1/search", self._body(query, k, kwargs))
        return _documents(search_hits(answer, self.include))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, **kwargs: Any
                                       ) -> list[Document]:
        answer = await self._client.apost("/v1/search", self._body(query, k, kwargs))
        return _documents(search_hits(answer, self.include))


class TTTEmbedChainRetriever(_Feedback, BaseRetriever):
    """The final ranking of a tttembed chain server's ``POST /v1/chain/search``
    (``serve --chain``; multi-hop retrieval)."""

    url: str
    k: int = Field(default=4, ge=1)
    """Passages to return (the request's ``top_k``; also an ``invoke`` keyword)."""
    max_hops: int | None = Field(default=None, ge=1)
    """Chain steps (None: the server's default; also an ``invoke`` keyword)."""
    beam: int = Field(default=1, ge=1)
    """Beam width (1: greedy; also an ``invoke`` keyword)."""
    api_key_env: str | None = None
    include: list[str] = Field(default_factory=lambda: ["title", "text"])
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)

    _client: ServerClient = PrivateAttr()
    _check_k = field_validator("k", mode="before")(_strict_k)
    _check_timeout = field_validator("timeout", mode="before")(_strict_timeout)
    _check_retries = field_validator("max_retries", mode="before")(_strict_max_retries)

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())

    def _body(self, question: str, k: int | None, max_hops: int | None, beam: int | None,
              kwargs: dict[str, Any]) -> dict[str, Any]:
        _no_extra(kwargs, type(self).__name__, "k, max_hops and beam")
        n = _k(self.k if k is None else k, type(self).__name__)
        return ServerClient.chain_body(question, n, self.max_hops if max_hops is None
                                       else max_hops, self.beam if beam is None else beam,
                                       self.include)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, max_hops: int | None = None,
                                beam: int | None = None, **kwargs: Any) -> list[Document]:
        body = self._body(query, k, max_hops, beam, kwargs)
        return _documents(chain_hits(self._client.post("/v1/chain/search", body),
                                     self.include))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, max_hops: int | None = None,
                                       beam: int | None = None, **kwargs: Any
                                       ) -> list[Document]:
        body = self._body(query, k, max_hops, beam, kwargs)
        return _documents(chain_hits(await self._client.apost("/v1/chain/search", body),
                                     self.include))


class TTTEmbedEmbeddings(BaseModel, Embeddings):
    """A tttembed server's embeddings: documents raw, queries adapted for ``task``."""

    model_config = ConfigDict(extra="forbid")

    url: str
    task: str | None = None
    """The task queries are adapted for (None: global states only)."""
    api_key_env: str | None = None
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)

    _client: ServerClient = PrivateAttr()
    _check_timeout = field_validator("timeout", mode="before")(_strict_timeout)
    _check_retries = field_validator("max_retries", mode="before")(_strict_max_retries)

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        return masked_repr_args(super().__repr_args__())

    def model_post_init(self, context: Any) -> None:
        self._client = ServerClient(self.url, owner=type(self).__name__,
                                    api_key_env=self.api_key_env, timeout=self.timeout,
                                    max_retries=self.max_retries)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._client.embed(texts, query=False, task=None) if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self._client.embed([text], query=True, task=self.task)[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self._client.aembed(texts, query=False, task=None) if texts else []

    async def aembed_query(self, text: str) -> list[float]:
        return (await self._client.aembed([text], query=True, task=self.task))[0]


__all__ = ["TTTEmbedChainRetriever", "TTTEmbedEmbeddings", "TTTEmbedRetriever"]
