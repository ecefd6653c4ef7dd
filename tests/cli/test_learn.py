from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.cli.test_cli import _write_beir
from tttembed.cli import app

runner = CliRunner()

TOPICS = {
    "astro": ["stars fuse hydrogen into helium", "galaxies contain billions of stars",
              "black holes bend light", "the moon orbits the earth", "comets have icy tails"],
    "cook": ["bake bread with yeast and flour", "simmer the soup for an hour",
             "whisk eggs for an omelette", "roast vegetables in the oven", "season pasta water with salt"],
    "code": ["python lists are mutable", "rust prevents data races", "git tracks file history",
             "sql joins combine tables", "unit tests catch regressions"],
}


@pytest.fixture(scope="module")
def beir(tmp_path_factory, minilm):
    root = tmp_path_factory.mktemp("beir")
    corpus = {}
    for topic, texts in TOPICS.items():
        for i, t in enumerate(texts):
            corpus[f"{topic}{i}"] = {"title": "", "text": t}
    # each query shares a word or two with its topic: bm25 rewards carry a signal
    queries = {"q1": "astronomy facts about stars in space", "q2": "kitchen recipes to bake bread",
               "q3": "programming languages and tools like git", "q4": "cosmic objects like comets",
               "q5": "cooking techniques for the oven"}
    qrels = {"q1": {"astro0": 2, "astro1": 1}, "q2": {"cook0": 2, "cook1": 1},
             "q3": {"code0": 2, "code1": 1}, "q4": {"astro2": 2}, "q5": {"cook2": 2}}
    data = _write_beir(root / "toy", corpus, queries, qrels)
    r = runner.invoke(app, ["index", str(data), "--out", str(root / "idx")])
    assert r.exit_code == 0, r.output
    return data, root / "idx"


def test_learn_dry_run_scores_nothing(beir, tmp_path):
    data, idx = beir
    r = runner.invoke(app, ["learn", "--index", str(idx), "--queries", str(data), "--scorer", "bm25",
                            "--budget", "4", "--dry-run", "--out", str(tmp_path / "v.npz"),
                            "--ledger", str(tmp_path / "l.sqlite")])
    assert r.exit_code == 0, r.output
    assert "20 pairs" in r.output and "to pay: 20" in r.output and "Nothing was scored" in r.output
    assert not (tmp_path / "v.npz").exists()


