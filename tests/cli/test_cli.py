from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tttembed.cli import app
from tttembed.core.io import resolve_version

runner = CliRunner()


def _write_beir(root, corpus, queries, qrels, split="test"):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as fh:
        for did, doc in corpus.items():
            fh.write(json.dumps({"_id": did, **doc}) + "\n")
    with open(root / "queries.jsonl", "w") as fh:
        for qid, text in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "qrels" / f"{split}.tsv", "w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, docs in qrels.items():
            for did, g in docs.items():
                fh.write(f"{qid}\t{did}\t{g}\n")
    return root


def index_and_learn(data, out):
    """``tttembed index`` of the BEIR folder ``data`` into ``out/idx`` and a task-wise state
    learned on its own qrels (b = 3) into ``out/task.npz``: (index folder, state file)."""
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", str(out / "idx")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["learn", str(data), "--index", str(out / "idx"), "--scorer",
                            f"qrels:{data / 'qrels' / 'test.tsv'}", "--budget", "3",
                            "--out", str(out / "task.npz")])
    assert r.exit_code == 0, r.output
    return out / "idx", out / "task.npz"


CORPUS = {
    "d1": {"title": "Photosynthesis", "text": "Plants convert light into chemical energy."},
    "d2": {"title": "Volcanoes", "text": "Magma rises through the crust and erupts as lava."},
    "d3": {"title": "Tides", "text": "The moon's gravity pulls the oceans, causing tides."},
}
QUERIES = {"q1": "how do plants make energy from sunlight", "q2": "why does the sea level change daily"}
QRELS = {"q1": {"d1": 1}, "q2": {"d3": 2}}


def test_help_does_not_import_torch():
    code = ("import sys; from typer.testing import CliRunner; from tttembed.cli import app; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
            "bad = [m for m in ('torch', 'transformers', 'sentence_transformers', 'faiss') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_index_and_search_end_to_end(tmp_path, minilm):
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 0, r.output
    assert "indexed 3 documents" in r.output
    manifest = json.loads((resolve_version(tmp_path / "idx") / "manifest.json").read_text())
    assert manifest["embedder"] == "st:bundled:all-MiniLM-L6-v2" and manifest["dim"] == 384
    r = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "--queries", str(data),
                            "--top-k", "2", "--out", str(tmp_path / "run.trec")])
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines) == 4
    assert lines[0].split()[:3] == ["q1", "Q0", "d1"]
    assert "ndcg@10" in r.output and "1.0000" in r.output
    # re-index with a warm cache: zero model calls
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx"), "--overwrite"])
    assert r.exit_code == 0 and "model calls: 0" in r.output


def test_search_with_plain_query_file_writes_jsonl(tmp_path, minilm):
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    assert runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx")]).exit_code == 0
    qfile = tmp_path / "q.txt"
    qfile.write_text("volcano eruption\nocean tides\n")
    r = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "--queries", str(qfile),
                            "--top-k", "1", "--out", str(tmp_path / "run.jsonl")])
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [(x["query_id"], x["results"][0]["doc_id"]) for x in recs] == [("q1", "d2"), ("q2", "d3")]


@pytest.mark.parametrize("content,expected", [
    ('{"_id": "a", "title": "t", "text": "x"}\n{"_id": "a", "title": "t", "text": "y"}\n',
     "corpus.jsonl:2: duplicate"),
    ('{"_id": "a", "title": "t", "text": "x"}\n{"_id": "b", "text": \n', "corpus.jsonl:2: invalid JSON"),
    ('{"_id": "a", "title": "t"}\n', "corpus.jsonl:1:"),
])
def test_bad_corpus_is_one_line_and_exit_1(tmp_path, content, expected):
    d = tmp_path / "data"
    d.mkdir()
    (d / "corpus.jsonl").write_text(content)
    r = runner.invoke(app, ["index", str(d), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 1
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert expected in err
    assert "Traceback" not in r.output and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "idx").exists()


def test_bad_utf8_and_missing_index(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "corpus.jsonl").write_bytes(b'{"_id": "a", "title": "", "text": "ok"}\n{"_id": "b", "text": "\xff\xfe"}\n')
    r = runner.invoke(app, ["index", str(d), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 1 and "corpus.jsonl:2" in r.stderr and "UTF-8" in r.stderr
    q = tmp_path / "q.txt"
    q.write_text("hello\n")
    r = runner.invoke(app, ["search", "--index", str(tmp_path / "nope"), "--queries", str(q)])
    assert r.exit_code == 1 and "does not exist" in r.stderr


def test_unknown_embedder_scheme_lists_known_ones(tmp_path):
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "i"), "--embedder", "foo:bar"])
    assert r.exit_code == 1
    assert "unknown embedder scheme 'foo'" in r.stderr and "openai, st" in r.stderr


def test_bad_param_is_usage_error(tmp_path):
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "i"), "--param", "m"])
    assert r.exit_code == 2
