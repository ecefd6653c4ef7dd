"""Milvus collections as tttembed indexes: ``milvus:URI/COLLECTION``.

``URI`` is a Milvus Lite file (``milvus:./idx.db/scifact``: the embedded Milvus engine,
created on first write) or a server / cluster (``milvus:http://host:19530/scifact``;
``TTTEMBED_MILVUS_TOKEN`` is sent as the token when set). The collection has the fields
``row`` (INT64 primary key, 0..n-1), ``doc_id`` (VARCHAR), ``vector`` (FLOAT_VECTOR
with a FLAT index, metric IP: exact inner product) and, built with ``store_text``, ``text``
(VARCHAR, cut to its 65,535-byte limit at a character boundary), strong consistency; the manifest is
the collection property ``tttembed.manifest`` (JSON). Extra: ``pip install
'tttembed[milvus]'`` (``pymilvus`` + ``milvus-lite``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.core.faults import fault_point
from tttembed.index.base import split_collection
from tttembed.index.collection import assemble_doc_ids, engine_errors

MANIFEST_KEY = "tttembed.manifest"
VARCHAR_MAX = 65535  # bytes: Milvus's VARCHAR limit (doc ids and the text payload)
QUERY_BATCH = 16384  # Milvus caps a query at 16384 entities
_CLIENTS: dict[str, Any] = {}


def _client(uri: str) -> Any:
    """One client per URI and process (Milvus Lite runs one engine per file)."""
    try:
        from pymilvus import MilvusClient
    except ImportError as exc:
        raise MissingDependency("pymilvus", "milvus") from exc
    if not uri.startswith(("http://", "https://", "tcp://", "unix:")):
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        uri = str(Path(uri).resolve())
    for name in ("pymilvus", "milvus_lite"):  # their tracebacks become our one line
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if uri not in _CLIENTS:
        token = os.environ.get("TTTEMBED_MILVUS_TOKEN", "")
        _CLIENTS[uri] = MilvusClient(uri=uri, token=token) if token else MilvusClient(uri=uri)
    return _CLIENTS[uri]


def _locked(folder: Path) -> bool:
    """Whether another process holds Milvus Lite's advisory lock on ``folder/LOCK``."""
    import fcntl

    try:
        fd = os.open(folder / "LOCK", os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


_DAMAGED = ("not valid json", "corrupt", "schema file", "manifest", "wal", "truncat")


def explain(exc: Exception, store: Any) -> tuple[str, str] | None:
    """Milvus's failures in one line: a Milvus Lite file another process holds, a path
    that is not a Milvus Lite database, damaged database files, an unreachable server."""
    uri = str(getattr(store, "uri", "") or "")
    text = " ".join(str(exc).split()).lower()
    rebuild = "rebuild the index into a new database: tttembed index DATA --out milvus:NEW.db/NAME"
    if uri and not uri.startswith(("http://", "https://", "tcp://", "unix:")):
        path = Path(uri).resolve()
        if path.is_file():
            return (f"{path} is a file, not a Milvus Lite database (a folder)",
                    "give a new path ending in .db, or the folder of an existing database")
        opening = "open local milvus failed" in text  # (a later failure: we hold LOCK)
        if type(exc).__name__ == "DataDirLockedError" or (opening and _locked(path)):
            return (f"another process has the Milvus Lite database {path} open (Milvus Lite "
                    "allows one process per database)", "stop that process (e.g. a running "
                    "`tttembed serve`), or use a Milvus server for concurrent access")
        if opening or any(word in text for word in _DAMAGED):
            return (f"the Milvus Lite database {path} is damaged or unreadable "
                    f"({' '.join(str(exc).split())[:200]})", rebuild)
        return None
    if "connect" in text or "unavailable" in text or "deadline" in text:
        return (f"cannot reach the Milvus server {uri} ({' '.join(str(exc).split())[:160]})",
                "check that it runs and the URI; a token goes in TTTEMBED_MILVUS_TOKEN")
    return None


@engine_errors(explain)
class MilvusStore:
    """One Milvus collection (see the module docstring)."""

    def __init__(self, spec: str, uri: str, collection: str) -> None:
        if not collection.replace("_", "a").isalnum() or collection[0].isdigit():
            raise ConfigError(f"Milvus collection names hold letters, digits and '_' and do "
                              f"not start with a digit; got {collection!r} in {spec!r}")
        self.spec, self.uri, self.collection = spec, uri, collection
        self.client = _client(uri)

    def versions(self) -> dict[str, str]:
        import pymilvus

        return {"pymilvus_version": getattr(pymilvus, "__version__", "?")}

    def exists(self) -> bool:
        return bool(self.client.has_collection(self.collection))

    def at(self, collection: str) -> MilvusStore:
        return MilvusStore(self.spec, self.uri, collection)

    def collections(self) -> list[str]:
        return [str(n) for n in self.client.list_collections()]

    def alias_target(self) -> str | None:
        try:
            return str(self.client.describe_alias(self.collection)["collection_name"])
        except Exception:  # noqa: BLE001 - pymilvus raises MilvusException: no such alias
            return None

    def point_alias(self, collection: str) -> None:
        """Make the spec's name an alias of ``collection`` (one call when it already is an
        alias; a collection of older tttembed under that name is dropped first)."""
        if self.alias_target() is not None:
            self.client.alter_alias(collection, self.collection)
            return
        if self.collection in self.collections():
            self.client.drop_collection(self.collection)
            fault_point("collection:legacy-dropped")
        self.client.create_alias(collection, self.collection)

    def drop(self) -> None:
        self.client.drop_collection(self.collection)

    def create(self, dim: int, with_text: bool = False) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("row", DataType.INT64, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=VARCHAR_MAX)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        if with_text:
            schema.add_field("text", DataType.VARCHAR, max_length=VARCHAR_MAX)
        params = self.client.prepare_index_params()
        params.add_index("vector", index_type="FLAT", metric_type="IP")
        self.client.create_collection(self.collection, schema=schema, index_params=params,
                                      consistency_level="Strong")

    def insert(self, rows: np.ndarray, doc_ids: list[str], vectors: np.ndarray,
               texts: list[str] | None = None) -> None:
        entities = [{"row": int(r), "doc_id": d, "vector": v.tolist()}
                    for r, d, v in zip(rows, doc_ids, vectors)]
        for entity, text in zip(entities, texts or ()):
            entity["text"] = _fit(text, VARCHAR_MAX)
        self.client.insert(self.collection, entities)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.client.flush(self.collection)
        self.client.alter_collection_properties(
            self.collection, properties={MANIFEST_KEY: json.dumps(manifest, sort_keys=True)})

    def read_manifest(self) -> dict[str, Any] | None:
        props = self.client.describe_collection(self.collection).get("properties") or {}
        text = props.get(MANIFEST_KEY)
        return json.loads(text) if text else None

    def read_doc_ids(self, n: int) -> list[str]:
        """Rows are the primary keys 0..n-1: read them in primary-key ranges."""
        self.client.load_collection(self.collection)
        pairs: list[tuple[int, str]] = []
        for start in range(0, n + 1, QUERY_BATCH):  # one range past n: catches extra rows
            got = self.client.query(self.collection, output_fields=["row", "doc_id"],
                                    filter=f"row >= {start} and row < {start + QUERY_BATCH}",
                                    limit=QUERY_BATCH)
            pairs.extend((int(e["row"]), str(e["doc_id"])) for e in got)
        return assemble_doc_ids(pairs, n, self.spec)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        out: list[list[tuple[int, float]]] = []
        for start in range(0, len(queries), 256):
            res = self.client.search(self.collection, data=queries[start:start + 256].tolist(),
                                     limit=k, anns_field="vector",
                                     search_params={"metric_type": "IP"})
            out.extend([(_pk(h), float(h["distance"])) for h in hits] for hits in res)
        return out

    def fetch(self, rows: list[int]) -> dict[int, np.ndarray]:
        got = self.client.get(self.collection, ids=rows, output_fields=["vector"])
        return {int(e["row"]): np.asarray(e["vector"], np.float32) for e in got}


def _fit(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at a character boundary."""
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _pk(hit: Any) -> int:
    entry = dict(hit)
    return int(entry["row"] if "row" in entry else entry["id"])


def from_spec(rest: str, **options: Any) -> MilvusStore:
    """The store of ``milvus:URI/COLLECTION`` (registry role ``index``)."""
    uri, collection = split_collection(rest, "milvus")
    return MilvusStore(f"milvus:{rest}", uri, collection)
