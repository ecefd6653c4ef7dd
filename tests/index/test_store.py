from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import HashEmbedder, tiny_corpus
from tttembed import api
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.embed.cache import CachedEmbedder
from tttembed.index.store import build_index, open_index


def _build(tmp_path, index_type="flat", **kw):
    emb = CachedEmbedder(HashEmbedder(dim=16), tmp_path / "cache")
    corpus = tiny_corpus(200)
    out = build_index(corpus, emb, tmp_path / "idx", index_type=index_type, **kw)
    return emb, corpus, out


def test_manifest_records_what_made_the_index(tmp_path):
    emb, corpus, out = _build(tmp_path)
    m = json.loads((out / "manifest.json").read_text())
    assert m["embedder"] == "fake:hash" and m["dim"] == 16
    assert m["metric"] == "inner_product" and m["normalized"] is True
    assert m["n_docs"] == 200 and m["index_type"] == "flat"
    from tttembed.data.beir import corpus_fingerprint
    assert m["corpus_fingerprint"] == corpus_fingerprint(corpus)
    assert "tttembed_version" in m


def test_flat_search_is_exact(tmp_path):
    emb, corpus, out = _build(tmp_path)
    handle = open_index(out)
    q = HashEmbedder(dim=16).encode(["a query"], "query")
    scores, rows = handle.search(q, 5)
    brute = np.asarray(handle.vectors) @ q[0]
    np.testing.assert_array_equal(rows[0], np.argsort(-brute)[:5])
    np.testing.assert_allclose(scores[0], np.sort(brute)[::-1][:5], atol=1e-5)


@pytest.mark.parametrize("index_type,params", [("hnsw", {"m": 16}), ("ivf", {"nlist": 4, "nprobe": 4})])
def test_approximate_types_find_the_exact_top1_on_small_data(tmp_path, index_type, params):
    emb, corpus, out = _build(tmp_path, index_type=index_type, index_params=params)
    handle = open_index(out)
    assert handle.manifest["index_type"] == index_type
    q = np.asarray(handle.vectors[:20])
    _, rows = handle.search(q, 1)
    assert (rows[:, 0] == np.arange(20)).mean() >= 0.95


def test_opening_with_another_embedder_is_a_clear_error(tmp_path):
    _, _, out = _build(tmp_path)
    with pytest.raises(StateMismatch, match="built with embedder 'fake:hash'"):
        open_index(out, expected_identity="st:other")
    with pytest.raises(StateMismatch, match="dimension 16"):
        open_index(out, expected_dim=384)
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
    assert open_index(out).manifest["n_docs"] == 200


def test_missing_and_incomplete_index(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        open_index(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a tttembed index"):
        open_index(tmp_path / "empty")
    _, _, out = _build(tmp_path)
    (out / "vectors.npy").unlink()
    with pytest.raises(DataError, match="vectors.npy is missing"):
        open_index(out)


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
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "vectors.npy"),
                                  np.load(tmp_path / "b" / "vectors.npy"))
