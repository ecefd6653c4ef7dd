"""``tttembed compare RUN...``: every pair of two or more runs (ranx's ``compare``), each
metric's p-values corrected over the pairs (Holm by default, ``--correction``), the
correction named in the output; two runs print and emit what they did before."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tttembed.cli import app
from tttembed.metrics.stats import adjust_p


def test_adjusted_p_values_match_r_p_adjust():
    """R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm" / "bonferroni")."""
    p = [0.01, 0.04, 0.03, 0.005]
    assert adjust_p(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust_p(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert adjust_p(p, "none") == p
    assert adjust_p([0.5, 0.6], "bonferroni") == [1.0, 1.0]


def _world(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("".join(f"q{i}\td{i}\t1\n" for i in range(12)))
    runs = []
    for name, good in (("raw", 4), ("mid", 8), ("best", 12)):
        path = tmp_path / f"{name}.trec"
        lines = []
        for i in range(12):
            docs = [f"d{i}", "x"] if i < good else ["x", f"d{i}"]
            lines += [f"q{i} Q0 {d} {r + 1} {2 - r} {name}\n" for r, d in enumerate(docs)]
        path.write_text("".join(lines))
        runs.append(str(path))
    return str(qrels), runs


def test_three_runs_are_compared_in_every_pair_with_holm_named(tmp_path):
    qrels, runs = _world(tmp_path)
    got = CliRunner().invoke(app, ["compare", *runs, "--qrels", qrels, "--metrics", "mrr@10",
                                   "--n-resamples", "500", "--json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    assert doc["correction"] == "holm" and doc["runs"] == runs
    pairs = [(c["run_a"], c["run_b"]) for c in doc["comparisons"]]
    assert pairs == [(runs[0], runs[1]), (runs[0], runs[2]), (runs[1], runs[2])]
    raw = [c["metrics"][0]["p_value"] for c in doc["comparisons"]]
    adjusted = [c["metrics"][0]["p_adjusted"] for c in doc["comparisons"]]
    assert adjusted == pytest.approx(adjust_p(raw, "holm"))
    assert any(a > r for a, r in zip(adjusted, raw))  # the correction did something
    text = CliRunner().invoke(app, ["compare", *runs, "--qrels", qrels, "--metrics",
                                    "mrr@10", "--n-resamples", "500"])
    assert text.exit_code == 0, text.output
    assert "Holm" in text.output and "3 pairs" in text.output


def test_the_correction_is_an_option_and_one_run_is_refused(tmp_path):
    qrels, runs = _world(tmp_path)
    for corr in ("bonferroni", "none"):
        got = CliRunner().invoke(app, ["compare", *runs, "--qrels", qrels, "--metrics",
                                       "mrr@10", "--n-resamples", "300", "--json",
                                       "--correction", corr])
        assert got.exit_code == 0, got.output
        doc = json.loads(got.stdout)
        raw = [c["metrics"][0]["p_value"] for c in doc["comparisons"]]
        adjusted = [c["metrics"][0]["p_adjusted"] for c in doc["comparisons"]]
        assert doc["correction"] == corr and adjusted == pytest.approx(adjust_p(raw, corr))
    bad = CliRunner().invoke(app, ["compare", *runs, "--qrels", qrels, "--correction", "bh"])
    assert bad.exit_code == 2 and "holm" in bad.output
    one = CliRunner().invoke(app, ["compare", runs[0], "--qrels", qrels])
    assert one.exit_code == 2 and "at least two runs" in one.output


def test_two_runs_keep_their_output_and_json(tmp_path):
    qrels, runs = _world(tmp_path)
    got = CliRunner().invoke(app, ["compare", runs[0], runs[2], "--qrels", qrels,
                                   "--metrics", "mrr@10", "--n-resamples", "300", "--json"])
    doc = json.loads(got.stdout)
    assert {"run_a", "run_b", "qrels", "ignore_identical_ids", "metrics"} <= set(doc)
    assert doc["run_a"] == runs[0] and doc["metrics"][0]["metric"] == "mrr@10"
    text = CliRunner().invoke(app, ["compare", runs[0], runs[2], "--qrels", qrels,
                                    "--metrics", "mrr@10", "--n-resamples", "300"])
    assert f"A = {runs[0]}, B = {runs[2]}" in " ".join(text.output.split())


def test_a_file_given_twice_is_labelled_by_position_and_said(tmp_path):
    """issue 59: `compare a a b` printed rows R2-R2, R2-R3, R2-R3 and no R1."""
    qrels, runs = _world(tmp_path)
    args = [runs[0], runs[0], runs[1]]
    got = CliRunner().invoke(app, ["compare", *args, "--qrels", qrels, "--metrics", "mrr@10",
                                   "--n-resamples", "300"])
    assert got.exit_code == 0, got.output
    rows = [ln.split("│")[2:4] for ln in got.stdout.splitlines() if "mrr@10" in ln
            and "│" in ln]
    assert [(a.strip(), b.strip()) for a, b in rows] == [("R1", "R2"), ("R1", "R3"),
                                                         ("R2", "R3")], got.stdout
    assert f"warning: R1 and R2 are the same file ({runs[0]})" in got.output
    doc = json.loads(CliRunner().invoke(app, ["compare", *args, "--qrels", qrels, "--metrics",
                                              "mrr@10", "--n-resamples", "300",
                                              "--json"]).stdout)
    assert [(c["position_a"], c["position_b"]) for c in doc["comparisons"]] == [
        (1, 2), (1, 3), (2, 3)]
    assert any("same file" in w for w in doc["warnings"])


def test_a_run_of_another_corpus_is_said_to_have_no_judged_document(tmp_path):
    """issue 59: a run whose documents appear in no judgment scored 0.0000 without a word."""
    qrels, runs = _world(tmp_path)
    other = tmp_path / "other.trec"
    other.write_text("".join(f"q{i} Q0 z{i} 1 1 other\n" for i in range(12)))
    got = CliRunner().invoke(app, ["compare", runs[0], str(other), "--qrels", qrels,
                                   "--metrics", "mrr@10", "--n-resamples", "300"])
    assert got.exit_code == 0, got.output
    assert (f"warning: B ({other}): none of its 12 documents is in the judgments {qrels}"
            in " ".join(got.output.split())), got.output
    assert "warning" not in CliRunner().invoke(app, ["compare", *runs[:2], "--qrels", qrels,
                                                     "--n-resamples", "300"]).output
