"""BEIR/MTEB ``ignore_identical_ids`` whatever form the queries take: `learn`, `rerank`,
`eval` and the Python functions take the flags `search` takes, both at once is a usage
error, the rule follows the task (``--task arguana`` on a query file, the index's corpus
folder's settings) and its line says where it came from; with the rule off, queries that
find their own document are said once, with the count and the flag.

A toy corpus of "arguments" whose embedder hashes the text alone (a query and the
document of the same text get the same vector): each query, whose id is also a document
id, finds its own document first, as ArguAna's do."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed import api
from tttembed.cli import app
from tttembed.core import backends
from tttembed.core.notes import NOTES
from tttembed.embed.base import l2_normalize

N_QUERIES = 6


def _noise(key: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim)


class TextHashEmbedder:
    """Vectors from the text alone (query and document alike): the topic of the number
    in it (an argument and its counter-argument share it) plus a hash of the text."""

    dim = 16

    def __init__(self, rest: str = "", **options):
        self.spec = self.identity = f"texthash:{rest}"

    def encode(self, texts, kind="document"):
        rows = []
        for t in texts:
            topic = [w for w in t.split() if w.isdigit()]
            base = _noise(f"topic {topic[0]}", self.dim) if topic else np.zeros(self.dim)
            rows.append(2 * base + _noise(t, self.dim))
        return l2_normalize(np.array(rows, dtype=np.float32).reshape(len(texts), self.dim))


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """A BEIR folder ``args`` (12 documents; 6 queries, each also a document, each judged
    with its counter-argument), query files train.jsonl / test.jsonl of its queries, and
    its index."""
    monkeypatch.setitem(backends._EXTRA["embedder"], "texthash", TextHashEmbedder)
    folder = tmp_path / "args"
    (folder / "qrels").mkdir(parents=True)
    docs = {f"a{i}": f"argument {i} for the motion" for i in range(N_QUERIES)}
    docs |= {f"c{i}": f"counter {i} against the motion" for i in range(N_QUERIES)}
    queries = {f"a{i}": docs[f"a{i}"] for i in range(N_QUERIES)}
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    lines = "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    (folder / "queries.jsonl").write_text(lines)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"a{i}\tc{i}\t1\n" for i in range(N_QUERIES)))
    (tmp_path / "train.jsonl").write_text(lines)
    api.index_corpus(folder, tmp_path / "idx", embedder=api.load_embedder("texthash:toy"))
    return {"folder": folder, "train": tmp_path / "train.jsonl", "idx": tmp_path / "idx",
            "qrels": folder / "qrels" / "test.tsv", "tmp": tmp_path}


def _said(r) -> str:
    return " ".join(r.output.split())


NOTE = "find their own document (the one whose id is the query id)"


def test_learn_takes_the_flags_and_task_arguana_turns_the_rule_on(toy):
    """Before: `learn` had no such option (exit 2, "No such option:
    --ignore-identical-ids"), and a query file never had the rule on."""
    cli = CliRunner()
    base = ["learn", str(toy["train"]), "--index", str(toy["idx"]), "--scorer",
            f"qrels:{toy['qrels']}", "--dry-run"]
    r = cli.invoke(app, [*base, "--ignore-identical-ids"])
    assert r.exit_code == 0, r.output
    assert ("ignore_identical_ids: on for train (--ignore-identical-ids)" in _said(r)), r.output
    r = cli.invoke(app, [*base, "--task", "arguana"])
    assert r.exit_code == 0, r.output
    said = _said(r)
    assert ("ignore_identical_ids: on for arguana (the benchmark's setting for task "
            "arguana)") in said, said
    assert NOTE not in said


def test_with_the_rule_off_learn_and_search_say_that_queries_find_themselves(toy):
    """Before: nothing said; 6 of 6 queries kept their own document first."""
    cli = CliRunner()
    r = cli.invoke(app, ["learn", str(toy["train"]), "--index", str(toy["idx"]), "--scorer",
                         f"qrels:{toy['qrels']}", "--dry-run"])
    assert r.exit_code == 0, r.output
    said = _said(r)
    assert f"6 of 6 queries of train {NOTE} in their top" in said, said
    assert "--ignore-identical-ids" in said and said.count(NOTE) == 1
    r = cli.invoke(app, ["search", str(toy["train"]), "--index", str(toy["idx"])])
    assert r.exit_code == 0 and _said(r).count(f"6 of 6 queries of train {NOTE}") == 1, r.output
    r = cli.invoke(app, ["search", str(toy["train"]), "--index", str(toy["idx"]),
                         "--keep-identical-ids"])  # asked for: no note
    assert r.exit_code == 0 and NOTE not in _said(r), r.output


@pytest.mark.parametrize("command", ["search", "learn", "rerank", "eval", "compare"])
def test_both_flags_at_once_is_a_one_line_usage_error(toy, command):
    """Before: the last flag won silently (search, eval, compare) or learn/rerank had no
    such option."""
    args = {"search": ["search", str(toy["train"]), "--index", str(toy["idx"])],
            "learn": ["learn", str(toy["train"]), "--index", str(toy["idx"]), "--scorer",
                      "bm25"],
            "rerank": ["rerank", str(toy["train"]), "--index", str(toy["idx"]), "--scorer",
                       "bm25"],
            "eval": ["eval", str(toy["folder"])],
            "compare": ["compare", "a.trec", "b.trec", "--qrels", str(toy["qrels"])]}[command]
    r = CliRunner().invoke(app, [*args, "--keep-identical-ids", "--ignore-identical-ids"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert lines == ["Error: --ignore-identical-ids and --keep-identical-ids contradict each "
                     "other: give one of them (or neither: the data decides)"], r.output


def test_python_functions_take_the_rule_and_a_query_file_follows_its_task(toy):
    index = api.open_index(toy["idx"])
    raw = api.search(index, toy["train"], k=3)
    assert raw.identical == [] and all(q in run for q, run in raw.to_run().items())
    named = api.search(index, toy["train"], k=3, task="arguana")
    assert named.identical == ["arguana"]
    assert named.identical_why == {"arguana": "on (the benchmark's setting for task arguana)"}
    assert all(q not in run for q, run in named.to_run().items())
    flagged = api.rerank(index, toy["train"], scorer=f"qrels:{toy['qrels']}", budget=2, k=3,
                         ignore_identical_ids=True)
    assert all(q not in run for q, run in flagged.to_run().items())
    state = api.learn(index, toy["train"], scorer=f"qrels:{toy['qrels']}", budget=2,
                      ignore_identical_ids=True, dry_run=True, folds=0)
    assert state.pairs["requested"] > 0


def test_the_index_corpus_folder_settings_turn_the_rule_on_for_a_query_file(toy):
    (toy["folder"] / "tttembed-task.json").write_text('{"ignore_identical_ids": true}')
    r = CliRunner().invoke(app, ["search", str(toy["train"]), "--index", str(toy["idx"])])
    assert r.exit_code == 0, r.output
    said = _said(r)
    assert (f"ignore_identical_ids: on for train (tttembed-task.json of the index's corpus "
            f"folder {toy['folder']})") in said, said
    assert NOTE not in said


def test_eval_says_it_once_too(toy, caplog):
    """`eval` on a folder not named as the benchmark: the same note."""
    caplog.set_level(logging.WARNING, logger=NOTES)
    options = dict(embedder="texthash:toy", scorers=["bm25"], scopes=["global"],
                   budgets=[1.0], baselines=[], n_resamples=10, cache_dir=toy["tmp"] / "cache")
    off = api.evaluate([str(toy["folder"])], **options)
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert notes and "6 of 6 queries of args" in notes[0], notes
    assert off.data["tasks"][0]["ignore_identical_ids_why"] == "off"
    caplog.clear()
    on = api.evaluate([str(toy["folder"])], ignore_identical_ids=True, **options)
    assert on.data["tasks"][0]["ignore_identical_ids_why"] == "on (--ignore-identical-ids)"
    assert not [r for r in caplog.records if NOTE in r.getMessage()]


def test_the_label_leak_banner_says_the_overlap_is_by_text(toy):
    """A held-out split that shares no id with the rewarded one, but one text (as ArguAna
    files 108 arguments under two ids; argument 2 is one the query-wise state learned): the banner says the overlap it found. Before:
    `LABEL LEAK on 1 of 2 judged queries` and "rewarded it with their own judgments"."""
    cli = CliRunner()
    state = toy["tmp"] / "q.npz"
    r = cli.invoke(app, ["learn", str(toy["train"]), "--index", str(toy["idx"]), "--scorer",
                         f"qrels:{toy['qrels']}", "--scope", "query", "--budget", "3",
                         "--out", str(state)])
    assert r.exit_code == 0, r.output
    held = toy["tmp"] / "held"
    (held / "qrels").mkdir(parents=True)
    (held / "corpus.jsonl").write_text((toy["folder"] / "corpus.jsonl").read_text())
    (held / "queries.jsonl").write_text(
        json.dumps({"_id": "b2", "text": "argument 2 for the motion"}) + "\n"
        + json.dumps({"_id": "b9", "text": "a question nobody rewarded"}) + "\n")
    (held / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nb2\tc2\t1\n"
                                             "b9\tc1\t1\n")
    r = cli.invoke(app, ["search", str(held), "--index", str(toy["idx"]), "--state",
                         str(state), "--task", "train"])
    assert r.exit_code == 0, r.output
    said = _said(r)
    assert ("LABEL LEAK on 1 of 2 judged queries (their text is the text of a rewarded "
            "query)") in said, said
    assert "matched by text, not by id, so the same text under another id counts" in said
    assert "label-leak queries: b2" in said
