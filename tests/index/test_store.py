from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import HashEmbedder, tiny_corpus
from tttembed import api
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.core.io import resolve_version
from tttembed.embed.cache import CachedEmbedder
from tttembed.index.manifest import read_index_manifest
from tttembed.index.store import build_index, load_index


def _build(tmp_path, index_type="flat", **kw):
    emb = CachedEmbedder(HashEmbedder(dim=16), tmp_path / "cache")
    corpus = tiny_corpus(200)
    out = build_index(corpus, emb, tmp_path / "idx", index_type=index_type, **kw)
    return emb, corpus, out


def test_manifest_records_what_made_the_index(tmp_path):
    emb, corpus, out = _build(tmp_path)
    m = json.loads((resolve_version(out) / "manifest.json").read_text())
    assert m == read_index_manifest(out)
    assert m["embedder"] == "fake:hash" and m["dim"] == 16
    assert m["metric"] == "inner_product" and m["normalized"] is True
    assert m["n_docs"] == 200 and m["index_type"] == "flat"
    from tttembed.data.beir import corpus_fingerprint
    assert m["corpus_fingerprint"] == corpus_fingerprint(corpus)
    assert "tttembed_version" in m


def test_flat_search_is_exact(tmp_path):
    emb, corpus, out = _build(tmp_path)
    handle = load_index(out)
    q = HashEmbedder(dim=16).encode(["a query"], "query")
    scores, rows = handle.search(q, 5)
    brute = np.asarray(handle.vectors) @ q[0]
    np.testing.assert_array_equal(rows[0], np.argsort(-brute)[:5])
    np.testing.assert_allclose(scores[0], np.sort(brute)[::-1][:5], atol=1e-5)


@pytest.mark.parametrize("index_type,params", [("hnsw", {"m": 16}), ("ivf", {"nlist": 4, "nprobe": 4}),
                                               ("ivfpq", {"nlist": 4, "nprobe": 4, "pq_m": 8})])
def test_approximate_types_find_the_exact_top1_on_small_data(tmp_path, index_type, params):
    emb, corpus, out = _build(tmp_path, index_type=index_type, index_params=params)
    handle = load_index(out)
    assert handle.manifest["index_type"] == index_type
    q = np.asarray(handle.vectors[:20])
    _, rows = handle.search(q, 1)
    assert (rows[:, 0] == np.arange(20)).mean() >= 0.95


def test_ivfpq_keeps_codes_not_vectors_and_checks_pq_m(tmp_path):
    from tttembed.core.io import resolve_version

    _, _, out = _build(tmp_path, index_type="ivfpq", index_params={"nlist": 4, "pq_m": 4})
    handle = load_index(out)
    assert handle.manifest["index_params"] == {"nlist": 4, "nprobe": 16, "pq_m": 4,
                                               "nbits": 7}  # 200 docs: 2**7 centroids
    assert handle.faiss_index.code_size == 4  # 4 codes of 7 bits: 4 bytes, not 64
    flat = (resolve_version(out) / "vectors.npy").stat().st_size
    assert (resolve_version(out) / "index.faiss").stat().st_size < flat
    with pytest.raises(ConfigError, match="must divide the dimension 16"):
        _build(tmp_path / "b", index_type="ivfpq", index_params={"pq_m": 5})


def test_opening_with_another_embedder_is_a_clear_error(tmp_path):
    _, _, out = _build(tmp_path)
    with pytest.raises(StateMismatch, match="built with embedder 'fake:hash'"):
        load_index(out, expected_identity="st:other")
    with pytest.raises(StateMismatch, match="dimension 16"):
        load_index(out, expected_dim=384)
    other = HashEmbedder(dim=8, spec="fake:other")
    with pytest.raises(StateMismatch):
        api.open_index(out, embedder=other)


def test_existing_output_needs_overwrite_and_crash_leaves_no_half_index(tmp_path, monkeypatch):
    emb, corpus, out = _build(tmp_path)
    with pytest.raises(ConfigError, match="--overwrite"):
        build_index(corpus, emb, out)
    import tttembed.index.store as store

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_manifest", boom)
    with pytest.raises(OSError):
        build_index(tiny_corpus(10), emb, tmp_path / "idx2")
    assert not (tmp_path / "idx2").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx2")]
    # the old index survives a failed overwrite
    with pytest.raises(OSError):
        build_index(tiny_corpus(10), emb, out, overwrite=True)
    assert load_index(out).manifest["n_docs"] == 200


