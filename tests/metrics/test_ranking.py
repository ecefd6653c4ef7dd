from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest

from tttembed.core.errors import ConfigError, DataError
from tttembed.metrics.ranking import (
    evaluated_queries,
    mean_metric,
    mrr_at_k,
    ndcg_at_k,
    parse_metric,
    per_query_metrics,
    recall_at_k,
    run_metrics,
)


def _dcg(gains):
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


# --- hand-computed cases -------------------------------------------------------------


def test_graded_ndcg_by_hand():
    qrels = {"q": {"a": 3, "b": 2, "c": 0, "e": 1}}
    run = {"q": {"c": 0.9, "a": 0.8, "d": 0.7, "b": 0.6}}  # ranks c1 a2 d3 b4; e unretrieved
    dcg = 3 / math.log2(3) + 2 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(qrels, run, 10)["q"] == pytest.approx(dcg / idcg, abs=1e-12)
    # Cut at 3: b (rank 4) drops out of DCG; the ideal is cut at 3 too.
    assert ndcg_at_k(qrels, run, 3)["q"] == pytest.approx((3 / math.log2(3)) / idcg, abs=1e-12)
    # Cut at 1: the top document is judged 0.
    assert ndcg_at_k(qrels, run, 1)["q"] == 0.0
    assert recall_at_k(qrels, run, 2)["q"] == pytest.approx(1 / 3)
    assert recall_at_k(qrels, run, 4)["q"] == pytest.approx(2 / 3)
    assert mrr_at_k(qrels, run, 10)["q"] == pytest.approx(0.5)
    assert mrr_at_k(qrels, run, 1)["q"] == 0.0


def test_ties_break_by_doc_id_descending_like_trec_eval():
    qrels = {"q": {"a": 1}}
    # All tied: trec_eval orders c, b, a (docno descending), so "a" is rank 3.
    run = {"q": {"a": 0.5, "b": 0.5, "c": 0.5}}
    assert mrr_at_k(qrels, run, 10)["q"] == pytest.approx(1 / 3)
    assert ndcg_at_k(qrels, run, 10)["q"] == pytest.approx(1 / math.log2(4))
    assert recall_at_k(qrels, run, 2)["q"] == 0.0
    # "z" tied with "a" sorts first; "a" tied with nothing below it keeps its place.
    qrels = {"q": {"z": 1, "m": 1}}
    run = {"q": {"a": 0.9, "m": 0.9, "z": 0.9, "x": 0.1}}  # order z, m, a, x
    assert mrr_at_k(qrels, run, 10)["q"] == 1.0
    assert ndcg_at_k(qrels, run, 2)["q"] == pytest.approx(1.0)


def test_missing_query_scores_zero_and_counts_in_the_mean():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}}
    run = {"q1": {"a": 1.0, "x": 0.5}}
    for fn in (ndcg_at_k, recall_at_k, mrr_at_k):
        per_query = fn(qrels, run, 10)
        assert per_query == {"q1": 1.0, "q2": 0.0}
        assert mean_metric(per_query) == 0.5
    # An empty run for the query behaves the same.
    assert ndcg_at_k(qrels, {"q1": {"a": 1.0}, "q2": {}}, 10)["q2"] == 0.0


def test_queries_without_relevant_documents_do_not_count():
    qrels = {"q1": {"a": 1}, "q0": {"b": 0, "c": 0}, "qneg": {"d": -1}}
    run = {"q1": {"a": 1.0}, "q0": {"b": 1.0}, "qneg": {"d": 1.0}, "extra": {"a": 1.0}}
    assert evaluated_queries(qrels) == ["q1"]
    assert per_query_metrics(qrels, run) == {
        "ndcg@10": {"q1": 1.0},
        "recall@100": {"q1": 1.0},
        "mrr@10": {"q1": 1.0},
    }


