"""Indexes kept in a vector database (Milvus, Qdrant): the opened handle and the common
write/open steps. The backends (``tttembed.index.milvus``, ``tttembed.index.qdrant``)
only talk to their engine through the :class:`CollectionStore` protocol below.

A collection holds one point per document: the row ``0..n-1`` as primary key / point id,
the document id as a field / payload, the unit vector and, when built with
``store_text=True``, the document text (title and text, as embedded) as a ``text`` field /
payload, so that applications can show results without a second store. The build manifest is written
with the collection (Milvus collection property, Qdrant collection metadata) after the
last vector: a collection without it is an incomplete build and is refused.

The name in a spec is an *alias* (both engines have collection aliases). A build writes a
new physical collection ``NAME__tt<hex time>``, writes its manifest last, then points the
alias at it in one engine call and drops the old one, so a kill at any point leaves the
old index or the new one in force, as a FAISS folder's version switch does. A collection
written by older tttembed under the bare name is converted on its next ``--overwrite``
(dropped just before the alias is made; a kill in that instant leaves the complete new
build, which the next open adopts). Builds left by a killed writer are dropped by the
next write. Writers on a server are not serialised: each builds its own collection and
the last switch wins (the engines serialise local files themselves).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from tttembed.core.errors import BackendError, DataError, TTTEmbedError
from tttembed.core.faults import fault_point
from tttembed.core.progress import Advance
from tttembed.index.base import ManifestFields, normalise_rows
from tttembed.index.manifest import BUILD_FIX, FORMAT, check_fields, check_identity

log = logging.getLogger(__name__)
WRITE_BATCH = 2000
FETCH_BATCH = 1000


class CollectionStore(Protocol):
    """One collection of one engine, named by a spec (``milvus:URI/COLLECTION``)."""

    spec: str

    collection: str

    def exists(self) -> bool: ...

    def at(self, collection: str) -> CollectionStore: ...

    def collections(self) -> list[str]: ...

    def alias_target(self) -> str | None: ...

    def point_alias(self, collection: str) -> None: ...

    def versions(self) -> dict[str, str]: ...

    def drop(self) -> None: ...

    def create(self, dim: int, with_text: bool = False) -> None: ...

    def insert(self, rows: np.ndarray, doc_ids: list[str], vectors: np.ndarray,
               texts: list[str] | None = None) -> None: ...

    def write_manifest(self, manifest: dict[str, Any]) -> None: ...

    def read_manifest(self) -> dict[str, Any] | None: ...

    def read_doc_ids(self, n: int) -> list[str]: ...

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]: ...

    def fetch(self, rows: list[int]) -> dict[int, np.ndarray]: ...


class RowView:
    """``index.vectors`` of a collection: ``view[rows]`` fetches those rows from the
    engine; ``np.asarray(view)`` fetches every row (in batches)."""

    def __init__(self, handle: CollectionIndex) -> None:
        self._handle = handle

    @property
    def shape(self) -> tuple[int, int]:
        return len(self._handle), self._handle.dim

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return len(self._handle)

    def __getitem__(self, rows: Any) -> np.ndarray:
        if isinstance(rows, slice):
            rows = np.arange(len(self._handle))[rows]
        return self._handle.get_vectors(rows)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._handle.get_vectors(np.arange(len(self._handle)))
        return out if dtype is None else out.astype(dtype)


@dataclass(frozen=True)
class CollectionIndex(ManifestFields):
    """An index kept in a vector database (the collection backends of
    :class:`tttembed.index.base.Index`); ``path`` is its spec string. Search goes to the
    engine; ``get_vectors`` (and ``vectors[rows]``) read stored vectors back from it."""

    path: str
    manifest: dict[str, Any]
    doc_ids: list[str]
    store: Any

    @property
    def vectors(self) -> RowView:
        return RowView(self)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from tttembed.index.base import pad_results

        q, k = self.checked_queries(queries, k)
        if len(q) == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return pad_results(self.store.search(q, k), k)

    def get_vectors(self, rows: Any) -> np.ndarray:
        from tttembed.index.base import gather

        r = normalise_rows(rows, len(self.doc_ids))
        wanted = sorted(set(r.reshape(-1).tolist()))
        fetched: dict[int, np.ndarray] = {}
        for start in range(0, len(wanted), FETCH_BATCH):
            fetched.update(self.store.fetch(wanted[start:start + FETCH_BATCH]))
        missing = [w for w in wanted if w not in fetched]
        if missing:
            raise DataError(f"index {self.path} lacks the vectors of rows {missing[:5]}",
                            fix="rebuild the index")
        return gather(r, fetched, self.dim)


T = TypeVar("T")
#: An engine's explanation of one of its exceptions: (message, fix) or None (not known).
Explain = Callable[[Exception, Any], "tuple[str, str] | None"]


def engine_errors(explain: Explain) -> Callable[[type[T]], type[T]]:
    """Class decorator for a :class:`CollectionStore`: every public method (and
    ``__init__``, which opens the engine) turns an engine exception into one
    :class:`BackendError` line with the spec and a fix (``explain`` knows the engine's
    cases), never a traceback."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except TTTEmbedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the engines raise many kinds
                known = explain(exc, self)
                detail = " ".join(str(exc).split())[:300] or type(exc).__name__
                message, fix = known or (f"{type(exc).__name__}: {detail}",
                                         "check the engine's log; rebuild the index with "
                                         "--overwrite if its files are damaged")
                raise BackendError(f"{getattr(self, 'spec', '?')}: {message} ({fix})") from exc
        return guarded

    def decorate(cls: type[T]) -> type[T]:
        for name, member in list(vars(cls).items()):
            if callable(member) and (name == "__init__" or not name.startswith("_")):
                setattr(cls, name, wrap(member))
        return cls

    return decorate


