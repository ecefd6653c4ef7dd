"""BEIR's ``ignore_identical_ids`` on a three-document toy: a query whose id is also a
document id never finds itself, in search, eval's lists, the guard's lists and compare."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed import api
from tttembed.cli import app
from tttembed.data.beir import identical_ids_rule, load_task
from tttembed.embed.base import l2_normalize
from tttembed.embed.cache import CachedEmbedder
from tttembed.index.search import identical_rows, search_excluding, write_run
from tttembed.metrics.ranking import drop_identical, run_metrics
from tttembed.ttt.judged import source_lists
from tttembed.ttt.queries import query_sources

#: Text -> vector: the query "arg a" is nearest its own document a, then b (its
#: counter-argument, the only relevant one), then c.
VECTORS = {"arg a": [1.0, 0.0, 0.0], "counter b": [0.8, 0.6, 0.0], "other c": [0.5, 0.0, 0.87]}


class ToyEmbedder:
    spec = identity = "toy:fixed"
    dim = 3

    def encode(self, texts, kind="document"):
        return l2_normalize(np.array([VECTORS[t] for t in texts], dtype=np.float32))


def toy_folder(root, name="toy", flag=None):
    folder = root / name
    (folder / "qrels").mkdir(parents=True)
    docs = [("a", "arg a"), ("b", "counter b"), ("c", "other c")]
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "a", "text": "arg a"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\na\tb\t1\n")
    if flag is not None:
        (folder / "tttembed-task.json").write_text(json.dumps({"ignore_identical_ids": flag}))
    return folder


@pytest.fixture()
def toy(tmp_path):
    folder = toy_folder(tmp_path, flag=True)
    emb = CachedEmbedder(ToyEmbedder(), tmp_path / "cache")
    api.index_corpus(folder, tmp_path / "idx", embedder=emb)
    return folder, api.open_index(tmp_path / "idx", embedder=emb), emb


def test_rule_reads_the_folder_flag_then_the_benchmark_setting(tmp_path):
    assert identical_ids_rule(toy_folder(tmp_path / "1", flag=True), "toy")[0] is True
    assert identical_ids_rule(toy_folder(tmp_path / "2", flag=False), "arguana")[0] is False
    assert identical_ids_rule(toy_folder(tmp_path / "3", "arguana"), "arguana")[0] is True
    assert identical_ids_rule(toy_folder(tmp_path / "4", "ArguAna"), "ArguAna")[0] is True
    assert identical_ids_rule(toy_folder(tmp_path / "5"), "toy")[0] is False
    assert load_task(toy_folder(tmp_path / "6", "arguana")).ignore_identical_ids


def test_bad_flag_is_a_data_error_naming_the_file(tmp_path):
    folder = toy_folder(tmp_path)
    (folder / "tttembed-task.json").write_text('{"ignore_identical_ids": "yes"}')
    with pytest.raises(Exception) as info:
        identical_ids_rule(folder, "toy")
    assert "tttembed-task.json" in str(info.value)


def test_search_leaves_the_query_document_out_and_keeps_k(toy):
    folder, index, emb = toy
    dropped = api.search(index, folder, k=2, embedder=emb)
    kept = api.search(index, folder, k=2, embedder=emb, ignore_identical_ids=False)
    assert dropped.identical == ["toy"] and kept.identical == []
    assert list(dropped.to_run()["a"]) == ["b", "c"]  # still k = 2 results
    assert list(kept.to_run()["a"]) == ["a", "b"]
    qrels = dropped.qrels["toy"]
    assert run_metrics(qrels, dropped.to_run())["ndcg@10"] == pytest.approx(1.0)
    assert run_metrics(qrels, kept.to_run())["ndcg@10"] == pytest.approx(1 / np.log2(3))


def test_search_excluding_matches_a_filtered_deeper_search(toy):
    _, index, emb = toy
    x = emb.encode(["arg a", "counter b", "other c"], "query")
    for exclude in ([0, -1, 2], [1, 1, 1], [-1, -1, -1]):
        scores, rows = search_excluding(index, x, 2, np.array(exclude))
        _, full = index.search(x, 3)
        for i, ex in enumerate(exclude):
            assert rows[i].tolist() == [r for r in full[i] if r != ex][:2]
            assert np.all(np.diff(scores[i]) <= 0)
    assert identical_rows(index, ["a", "zz", "c"]).tolist() == [0, -1, 2]


def test_guard_lists_leave_the_query_document_out(toy):
    folder, index, emb = toy
    qs = query_sources(folder)
    x = emb.encode(["arg a"], "query")
    base = api.search(index, folder, k=3, embedder=emb)
    source = (qs, base, index)
    on = source_lists([source], [0], {"": x}, 2, keys=["toy/a"])
    off = source_lists([source], [0], {"": x}, 2)
    assert on[0][""] == ["b", "c"] and off[0][""] == ["a", "b"]


def test_compare_reads_the_rule_from_the_qrels_folder(toy, tmp_path):
    folder, index, emb = toy
    run = api.search(index, folder, k=3, embedder=emb, ignore_identical_ids=False).to_run()
    write_run(run, tmp_path / "a.trec")
    write_run({"a": {"c": 2.0, "b": 1.0, "a": 3.0}}, tmp_path / "b.trec")
    qrels = str(folder / "qrels" / "test.tsv")
    cli = CliRunner()
    on = cli.invoke(app, ["compare", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                          "--qrels", qrels, "--metrics", "ndcg@10", "--json"])
    off = cli.invoke(app, ["compare", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                           "--qrels", qrels, "--metrics", "ndcg@10", "--json",
                           "--keep-identical-ids"])
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    got_on, got_off = json.loads(on.stdout), json.loads(off.stdout)
    assert got_on["ignore_identical_ids"] is True and got_off["ignore_identical_ids"] is False
    assert got_on["metrics"][0]["a"] == pytest.approx(1.0)
    assert got_off["metrics"][0]["a"] == pytest.approx(1 / np.log2(3))
    assert drop_identical({"a": {"a": 1.0, "b": 0.5}}) == {"a": {"b": 0.5}}


def test_compare_names_in_its_legend_the_metrics_it_computed(toy, tmp_path):
    folder, index, emb = toy
    run = api.search(index, folder, k=3, embedder=emb).to_run()
    write_run(run, tmp_path / "a.trec")
    write_run(run, tmp_path / "b.trec")
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                 "--qrels", str(folder / "qrels" / "test.tsv"),
                                 "--metrics", "ndcg@10,map,P_10"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "legend: ndcg@10, map, P_10 = trec_eval means" in said
    assert "recall@100" not in said and "MRR@10" not in said
    assert "ignore_identical_ids: on (tttembed-task.json)" in said