def test_negative_grades_give_no_gain_and_are_not_relevant():
    qrels = {"q": {"bad": -2, "good": 1}}
    run = {"q": {"bad": 0.9, "good": 0.8}}
    assert ndcg_at_k(qrels, run, 10)["q"] == pytest.approx(1 / math.log2(3))
    assert mrr_at_k(qrels, run, 10)["q"] == 0.5
    assert recall_at_k(qrels, run, 1)["q"] == 0.0


def test_k_larger_than_the_run():
    qrels = {"q": {"a": 2, "b": 1, "c": 1}}
    run = {"q": {"b": 0.9, "a": 0.1}}
    idcg = _dcg([2, 1, 1])
    assert ndcg_at_k(qrels, run, 1000)["q"] == pytest.approx(_dcg([1, 2]) / idcg)
    assert recall_at_k(qrels, run, 1000)["q"] == pytest.approx(2 / 3)


def test_evaluate_means_and_no_mutation():
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}}
    run = {"q1": {"b": 0.9, "a": 0.8}, "q2": {"c": 0.1, "d": 0.2}}
    before = (copy.deepcopy(qrels), copy.deepcopy(run))
    out = run_metrics(qrels, run, metrics=("ndcg@10", "mrr@10", "recall@1"))
    assert out["mrr@10"] == pytest.approx(0.5)
    assert out["recall@1"] == 0.0
    assert out["ndcg@10"] == pytest.approx(1 / math.log2(3))
    assert (qrels, run) == before


def test_all_zero_grades_raise_on_mean():
    qrels = {"q": {"a": 0}}
    assert ndcg_at_k(qrels, {"q": {"a": 1.0}}, 10) == {}
    with pytest.raises(DataError, match="grade >= 1"):
        run_metrics(qrels, {"q": {"a": 1.0}})


def test_bad_inputs():
    with pytest.raises(ConfigError, match="ndcg@k"):
        parse_metric("err@10")
    with pytest.raises(ConfigError, match="trec_eval"):
        parse_metric("P_x")
    with pytest.raises(ConfigError):
        parse_metric("ndcg")
    with pytest.raises(ConfigError):
        ndcg_at_k({"q": {"a": 1}}, {}, 0)
    with pytest.raises(DataError, match="NaN"):
        ndcg_at_k({"q": {"a": 1}}, {"q": {"a": float("nan")}}, 10)
    assert parse_metric(" NDCG@5 ") == ("ndcg", 5)


# --- against an independent straightforward implementation (ties included) ------------


def _reference(qrels, run, k):
    """Literal trec_eval reading: sort by (score desc, doc id desc), walk the top k."""
    out = {}
    for qid, judged in qrels.items():
        n_rel = sum(1 for g in judged.values() if g >= 1)
        if n_rel == 0:
            continue
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
        gains = [max(judged.get(d, 0), 0) for d, _ in ranked]
        ideal = sorted((max(g, 0) for g in judged.values()), reverse=True)[:k]
        rr = next((1 / (i + 1) for i, (d, _) in enumerate(ranked) if judged.get(d, 0) >= 1), 0.0)
        out[qid] = (
            _dcg(gains) / _dcg(ideal),
            sum(1 for d, _ in ranked if judged.get(d, 0) >= 1) / n_rel,
            rr,
        )
    return out


