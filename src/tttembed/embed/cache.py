"""Content-addressed embedding cache and the batched embedding pipeline.

Vectors are keyed by ``sha256(identity, kind, text)``: the same text embedded by the same
embedder (same prompts) is never sent to the model twice. Storage is append-only shards
of ``.npy`` files (memory-mappable, no pickle) per (identity, kind) namespace::

    <cache>/embeddings/<sha(identity|kind)[:20]>/<shard>.keys.npy   uint8 (n, 32) digests
    <cache>/embeddings/<sha(identity|kind)[:20]>/<shard>.vecs.npy   float32 (n, d)
    <cache>/embeddings/<sha(identity|kind)[:20]>/namespace.json     identity, kind, dim

Shards are written after each chunk, so an interrupted corpus embedding keeps the work
already done. Writes go to a temporary name and are renamed into place.

Nothing unchecked goes in, nothing corrupt comes out: every vector is validated
(:func:`check_vectors`: finite, non-zero norm, the expected dimension) before it is
stored; a shard that cannot be read (zero-byte or truncated ``.npy``, keys and vectors of
different lengths, wrong dtype or dimension) is removed with a logged warning and its
texts are embedded again; a stored row that is not finite or has a zero norm is served as
a miss (embedded again, with a warning); an unreadable ``namespace.json``, or a dimension
that disagrees with the one expected (an index manifest's), makes the whole namespace
rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import BackendError, StateMismatch
from tttembed.core.io import atomic_file, text_digest, write_json
from tttembed.core.paths import ENV_CACHE, cache_dir
from tttembed.core.progress import Advance
from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder, Kind, check_kind, get_embedder
from tttembed.types import PathLike

log = logging.getLogger(__name__)

#: rows whose L2 norm is at most this are "zero vectors" (no direction: never stored)
MIN_NORM = 1e-12
_UNREADABLE = (OSError, ValueError, EOFError, UnicodeDecodeError)


def check_vectors(vecs: np.ndarray, n: int, dim: int | None, where: str) -> None:
    """Raise BackendError unless ``vecs`` is ``n`` finite, non-zero rows of size ``dim``
    (any size when ``dim`` is None). ``where`` names the endpoint or embedder."""
    if vecs.ndim != 2 or len(vecs) != n:
        raise BackendError(f"{where} returned {len(vecs)} vectors for {n} inputs (the server "
                           "dropped or added items); nothing was cached")
    if dim is not None and vecs.shape[1] != dim:
        raise BackendError(
            f"{where} returned {vecs.shape[1]}-dimensional vectors, expected {dim} (did the "
            "model behind the URL change? check dim/dimensions); nothing was cached")
    bad = ~np.isfinite(vecs).all(axis=1)
    if bad.any():
        raise BackendError(f"{where} returned non-finite values (NaN or inf) in "
                           f"{int(bad.sum())} of {n} vectors (first: input {int(bad.argmax())}); "
                           "nothing was cached")
    zero = np.linalg.norm(vecs.astype(np.float64), axis=1) <= MIN_NORM
    if zero.any():
        raise BackendError(f"{where} returned {int(zero.sum())} all-zero vectors of {n} "
                           f"(first: input {int(zero.argmax())}; a zero vector has no "
                           "direction); nothing was cached")


def _good_rows(rows: np.ndarray) -> np.ndarray:
    """Mask of stored rows that are finite with a non-zero norm."""
    finite = np.isfinite(rows).all(axis=1)
    norms = np.linalg.norm(np.where(finite[:, None], rows, 0).astype(np.float64), axis=1)
    return finite & (norms > MIN_NORM)


class EmbeddingCache:
    """On-disk store for one embedder identity and kind.

    ``expected_dim`` (e.g. an index manifest's) is checked against the stored dimension:
    a namespace that disagrees is ignored and rebuilt on the next :meth:`add`.
    """

    def __init__(self, identity: str, kind: Kind, root: PathLike | None = None,
                 expected_dim: int | None = None):
        check_kind(kind)
        self.identity = identity
        self.kind = kind
        ns = hashlib.sha256(f"{identity}\0{kind}".encode()).hexdigest()[:20]
        self.dir = cache_dir(root) / "embeddings" / ns
        self._index: dict[bytes, tuple[int, int]] = {}
        self._shards: list[np.ndarray] = []
        self.expected_dim = None if expected_dim is None else int(expected_dim)
        self.dim: int | None = None
        self._rebuild = False  # wipe the stored shards before the next write
        self._load()

    def _warn(self, what: str, action: str) -> None:
        log.warning("embedding cache %s: %s; %s", self.dir, what, action)

    def _read_meta(self) -> dict[str, Any] | None:
        meta = self.dir / "namespace.json"
        if not meta.exists():
            return None
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
        except _UNREADABLE as exc:
            self._warn(f"unreadable namespace.json ({exc})", "rebuilding the cache")
            self._rebuild = True
            return None
        if info.get("identity") != self.identity or info.get("kind") != self.kind:
            raise StateMismatch(f"embedding cache {self.dir} belongs to another embedder; "
                                "delete it")
        return info

    def _load(self) -> None:
        info = self._read_meta()
        if info is not None:
            dim = info.get("dim")
            if not isinstance(dim, int) or dim < 1:
                self._warn(f"bad dimension {dim!r} in namespace.json", "rebuilding the cache")
                self._rebuild = True
            elif self.expected_dim is not None and dim != self.expected_dim:
                self._warn(f"holds {dim}-dimensional vectors, {self.expected_dim} expected "
                           "(the index manifest's)", "rebuilding the cache")
                self._rebuild = True
            else:
                self.dim = dim
        if self._rebuild or self.dim is None or not self.dir.is_dir():
            return
        for keys_path in sorted(self.dir.glob("*.keys.npy")):
            vecs_path = keys_path.with_name(keys_path.name.replace(".keys.npy", ".vecs.npy"))
            if not vecs_path.exists():
                continue
            shard = self._read_shard(keys_path, vecs_path)
            if shard is None:
                continue
            keys, vecs = shard
            number = len(self._shards)
            self._shards.append(vecs)
            for row, key in enumerate(keys):
                self._index[key.tobytes()] = (number, row)

    def _read_shard(self, keys_path: Path, vecs_path: Path
                    ) -> tuple[np.ndarray, np.ndarray] | None:
        """A shard's (keys, vectors), or None (with a warning, files removed) if corrupt."""
        try:
            keys = np.load(keys_path, allow_pickle=False)
            vecs = np.load(vecs_path, mmap_mode="r", allow_pickle=False)
            problem = ""
            if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32:
                problem = f"keys of shape {keys.shape} ({keys.dtype})"
            elif vecs.dtype != np.float32 or vecs.ndim != 2 or vecs.shape[1] != self.dim:
                problem = f"vectors of shape {vecs.shape} ({vecs.dtype}), dim {self.dim}"
            elif len(keys) != len(vecs):
                problem = f"{len(keys)} keys for {len(vecs)} vectors"
        except _UNREADABLE as exc:
            problem = f"unreadable ({type(exc).__name__}: {exc})"
        if not problem:
            return keys, vecs
        self._warn(f"corrupt shard {keys_path.name[:-9]} ({problem})",
                   "removed; its texts are embedded again")
        for path in (keys_path, vecs_path):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        return None

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, keys: Sequence[bytes]) -> tuple[np.ndarray | None, list[int]]:
        """Rows for the keys found, and the positions of the keys that are missing.

        A stored row that is not finite or has a zero norm counts as missing."""
        missing = [i for i, k in enumerate(keys) if k not in self._index]
        if self.dim is None or len(missing) == len(keys):
            return None, missing
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        miss = set(missing)
        hits = [i for i in range(len(keys)) if i not in miss]
        for i in hits:
            shard, row = self._index[keys[i]]
            out[i] = self._shards[shard][row]
        good = _good_rows(out[hits])
        if not good.all():
            bad = [i for i, ok in zip(hits, good) if not ok]
            self._warn(f"{len(bad)} stored vectors are not finite or zero",
                       "embedding them again")
            for i in bad:
                self._index.pop(keys[i], None)
            missing = sorted(miss.union(bad))
            if len(missing) == len(keys):
                return None, missing
        return out, missing

    def _wipe(self) -> None:
        """Drop every stored shard (a rebuild after a corrupt or foreign namespace)."""
        for path in list(self.dir.glob("*.npy")) + [self.dir / "namespace.json"]:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        self._index.clear()
        self._shards.clear()
        self.dim = None
        self._rebuild = False

    def add(self, keys: Sequence[bytes], vecs: np.ndarray) -> None:
        """Store validated vectors (see :func:`check_vectors`) under their keys."""
        if len(keys) == 0:
            return
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        check_vectors(vecs, len(keys), self.expected_dim, f"embedding cache {self.dir}: input")
        if self._rebuild:
            self._wipe()
        if self.dim is not None and vecs.shape[1] != self.dim:
            raise StateMismatch(f"embedding cache {self.dir} holds dim {self.dim}, "
                                f"got vectors of dim {vecs.shape[1]} from the same embedder "
                                "(did the model behind the URL change?); delete the cache "
                                "folder to rebuild it")
        with _cache_write():
            self.dir.mkdir(parents=True, exist_ok=True)
            if self.dim is None:
                write_json(self.dir / "namespace.json", {
                    "identity": self.identity, "kind": self.kind, "dim": int(vecs.shape[1])})
                self.dim = int(vecs.shape[1])
        name = uuid.uuid4().hex
        karr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        # vectors first, keys last: a shard only counts once its keys file exists
        with _cache_write():
            for suffix, arr in ((".vecs.npy", vecs), (".keys.npy", karr)):
                with atomic_file(self.dir / f"{name}{suffix}") as fh:
                    np.save(fh, arr, allow_pickle=False)
        shard = len(self._shards)
        self._shards.append(vecs)
        for row, k in enumerate(keys):
            self._index[k] = (shard, row)