#: Physical collections of an alias are named ``<alias>__tt<hex nanoseconds>``.
STAGE = "__tt"


def _builds(store: CollectionStore) -> list[str]:
    """The physical collections built for ``store``'s alias, oldest first."""
    prefix = store.collection + STAGE
    return sorted((n for n in store.collections() if n.startswith(prefix)),
                  key=lambda n: (len(n), n))


def present(store: CollectionStore) -> bool:
    """Whether the spec names an index: its alias (or a collection of older tttembed
    under the bare name) exists. A complete build left without its alias (a kill between
    dropping an old-style collection and making the alias) is adopted here."""
    if store.exists():
        return True
    for name in reversed(_builds(store)):
        if store.at(name).read_manifest() is not None:
            log.warning("%s: adopting the complete build %s left without its alias",
                        store.spec, name)
            store.point_alias(name)
            return True
    return False


def write_collection(store: CollectionStore, doc_ids: list[str], vectors: np.ndarray,
                     manifest: dict[str, Any], progress: Advance | None = None,
                     texts: list[str] | None = None) -> str:
    """Replace the index with ``vectors`` (rows 0..n-1) written in batches (with ``texts``
    as the ``text`` payload when given) into a new collection, then the manifest (the
    completion mark), then switch the alias to it and drop the old one (module
    docstring): the old index stays in force until the switch."""
    if texts is not None and len(texts) != len(doc_ids):
        raise DataError(f"need one text per document, got {len(texts)} for {len(doc_ids)}")
    present(store)
    target = store.alias_target()
    for name in _builds(store):  # left by a killed writer
        if name != target:
            store.at(name).drop()
    staged = store.at(f"{store.collection}{STAGE}{time.time_ns():x}")
    staged.create(int(vectors.shape[1]), with_text=texts is not None)
    for start in range(0, len(doc_ids), WRITE_BATCH):
        stop = min(start + WRITE_BATCH, len(doc_ids))
        staged.insert(np.arange(start, stop, dtype=np.int64), doc_ids[start:stop],
                      vectors[start:stop], None if texts is None else texts[start:stop])
        log.debug("%s: wrote %d/%d vectors", store.spec, stop, len(doc_ids))
        fault_point("collection:inserted")
        if progress is not None:
            progress(stop - start)
    staged.write_manifest(manifest)
    fault_point("collection:written")
    store.point_alias(staged.collection)  # the commit point
    fault_point("collection:switched")
    if target is not None:
        store.at(target).drop()
    return store.spec


def open_collection(store: CollectionStore, expected_identity: str | None = None,
                    expected_dim: int | None = None) -> CollectionIndex:
    """Open a collection written by :func:`write_collection`, refusing an incomplete
    build, a foreign collection, or one built by another embedder or dimension."""
    fix = BUILD_FIX.replace("--out DIR", f"--out {store.spec}")
    if not present(store):
        raise DataError(f"index {store.spec} does not exist", fix=fix)
    manifest = store.read_manifest()
    if manifest is None or manifest.get("format") != FORMAT:
        raise DataError(f"index {store.spec} holds no tttembed manifest (an incomplete "
                        "build, or a collection written by something else)",
                        fix=fix + " --overwrite")
    check_fields(store.spec, manifest)
    check_identity(store.spec, manifest, expected_identity, expected_dim)
    n = int(manifest["n_docs"])
    doc_ids = store.read_doc_ids(n)
    if len(doc_ids) != n:
        raise DataError(f"index {store.spec} is inconsistent (manifest: {n} docs; "
                        f"collection: {len(doc_ids)})", fix="rebuild the index")
    return CollectionIndex(path=store.spec, manifest=manifest, doc_ids=doc_ids, store=store)


def assemble_doc_ids(pairs: list[tuple[int, str]], n: int, spec: str) -> list[str]:
    """(row, doc id) pairs in any order -> the list row -> doc id (rows 0..n-1 once)."""
    out: list[str | None] = [None] * n
    for row, did in pairs:
        if not 0 <= row < n or out[row] is not None:
            raise DataError(f"index {spec} holds an unexpected row {row}",
                            fix="rebuild the index")
        out[row] = did
    if any(d is None for d in out):
        raise DataError(f"index {spec} lacks some rows of its {n} documents",
                        fix="rebuild the index")
    return [str(d) for d in out]
