"""qdrant-rf: Qdrant's naive relevance feedback formula, its pairs, its fit, its cells."""

from __future__ import annotations

import numpy as np
import pytest

from tests.evaluation.synth import QrelsRewards, make_work, unit
from tttembed.evaluation import protocols as P
from tttembed.evaluation.baselines import qdrant_rf as Q


def test_pairs_best_with_worst_at_most_three():
    assert Q.feedback_pairs([0.5]) == []
    assert Q.feedback_pairs([]) == []
    # 2 items: one pair; best first, confidence = best - worst
    assert Q.feedback_pairs([0.2, 0.9]) == [(1, 0, pytest.approx(0.7))]
    # 5 items (odd): min(3, 5 // 2) = 2 pairs; the median is left out
    got = Q.feedback_pairs([0.1, 0.9, 0.5, 0.3, 0.7])
    assert [(p, n) for p, n, _ in got] == [(1, 0), (4, 3)]
    assert [c for *_, c in got] == pytest.approx([0.8, 0.4])
    # 8 items: capped at 3 pairs
    s = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert [(p, n) for p, n, _ in Q.feedback_pairs(s)] == [(7, 0), (6, 1), (5, 2)]
    # ties keep the input order (a stable sort on -score), confidence 0
    assert [(p, n) for p, n, _ in Q.feedback_pairs([0.5, 0.5, 0.5, 0.5])] == [(0, 3), (1, 2)]


