"""The corpus k-NN graph: each document's ``k`` nearest other documents, found once by
the index's own search and kept beside the index, so the active allocation's neighbour
step (:mod:`tttembed.adapt.active`) reads rows instead of searching the corpus each round.

Stored in an index version folder (``v-<id>/knn_graph/``), written whole or not at all
(:func:`tttembed.core.io.atomic_directory`)::

    manifest.json   format, k, n_docs, the index's corpus fingerprint and creation time
    rows.npy        int64 (n_docs, k): neighbour rows, best first (-1 past the corpus)
    scores.npy      float32 (n_docs, k): their inner products

A row's neighbours are what ``index.search(its vector, k + 1)`` returns without the
document itself (the first ``k`` of the rest): the same answer as searching at
allocation time, so the allocation chooses the same pairs. When documents are appended
to a flat (exact) index, the next version's graph is the previous one extended
(:func:`extend_graph`: the new documents searched against everything, the old ones
against the new), not rebuilt; an approximate index (its search changes with its build)
gets a new graph on first use. The building functions are pure (arrays and a search
callable); :func:`index_graph_rows` and :func:`carry_graph` do the file work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import TTTEmbedError
from tttembed.core.io import atomic_directory, read_json, resolve_version, write_json
from tttembed.types import Search

FORMAT = "tttembed-knn-graph"
FOLDER = "knn_graph"
#: Query rows per search call while building.
BUILD_BATCH = 2048


@dataclass(frozen=True)
class KnnGraph:
    """``rows[i]``: the ``k`` nearest other rows of row ``i`` (-1 padded), ``scores[i]``
    their inner products."""

    rows: np.ndarray
    scores: np.ndarray

    @property
    def k(self) -> int:
        return int(self.rows.shape[1])

    def __len__(self) -> int:
        return int(self.rows.shape[0])


def _without_self(first: int, found: np.ndarray, scores: np.ndarray, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Drop each query row's own row from its hits (rows ``first ..``), keep ``k``."""
    n = len(found)
    own = (first + np.arange(n))[:, None]
    keep = (found >= 0) & (found != own)
    rows = np.full((n, k), -1, dtype=np.int64)
    out = np.full((n, k), -np.inf, dtype=np.float32)
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]  # kept hits first, in order
    m = order.shape[1]
    picked = np.take_along_axis(keep, order, axis=1)
    rows[:, :m][picked] = np.take_along_axis(found, order, axis=1)[picked]
    out[:, :m][picked] = np.take_along_axis(scores, order, axis=1)[picked]
    return rows, out


def build_graph(vectors: np.ndarray, search: Search, k: int, n_total: int | None = None,
                first: int = 0, batch: int = BUILD_BATCH) -> KnnGraph:
    """The graph rows of ``vectors`` (rows ``first ..`` of an index of ``n_total``
    documents, searched through ``search``): one ``search(batch, k + 1)`` per batch."""
    n = len(vectors)
    total = n if n_total is None else int(n_total)
    depth = min(k + 1, total)
    rows = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    for at in range(0, n, batch):
        q = np.ascontiguousarray(vectors[at:at + batch], dtype=np.float32)
        d, i = search(q, depth)
        rows[at:at + len(q)], scores[at:at + len(q)] = _without_self(
            first + at, np.asarray(i, dtype=np.int64), np.asarray(d, dtype=np.float32), k)
    return KnnGraph(rows, scores)


