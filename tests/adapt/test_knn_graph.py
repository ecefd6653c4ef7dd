"""The corpus k-NN graph the active allocation reads: the same neighbours as searching the
index at allocation time (so the same pairs), stored beside the index whole or not at
all, and extended (not rebuilt) when documents are appended to a flat index."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.active import ACTIVE_NEIGHBOURS, active_sequence
from tttembed.core.io import resolve_version
from tttembed.index import knn_graph
from tttembed.index.knn_graph import (
    FOLDER,
    build_graph,
    extend_graph,
    index_graph_rows,
    read_graph,
    write_graph,
)
from tttembed.index.store import load_index, write_index
from tttembed.ttt.active import index_graph


def unit(rng: np.random.Generator, n: int, d: int = 24) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def naive(vectors: np.ndarray, k: int) -> np.ndarray:
    """Each row's k best other rows by inner product (numpy, no FAISS)."""
    s = vectors.astype(np.float64) @ vectors.T.astype(np.float64)
    np.fill_diagonal(s, -np.inf)
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def flat_search(vectors: np.ndarray):
    import faiss

    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    return flat.search


def make_index(tmp_path, vectors: np.ndarray, name: str = "index", overwrite: bool = False,
               index_type: str = "flat"):
    ids = [f"d{i}" for i in range(len(vectors))]
    path = write_index(tmp_path / name, ids, vectors, embedder_identity="fake:24",
                       embedder_spec="fake", corpus_fingerprint=f"fp{len(ids)}",
                       index_type=index_type, overwrite=overwrite)
    return load_index(path)


def exhaustive_graph(index, k: int = ACTIVE_NEIGHBOURS):
    """The neighbour search the allocation made before the graph: one index search of the
    asked documents' vectors per call."""
    row_of = {d: r for r, d in enumerate(index.doc_ids)}

    def graph(docs):
        have = [d for d in docs if d in row_of]
        if not have:
            return {}
        _, found = index.search(index.get_vectors([row_of[d] for d in have]),
                                min(k + 1, len(index)))
        ids = index.doc_ids
        return {d: [ids[int(r)] for r in hit if r >= 0 and ids[int(r)] != d][:k]
                for d, hit in zip(have, found)}
    return graph


@pytest.mark.parametrize("n,k", [(300, 5), (4, 5), (1, 3)])
def test_build_graph_gives_each_row_its_k_nearest_other_rows(n, k):
    x = unit(np.random.default_rng(n), n)
    g = build_graph(x, flat_search(x), k, batch=64)
    want = naive(x, min(k, n - 1))
    assert g.rows.shape == (n, k)
    np.testing.assert_array_equal(g.rows[:, :want.shape[1]], want)
    assert (g.rows[:, want.shape[1]:] == -1).all()  # a corpus smaller than k + 1: padded
    s = (x @ x.T)[np.arange(n)[:, None], want]
    np.testing.assert_allclose(g.scores[:, :want.shape[1]], s, atol=1e-5)


def test_extending_the_graph_equals_building_it_on_the_grown_corpus():
    rng = np.random.default_rng(7)
    old, new = unit(rng, 200), unit(rng, 37)
    both = np.concatenate([old, new])
    g_old = build_graph(old, flat_search(old), 5)
    grown = extend_graph(g_old, old, new, flat_search(both), batch=50)
    fresh = build_graph(both, flat_search(both), 5)
    np.testing.assert_array_equal(grown.rows, fresh.rows)
    np.testing.assert_allclose(grown.scores, fresh.scores, atol=1e-5)


def test_the_graph_is_stored_beside_the_index_once_and_read_back(tmp_path, monkeypatch):
    index = make_index(tmp_path, unit(np.random.default_rng(1), 120))
    first = index_graph_rows(index, 5)
    version = resolve_version(index.path)
    assert (version / FOLDER / "manifest.json").exists()
    built = []
    monkeypatch.setattr(knn_graph, "build_graph", lambda *a, **kw: built.append(1))
    again = index_graph_rows(load_index(index.path), 5)  # read, not built again
    assert not built
    np.testing.assert_array_equal(again.rows, first.rows)
    fewer = index_graph_rows(index, 3)  # fewer neighbours: the first ones
    np.testing.assert_array_equal(fewer.rows, first.rows[:, :3])
    assert read_graph(version, index.manifest, 6) is None  # more than stored: rebuilt