def test_vector_inner_products_equal_the_formula_brute_force():
    rng = np.random.default_rng(3)
    docs = unit(rng.normal(size=(40, 8)))
    t = unit(rng.normal(size=8))
    for n_items in (1, 2, 3, 5, 6, 9):
        items = docs[rng.choice(40, size=n_items, replace=False)]
        scores = rng.uniform(size=n_items)
        for coef in ((1.0, 1.0, 1.0), (0.7, 2.3, -0.4), (1.2, 0.5, 3.0)):
            v = Q.feedback_vector(t, items, scores, coef)
            brute = [Q.naive_score(t, items, scores, coef, d) for d in docs]
            # the Rust formula written out: a*sim(t,d) + sum conf^b * c * (sim(p,d) - sim(n,d))
            by_hand = []
            order = sorted(range(n_items), key=lambda i: -scores[i])
            for d in docs:
                s = coef[0] * float(t @ d)
                for k in range(min(3, n_items // 2)):
                    p, n = order[k], order[n_items - 1 - k]
                    s += (scores[p] - scores[n]) ** coef[1] * coef[2] * float(
                        items[p] @ d - items[n] @ d)
                by_hand.append(s)
            assert docs.astype(np.float64) @ v == pytest.approx(brute, abs=1e-9)
            assert brute == pytest.approx(by_hand, abs=1e-6)  # by_hand: float32 dots


def test_zero_confidence_with_negative_b_adds_nothing():
    assert Q.pair_weight(0.0, -1.0, 2.0) == 0.0
    assert Q.pair_weight(0.0, 1.0, 2.0) == 0.0
    assert Q.pair_weight(0.25, 0.5, 2.0) == pytest.approx(1.0)


def test_context_pair_is_the_most_confident_in_the_package_order():
    assert Q.context_pair([0.3, 0.3]) is None
    assert Q.context_pair([0.2, 0.9, 0.1, 0.9, 0.5]) == (2, 1, pytest.approx(0.8))


def _synthetic_rows(true: Q.Coef, n_queries: int, seed: int) -> list[Q.Rows]:
    """Rows whose feedback is the naive formula with ``true`` coefficients."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_queries):
        score = rng.uniform(0.3, 0.8, size=45)
        delta = rng.normal(scale=0.2, size=45)
        conf = float(rng.uniform(0.2, 0.9))
        fb = true[0] * score + conf ** true[1] * delta * true[2]
        rows.append(Q.Rows(score, conf, delta, fb - fb.max()))
    return rows


def test_fit_lowers_the_loss_recovers_the_direction_and_is_deterministic():
    true = (1.0, 1.0, 4.0)
    rows = _synthetic_rows(true, 40, seed=1)
    fit = Q.fit_coefficients(rows, epochs=400, patience=100)
    assert fit.fitted and fit.loss_best < fit.loss_start
    a, b, c = fit.coef
    assert c / a > 1.0 / 1.0  # feedback weight grew relative to the score, as in the truth
    again = Q.fit_coefficients(rows, epochs=400, patience=100)
    assert again == fit
    batch = Q.Batch.of(rows)
    assert Q.ranking_loss(np.array(true), batch, margin=0.0)[0] == pytest.approx(0.0)


def test_loss_gradient_matches_finite_differences():
    batch = Q.Batch.of(_synthetic_rows((1.0, 1.5, 2.0), 5, seed=2))
    p = np.array([0.9, 1.2, 1.1])
    _, g = Q.ranking_loss(p, batch)
    for i in range(3):
        e = np.zeros(3)
        e[i] = 1e-6
        num = (Q.ranking_loss(p + e, batch)[0] - Q.ranking_loss(p - e, batch)[0]) / 2e-6
        assert g[i] == pytest.approx(num, rel=1e-3, abs=1e-3)


def test_too_few_queries_keep_the_initial_coefficients():
    fit = Q.fit_coefficients(_synthetic_rows((1, 1, 1), 1, seed=0))
    assert not fit.fitted and fit.coef == Q.INIT


def test_halves_are_seeded_and_disjoint():
    keys = [f"t/q{i}" for i in range(11)]
    h = Q.halves(keys)
    assert h == Q.halves(keys) and set(h) == set(keys)
    assert sum(v == "A" for v in h.values()) == 6


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_work(tmp_path_factory.mktemp("qrf"), sizes=(12, 8))


def test_fixed_protocol_records_qdrant_rf_with_crossfit(work, monkeypatch):
    monkeypatch.setattr(Q, "LIMIT", 20)  # the synthetic tasks hold 60 documents
    info: dict = {}
    res = P.fixed_population(work, QrelsRewards(work), budgets=(1.0, 10.0),
                             baselines=("direct", "qdrant-rf"), scopes=("task",), info=info)
    got = [r for r in res if r.method == "qdrant-rf"]
    assert len(got) == 2 and all(r.per_query["ndcg@10"] for r in got)
    keys = {k for td in work for k in td.queries.keys}
    assert all(set(r.per_query["ndcg@10"]) == keys for r in got)
    fits = info["qdrant_rf"]
    assert set(fits) == {"t0", "t1"}
    assert all(f["source"] == "crossfit" and set(f["fits"]) == {"A", "B"} for f in fits.values())
    assert fits["t0"]["pairs"] == 12 * 20
    assert [q["B"] for q in info["reward_quality"]] == [r.budget for r in got]
    assert all(q["auc"] == pytest.approx(1.0) for q in info["reward_quality"])


def test_synthetic_fit_uses_the_judge_and_is_cached(work, monkeypatch):
    monkeypatch.setattr(Q, "LIMIT", 20)
    monkeypatch.setattr(Q, "SYNTHETIC_QUERIES", 10)
    calls = []

    def judge(task, text, ids):
        calls.append((task, text, len(ids)))
        return np.linspace(1.0, 0.0, len(ids)) ** 2  # any text judge

    store: dict = {}

    def cells(parts, compute):
        k = repr(sorted(parts.items()))
        if k not in store:
            store[k] = compute()
        return store[k]
    fits = P.qdrant_fits(work, QrelsRewards(work), judge, cells)
    assert all(f.source == "synthetic" and f.pairs == 10 * 20 for f in fits.values())
    assert len(calls) == 20 and all(n == 20 for *_, n in calls)
    again = P.qdrant_fits(work, QrelsRewards(work), judge, cells)
    assert len(calls) == 20  # served from the cells
    assert {t: f.fits["all"].coef for t, f in again.items()} == \
        {t: f.fits["all"].coef for t, f in fits.items()}


def test_qdrant_rf_equals_raw_ranking_without_feedback(work):
    fits = {td.name: Q.TaskFit("synthetic", {"all": Q.Fit((1.0, 1.0, 1.0), True)}, 0)
            for td in work}
    per = P.qdrant_rf_metrics(work, {}, fits)
    assert per == P.raw_metrics(work)


def test_eval_runs_noisy_qrels_in_the_fixed_protocol_with_qdrant_rf(minilm, tmp_path,
                                                                   monkeypatch):
    from tests.evaluation.evaldata import write_tasks
    from tttembed.embed.cache import CachedEmbedder
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.report import markdown
    from tttembed.evaluation.runner import run_eval

    monkeypatch.setattr(Q, "LIMIT", 10)  # the test tasks are small
    monkeypatch.setattr(Q, "SYNTHETIC_QUERIES", 8)
    data, cache = write_tasks(tmp_path / "data"), tmp_path / "cache"
    cfg = EvalConfig(tasks=("alpha", "beta"), data_root=str(data), cache_dir=str(cache),
                     scorers=("noisy-qrels:?sigma=0.3&seed=1", "bm25", "qrels"),
                     budgets=(1.0, 10.0), scopes=("task",), baselines=("direct", "qdrant-rf"),
                     n_resamples=100)
    cold = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    noisy, bm25, qrels = cold["sections"]
    assert {r["method"] for r in noisy["rows"]} == {"raw", "direct", "task", "qdrant-rf"}
    assert any("controlled simulation" in n for n in noisy["notes"])
    assert "noisy-qrels sigma=0.3 seed=1" in noisy["scorer_identity"]
    assert {f["source"] for f in noisy["qdrant_rf"].values()} == {"crossfit"}
    assert {f["source"] for f in bm25["qdrant_rf"].values()} == {"synthetic"}
    assert all(f["pairs"] == 8 * 10 for f in bm25["qdrant_rf"].values())
    assert [q["B"] for q in noisy["reward_quality"]] == [18, 180]
    assert 0.5 < noisy["reward_quality"][0]["auc"] <= 1.0
    assert "fixed" not in {r["protocol"] for r in qrels["rows"]}  # plain qrels: still skipped
    md = markdown(cold)
    assert "qdrant-rf coefficients" in md and "Reward quality" in md
    warm = run_eval(cfg, embedder=CachedEmbedder(minilm, cache))
    assert warm["counts"]["cells_computed"] == 0
    assert warm["counts"]["reward_pairs_requested"] == 0
    assert warm["sections"][0]["qdrant_rf"] == noisy["qdrant_rf"]