def test_missing_and_incomplete_index(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_index(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a tttembed index"):
        load_index(tmp_path / "empty")
    _, _, out = _build(tmp_path)
    (resolve_version(out) / "vectors.npy").unlink()
    with pytest.raises(DataError, match="vectors.npy is missing"):
        load_index(out)


def test_unknown_index_type_and_param(tmp_path):
    with pytest.raises(ConfigError, match="known: flat, hnsw, ivf"):
        _build(tmp_path, index_type="lsh")
    with pytest.raises(ConfigError, match="unknown parameter 'm'"):
        _build(tmp_path, index_type="ivf", index_params={"m": 3})


def test_reindex_with_warm_cache_makes_zero_model_calls(tmp_path):
    corpus = tiny_corpus(100)
    inner = HashEmbedder()
    build_index(corpus, CachedEmbedder(inner, tmp_path / "c"), tmp_path / "a")
    calls = inner.calls
    emb2 = CachedEmbedder(inner, tmp_path / "c")
    build_index(corpus, emb2, tmp_path / "b")
    assert inner.calls == calls and emb2.model_calls == 0
    np.testing.assert_array_equal(np.load(resolve_version(tmp_path / "a") / "vectors.npy"),
                                  np.load(resolve_version(tmp_path / "b") / "vectors.npy"))


def test_versions_and_one_pointer(tmp_path):
    """A rebuild adds a version and switches CURRENT; the superseded version is removed."""
    emb, corpus, out = _build(tmp_path)
    first = resolve_version(out)
    assert first.parent == out and first.name.startswith("v-")
    assert sorted(p.name for p in out.iterdir()) == ["CURRENT", first.name]
    build_index(tiny_corpus(50), emb, out, overwrite=True)
    second = resolve_version(out)
    assert second != first and sorted(p.name for p in out.iterdir()) == ["CURRENT", second.name]
    assert load_index(out).manifest["n_docs"] == 50
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".idx")] == []  # no lock left


def test_old_flat_layout_opens_and_is_converted_on_overwrite(tmp_path):
    """An index folder of the flat layout (files directly inside) still opens."""
    emb, corpus, out = _build(tmp_path)
    flat = tmp_path / "flat"
    import shutil
    shutil.copytree(resolve_version(out), flat)
    assert load_index(flat).manifest["n_docs"] == 200
    build_index(tiny_corpus(30), emb, flat, overwrite=True)
    assert load_index(flat).manifest["n_docs"] == 30
    assert sorted(p.name for p in flat.iterdir()) == ["CURRENT", resolve_version(flat).name]


def test_a_second_writer_gets_a_clear_error(tmp_path):
    """While one writer holds the lock, another gets a ConfigError naming the folder."""
    from tttembed.core.io import writer_lock

    emb = CachedEmbedder(HashEmbedder(dim=16), tmp_path / "cache")
    out = tmp_path / "idx"
    import subprocess
    import sys
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from tttembed.core.io import writer_lock\n"
        f"with writer_lock({str(out)!r}):\n"
        "    print('held', flush=True); sys.stdin.readline()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"{out} is being written by another process"):
            build_index(tiny_corpus(10), emb, out)
    finally:
        holder.communicate("\n", timeout=30)
    build_index(tiny_corpus(10), emb, out)
    with writer_lock(out), writer_lock(out):  # re-entrant inside one process
        pass


def test_corrupt_index_files_are_data_errors_naming_the_file(tmp_path):
    """Truncated FAISS file, vectors or ids, or a garbage pointer: DataError with the path."""
    _, _, out = _build(tmp_path)
    version = resolve_version(out)
    faiss_file = version / "index.faiss"
    faiss_file.write_bytes(faiss_file.read_bytes()[:100])
    with pytest.raises(DataError, match="index.faiss: corrupt FAISS index"):
        load_index(out)
    _, _, out = _build(tmp_path / "b")
    (resolve_version(out) / "vectors.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match="vectors.npy: corrupt index vectors"):
        load_index(out)
    (out / "CURRENT").write_text("../../etc\n")
    with pytest.raises(DataError, match="CURRENT: corrupt version pointer"):
        load_index(out)
