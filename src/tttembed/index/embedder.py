"""The index's own embedder: rebuilt from the spec and options its manifest records, or a
given one checked against the index (identity and dimension)."""

from __future__ import annotations

from typing import Any

from tttembed.core.errors import StateMismatch
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.types import PathLike


def embedder_for_index(index: Index, *, cache: bool = True,
                       cache_dir: PathLike | None = None, **options: Any) -> Embedder:
    """The embedder recorded in an index manifest (spec + vector options), rebuilt; it
    knows the index's dimension before its first call (every vector is checked against
    it before it is cached). ``options`` add backend settings that do not change the
    vectors (``timeout``, ``max_retries`` for HTTP embedders).

        >>> from tttembed.index.embedder import embedder_for_index
        >>> emb = embedder_for_index(tt.open_index("idx/scifact"))
    """
    from tttembed.embed.cache import load_embedder

    options = {**dict(index.manifest.get("embedder_options") or {}), **options}
    emb = load_embedder(index.manifest["embedder_spec"], cache=cache, cache_dir=cache_dir,
                        expected_dim=index.dim, **options)
    if emb.identity != index.identity:
        raise StateMismatch(f"rebuilt embedder {emb.identity!r} does not match the index's "
                            f"{index.identity!r}")
    return emb


def index_embedder(index: Index, embedder: Embedder | None = None) -> Embedder:
    """``embedder`` when it is the index's (same identity and dimension, else
    StateMismatch); without one, the index's own (:func:`embedder_for_index`)."""
    if embedder is None:
        return embedder_for_index(index)
    if embedder.identity != index.identity or int(embedder.dim) != index.dim:
        raise StateMismatch(f"index {index.path} was built with {index.identity!r} "
                            f"(dim {index.dim}); got embedder {embedder.identity!r}")
    return embedder
