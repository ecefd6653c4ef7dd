"""Building and opening the index of a corpus: the corpus read, its documents embedded
(on the chosen executor), an index folder or collection written with its manifest."""

from __future__ import annotations

from collections.abc import Mapping

from tttembed.core.progress import Progress, stage
from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder
from tttembed.execute.config import ExecutorLike, resolve_executor
from tttembed.index.base import Index
from tttembed.ttt.corpus import CorpusArg, read_corpus
from tttembed.types import PathLike


def index_corpus(data: CorpusArg, out: PathLike, *, embedder: Embedder | str | None = None,
                 index_type: str = "flat", index_params: Mapping[str, int] | None = None,
                 overwrite: bool = False, progress: Progress | None = None,
                 executor: ExecutorLike = "local", store_text: bool = False) -> Index:
    """Embed a corpus (a BEIR folder, a corpus.jsonl file, or a ``{id: {title, text}}``
    dict) and write an index folder with its manifest; returns the opened index.
    ``store_text=True`` keeps each document's text in a ``milvus:``/``qdrant:`` collection.
    ``executor="ray"`` (or a :class:`~tttembed.execute.config.Ray`) embeds the documents
    not yet cached on Ray Data first (:mod:`tttembed.execute`).

        >>> index = tt.index_corpus("data/scifact", "idx/scifact")
        >>> len(index), index.dim
        (5183, 384)
    """
    from tttembed.embed.cache import load_embedder
    from tttembed.index.base import is_db_spec
    from tttembed.index.store import build_index
    from tttembed.index.store import load_index as _open

    emb = embedder if embedder is not None and not isinstance(embedder, str) \
        else load_embedder(embedder or DEFAULT_EMBEDDER)
    corpus, source = read_corpus(data)
    ray = resolve_executor(executor)
    if ray is not None:
        from tttembed.execute.embed import prefill_corpus

        prefill_corpus(emb, corpus, executor=ray)
    build_index(corpus, emb, out, index_type=index_type,
                index_params=dict(index_params or {}), overwrite=overwrite,
                progress=stage(progress, "embedding corpus", len(corpus)),
                write_progress=(stage(progress, "writing vectors", len(corpus))
                                if is_db_spec(out) else None),
                extra={"embedder_options": dict(getattr(emb, "options", {}) or {}),
                       "corpus_source": source}, store_text=store_text)
    return _open(out, expected_identity=emb.identity)


def open_index(path: PathLike, *, embedder: Embedder | None = None) -> Index:
    """Open an index folder or collection spec; with ``embedder``, refuse one built by
    another embedder (or dimension).

        >>> index = tt.open_index("idx/scifact")
    """
    from tttembed.index.store import load_index as _open

    if embedder is None:
        return _open(path)
    return _open(path, expected_identity=embedder.identity, expected_dim=int(embedder.dim))
