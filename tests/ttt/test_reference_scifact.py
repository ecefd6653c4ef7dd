"""Reference figure: all-MiniLM-L6-v2 on BEIR SciFact (test) is nDCG@10 ~ 0.645 (MTEB).

Slow (embeds 5,183 abstracts): run with ``pytest -m slow tests/test_reference_scifact.py``.
"""

from __future__ import annotations

import pytest

from tests.conftest import shared_dataset


@pytest.mark.slow
@pytest.mark.data
def test_scifact_raw_ndcg_matches_the_published_figure(tmp_path, minilm):
    from tttembed import api
    from tttembed.data.beir import load_task
    from tttembed.embed.cache import CachedEmbedder
    from tttembed.metrics.ranking import run_metrics

    task = load_task(shared_dataset("scifact"), split="test")
    emb = CachedEmbedder(minilm, tmp_path / "cache")
    api.index_corpus(task.corpus, tmp_path / "idx", embedder=emb)
    index = api.open_index(tmp_path / "idx", embedder=emb)
    run = api.search(index, task.queries, embedder=emb, k=100).to_run()
    ndcg = run_metrics(task.qrels, run, ("ndcg@10",))["ndcg@10"]
    assert abs(ndcg - 0.645) < 0.01, ndcg