def test_a_graph_of_another_build_or_a_damaged_one_is_not_used(tmp_path):
    index = make_index(tmp_path, unit(np.random.default_rng(2), 50))
    version = resolve_version(index.path)
    g = index_graph_rows(index, 5)
    other = {**index.manifest, "created": "another build"}
    assert read_graph(version, other, 5) is None
    (version / FOLDER / "rows.npy").write_bytes(b"not an array")
    assert read_graph(version, index.manifest, 5) is None
    np.testing.assert_array_equal(index_graph_rows(index, 5).rows, g.rows)  # rebuilt


def test_a_failed_write_leaves_no_graph(tmp_path, monkeypatch):
    index = make_index(tmp_path, unit(np.random.default_rng(3), 40))
    version = resolve_version(index.path)
    g = build_graph(np.asarray(index.vectors), index.search, 5)
    real_save = np.save
    calls = []

    def failing_save(path, arr, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real_save(path, arr, **kw)
    monkeypatch.setattr(knn_graph.np, "save", failing_save)
    with pytest.raises(OSError):
        write_graph(version, g, index.manifest)
    monkeypatch.setattr(knn_graph.np, "save", real_save)
    assert not (version / FOLDER).exists()
    assert read_graph(version, index.manifest, 5) is None


def test_appending_documents_extends_the_stored_graph(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    old, new = unit(rng, 150), unit(rng, 20)
    index = make_index(tmp_path, old)
    index_graph_rows(index, 5)
    grown = make_index(tmp_path, np.concatenate([old, new]), overwrite=True)
    version = resolve_version(grown.path)
    assert (version / FOLDER / "manifest.json").exists()  # written with the new version
    stored = read_graph(version, grown.manifest, 5)
    assert stored is not None and len(stored) == 170
    np.testing.assert_array_equal(stored.rows, naive(np.concatenate([old, new]), 5))


def test_an_approximate_index_gets_its_graph_from_its_own_search(tmp_path):
    x = unit(np.random.default_rng(5), 400)
    index = make_index(tmp_path, x, index_type="hnsw")
    g = index_graph_rows(index, 5)
    near = exhaustive_graph(index)(list(index.doc_ids))
    assert all([index.doc_ids[r] for r in g.rows[i] if r >= 0] == near[d]
               for i, d in enumerate(index.doc_ids))


def test_the_allocation_chooses_the_same_pairs_with_the_graph(tmp_path):
    rng = np.random.default_rng(6)
    docs, queries = unit(rng, 400), unit(rng, 30)
    index = make_index(tmp_path, docs)
    _, found = index.search(queries, 30)
    qids = [f"q{i}" for i in range(len(queries))]
    cands = {q: [index.doc_ids[r] for r in row] for q, row in zip(qids, found)}
    row_of = {d: r for r, d in enumerate(index.doc_ids)}
    secret = unit(np.random.default_rng(60), len(queries))  # a judge the base disagrees with

    def judge(pairs):
        return {(q, d): float(docs[row_of[d]] @ secret[int(q[1:])]) for q, d in pairs}

    def through(graph):
        def neighbours(asked):
            near = graph(list(dict.fromkeys(d for _, d in asked)))
            return {(q, d): near.get(d, ()) for q, d in asked}
        return neighbours

    budgets = [10, 60, 200, 500]
    want = active_sequence(qids, cands, budgets, judge, neighbours=through(
        exhaustive_graph(index)))
    got = active_sequence(qids, cands, budgets, judge, neighbours=through(index_graph(index)))
    assert got == want
    outside = {p for p in want[-1] if p[1] not in cands[p[0]]}
    assert outside  # the neighbour step did choose pairs outside the base candidates
