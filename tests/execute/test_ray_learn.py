"""``learn`` / ``eval`` with ``executor="ray"``: a local-model scorer (a tiny random-weight
cross-encoder) pays its pairs on Ray, committed to the same ledger; the rewards are the
local executor's and a rerun pays nothing. Scorers that cannot run there fall back with a
note. The Ray tests use the package's local Ray (2 CPUs); the others replace the stage by
the same actor class run in this process (fast, no Ray start)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from typer.testing import CliRunner

import tttembed as tt
from tests.cli.test_cli import _write_beir
from tttembed.cli import app
from tttembed.core.errors import ConfigError
from tttembed.execute import Ray, ray_stage
from tttembed.execute.score import RayScoring, ray_fallback, use_executor
from tttembed.score.ledger import Ledger, LedgerScorer
from tttembed.ttt.queries import QuerySet
from tttembed.ttt.rewards import build_scorer, score_plan_pairs

pytest.importorskip("sentence_transformers")
CORPUS = {f"d{i}": {"title": "", "text": f"{w} cells and {w} genes in trial {i}"}
          for i, w in enumerate(["tumour", "virus", "heart", "brain", "dose", "protein",
                                 "tumour", "liver", "virus", "blood", "bone", "skin"])}
QUERIES = {"q1": "tumour cells", "q2": "virus genes", "q3": "heart trial", "q4": "tumour cells"}


def _pairs() -> tuple[QuerySet, list[tuple[str, str]]]:
    qs = QuerySet.from_tasks({"t": QUERIES})
    docs = list(CORPUS)
    pairs = [(k, d) for j, k in enumerate(qs.keys) for d in docs[j: j + 6]]
    return qs, pairs


@pytest.fixture
def in_process_stage(monkeypatch):
    """``run_score_stage`` run by one ScoreActor in this process; rows per call kept."""
    calls: list[int] = []

    def stage(spec, corpus, options, rows, *, settings, batch_size, num_cpus=1.0):
        actor = ray_stage.ScoreActor(spec, corpus, options)
        n = len(rows["g"])
        calls.append(n)
        for start in range(0, n, batch_size):
            part = {k: np.asarray(v[start: start + batch_size]) for k, v in rows.items()}
            yield actor(part)

    monkeypatch.setattr(ray_stage, "run_score_stage", stage)
    return calls


@pytest.fixture
def in_process_embed(monkeypatch):
    """``run_embed_stage`` run by one EmbedActor in this process; texts per call kept."""
    calls: list[tuple[str, int]] = []

    def stage(spec, options, kind, texts, *, settings, batch_size, num_cpus=1.0):
        calls.append((kind, len(texts)))
        out = ray_stage.EmbedActor(spec, options, kind)(
            {"pos": np.arange(len(texts)), "text": np.asarray(texts)})
        yield [int(p) for p in out["pos"]], out["vec"]

    monkeypatch.setattr(ray_stage, "run_embed_stage", stage)
    return calls


def _scorer(spec: str, ledger) -> LedgerScorer:
    options = {"device": "cpu"} if spec.startswith("cross-encoder:") else {}
    sc = build_scorer(spec, CORPUS, ledger_path=ledger, **options)
    assert isinstance(sc, LedgerScorer)
    return sc


def test_ray_scoring_in_learn_matches_local_and_a_rerun_pays_nothing(
        ray_local, tiny_cross_encoder, tmp_path):
    spec = f"cross-encoder:{tiny_cross_encoder}"
    qs, pairs = _pairs()
    local = _scorer(spec, tmp_path / "local.sqlite")
    expected = score_plan_pairs(pairs, qs, CORPUS, local)
    on_ray = _scorer(spec, tmp_path / "ray.sqlite")
    assert use_executor(on_ray, Ray(actors=2), batch_size=8) is None
    got = score_plan_pairs(pairs, qs, CORPUS, on_ray)
    assert got.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(list(got[key].values()), list(expected[key].values()),
                                   rtol=0, atol=1e-6)
    unique = len({(QUERIES[k.split("/")[1]], d) for k, d in pairs})
    assert on_ray.executor.stats == {"committed": unique}
    assert on_ray.counts().paid == unique == Ledger(tmp_path / "ray.sqlite").count()
    again = _scorer(spec, tmp_path / "ray.sqlite")
    use_executor(again, "ray")
    assert score_plan_pairs(pairs, qs, CORPUS, again) == got
    assert again.counts().paid == 0 and again.executor.stats == {"committed": 0}


def test_api_learn_on_ray_then_rerun_pays_nothing(ray_local, tiny_cross_encoder, tmp_path,
                                                  minilm):
    spec = f"cross-encoder:{tiny_cross_encoder}"
    index = tt.index_corpus(CORPUS, tmp_path / "idx", embedder=minilm)
    local = tt.learn(index, QUERIES, scorer=tt.load_scorer(
        spec, ledger=tmp_path / "a.sqlite", device="cpu"), budget=3, folds=0, corpus=CORPUS)
    ray = tt.learn(index, QUERIES, scorer=tt.load_scorer(
        spec, ledger=tmp_path / "b.sqlite", device="cpu"), budget=3, folds=0,
        executor="ray", corpus=CORPUS)
    assert ray.pairs == local.pairs and ray.pairs["paid"] > 0
    np.testing.assert_allclose(ray.vectors, local.vectors, atol=1e-5)
    rerun = tt.learn(index, QUERIES, scorer=tt.load_scorer(
        spec, ledger=tmp_path / "b.sqlite", device="cpu"), budget=3, folds=0,
        executor="ray", corpus=CORPUS)
    assert rerun.pairs["paid"] == 0 and rerun.pairs["cached"] == ray.pairs["requested"]


def test_http_and_label_scorers_fall_back_with_a_note(caplog):
    assert ray_fallback("cross-encoder:/m") is None and ray_fallback("bm25") is None
    sc = build_scorer("rerank:m@http://127.0.0.1:9/v1", ledger_path=None)
    with caplog.at_level(logging.WARNING, logger="tttembed.execute.score"):
        note = use_executor(sc, "ray")
    assert note and "HTTP service" in note and "--concurrency" in note
    assert "HTTP service" in caplog.text and sc.executor is None
    assert "reads judgments" in (ray_fallback("qrels:/x") or "")


def test_bad_executor_and_scorers_not_built_from_a_spec():
    with pytest.raises(ConfigError, match="unknown executor 'dask'"):
        use_executor(object(), "dask")
    with pytest.raises(ConfigError, match="built from its spec"):
        use_executor(build_scorer("bm25", CORPUS, use_ledger=False), "ray")
    with pytest.raises(ConfigError, match="unknown executor"):
        tt.evaluate(["x"], executor="dask")


def test_cli_learn_executor_ray_commits_to_the_ledger(in_process_stage, in_process_embed,
                                                      tiny_cross_encoder, tmp_path, minilm):
    data = _write_beir(tmp_path / "toy", CORPUS, dict(list(QUERIES.items())[:3]),
                       {"q1": {"d0": 1}, "q2": {"d1": 1}, "q3": {"d2": 1}})
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 0, r.output
    args = ["learn", str(data), "--index", str(tmp_path / "idx"), "--scorer",
            f"cross-encoder:{tiny_cross_encoder}", "--budget", "3", "--cv-folds", "0",
            "--ledger", str(tmp_path / "l.sqlite"), "--executor", "ray", "--ray-actors", "2",
            "--overwrite", "--out", str(tmp_path / "v.npz")]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "pairs requested 9, served from the ledger 0, paid 9" in r.output
    assert in_process_stage == [9] and Ledger(tmp_path / "l.sqlite").count() == 9
    assert in_process_embed == [("query", 3)]  # the query vectors, into the cache
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "served from the ledger 9, paid 0" in r.output and in_process_stage == [9]
    assert in_process_embed == [("query", 3)]  # the rerun found them cached


def test_ray_scoring_object_is_set_and_cleared(in_process_stage, tmp_path):
    sc = _scorer("bm25", tmp_path / "l.sqlite")
    use_executor(sc, Ray(actors=3, gpus=0.5))
    assert sc.executor == RayScoring(Ray(None, 3, 0.5), 64)
    qs, pairs = _pairs()
    score_plan_pairs(pairs, qs, CORPUS, sc)
    assert in_process_stage == [sc.counts().paid]
    use_executor(sc, "local")
    assert sc.executor is None


def test_cli_eval_takes_executor_and_http_limits(in_process_stage, tmp_path, minilm):
    import json

    from tests.evaluation.evaldata import write_tasks
    from tests.servers import LocalOpenAIServer

    data = write_tasks(tmp_path / "data")
    with LocalOpenAIServer(latency=0.02) as srv:
        args = ["eval", "alpha", "--data-root", str(data), "--scorer", "bm25", "--scorer",
                f"rerank:m@{srv.url}", "--budget", "2", "--scope", "task", "--baselines",
                "direct", "--resamples", "20", "--no-plots", "--cache-dir",
                str(tmp_path / "c"), "--executor", "ray", "--concurrency", "3", "--rpm",
                "6000", "--out", str(tmp_path / "rep")]
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        assert srv.count("/rerank") > 0 and srv.max_in_flight <= 3
    assert len(in_process_stage) == 1  # bm25 on the (in-process) Ray stage; rerank: not
    assert "note: scorer rerank:" in r.output and "HTTP service" in r.output
    result = json.loads((tmp_path / "rep" / "results.json").read_text())
    cfg = result["config"]
    assert cfg["executor"] == {"address": None, "actors": 1, "gpus": 0.0}
    assert (cfg["limits"]["concurrency"], cfg["limits"]["rpm"]) == (3, 6000.0)
    assert result["counts"]["scorer_paid"] > in_process_stage[0] > 0


def test_ray_scoring_resumes_from_a_partial_ledger(in_process_stage, tiny_cross_encoder,
                                                   tmp_path):
    """What a killed run left in the ledger is not sent to the stage again: the rerun
    pays only the missing pairs, and the rewards equal a single uninterrupted run's."""
    spec = f"cross-encoder:{tiny_cross_encoder}"
    qs, pairs = _pairs()
    expected = score_plan_pairs(pairs, qs, CORPUS, _scorer(spec, tmp_path / "whole.sqlite"))
    first = _scorer(spec, tmp_path / "l.sqlite")
    use_executor(first, "ray", batch_size=4)
    score_plan_pairs(pairs[:7], qs, CORPUS, first)  # the part a killed run had committed
    committed = Ledger(tmp_path / "l.sqlite").count()
    assert 0 < committed == first.counts().paid
    again = _scorer(spec, tmp_path / "l.sqlite")
    use_executor(again, "ray", batch_size=4)
    got = score_plan_pairs(pairs, qs, CORPUS, again)
    total = len({(QUERIES[k.split("/")[1]], d) for k, d in pairs})
    assert again.counts().paid == total - committed
    assert in_process_stage == [committed, total - committed]
    for key in expected:
        np.testing.assert_allclose(list(got[key].values()), list(expected[key].values()),
                                   rtol=0, atol=1e-6)


def test_cli_rerank_executor_ray_pays_on_the_stage_and_matches_local(
        in_process_stage, in_process_embed, tiny_cross_encoder, tmp_path, minilm):
    data = _write_beir(tmp_path / "toy", CORPUS, dict(list(QUERIES.items())[:3]),
                       {"q1": {"d0": 1}, "q2": {"d1": 1}, "q3": {"d2": 1}})
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 0, r.output
    runs = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--ray-actors", "2"])):
        out = tmp_path / f"{name}.jsonl"
        r = runner.invoke(app, ["rerank", str(data), "--index", str(tmp_path / "idx"),
                                "--scorer", f"cross-encoder:{tiny_cross_encoder}",
                                "--budget", "3", "--ledger", str(tmp_path / f"{name}.sqlite"),
                                "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        runs[name] = out.read_text()
    assert in_process_stage == [9]  # only the ray run went through the stage: 3 x 3 pairs
    assert Ledger(tmp_path / "ray.sqlite").count() == 9
    assert runs["ray"] == runs["local"]
