"""BEIR folders: exact loading of good files, file:line errors for bad ones, shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import shared_dataset
from tttembed.core.errors import DataError, TTTEmbedError
from tttembed.data import (
    Task,
    corpus_fingerprint,
    doc_text,
    load_beir_queries,
    load_corpus,
    load_qrels,
    load_task,
    resolve_task_path,
)


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def jl(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def check(exc: pytest.ExceptionInfo[DataError], path: Path, line: int | None,
          *words: str) -> str:
    """The error names the file, the line and the problem, on one line, with a fix."""
    err = exc.value
    message = str(err)
    assert isinstance(err, TTTEmbedError)
    assert err.path == str(path)
    assert err.line == line
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(prefix), message
    for word in words:
        assert word in message, (word, message)
    assert "\n" not in message
    assert err.fix
    return message


def make_task(root: Path, qrels: dict[str, str] | None = None) -> Path:
    write(root / "corpus.jsonl", jl({"_id": "d1", "title": "T1", "text": "one"},
                                    {"_id": "d2", "title": "", "text": "two"},
                                    {"_id": "d3", "text": "three"}))
    write(root / "queries.jsonl", jl({"_id": "q1", "text": "first"},
                                     {"_id": "q2", "text": "second"},
                                     {"_id": "q3", "text": "third"}))
    for split, body in (qrels or {}).items():
        write(root / "qrels" / f"{split}.tsv", body)
    return root


# ---- corpus: good files -------------------------------------------------------------------

def test_corpus_loads_exactly(tmp_path):
    body = ('\ufeff{"_id": "a", "title": "Title A", "text": "Text A", "extra": 1}\r\n'
            "\n   \n"
            '{"_id": 7, "text": "seven \u2028 with a line separator"}\n'
            '{"_id": "b", "title": "Only title", "text": ""}')
    path = write(tmp_path / "corpus.jsonl", body)
    assert load_corpus(path) == {
        "a": {"title": "Title A", "text": "Text A"},
        "7": {"title": "", "text": "seven \u2028 with a line separator"},
        "b": {"title": "Only title", "text": ""},
    }
    assert list(load_corpus(path)) == ["a", "7", "b"]


def test_empty_document_kept_by_default_rejected_when_strict(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jl({"_id": "a", "text": "x"},
                                               {"_id": "b", "title": " ", "text": ""}))
    assert load_corpus(path)["b"] == {"title": " ", "text": ""}
    with pytest.raises(DataError) as exc:
        load_corpus(path, allow_empty=False)
    check(exc, path, 2, "'b'", "empty title and text")


def test_corpus_where_every_document_is_empty_is_an_error(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jl({"_id": "a", "text": ""}, {"_id": "b", "text": ""}))
    with pytest.raises(DataError) as exc:
        load_corpus(path)
    check(exc, path, None, "every document", "empty")


# ---- corpus: bad files --------------------------------------------------------------------

GOOD = '{"_id": "ok", "title": "", "text": "fine"}\n'


@pytest.mark.parametrize(("bad_line", "words"), [
    ('{"_id": "x", "text": "y"', ("invalid JSON", "column")),
    ('{"_id": "x" "text": "y"}', ("invalid JSON", "delimiter", "column 13")),
    ("not json at all", ("invalid JSON",)),
    ('["x", "y"]', ("expected a JSON object", "array")),
    ('"just a string"', ("expected a JSON object", "string")),
    ('{"title": "t", "text": "y"}', ("missing required field", "'_id'")),
    ('{"_id": "x", "title": "t"}', ("missing required field", "'text'")),
    ('{"_id": 1.5, "text": "y"}', ("'_id'", "string or an integer", "number")),
    ('{"_id": true, "text": "y"}', ("'_id'", "boolean")),
    ('{"_id": null, "text": "y"}', ("'_id'", "null")),
    ('{"_id": ["x"], "text": "y"}', ("'_id'", "array")),
    ('{"_id": "  ", "text": "y"}', ("empty '_id'",)),
    ('{"_id": "x", "text": 3}', ("'text' must be a string", "number")),
    ('{"_id": "x", "title": null, "text": "y"}', ("'title' must be a string", "null")),
    ('{"_id": "ok", "text": "again"}', ("duplicate", "'ok'", "first on line 1")),
])
def test_corpus_bad_line(tmp_path, bad_line, words):
    path = write(tmp_path / "corpus.jsonl", GOOD + "\n" + bad_line + "\n" + GOOD.replace("ok", "z"))
    with pytest.raises(DataError) as exc:
        load_corpus(path)
    check(exc, path, 3, *words)


def test_bad_utf8_names_the_line(tmp_path):
    data = GOOD.encode() + b'{"_id": "x", "text": "caf\xe9"}\n' + GOOD.replace("ok", "z").encode()
    path = write(tmp_path / "corpus.jsonl", data)
    with pytest.raises(DataError) as exc:
        load_corpus(path)
    check(exc, path, 2, "invalid UTF-8", "byte 26")


@pytest.mark.parametrize("content", ["", "\n\n  \n", "\ufeff"])
def test_empty_corpus_file(tmp_path, content):
    path = write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(DataError) as exc:
        load_corpus(path)
    check(exc, path, None, "empty file", "no documents")


def test_missing_corpus_file_names_path_and_layout(tmp_path):
    path = tmp_path / "corpus.jsonl"
    with pytest.raises(DataError) as exc:
        load_corpus(path)
    check(exc, path, None, "file not found", "corpus.jsonl, queries.jsonl and qrels/<split>.tsv")


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(DataError) as exc:
        load_corpus(tmp_path)
    check(exc, tmp_path, None, "directory")


# ---- queries.jsonl ------------------------------------------------------------------------

def test_beir_queries_load_exactly(tmp_path):
    path = write(tmp_path / "queries.jsonl",
                 jl({"_id": "q2", "text": "b", "metadata": {}}, {"_id": 1, "text": " a "}))
    assert load_beir_queries(path) == {"q2": "b", "1": " a "}


@pytest.mark.parametrize(("bad_line", "words"), [
    ('{"_id": "q9", "text": "   "}', ("empty 'text'",)),
    ('{"_id": "q9"}', ("missing required field", "'text'")),
    ('{"_id": "q1", "text": "dup"}', ("duplicate query _id", "'q1'", "first on line 1")),
    ('{"id": "q9", "text": "x"}', ("missing required field", "'_id'")),
])
def test_beir_queries_bad_line(tmp_path, bad_line, words):
    path = write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "x"}\n' + bad_line + "\n")
    with pytest.raises(DataError) as exc:
        load_beir_queries(path)
    check(exc, path, 2, *words)


# ---- qrels --------------------------------------------------------------------------------

def test_qrels_with_and_without_header(tmp_path):
    with_header = write(tmp_path / "a.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\r\n\nq1\td2\t0\n"
                                            "q2\td1\t-1\n")
    without = write(tmp_path / "b.tsv", "q1\td1\t1\nq1\td2\t0\nq2\td1\t-1")
    expected = {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": -1}}
    assert load_qrels(with_header) == expected
    assert load_qrels(without) == expected
    assert load_qrels(with_header, corpus_ids={"d1", "d2"}, query_ids={"q1", "q2"}) == expected


@pytest.mark.parametrize(("bad_line", "words"), [
    ("q1\td3\t1", ("unknown corpus-id", "'d3'", "corpus.jsonl")),
    ("q9\td1\t1", ("unknown query-id", "'q9'", "queries.jsonl")),
    ("q1\td2\t1.5", ("score '1.5' is not an integer",)),
    ("q1\td2\thigh", ("score 'high' is not an integer",)),
    ("q1\td2", ("expected 3 tab-separated columns", "found 2")),
    ("q1 d2 1", ("found 1", "tabs, not spaces")),
    ("q1\t0\td2\t1", ("found 4", "TREC")),
    ("q1\t\t1", ("empty query-id or corpus-id",)),
    ("q1\td1\t2", ("duplicate judgment", "'q1'", "'d1'", "first on line 2")),
])
def test_qrels_bad_line(tmp_path, bad_line, words):
    path = write(tmp_path / "test.tsv", f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{bad_line}\n")
    with pytest.raises(DataError) as exc:
        load_qrels(path, corpus_ids={"d1", "d2"}, query_ids={"q1", "q2"})
    check(exc, path, 3, *words)


def test_qrels_ids_unchecked_without_collections(tmp_path):
    path = write(tmp_path / "test.tsv", "qx\tdx\t3\n")
    assert load_qrels(path) == {"qx": {"dx": 3}}


def test_qrels_header_only_is_empty(tmp_path):
    path = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\n")
    with pytest.raises(DataError) as exc:
        load_qrels(path)
    check(exc, path, None, "empty file", "no judgments")


def test_qrels_header_is_only_allowed_on_the_first_line(tmp_path):
    path = write(tmp_path / "test.tsv", "q1\td1\t1\nquery-id\tcorpus-id\tscore\n")
    with pytest.raises(DataError) as exc:
        load_qrels(path)
    check(exc, path, 2, "not an integer")


def test_qrels_bad_utf8(tmp_path):
    path = write(tmp_path / "test.tsv", b"q1\td1\t1\nq1\td\xff\t1\n")
    with pytest.raises(DataError) as exc:
        load_qrels(path)
    check(exc, path, 2, "invalid UTF-8")


# ---- tasks --------------------------------------------------------------------------------

def test_task_split_queries_follow_queries_file_order(tmp_path):
    root = make_task(tmp_path / "mini", {"test": "q3\td1\t1\nq1\td2\t2\nq3\td3\t0\n",
                                         "train": "q2\td1\t1\n"})
    task = load_task(root)
    assert isinstance(task, Task)
    assert task.name == "mini" and task.root == root and task.split == "test"
    assert list(task.queries) == ["q1", "q3"]
    assert task.queries == {"q1": "first", "q3": "third"}
    assert task.qrels == {"q3": {"d1": 1, "d3": 0}, "q1": {"d2": 2}}
    assert task.corpus["d3"] == {"title": "", "text": "three"}
    assert load_task(root, "train", name="other").queries == {"q2": "second"}
    assert load_task(root, "train", name="other").name == "other"
    assert "corpus" not in repr(task)


def test_task_without_split_or_qrels_has_all_queries(tmp_path):
    root = make_task(tmp_path / "a", {"test": "q1\td1\t1\n"})
    everything = load_task(root, split=None)
    assert everything.queries == {"q1": "first", "q2": "second", "q3": "third"}
    assert everything.qrels == {} and everything.split is None
    bare = load_task(make_task(tmp_path / "b"))
    assert list(bare.queries) == ["q1", "q2", "q3"] and bare.qrels == {} and bare.split is None


def test_task_missing_split_lists_available(tmp_path):
    root = make_task(tmp_path / "t", {"dev": "q1\td1\t1\n", "train": "q2\td1\t1\n"})
    with pytest.raises(DataError) as exc:
        load_task(root, "test")
    check(exc, root / "qrels" / "test.tsv", None, "'test'", "available splits: dev, train")


@pytest.mark.parametrize("split", ["../test", "", ".hidden"])
def test_task_bad_split_name(tmp_path, split):
    root = make_task(tmp_path / "t", {"test": "q1\td1\t1\n"})
    with pytest.raises(DataError, match="bad split name"):
        load_task(root, split)


def test_task_qrels_checked_against_corpus_and_queries(tmp_path):
    root = make_task(tmp_path / "t", {"test": "q1\td1\t1\nq1\td404\t1\n"})
    with pytest.raises(DataError) as exc:
        load_task(root)
    check(exc, root / "qrels" / "test.tsv", 2, "unknown corpus-id", "'d404'")


def test_task_missing_folder_and_files(tmp_path):
    with pytest.raises(DataError) as exc:
        load_task(tmp_path / "nope")
    check(exc, tmp_path / "nope", None, "does not exist", "corpus.jsonl")
    root = make_task(tmp_path / "t")
    (root / "queries.jsonl").unlink()
    with pytest.raises(DataError) as exc:
        load_task(root)
    check(exc, root / "queries.jsonl", None, "file not found", "queries.jsonl")


# ---- text, fingerprint, resolution --------------------------------------------------------

def test_doc_text():
    assert doc_text({"title": "T", "text": "body"}) == "T body"
    assert doc_text({"title": "", "text": "body"}) == "body"
    assert doc_text({"title": "T", "text": ""}) == "T"
    assert doc_text({"text": " x "}) == "x"


def test_fingerprint_is_stable_and_content_sensitive(tmp_path):
    corpus = {"b": {"title": "B", "text": "bee"}, "a": {"title": "", "text": "ay"}}
    fp = corpus_fingerprint(corpus)
    # pinned: an index built today must still match this corpus tomorrow
    assert fp == "fb308705d6e0ce0d74e4cf6b924f7df6425481bb8d70f2ffb2a710b902d145e3"
    assert corpus_fingerprint(dict(reversed(list(corpus.items())))) == fp
    assert corpus_fingerprint({**corpus, "a": {"title": "", "text": "ay!"}}) != fp
    assert corpus_fingerprint({"x": {"title": "ab", "text": "c"}}) != corpus_fingerprint(
        {"x": {"title": "a", "text": "bc"}})
    assert corpus_fingerprint({"ab": {"title": "", "text": "c"}}) != corpus_fingerprint(
        {"a": {"title": "", "text": "bc"}})
    task = load_task(make_task(tmp_path / "t"))
    assert task.fingerprint == corpus_fingerprint(load_corpus(tmp_path / "t" / "corpus.jsonl"))


def test_resolve_task_path(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "scifact").mkdir(parents=True)
    assert resolve_task_path(str(root / "scifact")) == root / "scifact"
    assert resolve_task_path("scifact", data_root=root) == root / "scifact"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TTTEMBED_DATA", str(root))
    assert resolve_task_path("scifact") == root / "scifact"
    monkeypatch.delenv("TTTEMBED_DATA")
    (tmp_path / "data" / "local").mkdir(parents=True)
    assert resolve_task_path("data/local") == Path("data") / "local"  # a path as given
    with pytest.raises(DataError, match="no data root is set"):
        resolve_task_path("local")  # no folder is guessed
    with pytest.raises(DataError) as exc:
        resolve_task_path("missing", data_root=root)
    message = str(exc.value)
    assert "missing" in message and str(root / "missing") in message
    monkeypatch.setenv("TTTEMBED_DATA", str(root))
    with pytest.raises(DataError, match="tried: missing, .*root/missing \\("):
        resolve_task_path("missing")


# ---- the shared data sets (README counts) -------------------------------------------------

SHARED = [  # name, split, docs, queries in split, judgments, all queries
    ("scifact", "test", 5183, 300, 339, 1109),
    ("scifact", "train", 5183, 809, 919, 1109),
    ("cosqa_coir", "test", 20604, 500, 500, 20604),
    ("cosqa_coir", "train", 20604, 19604, 19604, 20604),
    ("cranfield", "test", 1400, 225, 1837, 225),
    ("cisi", "test", 1460, 76, 3114, 112),
    ("medline", "test", 1033, 30, 696, 30),
    ("cacm", "test", 3204, 52, 796, 64),
    ("2wikimultihopqa", "train", 4209, 500, 1184, 664),
    ("hotpotqa_dev200", "test", 1971, 200, 400, 200),
]


@pytest.mark.data
@pytest.mark.parametrize(("name", "split", "docs", "nq", "judged", "allq"), SHARED)
def test_shared_task_counts(name, split, docs, nq, judged, allq):
    task = load_task(shared_dataset(name), split)
    assert task.name == name and task.split == split
    assert len(task.corpus) == docs
    assert len(task.queries) == nq == len(task.qrels)
    assert sum(len(j) for j in task.qrels.values()) == judged
    assert set(task.queries) == set(task.qrels)
    assert len(load_beir_queries(task.root / "queries.jsonl")) == allq
    assert len(task.fingerprint) == 64


@pytest.mark.data
def test_shared_grades_and_empty_documents():
    cran = load_task(shared_dataset("cranfield"))
    grades = {g for judged in cran.qrels.values() for g in judged.values()}
    assert grades == {0, 1, 2, 3, 4}
    # Cranfield 471 and 995 are empty in the original release; 995 is judged for query 125.
    assert cran.corpus["995"] == {"title": "", "text": ""} and cran.qrels["125"]["995"] == 2
    cosqa = load_qrels(shared_dataset("cosqa_coir") / "qrels" / "train.tsv")
    assert {g for judged in cosqa.values() for g in judged.values()} == {0, 1}