def extend_graph(graph: KnnGraph, old: np.ndarray, new: np.ndarray, search_all: Search,
                 batch: int = BUILD_BATCH) -> KnnGraph:
    """The graph of ``old + new`` rows (exact inner product) from ``graph`` of ``old``:
    the new rows searched through ``search_all`` (the whole new index), each old row's
    neighbours merged with its best among the new rows."""
    import faiss

    k, n_old = graph.k, len(old)
    added = build_graph(new, search_all, k, n_old + len(new), first=n_old, batch=batch)
    flat = faiss.IndexFlatIP(new.shape[1])
    flat.add(np.ascontiguousarray(new, dtype=np.float32))
    rows, scores = graph.rows.copy(), graph.scores.copy()
    depth = min(k, len(new))
    for at in range(0, n_old, batch):
        d, i = flat.search(np.ascontiguousarray(old[at:at + batch], dtype=np.float32), depth)
        cand_r = np.concatenate([rows[at:at + len(d)], np.where(i >= 0, i + n_old, -1)], 1)
        cand_s = np.concatenate([scores[at:at + len(d)], np.where(i >= 0, d, -np.inf)], 1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        rows[at:at + len(d)] = np.take_along_axis(cand_r, order, axis=1)
        scores[at:at + len(d)] = np.take_along_axis(cand_s, order, axis=1)
    return KnnGraph(np.concatenate([rows, added.rows]),
                    np.concatenate([scores, added.scores]).astype(np.float32))


def _stamp(manifest: dict[str, Any]) -> dict[str, Any]:
    """What ties a graph to one index build."""
    return {"n_docs": int(manifest.get("n_docs", -1)),
            "corpus_fingerprint": str(manifest.get("corpus_fingerprint", "")),
            "index_created": str(manifest.get("created", ""))}


def write_graph(version: Path, graph: KnnGraph, index_manifest: dict[str, Any]) -> Path:
    """``version/knn_graph/``, written whole or not at all."""
    out = version / FOLDER
    with atomic_directory(out) as tmp:
        _write_files(tmp, graph, index_manifest)
    return out


def _write_files(folder: Path, graph: KnnGraph, index_manifest: dict[str, Any]) -> None:
    np.save(folder / "rows.npy", graph.rows, allow_pickle=False)
    np.save(folder / "scores.npy", graph.scores.astype(np.float32), allow_pickle=False)
    write_json(folder / "manifest.json", {"format": FORMAT, "k": graph.k,
                                          **_stamp(index_manifest)})


def read_graph(version: Path, index_manifest: dict[str, Any], k: int) -> KnnGraph | None:
    """The graph stored in ``version`` for this index build with at least ``k``
    neighbours (its first ``k``), or None (absent, another build, unreadable)."""
    folder = version / FOLDER
    if not (folder / "manifest.json").exists():
        return None
    try:
        meta = read_json(folder / "manifest.json", what="k-NN graph manifest")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or \
                int(meta.get("k", 0)) < k or \
                {key: meta.get(key) for key in _stamp(index_manifest)} != _stamp(index_manifest):
            return None
        rows = np.load(folder / "rows.npy", allow_pickle=False)
        scores = np.load(folder / "scores.npy", allow_pickle=False)
    except (TTTEmbedError, OSError, ValueError):
        return None  # a damaged graph is rebuilt, never trusted
    if rows.shape != scores.shape or len(rows) != meta["n_docs"]:
        return None
    return KnnGraph(rows[:, :k], scores[:, :k])


def _version_of(index: Any) -> Path | None:
    """The version folder ``index`` was opened from (None: not a local folder, or a newer
    version has replaced it since)."""
    path = getattr(index, "path", None)
    if not isinstance(path, (str, Path)) or not Path(path).is_dir():
        return None
    version = resolve_version(path)
    try:
        meta = read_json(version / "manifest.json", what="index manifest")
    except (TTTEmbedError, OSError):
        return None
    return version if isinstance(meta, dict) and _stamp(meta) == _stamp(index.manifest) \
        else None


def index_graph_rows(index: Any, k: int) -> KnnGraph:
    """The graph of ``index`` with ``k`` neighbours: read from beside the index, else built
    once through ``index.search`` and stored there (a collection, or a folder that cannot
    be written, keeps it in memory only)."""
    version = _version_of(index)
    if version is not None:
        graph = read_graph(version, index.manifest, k)
        if graph is not None:
            return graph
    graph = build_graph(np.asarray(index.vectors), index.search, k, len(index))
    if version is not None:
        try:
            write_graph(version, graph, index.manifest)
        except (TTTEmbedError, OSError):
            pass  # read-only or locked by another writer: this process keeps its own
    return graph


def carry_graph(previous: Path, tmp: Path, doc_ids: list[str], vectors: np.ndarray,
                manifest: dict[str, Any]) -> None:
    """While a new version of a flat index is written into ``tmp``: when ``previous``
    holds a graph and its documents are the first of ``doc_ids`` (documents appended),
    write the extended graph into the new version. Anything else: nothing (the graph is
    built on first use)."""
    if manifest.get("index_type") != "flat" or not (previous / FOLDER).is_dir():
        return
    try:
        old_manifest = read_json(previous / "manifest.json", what="index manifest")
        old_ids = read_json(previous / "doc_ids.json", what="index doc ids")
        meta = read_json(previous / FOLDER / "manifest.json", what="k-NN graph manifest")
    except (TTTEmbedError, OSError):
        return
    n_old = len(old_ids) if isinstance(old_ids, list) else 0
    if not 0 < n_old < len(doc_ids) or old_ids != doc_ids[:n_old] or \
            not isinstance(old_manifest, dict) or old_manifest.get("index_type") != "flat" \
            or not isinstance(meta, dict) or not isinstance(meta.get("k"), int):
        return
    graph = read_graph(previous, old_manifest, meta["k"])
    if graph is None or not graph.k:
        return
    import faiss

    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    (tmp / FOLDER).mkdir()  # inside the new version: written whole with it
    _write_files(tmp / FOLDER, extend_graph(graph, vectors[:n_old], vectors[n_old:],
                                            flat.search), manifest)
