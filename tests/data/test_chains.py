"""Multi-hop chains: exact loading, file:line errors, and the shared multi-hop sets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import shared_dataset
from tttembed.core.errors import DataError
from tttembed.data import Chain, load_chains, load_multihop, load_task


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


FIRST = {"qid": "c1", "question": "Who?", "answer": "Ann", "type": "bridge",
         "chain": ["d2", "d1"], "chain_titles": ["B", "A"], "context_doc_ids": ["d1", "d2", "d3"],
         "supporting_facts": [["B", 0], ["A", 1]]}


def chains_file(tmp_path: Path, *records: object) -> Path:
    return write(tmp_path / "chains_test.jsonl",
                 "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def test_chains_load_exactly(tmp_path):
    path = chains_file(tmp_path, FIRST, "", {"qid": 5, "question": "What?", "chain": ["d3"]})
    chains = load_chains(path, corpus_ids={"d1", "d2", "d3"})
    assert chains == [
        Chain("c1", "Who?", ("d2", "d1"), "bridge", "Ann", ("d1", "d2", "d3")),
        Chain("5", "What?", ("d3",), "", "", ()),
    ]
    assert [c.hops for c in chains] == [2, 1]
    assert load_chains(path) == chains  # ids unchecked without corpus_ids


@pytest.mark.parametrize(("change", "words"), [
    ({"chain": []}, ("empty 'chain'",)),
    ({"chain": None}, ("'chain' must be a list", "null")),
    ({"chain": "d1"}, ("'chain' must be a list", "string")),
    ({"chain": ["d1", 2.5]}, ("'chain' item 2", "2.5")),
    ({"chain": ["d1", ""]}, ("'chain' item 2",)),
    ({"chain": ["d1", "d1"]}, ("lists id 'd1' twice",)),
    ({"chain": ["d1", "d404"]}, ("chain names unknown document 'd404'", "corpus.jsonl")),
    ({"context_doc_ids": ["d1", "d405"]}, ("context_doc_ids names unknown document 'd405'",)),
    ({"context_doc_ids": "d1"}, ("'context_doc_ids' must be a list",)),
    ({"question": " "}, ("empty 'question'",)),
    ({"answer": 3}, ("'answer' must be a string", "number")),
    ({"type": ["bridge"]}, ("'type' must be a string", "array")),
    ({"qid": "c1"}, ("duplicate qid", "'c1'", "first on line 1")),
    ({"qid": False}, ("'qid' must be a string or an integer", "boolean")),
])
def test_chain_bad_line(tmp_path, change, words):
    second = {**FIRST, "qid": "c2", **change}
    path = chains_file(tmp_path, FIRST, second)
    with pytest.raises(DataError) as exc:
        load_chains(path, corpus_ids={"d1", "d2", "d3"})
    check(exc, path, 2, *words)


@pytest.mark.parametrize("key", ["qid", "question", "chain"])
def test_chain_missing_required_field(tmp_path, key):
    second = {k: v for k, v in {**FIRST, "qid": "c2"}.items() if k != key}
    path = chains_file(tmp_path, FIRST, second)
    with pytest.raises(DataError) as exc:
        load_chains(path)
    check(exc, path, 2, "missing required field", repr(key))


def test_chain_invalid_json_and_empty_file(tmp_path):
    path = chains_file(tmp_path, FIRST, '{"qid": "c2", "chain": [}')
    with pytest.raises(DataError) as exc:
        load_chains(path)
    check(exc, path, 2, "invalid JSON", "column 25")
    empty = write(tmp_path / "chains_dev.jsonl", "\n")
    with pytest.raises(DataError) as exc:
        load_chains(empty)
    check(exc, empty, None, "empty file", "no chains")


def test_load_multihop(tmp_path):
    write(tmp_path / "corpus.jsonl", "".join(
        json.dumps({"_id": d, "title": d.upper(), "text": f"text {d}"}) + "\n"
        for d in ("d1", "d2", "d3")))
    chains_file(tmp_path, FIRST)
    write(tmp_path / "chains_train.jsonl", json.dumps({**FIRST, "chain": ["d3"]}) + "\n")
    corpus, chains = load_multihop(tmp_path, "test")
    assert list(corpus) == ["d1", "d2", "d3"] and corpus["d2"] == {"title": "D2", "text": "text d2"}
    assert [c.chain for c in chains] == [("d2", "d1")]
    assert load_multihop(str(tmp_path), "train")[1][0].chain == ("d3",)
    with pytest.raises(DataError) as exc:
        load_multihop(tmp_path, "dev")
    check(exc, tmp_path / "chains_dev.jsonl", None, "'dev'", "available splits: test, train")
    with pytest.raises(DataError, match="bad split name"):
        load_multihop(tmp_path, "../test")
    with pytest.raises(DataError) as exc:
        load_multihop(tmp_path / "absent", "test")
    check(exc, tmp_path / "absent", None, "does not exist")


def test_load_multihop_checks_ids_against_corpus(tmp_path):
    write(tmp_path / "corpus.jsonl", json.dumps({"_id": "d1", "text": "only"}) + "\n")
    path = chains_file(tmp_path, {**FIRST, "chain": ["d1"], "context_doc_ids": ["d1"]},
                       {**FIRST, "qid": "c2", "context_doc_ids": []})
    with pytest.raises(DataError) as exc:
        load_multihop(tmp_path, "test")
    check(exc, path, 2, "unknown document 'd2'")


MULTIHOP = [  # name, split, docs, questions, {hops: count}, {type: count}
    ("2wikimultihopqa", "train", 4209, 500, {2: 408, 4: 92}, None),
    ("2wikimultihopqa", "test", 4209, 164, {2: 121, 4: 43}, None),
    ("hotpotqa_dev200", "test", 1971, 200, {2: 200}, {"bridge": 134, "comparison": 66}),
]


@pytest.mark.data
@pytest.mark.parametrize(("name", "split", "docs", "nq", "hops", "types"), MULTIHOP)
def test_shared_multihop_counts(name, split, docs, nq, hops, types):
    root = shared_dataset(name)
    corpus, chains = load_multihop(root, split)
    assert len(corpus) == docs and len(chains) == nq
    assert dict(Counter(c.hops for c in chains)) == hops
    if types is not None:
        assert dict(Counter(c.type for c in chains)) == types
    assert all(c.answer and c.question and c.context_doc_ids for c in chains)
    # the gold chain of every question is exactly its judged set in qrels/<split>.tsv
    task = load_task(root, split)
    assert {c.qid: set(c.chain) for c in chains} == {q: set(j) for q, j in task.qrels.items()}
    assert all(task.queries[c.qid] == c.question for c in chains)


@pytest.mark.data
def test_shared_2wiki_four_doc_questions_are_bridge_comparison():
    _, chains = load_multihop(shared_dataset("2wikimultihopqa"), "train")
    assert {c.type for c in chains if c.hops == 4} == {"bridge_comparison"}
    assert chains[0].chain == ("2wk-7", "2wk-6")