def _random_case(rng: random.Random, n_queries: int, ties: bool):
    docs = [f"d{i}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[qid] = {d: rng.choice([0, 0, 1, 1, 2, 3]) for d in judged}
        if all(g == 0 for g in qrels[qid].values()):
            qrels[qid][judged[0]] = 1  # ranx averages zero-relevance queries as 0; we skip them
        if rng.random() < 0.1:
            continue  # query missing from the run
        retrieved = rng.sample(docs, rng.randint(1, 40))
        if ties:
            run[qid] = {d: float(rng.randint(0, 5)) for d in retrieved}
        else:
            scores = rng.sample(range(10_000), len(retrieved))
            run[qid] = {d: s / 10_000 for d, s in zip(retrieved, scores)}
    return qrels, run


def test_matches_reference_with_ties():
    rng = random.Random(7)
    for _ in range(30):
        qrels, run = _random_case(rng, 15, ties=True)
        for k in (1, 3, 10, 100):
            ref = _reference(qrels, run, k)
            got = per_query_metrics(qrels, run, (f"ndcg@{k}", f"recall@{k}", f"mrr@{k}"))
            for qid, (nd, rc, rr) in ref.items():
                assert got[f"ndcg@{k}"][qid] == pytest.approx(nd, abs=1e-12)
                assert got[f"recall@{k}"][qid] == pytest.approx(rc, abs=1e-12)
                assert got[f"mrr@{k}"][qid] == pytest.approx(rr, abs=1e-12)
            assert set(got[f"ndcg@{k}"]) == set(ref)


# --- against ranx ---------------------------------------------------------------------


# importing ranx and compiling its numba kernels takes ~10 s warm (~60 s cold); kept in CI on purpose
def test_matches_ranx_on_random_runs():
    # ranx's "ndcg" is the Jarvelin (linear gain) form that trec_eval uses. ranx averages
    # over all qrels queries (a zero-relevance query scores 0 there, while we leave it
    # out), so every generated query has a grade >= 1; `make_comparable` gives queries
    # missing from the run an empty result (0), as we do. Scores are distinct because
    # ranx's tie order is not trec_eval's.
    ranx = pytest.importorskip("ranx")
    rng = random.Random(0)
    metrics = ["ndcg@10", "ndcg@3", "recall@10", "recall@100", "mrr@10", "mrr@5"]
    for _ in range(50):
        qrels, run = _random_case(rng, 20, ties=False)
        r_qrels = ranx.Qrels(copy.deepcopy(qrels))
        r_run = ranx.Run({q: dict(d) for q, d in run.items() if d}).make_comparable(r_qrels)
        theirs = ranx.evaluate(r_qrels, r_run, metrics, return_mean=False)
        ours = per_query_metrics(qrels, run, metrics)
        qids = list(r_run.get_query_ids())
        assert sorted(qids) == sorted(ours["ndcg@10"])
        for m in metrics:
            ranx_per_query = dict(zip(qids, np.asarray(theirs[m], dtype=float).tolist()))
            for qid, value in ours[m].items():
                assert value == pytest.approx(ranx_per_query[qid], abs=1e-9), (m, qid)
            assert mean_metric(ours[m]) == pytest.approx(
                float(np.mean(list(ranx_per_query.values()))), abs=1e-9
            )


def test_trec_eval_names_parse_to_ours():
    assert parse_metric("ndcg_cut_10") == parse_metric("ndcg_cut.10") == ("ndcg", 10)
    assert parse_metric("P_5") == parse_metric("p@5") == ("p", 5)
    assert parse_metric("recall_100") == ("recall", 100)
    assert parse_metric("map_cut_100") == parse_metric("map@100") == ("map", 100)
    assert parse_metric("map")[0] == "map" and parse_metric("recip_rank")[0] == "mrr"


def test_every_metric_matches_pytrec_eval_on_random_runs():
    """nDCG@k, recall@k, P@k, MAP@k, MAP and MRR agree with trec_eval (pytrec_eval) per
    query, distinct scores (trec_eval's tie rule is ours too, pytrec_eval's C sort may differ)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(11)
    names = {"ndcg_cut_10": "ndcg_cut_10", "P_5": "P_5", "recall_20": "recall_20",
             "map_cut_10": "map_cut_10", "map": "map", "recip_rank": "recip_rank"}
    for _ in range(10):
        qrels, run = _random_case(rng, 20, ties=False)
        run = {q: r for q, r in run.items() if r}
        ev = pytrec_eval.RelevanceEvaluator(
            {q: {d: int(g) for d, g in j.items()} for q, j in qrels.items()},
            {"ndcg_cut.10", "P.5", "recall.20", "map_cut.10", "map", "recip_rank"})
        ref = ev.evaluate(run)
        got = per_query_metrics(qrels, run, list(names))
        for ours, theirs in names.items():
            for qid, vals in ref.items():
                assert got[ours][qid] == pytest.approx(vals[theirs], abs=1e-9), (ours, qid)
