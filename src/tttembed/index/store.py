"""Index directories: build atomically, open with a manifest check, search.

An index directory holds::

    manifest.json   embedder identity, dim, metric, normalisation, corpus fingerprint,
                    index type and parameters, versions
    index.faiss     the FAISS index
    doc_ids.json    row -> document id
    vectors.npy     float32 (n_docs, dim) unit document vectors (memory-mapped on open;
                    the adaptation step reads candidate vectors from here)

It is written into a temporary sibling folder and renamed into place, so a crash never
leaves a half index behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed import __version__
from tttembed.core.errors import DataError, StateMismatch
from tttembed.core.io import (
    MANIFEST,
    atomic_directory,
    now_utc,
    read_json,
    refuse_existing,
    write_json,
    write_manifest,
)
from tttembed.core.io import (
    read_manifest as _read_manifest,
)
from tttembed.core.progress import Advance
from tttembed.embed.base import Embedder
from tttembed.index.faiss_backend import build_faiss, configure, faiss_module, resolve_params

FORMAT = "tttembed-index"
BUILD_FIX = "build it with 'tttembed index DATA --out DIR'"
FORMAT_VERSION = 1
FILES = (MANIFEST, "index.faiss", "doc_ids.json", "vectors.npy")


@dataclass(frozen=True)
class IndexHandle:
    """An opened index: FAISS object, row -> doc id, unit doc vectors, manifest."""

    path: Path
    manifest: dict[str, Any]
    doc_ids: list[str]
    vectors: np.ndarray
    faiss_index: Any

    @property
    def identity(self) -> str:
        return str(self.manifest["embedder"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS contract: (D, I) of shape (nq, k); I = -1 where fewer than k exist."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise StateMismatch(f"query vectors have shape {q.shape}, index dim is {self.dim}")
        k = min(int(k), len(self.doc_ids))
        return self.faiss_index.search(q, k)


def write_index(out: str | os.PathLike[str], doc_ids: list[str], vectors: np.ndarray, *,
                embedder_identity: str, embedder_spec: str, corpus_fingerprint: str,
                index_type: str = "flat", index_params: dict[str, int] | None = None,
                overwrite: bool = False, extra: dict[str, Any] | None = None) -> Path:
    """Write an index directory from document vectors (atomic: temp folder + rename)."""
    out = refuse_existing(out, overwrite, "index")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(doc_ids) or len(doc_ids) == 0:
        raise DataError(f"need one vector per document, got {vectors.shape} for "
                        f"{len(doc_ids)} ids")
    norms = np.linalg.norm(vectors, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-3):
        raise DataError("document vectors must be L2-normalised")
    params = resolve_params(index_type, index_params, len(doc_ids))
    faiss = faiss_module()
    index = build_faiss(vectors, index_type, params)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "embedder": embedder_identity, "embedder_spec": embedder_spec,
        "dim": int(vectors.shape[1]), "metric": "inner_product", "normalized": True,
        "n_docs": len(doc_ids), "corpus_fingerprint": corpus_fingerprint,
        "index_type": index_type, "index_params": params,
        "tttembed_version": __version__, "faiss_version": getattr(faiss, "__version__", "?"),
        "created": now_utc(),
        **(extra or {}),
    }
    with atomic_directory(out) as tmp:
        faiss.write_index(index, str(tmp / "index.faiss"))
        np.save(tmp / "vectors.npy", vectors, allow_pickle=False)
        write_json(tmp / "doc_ids.json", doc_ids)
        write_manifest(tmp, manifest)
    return out


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An index folder's manifest (a DataError naming the path when absent or corrupt)."""
    return _read_manifest(path, fmt=FORMAT, what="tttembed index", fix=BUILD_FIX)


def open_index(path: str | os.PathLike[str], *, expected_identity: str | None = None,
               expected_dim: int | None = None) -> IndexHandle:
    """Open an index directory, refusing one built by another embedder or dimension."""
    path = Path(path)
    manifest = read_manifest(path)
    if expected_identity is not None and manifest["embedder"] != expected_identity:
        raise StateMismatch(
            f"index {path} was built with embedder {manifest['embedder']!r}, not "
            f"{expected_identity!r}; use the same --embedder or rebuild the index")
    if expected_dim is not None and int(manifest["dim"]) != int(expected_dim):
        raise StateMismatch(f"index {path} has dimension {manifest['dim']}, the embedder "
                            f"gives {expected_dim}; rebuild the index with this embedder")
    for name in FILES:
        if not (path / name).exists():
            raise DataError(f"index {path} is incomplete: {name} is missing",
                            fix="rebuild the index")
    faiss = faiss_module()
    index = faiss.read_index(str(path / "index.faiss"))
    configure(index, manifest["index_type"], manifest["index_params"])
    doc_ids = read_json(path / "doc_ids.json", what="index doc ids", fix="rebuild the index")
    vectors = np.load(path / "vectors.npy", mmap_mode="r", allow_pickle=False)
    if index.ntotal != len(doc_ids) or len(vectors) != len(doc_ids):
        raise DataError(f"index {path} is inconsistent ({index.ntotal} vectors in FAISS, "
                        f"{len(doc_ids)} ids)", fix="rebuild the index")
    return IndexHandle(path=path, manifest=manifest, doc_ids=doc_ids, vectors=vectors,
                       faiss_index=index)


def build_index(corpus: dict[str, dict[str, str]], embedder: Embedder,
                out: str | os.PathLike[str], *, index_type: str = "flat",
                index_params: dict[str, int] | None = None, overwrite: bool = False,
                progress: Advance | None = None,
                extra: dict[str, Any] | None = None) -> Path:
    """Embed a BEIR corpus (through the cache when ``embedder`` is a CachedEmbedder) and
    write the index directory."""
    from tttembed.data.beir import corpus_fingerprint, doc_text

    if not corpus:
        raise DataError("the corpus is empty")
    doc_ids = list(corpus)
    texts = [doc_text(corpus[d]) for d in doc_ids]
    vectors = embedder.encode(texts, "document", progress=progress)
    return write_index(out, doc_ids, vectors, embedder_identity=embedder.identity,
                       embedder_spec=embedder.spec,
                       corpus_fingerprint=corpus_fingerprint(corpus), index_type=index_type,
                       index_params=index_params, overwrite=overwrite, extra=extra)


def open_or_build(corpus: dict[str, dict[str, str]], path: str | os.PathLike[str],
                  embedder: Embedder, *, progress: Advance | None = None,
                  rebuild: bool = False, source: str | None = None) -> IndexHandle:
    """The index of ``corpus`` at ``path`` for ``embedder``: opened when its manifest
    matches both, built there when absent. A mismatch is an error, or (``rebuild=True``,
    for folders tttembed owns, such as cached evaluation indexes) rebuilt in place."""
    from tttembed.data.beir import corpus_fingerprint

    path = Path(path)
    fingerprint = corpus_fingerprint(corpus)
    if path.exists():
        try:
            handle = open_index(path, expected_identity=embedder.identity)
            if handle.manifest.get("corpus_fingerprint") == fingerprint:
                return handle
            problem: Exception = StateMismatch(
                f"index {path} was built from another corpus; pass another index folder or "
                "delete this one")
        except (DataError, StateMismatch) as exc:
            problem = exc
        if not rebuild:
            raise problem
    extra = {"embedder_options": dict(getattr(embedder, "options", {}) or {}),
             "corpus_source": source or "<dict>"}
    build_index(corpus, embedder, path, overwrite=True, progress=progress, extra=extra)
    return open_index(path, expected_identity=embedder.identity)
