"""The ray executor's driver side without Ray: the stage is replaced by the same actor
class run in this process, so these run (fast) where ray is not installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tttembed as tt
from tttembed.execute import EmbedStats, embed_texts, ray_stage

SPEC = "st:bundled:all-MiniLM-L6-v2"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                                reason="sentence-transformers is not installed")


@pytest.fixture
def fake_stage(monkeypatch):
    calls: list[int] = []

    def stage(spec, options, kind, texts, *, ray_address, batch_size, num_actors, num_gpus,
              num_cpus=1.0):
        actor = ray_stage.EmbedActor(spec, options, kind)
        for start in range(0, len(texts), batch_size):
            pos = np.arange(start, min(start + batch_size, len(texts)))
            out = actor({"pos": pos, "text": np.asarray([texts[p] for p in pos])})
            calls.append(len(pos))
            yield [int(p) for p in out["pos"]], out["vec"]

    monkeypatch.setattr(ray_stage, "run_embed_stage", stage)
    return calls


def test_driver_fills_the_cache_batch_by_batch(fake_stage, tmp_path):
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(20)] + ["text number 0 "]
    stats = EmbedStats()
    got = embed_texts(SPEC, texts, executor="ray", batch_size=8, cache_dir=tmp_path, stats=stats)
    assert fake_stage == [8, 8, 4] and (stats.embedded, stats.cached, stats.batches) == (20, 0, 3)
    np.testing.assert_allclose(got, embed_texts(SPEC, texts, cache_dir=tmp_path / "l"), atol=1e-6)
    embed_texts(SPEC, texts, executor="ray", cache_dir=tmp_path)
    assert fake_stage == [8, 8, 4]  # the rerun reached no actor


def test_index_corpus_on_the_ray_executor(fake_stage, tmp_path):
    corpus = {f"d{i}": {"title": f"T{i}", "text": f"document {i} about cells"} for i in range(6)}
    idx = tt.index_corpus(corpus, tmp_path / "idx", executor="ray")
    assert sum(fake_stage) == 6 and len(idx) == 6