def test_learn_then_adapted_search_with_ledger_reuse(beir, tmp_path):
    data, idx = beir
    args = ["learn", "--index", str(idx), "--queries", str(data), "--scorer", "bm25",
            "--budget", "3", "--scope", "task", "--ledger", str(tmp_path / "l.sqlite")]
    r = runner.invoke(app, args + ["--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    assert "pairs requested 15, served from the ledger 0, paid 15" in r.output
    meta = json.loads((tmp_path / "v.json").read_text())
    assert meta["scope"] == "task" and meta["budget"] == 15
    assert meta["scorer"].startswith("bm25") and meta["reward_mapping"] == "bm25/query_max"
    # the dry run of a larger budget knows what the ledger already holds
    r = runner.invoke(app, [a if a != "3" else "5" for a in args] + ["--dry-run"])
    assert r.exit_code == 0 and "already in the ledger: 15; to pay: 10" in r.output, r.output
    # a larger nested budget pays only the new pairs
    r = runner.invoke(app, [a if a != "3" else "5" for a in args] + ["--out", str(tmp_path / "v5.npz")])
    assert r.exit_code == 0, r.output
    assert "pairs requested 25, served from the ledger 15, paid 10" in r.output
    # adapted search differs from raw search
    raw = runner.invoke(app, ["search", "--index", str(idx), "--queries", str(data), "-k", "15",
                              "--out", str(tmp_path / "raw.jsonl")])
    ada = runner.invoke(app, ["search", "--index", str(idx), "--queries", str(data), "-k", "15",
                              "--state", str(tmp_path / "v.npz"), "--out", str(tmp_path / "ada.jsonl")])
    assert raw.exit_code == 0 and ada.exit_code == 0, ada.output
    assert "adapted (task-wise)" in ada.output
    s_raw = [json.loads(x)["results"][0]["score"] for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    s_ada = [json.loads(x)["results"][0]["score"] for x in (tmp_path / "ada.jsonl").read_text().splitlines()]
    assert not np.allclose(s_raw, s_ada)


def test_state_that_applies_to_no_query_is_an_error(beir, tmp_path):
    data, idx = beir
    r = runner.invoke(app, ["learn", str(data), "--index", str(idx), "--scorer",
                            f"qrels:{data}", "--budget", "2", "--task", "other",
                            "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    a = runner.invoke(app, ["search", str(data), "--index", str(idx), "-k", "5",
                            "--state", str(tmp_path / "v.npz"), "--out", str(tmp_path / "a.trec")])
    assert a.exit_code == 1 and not (tmp_path / "a.trec").exists()
    assert "applies to none of the 5 queries" in a.output and "tasks other" in a.output
    assert f"(tasks {data.name})" in a.output and "--task NAME" in a.output
    # naming the queries' task as the state's makes it apply
    b = runner.invoke(app, ["search", str(data), "--index", str(idx), "-k", "5", "--task",
                            "other", "--state", str(tmp_path / "v.npz")])
    assert b.exit_code == 0 and "applied to 5 of 5 queries" in b.output, b.output


def test_state_against_another_index_is_a_clear_error(beir, tmp_path):
    data, idx = beir
    r = runner.invoke(app, ["learn", "--index", str(idx), "--queries", str(data), "--scorer",
                            f"qrels:{data}", "--budget", "1", "--scope", "global",
                            "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "v.json").read_text())
    assert meta["scope"] == "global"
    # tamper: pretend the state came from another embedder
    from dataclasses import replace

    from tttembed.adapt import load_state, save_state

    st = load_state(tmp_path / "v.npz")
    save_state(tmp_path / "w.npz", replace(st, identity="st:other", embedder="st:other"))
    r = runner.invoke(app, ["search", "--index", str(idx), "--queries", str(data),
                            "--state", str(tmp_path / "w.npz")])
    assert r.exit_code == 1 and "st:other" in r.stderr


def test_rerank_command_and_bad_scope(beir, tmp_path):
    data, idx = beir
    r = runner.invoke(app, ["rerank", "--index", str(idx), "--queries", str(data), "--scorer",
                            f"qrels:{data}", "--budget", "10", "-k", "5",
                            "--out", str(tmp_path / "rr.trec")])
    assert r.exit_code == 0, r.output
    assert "raw vs reranked, b = 10" in r.output and "reranked - raw" in r.output
    lines = (tmp_path / "rr.trec").read_text().splitlines()
    first = {line.split()[0]: line.split()[2] for line in lines if line.split()[3] == "1"}
    # every query rewarded to depth 10 with perfect labels: the grade-2 documents come first
    assert first["q1"] == "astro0" and first["q2"] == "cook0" and first["q3"] == "code0"
    r = runner.invoke(app, ["learn", "--index", str(idx), "--queries", str(data), "--scorer", "bm25",
                            "--scope", "everything"])
    assert r.exit_code == 1 and "unknown scope" in r.stderr


def test_learn_alpha_auto_reports_the_crossvalidation(beir, tmp_path):
    data, idx = beir
    args = ["learn", "--index", str(idx), str(data), "--scorer", f"qrels:{data}", "--budget", "3",
            "--ledger", str(tmp_path / "l.sqlite"), "--quiet"]
    r = runner.invoke(app, args + ["--alpha", "auto", "--out", str(tmp_path / "a.npz")])
    assert r.exit_code == 0, r.output
    assert "guard: 5 folds" in r.output and "under the judge" in r.output
    meta = json.loads((tmp_path / "a.json").read_text())
    assert meta["alpha_asked"] == "auto" and meta["alpha_chosen"] == meta["crossval"]["auto"]
    assert [g["alpha"] for g in meta["crossval"]["gains"]][-1] == "rule"
    r = runner.invoke(app, args + ["--out", str(tmp_path / "r.npz"), "--cv-folds", "0"])
    assert r.exit_code == 0, r.output
    assert "cross-validation" not in r.output
    assert json.loads((tmp_path / "r.json").read_text())["alpha_chosen"] == "rule"
    r = runner.invoke(app, args + ["--alpha", "half", "--out", str(tmp_path / "h.npz")])
    assert r.exit_code == 2 and "unknown alpha 'half'" in r.output


def test_learn_method_auto_writes_one_state_and_search_applies_it(beir, tmp_path):
    data, idx = beir
    out = tmp_path / "auto.npz"
    r = runner.invoke(app, ["learn", "--index", str(idx), str(data), "--scorer",
                            f"qrels:{data}", "--budget", "3", "--method", "auto", "--quiet",
                            "--ledger", str(tmp_path / "l.sqlite"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "method auto: per task" in r.output and "estimated by" in r.output
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["scope"] == "mixed" and meta["method"] == "auto"
    assert set(meta["selection"]["evidence"]) == set(meta["selection"]["choice"])
    shown = runner.invoke(app, ["state", "show", str(out)])
    assert shown.exit_code == 0 and "method: auto, per task" in shown.output
    s = runner.invoke(app, ["search", "--index", str(idx), str(data), "--state", str(out),
                            "-k", "5"])
    assert s.exit_code == 0, s.output
    bad = runner.invoke(app, ["learn", "--index", str(idx), str(data), "--scorer", "bm25",
                              "--method", "best", "--out", str(tmp_path / "x.npz")])
    assert bad.exit_code == 1 and "unknown method 'best'" in bad.stderr
    both = runner.invoke(app, ["learn", "--index", str(idx), str(data), "--scorer", "bm25",
                               "--method", "auto", "--alpha", "0.3",
                               "--out", str(tmp_path / "y.npz")])
    assert both.exit_code == 1 and "--alpha applies to --method scope" in both.stderr


def test_learn_with_active_allocation_pays_the_same_number_of_pairs(beir, tmp_path):
    data, idx = beir
    args = ["learn", "--index", str(idx), "--queries", str(data), "--scorer", "bm25",
            "--budget", "3", "--scope", "query", "--ledger", str(tmp_path / "l.sqlite"),
            "--allocation", "active"]
    r = runner.invoke(app, args + ["--out", str(tmp_path / "a.npz")])
    assert r.exit_code == 0, r.output
    assert "pairs requested 15, served from the ledger 0, paid 15" in r.output
    assert json.loads((tmp_path / "a.json").read_text())["budget"] == 15
    again = runner.invoke(app, args + ["--out", str(tmp_path / "b.npz")])
    assert "pairs requested 15, served from the ledger 15, paid 0" in again.output, again.output
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        np.testing.assert_array_equal(a["vectors"], b["vectors"])  # the same pairs
    bad = runner.invoke(app, args[:-1] + ["bandit", "--out", str(tmp_path / "c.npz")])
    assert bad.exit_code != 0 and "unknown allocation 'bandit'" in bad.output


def test_learn_refuses_a_bad_option_before_opening_the_index(tmp_path):
    """The options are one object built at the door: a bad value is refused (exit 1, the
    message with its fix) before the index, the model or the scorer is opened."""
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\twhat is a star\n")
    for flags, message in ((["--method", "foo"], "unknown method 'foo'; choose one of: scope, auto"),
                           (["--folds", "1"], "cross-validation folds must be 0 (none) or at "
                                              "least 2, got 1")):
        r = runner.invoke(app, ["learn", str(queries), "--index", str(tmp_path / "no-index"),
                                "--scorer", "bm25", "--out", str(tmp_path / "v.npz"), *flags])
        assert r.exit_code == 1 and message in r.stderr, r.output
        assert "no-index" not in r.stderr
