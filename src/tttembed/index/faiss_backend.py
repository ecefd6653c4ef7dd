"""FAISS index types. Inner product over unit vectors (= cosine).

``flat`` (exact, default), ``hnsw`` (graph; params ``m``, ``ef_construction``,
``ef_search``), ``ivf`` (inverted lists over a k-means coarse quantiser; params ``nlist``,
``nprobe``), ``ivfpq`` (the same inverted lists holding product-quantised codes of
``pq_m`` codes of ``nbits`` bits a vector: ``pq_m`` bytes at the default 8 bits, about
``pq_m / 4d`` of the flat index's memory; params ``nlist``, ``nprobe``, ``pq_m``, which
must divide the dimension, and ``nbits``, lowered to ``log2(n_docs)`` on a small corpus). Approximate types keep
the exact vectors beside the index (``vectors.npy``), so results are re-scorable and the
adaptation step reads exact candidate vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.index.base import ManifestFields

INDEX_TYPES = ("flat", "hnsw", "ivf", "ivfpq")
DEFAULT_PARAMS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"m": 32, "ef_construction": 200, "ef_search": 128},
    "ivf": {"nlist": 0, "nprobe": 16},  # nlist 0 = 4 * sqrt(n_docs)
    "ivfpq": {"nlist": 0, "nprobe": 16, "pq_m": 48, "nbits": 8},  # d 384: 8 dims a byte
}


def faiss_module() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a core dependency
        raise MissingDependency("faiss-cpu", "st") from exc
    return faiss


def resolve_params(index_type: str, params: dict[str, int] | None, n_docs: int) -> dict[str, int]:
    if index_type not in INDEX_TYPES:
        raise ConfigError(f"unknown index type {index_type!r}; known: {', '.join(INDEX_TYPES)}")
    merged = dict(DEFAULT_PARAMS[index_type])
    for key, value in (params or {}).items():
        if key not in merged:
            raise ConfigError(f"unknown parameter {key!r} for index type {index_type!r}; "
                              f"known: {', '.join(merged) or 'none'}")
        merged[key] = int(value)
    if index_type in ("ivf", "ivfpq"):
        if merged["nlist"] <= 0:
            merged["nlist"] = max(1, int(4 * np.sqrt(n_docs)))
        merged["nlist"] = min(merged["nlist"], max(1, n_docs // 39 or 1))
    if index_type == "ivfpq":  # each sub-quantiser trains 2**nbits centroids on n_docs
        merged["nbits"] = max(1, min(merged["nbits"], 8, int(np.log2(max(n_docs, 2)))))
    return merged


def build_faiss(vectors: np.ndarray, index_type: str, params: dict[str, int]) -> Any:
    faiss = faiss_module()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    d = vectors.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(d)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(d, params["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
        index.hnsw.efSearch = params["ef_search"]
    else:
        index = _ivf(faiss, d, index_type, params)
        index.train(vectors)
        index.nprobe = params["nprobe"]
    index.add(vectors)
    return index


def _ivf(faiss: Any, d: int, index_type: str, params: dict[str, int]) -> Any:
    """An untrained IVF-Flat or IVF-PQ index (inner product)."""
    quantizer = faiss.IndexFlatIP(d)
    if index_type == "ivf":
        return faiss.IndexIVFFlat(quantizer, d, params["nlist"], faiss.METRIC_INNER_PRODUCT)
    if params["pq_m"] <= 0 or d % params["pq_m"]:
        raise ConfigError(f"ivfpq: pq_m={params['pq_m']} must divide the dimension {d}")
    return faiss.IndexIVFPQ(quantizer, d, params["nlist"], params["pq_m"], params["nbits"],
                            faiss.METRIC_INNER_PRODUCT)


def configure(index: Any, index_type: str, params: dict[str, int]) -> None:
    """Re-apply search-time parameters after reading an index from disk."""
    faiss = faiss_module()
    if index_type == "hnsw":
        faiss.downcast_index(index).hnsw.efSearch = params["ef_search"]
    elif index_type in ("ivf", "ivfpq"):
        faiss.extract_index_ivf(index).nprobe = params["nprobe"]



@dataclass(frozen=True)
class FaissIndex(ManifestFields):
    """An opened index folder: FAISS object, row -> doc id, unit doc vectors (memory-mapped),
    manifest (the FAISS backend of :class:`tttembed.index.base.Index`)."""

    path: Path | str
    manifest: dict[str, Any]
    doc_ids: list[str]
    vectors: np.ndarray
    faiss_index: Any

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS contract: (D, I) of shape (nq, k); I = -1 where fewer than k exist. Its
        OpenMP threads follow the free cores (:func:`~tttembed.core.devices.use_faiss_threads`)."""
        from tttembed.core.devices import use_faiss_threads

        q, k = self.checked_queries(queries, k)
        use_faiss_threads()
        return self.faiss_index.search(q, k)

    def get_vectors(self, rows: Any) -> np.ndarray:
        """The stored unit vectors of ``rows`` (any int array shape S): float32 S + (dim,)."""
        return np.asarray(self.vectors[np.asarray(rows, dtype=np.int64)], dtype=np.float32)