@contextmanager
def _cache_write() -> Iterator[None]:
    """A failed cache write says it is the cache (not the input) that failed, and where
    else the cache can live."""
    try:
        yield
    except OSError as exc:
        raise type(exc)(exc.errno or 0, f"{exc.strerror or exc} while writing the embedding "
                        f"cache (free space there, or point --cache-dir / ${ENV_CACHE} at "
                        "another disk)", exc.filename) from exc


class CachedEmbedder:
    """Wraps an Embedder: cache lookups first, model calls only for new texts.

    ``encode`` splits the missing texts into chunks of ``chunk_size`` (each one model call,
    validated by :func:`check_vectors`, then written to the cache as soon as it returns) and reports progress through ``progress``
    (called with the number of texts just finished). ``model_calls`` and
    ``texts_embedded`` count the work that reached the model.
    """

    def __init__(self, inner: Embedder, root: PathLike | None = None,
                 chunk_size: int = 256, expected_dim: int | None = None) -> None:
        self.inner = inner
        self.expected_dim = None if expected_dim is None else int(expected_dim)
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
        """``expected_dim`` when given (an index manifest's), else known from the cache when
        it holds vectors (no model load), else the model's."""
        if self.expected_dim is not None:
            return self.expected_dim
        for kind in ("document", "query"):
            cached_dim = self.cache(kind).dim
            if cached_dim is not None:
                return int(cached_dim)
        return int(self.inner.dim)

    def cache(self, kind: Kind) -> EmbeddingCache:
        if kind not in self._caches:
            self._caches[kind] = EmbeddingCache(self.identity, kind, self.root,
                                                expected_dim=self.expected_dim)
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
            try:
                vecs = np.asarray(self.inner.encode([texts[i] for i in chunk], kind))
            except Exception as exc:  # keep the vectors that did arrive (HTTP backends)
                self._keep_partial(cache, [keys[i] for i in chunk], exc)
                raise
            check_vectors(vecs, len(chunk), self.expected_dim, f"embedder {self.spec}")
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


    def _keep_partial(self, cache: EmbeddingCache, keys: Sequence[bytes],
                      exc: Exception) -> None:
        """Cache the rows of a failed chunk that arrived (``exc.partial_rows``)."""
        rows = getattr(exc, "partial_rows", None)
        if not rows:
            return
        got = sorted(p for p in rows if 0 <= p < len(keys))
        if not got:
            return
        vecs = np.asarray([rows[p] for p in got], dtype=np.float32)
        check_vectors(vecs, len(got), self.expected_dim, f"embedder {self.spec}")
        cache.add([keys[p] for p in got], vecs)


def cached(embedder: Embedder, root: PathLike | None = None) -> CachedEmbedder:
    return embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder, root)


#: embedder schemes that take the HTTP options (``timeout``, ``max_retries``, ``dim``)


def load_embedder(spec: str = DEFAULT_EMBEDDER, *, cache: bool = True,
                  cache_dir: PathLike | None = None,
                  expected_dim: int | None = None, **options: Any) -> Embedder:
    """An embedder from its spec, wrapped in the content-addressed cache by default.

    ``expected_dim`` (an index manifest's dimension) is known before the first call: every
    vector is checked against it before it is cached, and an HTTP embedder gets it as
    ``dim``."""
    from tttembed.core.http import HTTP_SCHEMES

    if expected_dim is not None and spec.partition(":")[0] in HTTP_SCHEMES:
        options.setdefault("dim", int(expected_dim))
    inner = get_embedder(spec, **options)
    if not cache:
        return inner
    return CachedEmbedder(inner, cache_dir, expected_dim=expected_dim)


__all__ = ["CachedEmbedder", "EmbeddingCache", "cached", "check_vectors", "load_embedder"]
