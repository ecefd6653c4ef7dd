"""LABEL LEAK is per query, not all or nothing: a state learned from the judgments of a
train split, searched on a test split where one question's text repeats, marks that
question and gives the paired figure without it beside the figure with it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.cli.test_cli import CORPUS, QRELS, QUERIES, _write_beir, index_and_learn
from tttembed.cli import app

TEST_QUERIES = {"t1": QUERIES["q1"], "t2": "which force drives the ocean tides",
                "t3": "what comes out of a volcano"}
TEST_QRELS = {"t1": {"d1": 1}, "t2": {"d3": 1}, "t3": {"d2": 1}}


def test_an_overlapping_query_is_marked_and_the_figure_without_it_is_printed(tmp_path, minilm):
    train = _write_beir(tmp_path / "train", CORPUS, QUERIES, QRELS)
    test = _write_beir(tmp_path / "test", CORPUS, TEST_QUERIES, TEST_QRELS)
    runner = CliRunner()
    idx, state = index_and_learn(train, tmp_path)
    args = ["search", str(test), "--index", str(idx), "--state",
            str(state), "--task", "train", "--allow-foreign-corpus"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "LABEL LEAK on 1 of 3 judged queries" in out, out
    assert "label-leak queries: t1" in out, out
    assert "without the 1 label-leak query" in out, out
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["label_leak"] == {"train": ["t1"]}
    rows = doc["paired_without_label_leak"]["train"]
    assert rows and all(row["n"] == 2 for row in rows), rows
    assert all(row["n"] == 3 for row in doc["paired"]["train"])
