from __future__ import annotations

import pytest

from tttembed.core.errors import ConfigError
from tttembed.core.io import resolve_version
from tttembed.embed.cache import CachedEmbedder
from tttembed.evaluation.config import EvalConfig
from tttembed.evaluation.runner import run_eval
from tttembed.evaluation.tasks import index_dir, load_eval_task

from .evaldata import write_tasks


@pytest.fixture()
def data(tmp_path):
    return write_tasks(tmp_path / "data")


def test_cold_then_warm_run(minilm, data, tmp_path):
    cache = tmp_path / "cache"
    cfg = EvalConfig(tasks=("alpha", "beta"), data_root=str(data), cache_dir=str(cache),
                     scorers=("bm25", "qrels"), budgets=(1.0, 10.0),
                     protocols=("fixed", "heldout", "loto"), scopes=("global", "task", "query"),
                     n_resamples=100)
    cold = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    assert cold["counts"]["embedding_model_calls"] > 0
    assert cold["counts"]["scorer_paid"] > 0  # bm25 pairs paid once, through the ledger
    bm25, qrels = cold["sections"]
    assert bm25["scorer"] == "bm25" and qrels["scorer"] == "qrels"
    protos = {r["protocol"] for r in bm25["rows"]}
    assert protos == {"fixed", "heldout", "loto"}
    # judgments never evaluate the queries they judged: no fixed protocol for qrels
    assert "fixed" not in {r["protocol"] for r in qrels["rows"]}
    assert any("fixed protocol skipped" in n for n in qrels["notes"])
    fixed = [r for r in bm25["rows"] if r["protocol"] == "fixed"]
    assert {r["method"] for r in fixed} == {"raw", "prf-avg", "prf-rocchio", "direct",
                                            "rw-rocchio", "global", "task", "query"}
    assert {r["B"] for r in fixed if r["B"]} == {18, 180}
    assert set(bm25["aubc"]) == {"direct", "rw-rocchio", "global", "task", "query"}
    t10 = next(r for r in fixed if r["method"] == "task" and r["B"] == 180)
    assert set(t10["tasks"]) == {"alpha", "beta"} and 0 <= t10["vs_raw"]["p_value"] <= 1
    assert t10["vs_direct"] is not None
    assert [t["few_queries"] for t in cold["tasks"]] == [True, True]
    assert cold["tasks"][0]["corpus_fingerprint"] == load_eval_task("alpha", data_root=data).fingerprint

    warm = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    assert warm["counts"]["embedding_model_calls"] == 0
    assert warm["counts"]["scorer_paid"] == 0
    assert warm["counts"]["cells_computed"] == 0
    assert warm["sections"][0]["rows"][5]["macro"] == bm25["rows"][5]["macro"]

    # without the cell cache: states are learned again, still no model or scorer call
    small = EvalConfig(tasks=("alpha", "beta"), data_root=str(data), cache_dir=str(cache),
                       scorers=("bm25",), budgets=(10.0,), protocols=("fixed",),
                       baselines=("direct",), scopes=("task",), n_resamples=100)
    again = run_eval(small, embedder=CachedEmbedder(minilm, cache), use_cell_cache=False)
    assert again["counts"]["embedding_model_calls"] == 0 and again["counts"]["scorer_paid"] == 0
    assert again["counts"]["cells_computed"] == 4  # raw, direct, task + the reward quality
    got = {(r["method"], r["B"]): r["macro"]["ndcg@10"] for r in again["sections"][0]["rows"]}
    want = {(r["method"], r["B"]): r["macro"]["ndcg@10"] for r in fixed}
    assert got == pytest.approx({k: want[k] for k in got})
    print(cold["timings_s"])


def test_index_is_cached_per_task(minilm, data, tmp_path):
    cache = tmp_path / "cache"
    cfg = EvalConfig(tasks=("beta",), data_root=str(data), cache_dir=str(cache),
                     budgets=(1.0,), protocols=("heldout",), scopes=("task",),
                     baselines=("direct",), n_resamples=50)
    run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    task = load_eval_task("beta", data_root=data)
    built = list(index_dir(task, minilm.identity, cache).parent.glob("beta-*"))
    assert len(built) == 1
    mtime = (resolve_version(built[0]) / "manifest.json").stat().st_mtime_ns
    run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    assert (resolve_version(built[0]) / "manifest.json").stat().st_mtime_ns == mtime


def test_config_is_validated():
    with pytest.raises(ConfigError, match="protocol"):
        EvalConfig(tasks=("a",), protocols=("nope",))
    with pytest.raises(ConfigError, match="scope"):
        EvalConfig(tasks=("a",), scopes=("corpus",))
    with pytest.raises(ConfigError, match="analysis"):
        EvalConfig(tasks=("a",), analyses=("x",))
    with pytest.raises(ConfigError):
        EvalConfig(tasks=("a",), budgets=(0.0,))


def test_skipped_budgets_are_reported_and_corrupt_cells_recomputed(minilm, data, tmp_path):
    """A budget the candidates cannot serve is named in the notes (console, report.md,
    results.json), never dropped silently; a cached cell replaced by {} is recomputed."""
    cache = tmp_path / "cache"
    cfg = EvalConfig(tasks=("alpha",), data_root=str(data), cache_dir=str(cache),
                     scorers=("bm25",), budgets=(1.0, 1000.0), protocols=("fixed",),
                     baselines=("direct",), scopes=("task",), n_resamples=50)
    first = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    notes = first["sections"][0]["notes"]
    assert any(n.startswith("b = 1000 skipped in the fixed protocol") for n in notes), notes
    assert {r["B"] for r in first["sections"][0]["rows"] if r["B"]} == {9}
    cells = sorted((cache / "eval" / "cells").glob("*.json"))
    assert cells
    for c in cells:
        c.write_text("{}")
    again = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    assert again["counts"]["cells_computed"] == len(cells)
    assert again["sections"][0]["rows"][-1]["macro"] == first["sections"][0]["rows"][-1]["macro"]
