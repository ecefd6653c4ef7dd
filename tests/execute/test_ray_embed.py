"""The ray executor gives the local executor's vectors, fills the same cache, and a rerun
(or a run after a killed one) pays only for what is not stored yet."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.execute import EmbedStats, Ray, embed_texts

SPEC = "st:bundled:all-MiniLM-L6-v2"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                                reason="sentence-transformers is not installed")


def _texts(n: int, tag: str = "") -> list[str]:
    words = ["protein", "cell", "gene", "virus", "cancer", "dose", "trial", "brain", "heart"]
    return [f"{tag}{' '.join(words[(i + j) % len(words)] for j in range(3 + i % 11))} {i}"
            for i in range(n)]


def test_unknown_executor_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="executor"):
        embed_texts(SPEC, ["a"], executor="dask", cache_dir=tmp_path)


def test_missing_ray_is_a_missing_dependency(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("no ray")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(MissingDependency, match=r"tttembed\[ray\]"):
        embed_texts(SPEC, ["a new text"], executor="ray", cache_dir=tmp_path)


def test_ray_matches_local_and_fills_the_cache(ray_local, tmp_path):
    texts = _texts(50)
    local = embed_texts(SPEC, texts, "document", cache_dir=tmp_path / "local")
    stats = EmbedStats()
    via_ray = embed_texts(SPEC, texts, "document", executor=Ray(actors=1),
                          batch_size=16, cache_dir=tmp_path / "ray", stats=stats)
    assert via_ray.dtype == np.float32 and via_ray.shape == local.shape == (50, 384)
    np.testing.assert_allclose(via_ray, local, atol=1e-6)
    assert (stats.embedded, stats.cached) == (50, 0) and stats.batches >= 1
    again = EmbedStats()  # a rerun makes no model call, on either executor
    np.testing.assert_array_equal(
        embed_texts(SPEC, texts, executor="ray", cache_dir=tmp_path / "ray", stats=again),
        via_ray)
    assert (again.embedded, again.cached, again.batches) == (0, 50, 0)
    local_again = EmbedStats()
    np.testing.assert_array_equal(
        embed_texts(SPEC, texts, cache_dir=tmp_path / "ray", stats=local_again), via_ray)
    assert (local_again.embedded, local_again.batches) == (0, 0)


def test_ray_resumes_from_a_partial_cache(ray_local, tmp_path):
    """A killed run keeps the batches it wrote (here: a cache holding the first 12): the
    rerun embeds only the rest (repeats and queries included), same vectors."""
    texts = _texts(30, "q: ")
    full = embed_texts(SPEC, texts, "query", cache_dir=tmp_path / "full")
    embed_texts(SPEC, texts[:12], "query", cache_dir=tmp_path / "part")
    stats = EmbedStats()
    got = embed_texts(SPEC, texts + texts[:3], "query", executor="ray", batch_size=8,
                      cache_dir=tmp_path / "part", stats=stats)
    assert (stats.embedded, stats.cached) == (18, 15)
    np.testing.assert_allclose(got[:30], full, atol=1e-6)
    np.testing.assert_array_equal(got[30:], got[:3])
