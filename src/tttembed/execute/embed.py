"""``embed_texts``: embed texts through the cache, locally or on Ray Data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.core.io import text_digest
from tttembed.embed.base import Kind, check_kind
from tttembed.embed.cache import CachedEmbedder, check_vectors, load_embedder
from tttembed.execute.config import ExecutorLike, Ray, executor_name, resolve_executor
from tttembed.types import PathLike


@dataclass
class EmbedStats:
    """What one :func:`embed_texts` call did: texts served from the cache, texts sent to
    the model (after de-duplication) and the number of results written to the cache
    (model calls for ``local``; result blocks, which Ray may coalesce, for ``ray``)."""

    cached: int = 0
    embedded: int = 0
    batches: int = 0


def _cached_embedder(spec: str, cache_dir: PathLike | None,
                     options: Mapping[str, Any]) -> CachedEmbedder:
    emb = load_embedder(spec, cache_dir=cache_dir, **dict(options))
    assert isinstance(emb, CachedEmbedder)
    return emb


def embed_texts(spec: str, texts: Sequence[str], kind: Kind = "document", *,
                executor: ExecutorLike = "local", batch_size: int = 256,
                num_cpus: float = 1.0, cache_dir: PathLike | None = None,
                options: Mapping[str, Any] | None = None,
                stats: EmbedStats | None = None) -> np.ndarray:
    """Vectors (float32, ``(len(texts), dim)``) of ``texts`` by the embedder ``spec``.

    Both executors read and fill the same embedding cache (``cache_dir``), so their
    vectors are interchangeable and a second call makes no model call. ``ray`` (or a
    :class:`~tttembed.execute.config.Ray`) uses its cluster (``address`` None: the one
    already initialised in this process, or a new local one), ``actors`` model replicas,
    each with ``gpus`` GPUs and ``num_cpus`` CPUs (Ray sets the actor's torch/OpenMP threads to it) and batches of
    ``batch_size`` texts. ``options`` are the embedder's (prompts, device...).
    ``stats``, when given, is filled in."""
    emb = _cached_embedder(spec, cache_dir, options or {})
    emb.chunk_size = int(batch_size)  # the local executor's model batches
    return embed_with(emb, texts, kind, executor=executor, batch_size=batch_size,
                      num_cpus=num_cpus, options=options, stats=stats)


def embed_with(emb: CachedEmbedder, texts: Sequence[str], kind: Kind = "document", *,
               executor: ExecutorLike = "local", batch_size: int = 256,
               num_cpus: float = 1.0, options: Mapping[str, Any] | None = None,
               stats: EmbedStats | None = None) -> np.ndarray:
    """:func:`embed_texts` with an embedder already built (its cache is the one filled;
    on ``ray``, the actors build ``emb.spec`` with ``emb.options`` and ``options``)."""
    check_kind(kind)
    ray = resolve_executor(executor)
    stats = stats if stats is not None else EmbedStats()
    texts = list(texts)
    if ray is None:
        _, todo, keys = _todo(emb, texts, kind)
        stats.cached = _served(keys, todo)
        before = (emb.texts_embedded, emb.model_calls)
        out = emb.encode(texts, kind)
        stats.embedded = emb.texts_embedded - before[0]
        stats.batches = emb.model_calls - before[1]
        return out
    return _embed_ray(emb, texts, kind, ray=ray, batch_size=batch_size, num_cpus=num_cpus,
                      options=options or {}, stats=stats)


def _served(keys: Sequence[bytes], todo: Sequence[int]) -> int:
    """How many of the texts (repeats included) the cache serves."""
    missing = {keys[i] for i in todo}
    return sum(1 for k in keys if k not in missing)


def _todo(emb: CachedEmbedder, texts: Sequence[str], kind: Kind
          ) -> tuple[np.ndarray | None, list[int], list[bytes]]:
    """(rows found in the cache, unique missing positions longest first, all keys)."""
    keys = [text_digest(t) for t in texts]
    found, missing = emb.cache(kind).lookup(keys)
    first: dict[bytes, int] = {}
    for i in missing:
        first.setdefault(keys[i], i)
    # longest first, as the local executor does: batches hold texts of similar length
    todo = sorted(first.values(), key=lambda i: -len(texts[i]))
    return found, todo, keys


def _embed_ray(emb: CachedEmbedder, texts: list[str], kind: Kind, *, ray: Ray,
               batch_size: int, num_cpus: float, options: Mapping[str, Any],
               stats: EmbedStats) -> np.ndarray:
    found, todo, keys = _todo(emb, texts, kind)
    stats.cached = _served(keys, todo)
    if not todo:
        return found if found is not None else np.zeros((0, emb.dim), np.float32)
    from tttembed.execute.ray_stage import run_embed_stage

    cache = emb.cache(kind)
    new_rows: dict[bytes, np.ndarray] = {}
    for pos, vecs in run_embed_stage(
            emb.spec, dict(emb.options) | dict(options), kind, [texts[i] for i in todo],
            settings=ray, batch_size=batch_size, num_cpus=num_cpus):
        check_vectors(vecs, len(pos), emb.expected_dim, f"embedder {emb.spec} (ray)")
        batch_keys = [keys[todo[p]] for p in pos]
        cache.add(batch_keys, vecs)  # in the driver, as each batch arrives
        new_rows.update(zip(batch_keys, vecs))
        stats.batches += 1
        stats.embedded += len(pos)
        emb.model_calls += 1  # the embedder's counters tell the work done for it, on Ray too
        emb.texts_embedded += len(pos)
    dim = next(iter(new_rows.values())).shape[0]
    out = found if found is not None else np.zeros((len(texts), dim), dtype=np.float32)
    for i, k in enumerate(keys):
        if k in new_rows:
            out[i] = new_rows[k]
    return out


def prefill_queries(emb: Any, texts: Sequence[str], *, executor: ExecutorLike) -> str | None:
    """Fill the embedding cache with query vectors on ``executor`` (``learn`` then reads
    them). Returns a note, and embeds nothing here, when the embedder is not cached or is
    an HTTP service (its requests are better sent from this process)."""
    from tttembed.core.http import HTTP_SCHEMES

    if resolve_executor(executor) is None:
        return None
    if not isinstance(emb, CachedEmbedder):
        return "the embedder is not cached: queries are embedded in this process"
    if emb.spec.partition(":")[0] in HTTP_SCHEMES:
        return (f"embedder {emb.spec} is an HTTP service: queries are embedded from this "
                "process")
    embed_with(emb, texts, "query", executor=executor)
    return None


def prefill_corpus(emb: Any, corpus: Mapping[str, Mapping[str, str]], *,
                   executor: ExecutorLike) -> None:
    """Fill the embedding cache with a corpus's documents on ``executor`` (index building
    then only reads the cache)."""
    from tttembed.data.beir import doc_text

    if not isinstance(emb, CachedEmbedder):
        raise ConfigError(f"executor {executor_name(executor)!r} needs a cached embedder (a spec string, or "
                          "load_embedder(...) with cache=True)")
    embed_with(emb, [doc_text(d) for d in corpus.values()], "document", executor=executor)
