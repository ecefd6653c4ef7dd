"""The Python API. The CLI calls these functions and holds no logic of its own.

    >>> import tttembed.api as tt
    >>> emb = tt.load_embedder()                       # bundled all-MiniLM-L6-v2, cached
    >>> tt.index_corpus("data/scifact", "idx/scifact", embedder=emb)
    >>> index = tt.open_index("idx/scifact")
    >>> result = tt.search(index, {"q1": "0-dimensional biomaterials"}, k=10)
    >>> result.to_run()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tttembed.embed.base import DEFAULT_EMBEDDER, get_embedder
from tttembed.embed.cache import CachedEmbedder
from tttembed.core.errors import StateMismatch
from tttembed.index.search import SearchResult, read_run, write_run
from tttembed.index.search import search as _search
from tttembed.index.store import IndexHandle, build_index
from tttembed.index.store import open_index as _open_index

__all__ = ["SearchResult", "embedder_for_index", "index_corpus", "load_embedder",
           "open_index", "read_run", "search", "write_run"]

#: embedder options that change the vectors, recorded in the index manifest
VECTOR_OPTIONS = ("query_prompt", "document_prompt", "max_seq_length", "dimensions")


def load_embedder(spec: str = DEFAULT_EMBEDDER, *, cache: bool = True,
                  cache_dir: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """Build an embedder from its spec; wrapped in the content-addressed cache by default."""
    options = {k: v for k, v in options.items() if v is not None}
    inner = get_embedder(spec, **options)
    inner.options = {k: v for k, v in options.items() if k in VECTOR_OPTIONS}  # type: ignore[attr-defined]
    return CachedEmbedder(inner, cache_dir) if cache else inner


def index_corpus(data: str | os.PathLike[str] | Mapping[str, Mapping[str, str]],
                 out: str | os.PathLike[str], *, embedder: Any = None,
                 index_type: str = "flat", index_params: dict[str, int] | None = None,
                 overwrite: bool = False, source: str | None = None,
                 progress: Callable[[int], None] | None = None) -> Path:
    """Embed a corpus (a BEIR folder, a corpus.jsonl file, or a BEIR corpus dict) and
    write an index directory."""
    from tttembed.data.beir import load_corpus

    if embedder is None:
        embedder = load_embedder()
    if isinstance(data, Mapping):
        corpus = {k: dict(v) for k, v in data.items()}
        source = source or "<dict>"
    else:
        path = Path(data)
        corpus = load_corpus(path / "corpus.jsonl" if path.is_dir() else path)
        source = str(path)
    options = getattr(getattr(embedder, "inner", embedder), "options", {})
    return build_index(corpus, embedder, out, index_type=index_type,
                       index_params=index_params, overwrite=overwrite, progress=progress,
                       extra={"embedder_options": options, "corpus_source": source})


def open_index(path: str | os.PathLike[str], *, embedder: Any = None) -> IndexHandle:
    """Open an index; with ``embedder``, refuse an index built by another one."""
    if embedder is None:
        return _open_index(path)
    return _open_index(path, expected_identity=embedder.identity,
                       expected_dim=int(embedder.dim))


def embedder_for_index(index: IndexHandle, *, cache: bool = True,
                       cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """Rebuild the embedder recorded in an index manifest (spec + vector options)."""
    options = dict(index.manifest.get("embedder_options") or {})
    emb = load_embedder(index.manifest["embedder_spec"], cache=cache, cache_dir=cache_dir,
                        **options)
    if emb.identity != index.identity:
        raise StateMismatch(f"rebuilt embedder {emb.identity!r} does not match the index's "
                            f"{index.identity!r}")
    return emb


def search(index: IndexHandle, queries: Mapping[str, str], *, embedder: Any = None,
           k: int = 100, batch_size: int = 256,
           progress: Callable[[int], None] | None = None) -> SearchResult:
    """Raw search: encode the queries with the index's embedder and search."""
    if embedder is None:
        embedder = embedder_for_index(index)
    elif embedder.identity != index.identity or int(embedder.dim) != index.dim:
        raise StateMismatch(f"index {index.path} was built with {index.identity!r} "
                            f"(dim {index.dim}); got embedder {embedder.identity!r}")
    return _search(index, queries, embedder, k=k, batch_size=batch_size, progress=progress)
