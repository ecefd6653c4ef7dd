"""The own-document note (trust round 5): `learn` prints it as `learn --dry-run` and
`search` do (the CLI guide promises it for each), and it counts only queries whose own
document holds their text: where query and document ids collide by coincidence (CISI's
"1", "2", ... are ids of unrelated documents) nothing is said, since the hint would drop
real documents."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.cli.test_identical_ids_rule import N_QUERIES, NOTE, _said, toy  # noqa: F401
from tttembed import api
from tttembed.cli import app

# ruff: noqa: F811  (the toy fixture, imported)


def test_learn_prints_the_note_when_it_pays(toy):
    r = CliRunner().invoke(app, ["learn", str(toy["train"]), "--index", str(toy["idx"]),
                                 "--scorer", f"qrels:{toy['qrels']}", "--budget", "2",
                                 "--out", str(toy["tmp"] / "s.npz")])
    assert r.exit_code == 0, r.output
    said = _said(r)
    assert f"6 of 6 queries of train {NOTE}" in said and said.count(NOTE) == 1, said


def test_ids_that_collide_by_coincidence_are_not_said(toy):
    """Queries whose ids are documents' ids but whose texts are other texts (CISI)."""
    folder = toy["tmp"] / "coincidence"
    (folder / "qrels").mkdir(parents=True)
    corpus = [json.loads(ln) for ln in (toy["folder"] / "corpus.jsonl").read_text()
              .splitlines()]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    # each query asks for argument i's topic but under the id of counter-argument i
    queries = {f"c{i}": f"argument {i} for the motion" for i in range(N_QUERIES)}
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"c{i}\ta{i}\t1\n" for i in range(N_QUERIES)))
    api.index_corpus(folder, toy["tmp"] / "idx2", embedder=api.load_embedder("texthash:toy"))
    r = CliRunner().invoke(app, ["search", str(folder), "--index", str(toy["tmp"] / "idx2")])
    assert r.exit_code == 0, r.output
    assert NOTE not in _said(r), r.output  # c_i is in every top 10 (12 documents), by id only
