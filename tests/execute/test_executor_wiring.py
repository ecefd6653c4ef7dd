"""The ray executor's driver side without Ray: the stage is replaced by the same actor
class run in this process, so these run (fast) where ray is not installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tttembed as tt
from tttembed.execute import EmbedStats, Ray, embed_texts, ray_stage

SPEC = "st:bundled:all-MiniLM-L6-v2"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                                reason="sentence-transformers is not installed")


@pytest.fixture
def fake_stage(monkeypatch):
    """The Ray stage replaced by one EmbedActor in this process: records what the driver
    sends it (texts, kind, batch size, Ray settings) and answers in blocks of 8."""
    calls: list[dict] = []

    def stage(spec, options, kind, texts, *, settings, batch_size, num_cpus=1.0):
        calls.append({"texts": list(texts), "kind": kind, "batch_size": batch_size,
                      "settings": settings})
        actor = ray_stage.EmbedActor(spec, options, kind)
        for start in range(0, len(texts), 8):
            pos = np.arange(start, min(start + 8, len(texts)))
            out = actor({"pos": pos, "text": np.asarray([texts[p] for p in pos])})
            yield [int(p) for p in out["pos"]], out["vec"]

    monkeypatch.setattr(ray_stage, "run_embed_stage", stage)
    return calls


def test_driver_sends_only_what_the_cache_lacks_and_commits_each_block(fake_stage, tmp_path):
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(20)] + ["text number 0 "]
    cached = texts[:5]
    embed_texts(SPEC, cached, cache_dir=tmp_path)  # a partial cache, as after a kill
    stats = EmbedStats()
    got = embed_texts(SPEC, texts, executor=Ray(address="auto", actors=2, gpus=0.5),
                      batch_size=4, cache_dir=tmp_path, stats=stats)
    [call] = fake_stage
    # each missing text once (the repeat of a cached text is not sent), longest first
    assert call["texts"] == sorted(texts[5:20], key=len, reverse=True)
    assert call["kind"] == "document" and call["batch_size"] == 4
    assert call["settings"] == Ray(address="auto", actors=2, gpus=0.5)
    assert (stats.embedded, stats.cached, stats.batches) == (15, 6, 2)
    np.testing.assert_allclose(got, embed_texts(SPEC, texts, cache_dir=tmp_path / "l"), atol=1e-6)
    again = EmbedStats()
    embed_texts(SPEC, texts, executor="ray", cache_dir=tmp_path, stats=again)
    assert len(fake_stage) == 1 and (again.embedded, again.cached) == (0, 21)


def test_index_corpus_on_the_ray_executor(fake_stage, tmp_path):
    corpus = {f"d{i}": {"title": f"T{i}", "text": f"document {i} about cells"} for i in range(6)}
    idx = tt.index_corpus(corpus, tmp_path / "idx", executor="ray")
    [call] = fake_stage
    assert len(call["texts"]) == 6 and call["settings"] == Ray() and len(idx) == 6


def test_the_cli_counts_what_ray_embedded(fake_stage, tmp_path):
    """`index --executor ray` reports the texts the Ray stage embedded (not "model calls:
    0, texts embedded: 0"); a rerun over the warm cache reports 0."""
    import json

    from typer.testing import CliRunner

    from tttembed.cli import app

    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"document {i} about cells"}) + "\n"
        for i in range(20)))
    args = ["index", str(data), "--out", str(tmp_path / "idx"), "--executor", "ray",
            "--cache-dir", str(tmp_path / "c"), "--quiet"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "model calls: 3, texts embedded: 20" in r.output  # 20 texts in blocks of 8
    r = CliRunner().invoke(app, [*args, "--overwrite"])
    assert r.exit_code == 0 and "model calls: 0, texts embedded: 0" in r.output, r.output
