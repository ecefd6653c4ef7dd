from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import HashEmbedder
from tttembed.core.errors import StateMismatch
from tttembed.core.io import text_digest as text_key
from tttembed.embed.cache import CachedEmbedder, EmbeddingCache


def test_second_encode_makes_no_model_call(tmp_path):
    inner = HashEmbedder()
    emb = CachedEmbedder(inner, tmp_path)
    texts = [f"text {i}" for i in range(50)]
    first = emb.encode(texts, "document")
    assert inner.calls == 1 and emb.texts_embedded == 50
    # a new wrapper over the same directory: everything comes from disk
    inner2 = HashEmbedder()
    emb2 = CachedEmbedder(inner2, tmp_path)
    second = emb2.encode(texts, "document")
    assert inner2.calls == 0 and emb2.model_calls == 0
    np.testing.assert_array_equal(first, second)


def test_only_new_texts_are_embedded_and_order_is_kept(tmp_path):
    inner = HashEmbedder()
    emb = CachedEmbedder(inner, tmp_path)
    emb.encode(["a", "b"], "document")
    out = emb.encode(["c", "a", "d", "c"], "document")
    assert sorted(inner.texts) == ["a", "b", "c", "d"]  # "c" embedded once, "a" reused
    direct = HashEmbedder().encode(["c", "a", "d", "c"], "document")
    np.testing.assert_allclose(out, direct, atol=1e-7)


def test_query_and_document_kinds_are_separate(tmp_path):
    inner = HashEmbedder()
    emb = CachedEmbedder(inner, tmp_path)
    q = emb.encode(["same text"], "query")
    d = emb.encode(["same text"], "document")
    assert inner.calls == 2
    assert not np.allclose(q, d)


def test_chunks_are_persisted_as_they_finish(tmp_path):
    class Failing(HashEmbedder):
        def encode(self, texts, kind="document"):
            if self.calls == 2:
                raise RuntimeError("model crashed")
            return super().encode(texts, kind)

    emb = CachedEmbedder(Failing(), tmp_path, chunk_size=10)
    with pytest.raises(RuntimeError):
        emb.encode([f"t{i}" for i in range(35)], "document")
    # the two finished chunks survived the crash
    assert len(EmbeddingCache("fake:hash", "document", tmp_path)) == 20


def test_cache_refuses_other_dimension(tmp_path):
    cache = EmbeddingCache("x", "document", tmp_path)
    cache.add([text_key("a")], np.ones((1, 4), np.float32) / 2)
    with pytest.raises(StateMismatch):
        cache.add([text_key("b")], np.ones((1, 8), np.float32))


def test_no_pickle_in_cache_files(tmp_path):
    CachedEmbedder(HashEmbedder(), tmp_path).encode(["x", "y"], "document")
    files = list(tmp_path.rglob("*.npy"))
    assert files
    for f in files:
        np.load(f, allow_pickle=False)


def test_real_model_through_cache_equals_bare(minilm, tmp_path):
    texts = ["The cat sat on the mat.", "Quantum chromodynamics", "how to sort a list"]
    bare = minilm.encode(texts, "document")
    emb = CachedEmbedder(minilm, tmp_path)
    np.testing.assert_allclose(emb.encode(texts, "document"), bare, atol=1e-6)
    np.testing.assert_allclose(emb.encode(texts, "document"), bare, atol=1e-6)
    assert emb.model_calls == 1
