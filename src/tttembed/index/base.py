"""The Index protocol: what search, learning, evaluation and serving need from an index.

TTT-Embed never changes the index, it only changes query vectors, so any store that
answers an inner-product query over unit vectors can serve adapted search. Backends are
chosen by spec (see :func:`tttembed.index.store.load_index`):

* a plain path: the FAISS index folder (default, embedded;
  :class:`~tttembed.index.faiss_backend.FaissIndex`);
* ``milvus:URI/COLLECTION``: a Milvus collection; ``URI`` is a Milvus Lite file
  (``milvus:./idx.db/scifact``) or a server (``milvus:http://host:19530/scifact``);
* ``qdrant:URL_OR_PATH/COLLECTION``: a Qdrant collection on a server
  (``qdrant:http://host:6333/scifact``) or in a local folder (``qdrant:./qdrant/scifact``).

Every backend maps rows ``0..n-1`` to document ids (``doc_ids[row]``), keeps the build
manifest (embedder identity and spec, dim, metric, corpus fingerprint, doc count) with
the vectors, searches exactly (FAISS flat, Milvus FLAT, Qdrant ``exact``) unless built
otherwise, and hands back stored document vectors by row (``get_vectors``), which the
adaptation step reads instead of re-embedding candidates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: Spec schemes of the vector-database backends (registry role "index").
DB_SCHEMES = ("milvus", "qdrant")


@runtime_checkable
class Index(Protocol):
    """An opened index (any backend)."""

    @property
    def manifest(self) -> dict[str, Any]:
        """The build manifest (embedder identity and spec, dim, corpus fingerprint...)."""
        ...

    @property
    def doc_ids(self) -> list[str]:
        """Row -> document id."""
        ...

    @property
    def path(self) -> Path | str:
        """Where the index lives: a folder (FAISS) or the spec string (databases)."""
        ...

    @property
    def identity(self) -> str:
        """The identity of the embedder that built the index."""
        ...

    @property
    def dim(self) -> int:
        ...

    def __len__(self) -> int:
        ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS contract: float32 scores D and int64 rows I, both (nq, min(k, n)), best
        first; I = -1 where fewer than k documents exist."""
        ...

    def get_vectors(self, rows: Any) -> np.ndarray:
        """The stored unit vectors of ``rows`` (any int array shape S): float32 S + (dim,).
        Negative rows count from the end, as numpy indexing does."""
        ...


class ManifestFields:
    """What every backend's opened index derives from its manifest and row -> id list:
    ``identity``, ``dim``, ``len``, and the query check of ``search``."""

    manifest: dict[str, Any]
    doc_ids: list[str]

    @property
    def identity(self) -> str:
        return str(self.manifest["embedder"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    def __len__(self) -> int:
        return len(self.doc_ids)

    def checked_queries(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, int]:
        """float32 C-contiguous queries of the index's dimension, and k capped at n."""
        from tttembed.core.errors import StateMismatch

        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise StateMismatch(f"query vectors have shape {q.shape}, index dim is {self.dim}")
        return q, min(int(k), len(self.doc_ids))


def is_db_spec(target: object) -> bool:
    """True when ``target`` names a collection of a registered index backend
    (``milvus:``, ``qdrant:`` or a third-party scheme), not a folder on disk."""
    import os

    from tttembed.core.backends import known_schemes

    if not isinstance(target, (str, os.PathLike)):
        return False
    text = os.fspath(target)
    if not isinstance(text, str) or ":" not in text:
        return False
    scheme = text.split(":", 1)[0]
    if scheme not in DB_SCHEMES and scheme not in known_schemes("index"):
        return False
    return not Path(text).is_dir()


def repair_spec(target: object) -> str:
    """The spec string of ``target``, undoing what ``pathlib.Path`` does to a spec given
    through a Path-typed option (``http://h`` -> ``http:/h``)."""
    import os
    import re

    text = os.fspath(target)  # type: ignore[call-overload]
    return re.sub(r"^(\w+):(https?|grpc|tcp|unix):/(?!/)", r"\1:\2://", str(text))


def split_collection(rest: str, what: str) -> tuple[str, str]:
    """``URI/COLLECTION`` -> (URI, COLLECTION), the collection being the last segment."""
    from tttembed.core.errors import ConfigError

    location, sep, collection = rest.rstrip("/").rpartition("/")
    if not sep or not location or not collection:
        raise ConfigError(f"{what} spec needs a location and a collection, "
                          f"'{what}:URI/COLLECTION', got {what}:{rest!r}")
    return location, collection


def normalise_rows(rows: Any, n: int) -> np.ndarray:
    """``rows`` as an int64 array with negative rows counted from the end; out of range
    rows are an IndexError (as numpy indexing raises)."""
    r = np.asarray(rows, dtype=np.int64)
    r = np.where(r < 0, r + n, r)
    if r.size and (r.min() < 0 or r.max() >= n):
        raise IndexError(f"row out of range for an index of {n} documents")
    return r


def gather(rows: np.ndarray, fetched: dict[int, np.ndarray], dim: int) -> np.ndarray:
    """Rows -> vectors from ``fetched`` ({row: vector}), shape rows.shape + (dim,)."""
    flat = rows.reshape(-1)
    out = np.empty((flat.size, dim), np.float32)
    for i, r in enumerate(flat.tolist()):
        out[i] = fetched[r]
    return out.reshape(*rows.shape, dim)


def pad_results(hits: list[list[tuple[int, float]]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-query ``[(row, score), ...]`` -> FAISS (D, I) of shape (nq, k), sorted by
    score (ties by row, as FAISS flat orders them); missing slots are (-inf, -1)."""
    scores = np.full((len(hits), k), -np.inf, np.float32)
    rows = np.full((len(hits), k), -1, np.int64)
    for i, got in enumerate(hits):
        ranked = sorted(got, key=lambda rs: (-rs[1], rs[0]))[:k]
        for j, (r, s) in enumerate(ranked):
            scores[i, j], rows[i, j] = s, r
    return scores, rows
