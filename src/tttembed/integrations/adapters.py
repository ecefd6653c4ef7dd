"""Framework adapters for apps that embed in-process (no server): the query side adapted,
the document side raw, as LlamaIndex's own ``AdapterEmbeddingModel`` does.

    >>> from tttembed.integrations.adapters import langchain_embeddings
    >>> emb = langchain_embeddings(tt.embedder_for_index(index), ["task.npz"], task="scifact")
    >>> emb.embed_query("0-dimensional biomaterials")      # unit(x + alpha v)
    >>> emb.embed_documents(["a document"])                # the embedder's own vectors

The adaptation is :meth:`tttembed.ttt.snapshot.Snapshot.adapt`, the same function the
server and ``tttembed.api.search`` use. Query-wise states find their queries by
text; ``queries`` (``{task: {qid: text}}``) only names tasks and ids for reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.adapt.state import StateLike, load_states
from tttembed.core.errors import MissingDependency
from tttembed.embed.base import Embedder
from tttembed.ttt.snapshot import Snapshot


class QueryAdapter:
    """An embedder plus states: ``queries(texts)`` adapted for ``task``, ``documents(texts)``
    raw. ``task="_"`` applies global states only."""

    def __init__(self, embedder: Embedder | str, states: StateLike | Sequence[StateLike] = (),
                 *, task: str = "_",
                 queries: Mapping[str, Mapping[str, str]] | None = None) -> None:
        if isinstance(embedder, str):  # a spec, as mteb_model takes it
            from tttembed.embed.cache import load_embedder

            embedder = load_embedder(embedder)
        loaded = load_states(states, embedder.identity, int(embedder.dim))
        qids = {t: {text: q for q, text in m.items()} for t, m in (queries or {}).items()}
        self.embedder, self.task = embedder, task
        self.snapshot = Snapshot(0, loaded, (0.0,) * len(loaded), qids)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        x = self.embedder.encode(list(texts), "query")
        return self.snapshot.adapt(x, list(texts), self.task)[0]

    def documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts), "document")


def langchain_embeddings(embedder: Embedder | str,
                         states: StateLike | Sequence[StateLike] = (), *,
                         task: str = "_",
                         queries: Mapping[str, Mapping[str, str]] | None = None) -> Any:
    """A LangChain ``Embeddings``: ``embed_query`` adapted, ``embed_documents`` raw."""
    try:
        from langchain_core.embeddings import Embeddings
    except ImportError:
        raise MissingDependency("langchain-core", "langchain") from None
    adapter = QueryAdapter(embedder, states, task=task, queries=queries)

    class TTTEmbedEmbeddings(Embeddings):
        """tttembed states on the query side of a LangChain app."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return adapter.documents(texts).tolist()

        def embed_query(self, text: str) -> list[float]:
            return adapter.queries([text])[0].tolist()

    out = TTTEmbedEmbeddings()
    out.adapter = adapter  # type: ignore[attr-defined]
    return out


def llamaindex_embedding(embedder: Embedder | str,
                         states: StateLike | Sequence[StateLike] = (), *,
                         task: str = "_",
                         queries: Mapping[str, Mapping[str, str]] | None = None,
                         model_name: str = "tttembed") -> Any:
    """A LlamaIndex ``BaseEmbedding``: query embeddings adapted, text embeddings raw."""
    try:
        from llama_index.core.base.embeddings.base import BaseEmbedding
        from pydantic import PrivateAttr
    except ImportError:
        raise MissingDependency("llama-index-core", "llamaindex") from None

    class TTTEmbedEmbedding(BaseEmbedding):
        """tttembed states on the query side of a LlamaIndex app."""

        _adapter: Any = PrivateAttr()

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._adapter.queries([query])[0].tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._adapter.documents([text])[0].tolist()

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return self._adapter.documents(texts).tolist()

    out = TTTEmbedEmbedding(model_name=model_name)
    out._adapter = QueryAdapter(embedder, states, task=task, queries=queries)
    return out
