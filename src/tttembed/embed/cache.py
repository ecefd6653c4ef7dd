"""Content-addressed embedding cache and the batched embedding pipeline.

Vectors are keyed by ``sha256(identity, kind, text)``: the same text embedded by the same
embedder (same prompts) is never sent to the model twice. Storage is append-only shards
of ``.npy`` files (memory-mappable, no pickle) per (identity, kind) namespace::

    <cache>/embeddings/<sha(identity|kind)[:20]>/<shard>.keys.npy   uint8 (n, 32) digests
    <cache>/embeddings/<sha(identity|kind)[:20]>/<shard>.vecs.npy   float32 (n, d)
    <cache>/embeddings/<sha(identity|kind)[:20]>/namespace.json     identity, kind, dim

Shards are written after each chunk, so an interrupted corpus embedding keeps the work
already done. Writes go to a temporary name and are renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from tttembed.core.errors import StateMismatch
from tttembed.core.io import atomic_file, text_digest, write_json
from tttembed.core.paths import cache_dir
from tttembed.core.progress import Advance
from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder, Kind, check_kind, get_embedder


class EmbeddingCache:
    """On-disk store for one embedder identity and kind."""

    def __init__(self, identity: str, kind: Kind, root: str | os.PathLike[str] | None = None):
        check_kind(kind)
        self.identity = identity
        self.kind = kind
        ns = hashlib.sha256(f"{identity}\0{kind}".encode()).hexdigest()[:20]
        self.dir = cache_dir(root) / "embeddings" / ns
        self._index: dict[bytes, tuple[int, int]] = {}
        self._shards: list[np.ndarray] = []
        self.dim: int | None = None
        self._load()

    def _load(self) -> None:
        meta = self.dir / "namespace.json"
        if meta.exists():
            info = json.loads(meta.read_text())
            if info.get("identity") != self.identity or info.get("kind") != self.kind:
                raise StateMismatch(f"embedding cache {self.dir} belongs to another embedder; "
                                    "delete it")
            self.dim = info.get("dim")
        if not self.dir.is_dir():
            return
        for keys_path in sorted(self.dir.glob("*.keys.npy")):
            vecs_path = keys_path.with_name(keys_path.name.replace(".keys.npy", ".vecs.npy"))
            if not vecs_path.exists():
                continue
            keys = np.load(keys_path, allow_pickle=False)
            vecs = np.load(vecs_path, mmap_mode="r", allow_pickle=False)
            if len(keys) != len(vecs):
                continue  # torn shard from a crash between the two renames: ignore it
            shard = len(self._shards)
            self._shards.append(vecs)
            for row, key in enumerate(keys):
                self._index[key.tobytes()] = (shard, row)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, keys: Sequence[bytes]) -> tuple[np.ndarray | None, list[int]]:
        """Rows for the keys found, and the positions of the keys that are missing."""
        missing = [i for i, k in enumerate(keys) if k not in self._index]
        if self.dim is None or len(missing) == len(keys):
            return None, missing
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        miss = set(missing)
        for i, k in enumerate(keys):
            if i not in miss:
                shard, row = self._index[k]
                out[i] = self._shards[shard][row]
        return out, missing

    def add(self, keys: Sequence[bytes], vecs: np.ndarray) -> None:
        if len(keys) == 0:
            return
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if self.dim is not None and vecs.shape[1] != self.dim:
            raise StateMismatch(f"embedding cache {self.dir} holds dim {self.dim}, "
                                f"got vectors of dim {vecs.shape[1]}; delete the cache")
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.dim is None:
            self.dim = int(vecs.shape[1])
            write_json(self.dir / "namespace.json",
                       {"identity": self.identity, "kind": self.kind, "dim": self.dim})
        name = uuid.uuid4().hex
        karr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        # vectors first, keys last: a shard only counts once its keys file exists
        for suffix, arr in ((".vecs.npy", vecs), (".keys.npy", karr)):
            with atomic_file(self.dir / f"{name}{suffix}") as fh:
                np.save(fh, arr, allow_pickle=False)
        shard = len(self._shards)
        self._shards.append(vecs)
        for row, k in enumerate(keys):
            self._index[k] = (shard, row)


class CachedEmbedder:
    """Wraps an Embedder: cache lookups first, model calls only for new texts.

    ``encode`` splits the missing texts into chunks of ``chunk_size`` (each one model call,
    written to the cache as soon as it returns) and reports progress through ``progress``
    (called with the number of texts just finished). ``model_calls`` and
    ``texts_embedded`` count the work that reached the model.
    """

    def __init__(self, inner: Embedder, root: str | os.PathLike[str] | None = None,
                 chunk_size: int = 256) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.identity = inner.identity
        self.options: dict[str, Any] = dict(getattr(inner, "options", {}) or {})
        self.root = root
        self.chunk_size = int(chunk_size)
        self._caches: dict[str, EmbeddingCache] = {}
        self.model_calls = 0
        self.texts_embedded = 0

    @property
    def dim(self) -> int:
        """Known from the cache when it holds vectors (no model load), else the model's."""
        for kind in ("document", "query"):
            cached_dim = self.cache(kind).dim  # type: ignore[arg-type]
            if cached_dim is not None:
                return int(cached_dim)
        return int(self.inner.dim)

    def cache(self, kind: Kind) -> EmbeddingCache:
        if kind not in self._caches:
            self._caches[kind] = EmbeddingCache(self.identity, kind, self.root)
        return self._caches[kind]

    def encode(self, texts: Sequence[str], kind: Kind = "document",
               progress: Advance | None = None) -> np.ndarray:
        check_kind(kind)
        texts = list(texts)
        keys = [text_digest(t) for t in texts]
        cache = self.cache(kind)
        found, missing = cache.lookup(keys)
        if progress is not None and len(texts) - len(missing):
            progress(len(texts) - len(missing))
        if not missing:
            return found if found is not None else np.zeros((0, self.dim), np.float32)
        # dedupe missing texts: the same text is embedded once
        first: dict[bytes, int] = {}
        for i in missing:
            first.setdefault(keys[i], i)
        # longest first, as sentence-transformers does inside one call: chunks then hold
        # texts of similar length, so padding stays low across chunk boundaries too
        todo = sorted(first.values(), key=lambda i: -len(texts[i]))
        new_rows: dict[bytes, np.ndarray] = {}
        for start in range(0, len(todo), self.chunk_size):
            chunk = todo[start:start + self.chunk_size]
            vecs = self.inner.encode([texts[i] for i in chunk], kind)
            self.model_calls += 1
            self.texts_embedded += len(chunk)
            chunk_keys = [keys[i] for i in chunk]
            cache.add(chunk_keys, vecs)
            for k, v in zip(chunk_keys, vecs):
                new_rows[k] = v
            if progress is not None:
                progress(len(chunk))
        dim = next(iter(new_rows.values())).shape[0]
        out = found if found is not None else np.zeros((len(texts), dim), dtype=np.float32)
        for i in missing:
            out[i] = new_rows[keys[i]]
        if progress is not None and len(missing) > len(todo):
            progress(len(missing) - len(todo))
        return out


def cached(embedder: Embedder, root: str | os.PathLike[str] | None = None) -> CachedEmbedder:
    return embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder, root)


def load_embedder(spec: str = DEFAULT_EMBEDDER, *, cache: bool = True,
                  cache_dir: str | os.PathLike[str] | None = None,
                  **options: Any) -> Embedder:
    """An embedder from its spec, wrapped in the content-addressed cache by default."""
    inner = get_embedder(spec, **options)
    return CachedEmbedder(inner, cache_dir) if cache else inner


__all__ = ["CachedEmbedder", "EmbeddingCache", "cached", "load_embedder"]
