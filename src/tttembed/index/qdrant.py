"""Qdrant collections as tttembed indexes: ``qdrant:URL_OR_PATH/COLLECTION``.

``URL_OR_PATH`` is a server (``qdrant:http://host:6333/scifact``; ``TTTEMBED_QDRANT_API_KEY``
is sent when set) or a local folder (``qdrant:./qdrant/scifact``: qdrant-client's local
mode, created on first write; one process at a time). Points: id = row (0..n-1), payload
``{"doc_id": ...}`` (and ``"text"`` when built with ``store_text``), the unit vector under distance DOT, searched with ``exact=True``
(local mode is always exact); the manifest is the collection metadata
``tttembed_manifest``. Extra: ``pip install 'tttembed[qdrant]'`` (``qdrant-client``).
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import MissingDependency
from tttembed.core.faults import fault_point
from tttembed.index.base import split_collection
from tttembed.index.collection import assemble_doc_ids, engine_errors

MANIFEST_KEY = "tttembed_manifest"
_CLIENTS: dict[str, Any] = {}


def _remote(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _close_all() -> None:
    """Close local-mode clients before interpreter shutdown (their finalisers fail then)."""
    for client in _CLIENTS.values():
        try:
            client.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    _CLIENTS.clear()


atexit.register(_close_all)


def _client(location: str) -> Any:
    """One client per location and process (local mode locks its folder)."""
    import os

    try:
        from qdrant_client import QdrantClient
    except ImportError as exc:
        raise MissingDependency("qdrant-client", "qdrant") from exc
    key = location if _remote(location) else str(Path(location).resolve())
    if key not in _CLIENTS:
        if _remote(location):
            _CLIENTS[key] = QdrantClient(url=location,
                                         api_key=os.environ.get("TTTEMBED_QDRANT_API_KEY"))
        else:
            _CLIENTS[key] = QdrantClient(path=key)
    return _CLIENTS[key]


def explain(exc: Exception, store: Any) -> tuple[str, str] | None:
    """Qdrant's failures in one line: a local folder another process holds, a damaged
    ``meta.json`` or collection storage, an unreachable server."""
    import json
    import sqlite3

    location = str(getattr(store, "location", "") or "")
    text = " ".join(str(exc).split())
    if _remote(location):
        if any(w in text.lower() for w in ("connect", "timed out", "unavailable")):
            return (f"cannot reach the Qdrant server {location} ({text[:160]})",
                    "check that it runs and the URL; an API key goes in TTTEMBED_QDRANT_API_KEY")
        return None
    folder = Path(location).resolve()
    rebuild = ("rebuild the index into a new folder: tttembed index DATA --out "
               "qdrant:NEW_FOLDER/NAME (qdrant local mode keeps no repair tool)")
    if "already accessed by another instance" in text:
        return (f"another process has the Qdrant folder {folder} open (local mode allows "
                "one process per folder)", "stop that process (e.g. a running `tttembed "
                "serve`), or use a Qdrant server for concurrent access")
    opening = not hasattr(store, "client")  # the client reads meta.json when it opens
    if opening and isinstance(exc, json.JSONDecodeError | KeyError | TypeError | ValueError):
        return (f"the Qdrant folder's {folder / 'meta.json'} is damaged ({text[:160]})",
                rebuild)
    if isinstance(exc, sqlite3.DatabaseError):
        return (f"a collection's storage under {folder / 'collection'} is damaged "
                f"(SQLite: {text[:120]})", rebuild)
    return None


@engine_errors(explain)
class QdrantStore:
    """One Qdrant collection (see the module docstring)."""

    def __init__(self, spec: str, location: str, collection: str) -> None:
        self.spec, self.location, self.collection = spec, location, collection
        self.client = _client(location)

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"qdrant_client_version": version("qdrant-client")}

    def exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    def at(self, collection: str) -> QdrantStore:
        return QdrantStore(self.spec, self.location, collection)

    def collections(self) -> list[str]:
        return [c.name for c in self.client.get_collections().collections]

    def alias_target(self) -> str | None:
        for alias in self.client.get_aliases().aliases:
            if alias.alias_name == self.collection:
                return str(alias.collection_name)
        return None

    def point_alias(self, collection: str) -> None:
        """Make the spec's name an alias of ``collection``: one atomic alias update (a
        collection of older tttembed under that name is deleted first)."""
        from qdrant_client import models

        ops: list[Any] = []
        if self.alias_target() is not None:
            ops.append(models.DeleteAliasOperation(
                delete_alias=models.DeleteAlias(alias_name=self.collection)))
        elif self.collection in self.collections():
            self.client.delete_collection(self.collection)
            fault_point("collection:legacy-dropped")
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=collection, alias_name=self.collection)))
        self.client.update_collection_aliases(change_aliases_operations=ops)

    def drop(self) -> None:
        self.client.delete_collection(self.collection)

    def create(self, dim: int, with_text: bool = False) -> None:
        from qdrant_client import models

        self.client.create_collection(self.collection, vectors_config=models.VectorParams(
            size=dim, distance=models.Distance.DOT))

    def insert(self, rows: np.ndarray, doc_ids: list[str], vectors: np.ndarray,
               texts: list[str] | None = None) -> None:
        from qdrant_client import models

        payloads = ([{"doc_id": d} for d in doc_ids] if texts is None
                    else [{"doc_id": d, "text": t} for d, t in zip(doc_ids, texts)])
        self.client.upsert(self.collection, wait=True, points=models.Batch(
            ids=[int(r) for r in rows], vectors=vectors.tolist(), payloads=payloads))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.client.update_collection(self.collection, metadata={MANIFEST_KEY: manifest})

    def read_manifest(self) -> dict[str, Any] | None:
        meta = self.client.get_collection(self.collection).config.metadata or {}
        found = meta.get(MANIFEST_KEY)
        return dict(found) if isinstance(found, dict) else None

    def read_doc_ids(self, n: int) -> list[str]:
        pairs: list[tuple[int, str]] = []
        offset = None
        while True:
            points, offset = self.client.scroll(self.collection, limit=10_000, offset=offset,
                                                with_payload=["doc_id"], with_vectors=False)
            pairs.extend((int(p.id), str((p.payload or {}).get("doc_id"))) for p in points)
            if offset is None:
                return assemble_doc_ids(pairs, n, self.spec)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        from qdrant_client import models

        params = models.SearchParams(exact=True) if _remote(self.location) else None
        out: list[list[tuple[int, float]]] = []
        for start in range(0, len(queries), 256):
            res = self.client.query_batch_points(self.collection, requests=[
                models.QueryRequest(query=q.tolist(), limit=k, params=params)
                for q in queries[start:start + 256]])
            out.extend([(int(p.id), float(p.score)) for p in r.points] for r in res)
        return out

    def fetch(self, rows: list[int]) -> dict[int, np.ndarray]:
        got = self.client.retrieve(self.collection, ids=rows, with_vectors=True,
                                   with_payload=False)
        return {int(p.id): np.asarray(p.vector, np.float32) for p in got}


def from_spec(rest: str, **options: Any) -> QdrantStore:
    """The store of ``qdrant:URL_OR_PATH/COLLECTION`` (registry role ``index``)."""
    location, collection = split_collection(rest, "qdrant")
    return QdrantStore(f"qdrant:{rest}", location, collection)
