"""Index directories: build atomically, open with a manifest check, search.

An index directory is versioned: it holds one folder per version ``v-<id>/`` and a
``CURRENT`` pointer file naming the one to read (:func:`tttembed.core.io.versioned_directory`).
A version holds::

    manifest.json   embedder identity, dim, metric, normalisation, corpus fingerprint,
                    index type and parameters, versions
    index.faiss     the FAISS index
    doc_ids.json    row -> document id
    vectors.npy     float32 (n_docs, dim) unit document vectors (memory-mapped on open;
                    the adaptation step reads candidate vectors from here)

A new version is written beside the current one and the pointer switched in one rename,
under the folder's writer lock: a reader resolves the pointer once and reads one version
(never the manifest of one build and the ids of another), a second writer gets a clear
error, and a crash at any point leaves the old index (or, on a first build, nothing);
the next writer removes the leftovers. Folders of the earlier flat layout (the files
directly in the folder) still open, and are converted on the next ``--overwrite``.

A spec ``milvus:URI/COLLECTION`` or ``qdrant:URL_OR_PATH/COLLECTION`` (any scheme of the
registry role ``index``) in place of the folder writes and opens a vector-database
collection instead (:mod:`tttembed.index.collection`), with the same manifest.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.core.io import (
    MANIFEST,
    read_json,
    refuse_existing,
    resolve_version,
    versioned_directory,
    write_json,
    write_manifest,
    writer_lock,
)
from tttembed.core.progress import Advance
from tttembed.embed.base import Embedder
from tttembed.index.base import Index, is_db_spec, repair_spec
from tttembed.index.faiss_backend import (
    FaissIndex,
    build_faiss,
    configure,
    faiss_module,
    resolve_params,
)
from tttembed.index.manifest import (
    BUILD_FIX,
    REQUIRED_FAISS,
    build_manifest,
    check_fields,
    check_identity,
    read_index_manifest,
)
from tttembed.types import PathLike

FILES = (MANIFEST, "index.faiss", "doc_ids.json", "vectors.npy")


def write_index(out: PathLike, doc_ids: list[str], vectors: np.ndarray, *,
                embedder_identity: str, embedder_spec: str, corpus_fingerprint: str,
                index_type: str = "flat", index_params: dict[str, int] | None = None,
                overwrite: bool = False, extra: dict[str, Any] | None = None,
                write_progress: Advance | None = None,
                texts: list[str] | None = None) -> Path | str:
    """Write an index directory from document vectors: a new version and one pointer
    switch, under the folder's writer lock (another writer: ConfigError). ``out`` may be
    a collection spec (``milvus:...``, ``qdrant:...``): written there in batches
    (``write_progress`` advanced per batch), with ``texts`` (one per document) as the
    ``text`` payload when given; returns the spec then."""
    if is_db_spec(out):
        return _write_collection(repair_spec(out), doc_ids, vectors, overwrite=overwrite,
                                 progress=write_progress, texts=texts, manifest=dict(
                                     embedder_identity=embedder_identity,
                                     embedder_spec=embedder_spec,
                                     corpus_fingerprint=corpus_fingerprint,
                                     index_type=index_type, extra=extra))
    if texts is not None:
        raise ConfigError("a FAISS index folder keeps no document text: the text payload "
                          "is for milvus: and qdrant: collections")
    with writer_lock(out):
        refuse_existing(out, overwrite, "index")
        return _write_index(Path(out), doc_ids, vectors, embedder_identity=embedder_identity,
                            embedder_spec=embedder_spec, corpus_fingerprint=corpus_fingerprint,
                            index_type=index_type, index_params=index_params, extra=extra)


def _write_index(out: Path, doc_ids: list[str], vectors: np.ndarray, *,
                 embedder_identity: str, embedder_spec: str, corpus_fingerprint: str,
                 index_type: str, index_params: dict[str, int] | None,
                 extra: dict[str, Any] | None) -> Path:
    vectors = _checked_vectors(doc_ids, vectors)
    params = resolve_params(index_type, index_params, len(doc_ids))
    faiss = faiss_module()
    index = build_faiss(vectors, index_type, params)
    manifest = build_manifest(vectors, embedder_identity=embedder_identity,
                              embedder_spec=embedder_spec,
                              corpus_fingerprint=corpus_fingerprint, index_type=index_type,
                              index_params=params,
                              versions={"faiss_version": getattr(faiss, "__version__", "?")},
                              extra=extra)
    with versioned_directory(out) as tmp:
        try:
            faiss.write_index(index, str(tmp / "index.faiss"))
            np.save(tmp / "vectors.npy", vectors, allow_pickle=False)
        except (RuntimeError, OSError) as exc:
            _raise_write_error(exc, tmp)
        write_json(tmp / "doc_ids.json", doc_ids)
        write_manifest(tmp, manifest)
        from tttembed.index.knn_graph import carry_graph  # documents appended: extend it

        carry_graph(resolve_version(out), tmp, doc_ids, vectors, manifest)
    return out


def _checked_vectors(doc_ids: list[str], vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(doc_ids) or len(doc_ids) == 0:
        raise DataError(f"need one vector per document, got {vectors.shape} for "
                        f"{len(doc_ids)} ids")
    norms = np.linalg.norm(vectors, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-3):
        raise DataError("document vectors must be L2-normalised")
    return vectors


def _write_collection(spec: str, doc_ids: list[str], vectors: np.ndarray, *, overwrite: bool,
                      progress: Advance | None, manifest: dict[str, Any],
                      texts: list[str] | None = None) -> str:
    """Write a vector-database collection (exact inner-product search)."""
    from tttembed.core.backends import create
    from tttembed.index.collection import present, write_collection

    store = create("index", spec)
    if present(store) and not overwrite:
        raise ConfigError(f"index {spec} already exists; pass --overwrite (overwrite=True) "
                          "to replace it, or choose another collection")
    vectors = _checked_vectors(doc_ids, vectors)
    index_type = manifest.pop("index_type")
    if index_type != "flat":
        raise ConfigError(f"index type {index_type!r} is FAISS-only; a {spec.split(':')[0]} "
                          "collection is searched exactly (flat)")
    full = build_manifest(vectors, index_params={}, index_type="flat",
                          versions=store.versions(), **manifest)
    full["backend"] = spec.split(":", 1)[0]
    full["text_payload"] = texts is not None
    return write_collection(store, doc_ids, vectors, full, progress, texts)


def _raise_write_error(exc: Exception, folder: Path) -> None:
    """FAISS and numpy report a failed write without an errno (a RuntimeError, or
    "N requested and M written"): make it an OSError that says why (a full disk, or an
    I/O error), so that the CLI prints one line naming the folder."""
    if isinstance(exc, OSError) and exc.errno is not None:
        raise exc
    full = shutil.disk_usage(folder).free < (1 << 20)
    code = errno.ENOSPC if full else errno.EIO
    raise OSError(code, f"{os.strerror(code)} while writing the index "
                  f"({str(exc).strip().splitlines()[-1][:120]})", str(folder)) from exc


def local_database(spec: str) -> Path | None:
    """The file or folder of a local ``milvus:PATH/COLLECTION`` (Milvus Lite) or
    ``qdrant:PATH/COLLECTION`` (local mode) spec; None for a server URL or another spec."""
    from tttembed.index.base import split_collection

    scheme, _, rest = spec.partition(":")
    if scheme not in ("milvus", "qdrant"):
        return None
    location, _ = split_collection(rest, scheme)
    if location.startswith(("http://", "https://", "tcp://", "unix:", "grpc://")):
        return None
    return Path(location)


def load_index(path: PathLike, *, expected_identity: str | None = None,
               expected_dim: int | None = None) -> Index:
    """Open an index directory, refusing one built by another embedder or dimension.

    Everything is read from one version; when a writer replaced that version while it was
    being read (its files vanished), the pointer is resolved again. A collection spec
    (``milvus:URI/COLLECTION``, ``qdrant:URL_OR_PATH/COLLECTION``) opens that collection."""
    if is_db_spec(path):
        from tttembed.core.backends import create
        from tttembed.index.collection import open_collection

        spec = repair_spec(path)
        local = local_database(spec)
        if local is not None and not local.exists():  # opening would create it, empty
            raise DataError(f"index {spec} does not exist (no database at {local})",
                            fix=BUILD_FIX.replace("--out DIR", f"--out {spec}"))
        return open_collection(create("index", spec), expected_identity, expected_dim)
    path = Path(path)
    for _ in range(5):
        version = resolve_version(path)
        try:
            return _open_version(path, version, expected_identity, expected_dim)
        except (DataError, FileNotFoundError):
            if version == path or resolve_version(path) == version:
                raise
    raise DataError("the index changed five times while it was being opened", path=path,
                    fix="open it again when the rebuild is over")


def _open_version(path: Path, version: Path, expected_identity: str | None,
                  expected_dim: int | None) -> Index:
    manifest = read_index_manifest(version)
    check_fields(version / MANIFEST, manifest, REQUIRED_FAISS)
    check_identity(path, manifest, expected_identity, expected_dim)
    for name in FILES:
        if not (version / name).exists():
            raise DataError(f"index {path} is incomplete: {name} is missing",
                            fix="rebuild the index")
    index = _read_faiss(version / "index.faiss", manifest)
    doc_ids = read_json(version / "doc_ids.json", what="index doc ids", fix="rebuild the index")
    try:
        vectors = np.load(version / "vectors.npy", mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise DataError(f"corrupt index vectors ({exc})", path=version / "vectors.npy",
                        fix="rebuild the index") from exc
    n, dim = manifest.get("n_docs"), int(manifest["dim"])
    if not isinstance(doc_ids, list) or index.ntotal != len(doc_ids) \
            or len(vectors) != len(doc_ids) or n != len(doc_ids) \
            or vectors.ndim != 2 or vectors.shape[1] != dim or index.d != dim:
        raise DataError(f"index {path} is inconsistent (manifest: {n} docs of dim {dim}; "
                        f"FAISS: {index.ntotal} of dim {index.d}; vectors: {vectors.shape}; "
                        f"{len(doc_ids)} ids)", fix="rebuild the index")
    return FaissIndex(path=path, manifest=manifest, doc_ids=doc_ids, vectors=vectors,
                      faiss_index=index)


def _read_faiss(file: Path, manifest: dict[str, Any]) -> Any:
    """The FAISS index in ``file``; a truncated or foreign file is a DataError naming it."""
    faiss = faiss_module()
    try:
        index = faiss.read_index(str(file))
    except RuntimeError as exc:
        if not file.exists():
            raise FileNotFoundError(str(file)) from exc
        first = str(exc).strip().splitlines()[-1][:160] if str(exc).strip() else "unreadable"
        raise DataError(f"corrupt FAISS index ({first})", path=file,
                        fix="rebuild the index") from exc
    configure(index, manifest["index_type"], manifest["index_params"])
    return index


def build_index(corpus: dict[str, dict[str, str]], embedder: Embedder,
                out: PathLike, *, index_type: str = "flat",
                index_params: dict[str, int] | None = None, overwrite: bool = False,
                progress: Advance | None = None,
                extra: dict[str, Any] | None = None,
                write_progress: Advance | None = None,
                store_text: bool = False) -> Path | str:
    """Embed a BEIR corpus (through the cache when ``embedder`` is a CachedEmbedder) and
    write the index directory, or the collection ``out`` names (``milvus:...``; with
    ``store_text``, each document's text as embedded goes with its vector)."""
    from tttembed.data.beir import corpus_fingerprint, doc_text

    if not corpus:
        raise DataError("the corpus is empty")
    if is_db_spec(out):
        return _build_collection(corpus, embedder, repair_spec(out), overwrite=overwrite,
                                 progress=progress, extra=extra,
                                 write_progress=write_progress, store_text=store_text)
    if store_text:
        raise ConfigError("a FAISS index folder keeps no document text: the text payload "
                          "is for milvus: and qdrant: collections")
    with writer_lock(out):  # held while embedding: a second writer fails at once
        refuse_existing(out, overwrite, "index")
        doc_ids = list(corpus)
        texts = [doc_text(corpus[d]) for d in doc_ids]
        vectors = embedder.encode(texts, "document", progress=progress)
        return write_index(out, doc_ids, vectors, embedder_identity=embedder.identity,
                           embedder_spec=embedder.spec,
                           corpus_fingerprint=corpus_fingerprint(corpus),
                           index_type=index_type, index_params=index_params,
                           overwrite=True, extra=extra)


def _build_collection(corpus: dict[str, dict[str, str]], embedder: Embedder, spec: str, *,
                      overwrite: bool, progress: Advance | None, extra: dict[str, Any] | None,
                      write_progress: Advance | None, store_text: bool = False) -> str:
    from tttembed.core.backends import create
    from tttembed.data.beir import corpus_fingerprint, doc_text
    from tttembed.index.collection import present

    if not overwrite and present(create("index", spec)):  # before embedding anything
        raise ConfigError(f"index {spec} already exists; pass --overwrite (overwrite=True) "
                          "to replace it, or choose another collection")
    doc_ids = list(corpus)
    texts = [doc_text(corpus[d]) for d in doc_ids]
    vectors = embedder.encode(texts, "document", progress=progress)
    return str(write_index(spec, doc_ids, vectors, embedder_identity=embedder.identity,
                           embedder_spec=embedder.spec,
                           corpus_fingerprint=corpus_fingerprint(corpus), overwrite=True,
                           extra=extra, write_progress=write_progress,
                           texts=texts if store_text else None))


def open_or_build(corpus: dict[str, dict[str, str]], path: PathLike,
                  embedder: Embedder, *, progress: Advance | None = None,
                  rebuild: bool = False, source: str | None = None) -> Index:
    """The index of ``corpus`` at ``path`` for ``embedder``: opened when its manifest
    matches both, built there when absent. A mismatch is an error, or (``rebuild=True``,
    for folders tttembed owns, such as cached evaluation indexes) rebuilt in place.
    ``path`` may be a collection spec (``milvus:URI/COLLECTION``, ``qdrant:...``): opened
    or built the same way (no writer lock: the engine serialises the writes)."""
    from tttembed.data.beir import corpus_fingerprint

    fingerprint = corpus_fingerprint(corpus)
    extra = {"embedder_options": dict(getattr(embedder, "options", {}) or {}),
             "corpus_source": source or "<dict>"}
    if is_db_spec(path):
        return _open_or_build_collection(corpus, repair_spec(path), embedder, fingerprint,
                                         progress=progress, rebuild=rebuild, extra=extra)
    path = Path(path)
    handle, problem = _matching(path, embedder, fingerprint)
    if handle is not None:
        return handle
    if path.exists() and not rebuild:
        raise problem
    with writer_lock(path, wait=True):  # another process may be building this very index
        handle, _ = _matching(path, embedder, fingerprint)
        if handle is not None:
            return handle
        build_index(corpus, embedder, path, overwrite=True, progress=progress, extra=extra)
    return load_index(path, expected_identity=embedder.identity)


def _open_or_build_collection(corpus: dict[str, dict[str, str]], spec: str,
                              embedder: Embedder, fingerprint: str, *,
                              progress: Advance | None, rebuild: bool,
                              extra: dict[str, Any]) -> Index:
    from tttembed.core.backends import create
    from tttembed.index.collection import present

    if present(create("index", spec)):
        handle, problem = _matching(spec, embedder, fingerprint)
        if handle is not None:
            return handle
        if not rebuild:
            raise problem
    build_index(corpus, embedder, spec, overwrite=True, progress=progress, extra=extra)
    return load_index(spec, expected_identity=embedder.identity)


def _matching(path: Path | str, embedder: Embedder, fingerprint: str
              ) -> tuple[Index | None, Exception]:
    """(the index at ``path`` when it matches embedder and corpus, else None; the reason)."""
    if isinstance(path, Path) and not path.exists():
        return None, DataError(f"index {path} does not exist", fix=BUILD_FIX)
    try:
        handle = load_index(path, expected_identity=embedder.identity)
    except (DataError, StateMismatch) as exc:
        return None, exc
    if handle.manifest.get("corpus_fingerprint") == fingerprint:
        return handle, DataError("")
    return None, StateMismatch(f"index {path} was built from another corpus; pass another "
                               "index folder or collection, or delete this one")
