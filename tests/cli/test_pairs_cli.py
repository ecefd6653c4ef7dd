"""``tttembed pairs export``: the JSONL it writes from a real ledger and a real SQLite
store, its one-line summary, and a one-line error (exit 1) for every input a user can get
wrong, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.tune.test_export import ANSWERS, KEY, QUERIES, fill_ledger, fill_store, write_folder
from tttembed.cli import app
from tttembed.loop.open import open_store
from tttembed.score.ledger import Ledger
from tttembed.tune.pairs import PAIR_KEYS

runner = CliRunner()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    fill_ledger(path)
    with Ledger(path) as db:  # a pair of other data: counted, not exported
        db.put_many(KEY, "a question of another data set", ["some text"], [0.5])
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_folder(tmp_path / "data")


def export(*args: str):
    return runner.invoke(app, ["pairs", "export", *args])


def one_line_error(r, code: int = 1) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.stderr
    return lines[0]


def test_pairs_are_written_with_a_summary(ledger, folder, tmp_path) -> None:
    out = tmp_path / "pairs.jsonl"
    r = export(str(ledger), "--data", str(folder), "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(rows) == len(ANSWERS) and all(tuple(row) == PAIR_KEYS for row in rows)
    assert {(row["query_id"], row["doc_id"]): row["reward"] for row in rows} == ANSWERS
    assert {row["source"] for row in rows} == {KEY} and {row["trusted"] for row in rows} == {None}
    assert f"wrote {len(ANSWERS)} pairs ({KEY}: {len(ANSWERS)}) of the reward ledger " \
           f"{ledger} to {out}" in r.stdout
    assert (f"note: 1 pairs of the ledger are not in {folder}'s queries/corpus"
            in r.stderr)


def test_triplets_are_written_with_their_counts(ledger, folder, tmp_path) -> None:
    out = tmp_path / "triplets.jsonl"
    r = export(str(ledger), "--data", str(folder), "--out", str(out), "--format", "triplets")
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [tuple(row) for row in rows] == [("anchor", "positive", "negative")] * 2
    assert [row["anchor"] for row in rows] == [QUERIES["q1"], QUERIES["q2"]]
    assert ("wrote 2 triplets" in r.stdout and "3 positives (positive = reward >= 0.5), 1 "
            "left out for lack of a judged negative" in r.stdout), r.stdout
    strict = tmp_path / "strict.jsonl"
    r = export(str(ledger), "--data", str(folder), "--out", str(strict), "--format",
               "triplets", "--threshold", "0.85")
    assert r.exit_code == 0 and "wrote 1 triplets" in r.stdout and ">= 0.85" in r.stdout


def test_a_store_with_labels_and_clicks(folder, tmp_path) -> None:
    path = tmp_path / "reg" / "loop.sqlite"
    s = open_store(str(path))
    fill_store(s)
    s.close()
    out = tmp_path / "store.jsonl"
    r = export(str(path), "--data", str(folder), "--out", str(out), "--labels", "--clicks")
    assert r.exit_code == 0, r.output
    assert "wrote 7 pairs (clicks: 2; judge: 2; label: 2; validation: 1) of the feedback store" \
        in r.stdout, r.stdout
    assert f"note: 1 pairs of the store are not in {folder}'s corpus" in r.stderr
    assert "note: 1 pairs recorded without a reward" in r.stderr
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert {(row["source"], row["trusted"]) for row in rows} == {
        ("judge", True), ("judge", False), ("label", True), ("clicks", True),
        ("clicks", False), ("validation", True)}
    line = one_line_error(export(str(path), "--data", str(folder), "--out",
                                 str(tmp_path / "x.jsonl"), "--scorer", KEY))
    assert "is a feedback store: --scorer picks a reward ledger's scorer key" in line


def test_an_existing_output_is_refused_then_replaced_on_request(ledger, folder,
                                                                 tmp_path) -> None:
    out = tmp_path / "pairs.jsonl"
    out.write_text("keep me\n")
    line = one_line_error(export(str(ledger), "--data", str(folder), "--out", str(out)))
    assert line == (f"error: output {out} already exists; pass --overwrite (overwrite=True) "
                    "to replace it, or choose another path")
    assert out.read_text() == "keep me\n"
    r = export(str(ledger), "--data", str(folder), "--out", str(out), "--overwrite")
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == len(ANSWERS)


def test_bad_inputs_are_one_line_errors_and_write_nothing(ledger, folder, tmp_path) -> None:
    out = tmp_path / "out.jsonl"
    empty = tmp_path / "empty.sqlite"
    Ledger(empty).close()
    cases = [
        ([str(tmp_path / "nope.sqlite"), "--data", str(folder)],
         f"error: {tmp_path / 'nope.sqlite'} does not exist (give a reward ledger"),
        ([str(empty), "--data", str(folder)],
         f"error: reward ledger {empty} holds no judged pairs"),
        ([str(ledger)], f"error: {ledger} keeps the texts' digests, not the texts: pass "
                        "--data FOLDER"),
        ([str(ledger), "--data", str(folder), "--threshold", "0"],
         "error: reward threshold must be in (0, 1], got 0.0"),
        ([str(ledger), "--data", str(folder), "--scorer", "bm25"],
         "holds no pairs of scorer key 'bm25'; its keys: fake:table#v1"),
        ([str(ledger), "--data", str(tmp_path / "missing")], "is not a folder"),
    ]
    for args, expected in cases:
        line = one_line_error(export(*args, "--out", str(out)))
        assert line.startswith(expected) or expected in line, (args, line)
        assert not out.exists()
    r = export(str(ledger), "--data", str(folder), "--out", str(out), "--format", "csv")
    assert r.exit_code == 2 and "'csv' is not one of pairs, triplets" in r.output
    assert not out.exists()
