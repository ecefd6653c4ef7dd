"""Plain query files for `tttembed search`: .jsonl, .tsv, .txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tttembed.core.errors import DataError
from tttembed.data import load_queries


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def check(exc: pytest.ExceptionInfo[DataError], path: Path, line: int | None,
          *words: str) -> None:
    err = exc.value
    message = str(err)
    assert err.path == str(path) and err.line == line
    assert message.startswith(f"{path}:{line}: " if line is not None else f"{path}: "), message
    for word in words:
        assert word in message, (word, message)
    assert "\n" not in message and err.fix


def test_jsonl(tmp_path):
    path = write(tmp_path / "q.jsonl", '{"_id": "a", "text": "alpha"}\n\n{"_id": 2, "text": "b"}\n')
    assert load_queries(path) == {"a": "alpha", "2": "b"}


def test_jsonl_is_strict_about_keys(tmp_path):
    path = write(tmp_path / "q.jsonl", '{"_id": "a", "text": "alpha"}\n{"id": "b", "query": "x"}\n')
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, 2, "missing required field", "'_id'")


@pytest.mark.parametrize("header", ["", "query-id\ttext\n", "id\ttext\n", "ID\tText\r\n",
                                    "query_id\ttext\n", "qid\tquery\n", "_id\ttext\n",
                                    "query-id\tquestion\n"])
def test_tsv_with_optional_header(tmp_path, header):
    path = write(tmp_path / "q.tsv", header + "q7\t how do I sort \n\nq2\tsecond\n")
    assert load_queries(path) == {"q7": "how do I sort", "q2": "second"}
    assert list(load_queries(path)) == ["q7", "q2"]


@pytest.mark.parametrize(("body", "line", "words"), [
    ("q1\tfirst\nq2\tsecond\textra\n", 2, ("expected 2 tab-separated columns", "found 3")),
    ("q1\tfirst\nq2 second\n", 2, ("found 1",)),
    ("q1\tfirst\nq2\t   \n", 2, ("empty text", "'q2'")),
    ("q1\tfirst\n\t second\n", 2, ("empty query id",)),
    ("q1\tfirst\n\nq1\tagain\n", 3, ("duplicate query id", "'q1'", "first on line 1")),
    ("q1\tfirst\nid\ttext\n", None, ()),  # a header after line 1 is a query named "id"
])
def test_tsv_errors(tmp_path, body, line, words):
    path = write(tmp_path / "q.tsv", body)
    if line is None:
        assert load_queries(path) == {"q1": "first", "id": "text"}
        return
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, line, *words)


def test_txt_ids_follow_line_numbers(tmp_path):
    path = write(tmp_path / "q.TXT", "first query\n\n  second query  \r\n   \nthird\tquery")
    assert load_queries(path) == {"q1": "first query", "q3": "second query", "q5": "third\tquery"}


def test_txt_bad_utf8(tmp_path):
    path = write(tmp_path / "q.txt", b"ok\nalso ok\nbad \xc3\x28 byte\n")
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, 3, "invalid UTF-8", "byte 5")


@pytest.mark.parametrize("name", ["q.txt", "q.tsv", "q.jsonl"])
def test_empty_files(tmp_path, name):
    path = write(tmp_path / name, "\n \n")
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, None, "empty file")


def test_header_only_tsv_is_empty(tmp_path):
    path = write(tmp_path / "q.tsv", "query-id\ttext\n")
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, None, "empty file", "no queries")


@pytest.mark.parametrize("name", ["q.csv", "queries"])
def test_unknown_suffix(tmp_path, name):
    path = write(tmp_path / name, "q1,text\n")
    with pytest.raises(DataError) as exc:
        load_queries(path)
    check(exc, path, None, "unknown query file type", ".jsonl, .tsv, .txt")


@pytest.mark.parametrize("name", ["missing.txt", "missing.tsv", "missing.jsonl"])
def test_missing_file(tmp_path, name):
    with pytest.raises(DataError) as exc:
        load_queries(tmp_path / name)
    check(exc, tmp_path / name, None, "file not found")
