"""What a newcomer reads: tables never cut when stdout is a pipe, progress as plain lines
in a log, ``--json`` for scripts, raw beside adapted, ``compare``, ``state show`` and
``index show``."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.cli.test_cli import CORPUS, QRELS, QUERIES, _write_beir
from tttembed.cli import app
from tttembed.cli._common import line_progress

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture()
def flow(tmp_path, minilm):
    """A BEIR folder, its index, a task-wise state learned with bare ``--scorer qrels``."""
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    runner = CliRunner()
    assert runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx"),
                               "--quiet"]).exit_code == 0
    r = runner.invoke(app, ["learn", str(data), "--index", str(tmp_path / "idx"), "--scorer",
                            "qrels", "--budget", "3", "--out", str(tmp_path / "s.npz"),
                            "--quiet"])
    assert r.exit_code == 0, r.output  # bare qrels = the folder's judgments, as in eval
    return data, tmp_path / "idx", tmp_path / "s.npz"


def test_line_progress_prints_done_total_rate_and_eta():
    out = io.StringIO()
    advance = line_progress(interval=0, stream=out)("embedding", 4)
    advance(1)
    advance(3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("embedding: 1/4 (25%)") and "ETA" in lines[0]
    assert lines[1].startswith("embedding: 4/4 (100%)") and lines[1].endswith("done")
    quiet = io.StringIO()
    step = line_progress(interval=3600, stream=quiet)("x", 10)
    step(1)
    assert quiet.getvalue() == ""  # at most one line per interval, and one at the end
    step(9)
    assert quiet.getvalue().count("\n") == 1


def test_a_piped_search_prints_whole_tables_and_progress_lines(flow, tmp_path):
    """stdout a pipe: no cell cut with an ellipsis (tables wider than 80 columns are kept
    whole); stderr a pipe: progress as plain lines with done/total."""
    data, idx, state = flow
    proc = subprocess.run(
        [sys.executable, "-c", "from tttembed.cli import main; main()", "search", str(data),
         "--index", str(idx), "--state", str(state), "--metrics",
         "ndcg@10,recall@100,mrr@10,P_1,map_cut_100"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1",
             "TTTEMBED_PROGRESS_INTERVAL": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) > 80
    assert "map_cut_100" in proc.stdout and "raw vs adapted" in proc.stdout
    assert "encoding queries: 2/2 (100%)" in proc.stderr, proc.stderr


def test_search_with_a_state_shows_raw_beside_adapted_and_json(flow, tmp_path):
    """The adapted result is never shown alone: raw, adapted, the paired difference, its
    interval and p; --json puts every figure in one document on stdout."""
    import tttembed.api as tt
    from tttembed.metrics.stats import compare

    data, idx, state = flow
    r = CliRunner().invoke(app, ["search", str(data), "--index", str(idx), "--state",
                                 str(state), "--quiet", "--json", "--n-resamples", "100"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = {row["metric"]: row for row in doc["paired"]["data"]}
    index = tt.open_index(idx)
    raw = tt.search(index, data).to_run()
    adapted = tt.search(index, data, states=[state]).to_run()
    want = compare(tt.per_query_metric(QRELS, adapted, "ndcg@10"),
                   tt.per_query_metric(QRELS, raw, "ndcg@10"), n_resamples=100)
    got = rows["ndcg@10"]
    assert (got["a"], got["b"], got["delta"], got["p_value"]) == pytest.approx(
        (want.mean_b, want.mean_a, want.delta, want.p_value))
    assert doc["states"][0]["applied"] == 2 and doc["states"][0]["label_leak_queries"] == 2
    text = CliRunner().invoke(app, ["search", str(data), "--index", str(idx), "--state",
                                    str(state), "--quiet"]).output
    assert "raw vs adapted" in text and "adapted - raw" in text and "95% CI" in text


def test_compare_two_runs_with_trec_names_and_run_tag(flow, tmp_path):
    data, idx, state = flow
    runner = CliRunner()
    a, b = tmp_path / "raw.trec", tmp_path / "ad.trec"
    assert runner.invoke(app, ["search", str(data), "--index", str(idx), "--out", str(a),
                               "--run-tag", "baseline", "--quiet"]).exit_code == 0
    assert a.read_text().split("\n")[0].endswith(" baseline")
    assert runner.invoke(app, ["search", str(data), "--index", str(idx), "--state",
                               str(state), "--out", str(b), "--quiet"]).exit_code == 0
    r = runner.invoke(app, ["compare", str(a), str(b), "--qrels",
                            str(data / "qrels" / "test.tsv"), "--metrics", "ndcg_cut_10,map",
                            "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["metrics"]
    assert [x["metric"] for x in rows] == ["ndcg_cut_10", "map"] and rows[0]["n"] == 2
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 not-a-number tag\n")
    r = runner.invoke(app, ["compare", str(a), str(bad), "--qrels",
                            str(data / "qrels" / "test.tsv")])
    assert r.exit_code == 1 and f"{bad}:1: not a run line" in r.output


def test_state_show_and_index_show(flow):
    data, idx, state = flow
    runner = CliRunner()
    r = runner.invoke(app, ["state", "show", str(state)])
    assert r.exit_code == 0, r.output
    for word in ("scope: task", "vectors: 1 of dim 384", "scorer: qrels:", "corpus:", "groups"):
        assert word in r.output, word
    doc = json.loads(runner.invoke(app, ["state", "show", str(state), "--json"]).stdout)
    assert doc["scope"] == "task" and doc["groups"][0]["n"] == 2
    assert doc["groups"][0]["alpha"] == pytest.approx(2 / 3)
    r = runner.invoke(app, ["index", "show", str(idx)])
    assert r.exit_code == 0 and "documents: 3" in r.output and "embedder_spec" in r.output
    doc = json.loads(runner.invoke(app, ["index", "show", str(idx), "--json"]).stdout)
    assert doc["documents"] == 3 and doc["dim"] == 384


def test_a_shadowed_state_says_by_which(flow, tmp_path):
    data, idx, state = flow
    runner = CliRunner()
    q = tmp_path / "q.npz"
    assert runner.invoke(app, ["learn", str(data), "--index", str(idx), "--scorer", "qrels",
                               "--scope", "query", "--budget", "3", "--out", str(q),
                               "--quiet"]).exit_code == 0
    r = runner.invoke(app, ["search", str(data), "--index", str(idx), "--state", str(state),
                            "--state", str(q), "--quiet"])
    assert r.exit_code == 0, r.output
    assert f"applied to 0 of 2 queries (shadowed by {q})" in r.output


def test_json_mode_keeps_stdout_one_document_for_learn_and_eval(flow, tmp_path):
    data, idx, _ = flow
    r = CliRunner().invoke(app, ["learn", str(data), "--index", str(idx), "--scorer", "bm25",
                                 "--budget", "2", "--out", str(tmp_path / "b.npz"),
                                 "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["state"].endswith("b.npz") and doc["scope"] == "task" and doc["groups"]
