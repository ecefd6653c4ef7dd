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
