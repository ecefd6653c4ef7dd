"""The independent fault matrix's offline cases (issue 38, section 6): no silent wrong
number, no traceback or crash, and messages that point the right way."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.faults.conftest import one_line_error, run_cli
from tests.servers import LocalOpenAIServer, Reply
from tttembed.cli import app
from tttembed.core.errors import BackendError
from tttembed.score.base import Item, get_scorer

MODULES = ("json", "csv", "re", "pathlib", "shutil", "functools")  # 141 docs, 14 queries


@pytest.fixture(scope="module")
def demo(tmp_path_factory, minilm) -> dict[str, Path]:
    """The demo task on six stdlib modules (14 queries) and its index."""
    from tttembed.demo import export_demo

    root = tmp_path_factory.mktemp("trust")
    data = export_demo(root / "tiny", modules=MODULES)
    r = CliRunner().invoke(app, ["index", str(data), "--out", str(root / "idx")])
    assert r.exit_code == 0, r.output
    return {"root": root, "data": data, "idx": root / "idx",
            "qrels": data / "qrels" / "test.tsv"}


def _trec(path: Path, run: dict[str, list[str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {d} {i + 1} {1.0 / (i + 1):.4f} t\n"
                            for q, docs in run.items() for i, d in enumerate(docs)))
    return path


# -- compare: over the common judged queries -------------------------------------------------
def test_compare_is_over_the_judged_queries_both_runs_answer(tmp_path):
    """`compare A B` where B answers half of the judged queries compares over the common
    ones (the absent ones never score 0 in B's mean), prints how many each run lacks; an
    empty run is refused with one line."""
    qrels = tmp_path / "q.tsv"
    qrels.write_text("".join(f"q{i}\td{i}\t1\n" for i in range(8)))
    a = _trec(tmp_path / "a.trec", {f"q{i}": [f"d{i}", "x"] for i in range(8)})
    b = _trec(tmp_path / "b.trec", {f"q{i}": [f"d{i}", "x"] for i in range(4)})
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--qrels", str(qrels), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["metrics"]
    ndcg = next(x for x in rows if x["metric"] == "ndcg@10")
    assert ndcg["n"] == 4 and ndcg["lacks_a"] == 0 and ndcg["lacks_b"] == 4, ndcg
    assert ndcg["delta"] == pytest.approx(0.0), ndcg  # B is A on the queries it answers
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--qrels", str(qrels)])
    assert "B" in r.stdout and "lacks 4" in r.stdout, r.stdout
    (tmp_path / "empty.trec").write_text("")
    proc = run_cli("compare", str(a), str(tmp_path / "empty.trec"), "--qrels", str(qrels))
    assert "answers none of the 8 judged queries" in one_line_error(proc)


def test_compare_of_a_run_that_is_not_utf8_is_one_line(tmp_path):
    """`compare` of a run file holding bytes that are not UTF-8: one line naming the file
    and line, exit 1, no UnicodeDecodeError traceback."""
    qrels = tmp_path / "q.tsv"
    qrels.write_text("q1\td1\t1\n")
    a = _trec(tmp_path / "a.trec", {"q1": ["d1"]})
    bad = tmp_path / "bad.trec"
    bad.write_bytes(b"q1 Q0 d1 1 1.0 t\nq1 Q0 \xff\xfe 2 0.5 t\n")
    line = one_line_error(run_cli("compare", str(a), str(bad), "--qrels", str(qrels)))
    assert f"{bad}:2" in line and "UTF-8" in line, line


# -- the eval report reads any cache entry ----------------------------------------------------
def test_the_report_ignores_cache_values_of_unknown_queries_and_tasks():
    """An eval cell cache entry with an extra per-query key (no task/ prefix) or a task
    no longer evaluated does not crash the report's summary (ValueError / KeyError); its
    rows equal those of the clean entry."""
    from tttembed.evaluation.method_cells import MethodResult
    from tttembed.evaluation.report import summarise

    raw = {m: {"t/q1": 0.2, "t/q2": 0.4, "t/q3": 0.1} for m in ("ndcg@10", "recall@100")}
    clean = {m: {"t/q1": 0.5, "t/q2": 0.4, "t/q3": 0.3} for m in raw}
    dirty = {m: {**v, "stray": 1.0, "gone/q9": 0.7} for m, v in clean.items()}
    rec = MethodResult("fixed", "ttt", clean, b=1, budget=3, setting={"scope": "task"})
    want = summarise([rec], raw, n_resamples=50)
    got = summarise([replace(rec, per_query=dirty)], raw, n_resamples=50)
    assert got["rows"][0]["tasks"] == want["rows"][0]["tasks"]
    assert got["rows"][0]["vs_raw"] == want["rows"][0]["vs_raw"]


# -- the judge check ------------------------------------------------------------------------
def test_an_inverted_judge_is_refused_before_learning(demo, tmp_path):
    """A judge whose rewards rise toward the bottom of the base lists (human labels,
    inverted: noisy-qrels flip=1) is refused before anything is learned, by the named
    label-free judge check; --trust-judge learns anyway and says so; an honest judge
    passes with its line in the output."""
    inverted = f"noisy-qrels:{demo['qrels']}?flip=1"
    base = ["learn", str(demo["data"]), "--index", str(demo["idx"]), "--budget", "10",
            "--cache-dir", str(tmp_path / "c"), "--method", "auto"]
    r = CliRunner().invoke(app, [*base, "--scorer", inverted, "--out", str(tmp_path / "i.npz")])
    assert r.exit_code == 1 and "judge check" in r.output, r.output
    assert "prefers the bottom of the lists" in r.output and "--trust-judge" in r.output
    assert not (tmp_path / "i.npz").exists()
    r = CliRunner().invoke(app, [*base, "--scorer", inverted, "--trust-judge",
                                 "--out", str(tmp_path / "t.npz")])
    assert r.exit_code == 0, r.output
    assert "learning anyway (--trust-judge)" in r.output, r.output
    r = CliRunner().invoke(app, [*base, "--scorer", "qrels", "--out", str(tmp_path / "q.npz")])
    assert r.exit_code == 0 and "judge check: reward vs base rank" in r.output, r.output


def test_the_judge_check_alone(caplog):
    """rank_agreement is +1 for rewards that fall down the list, -1 for rising ones;
    check_judge refuses the rising ones, passes the falling ones, decides nothing on
    too few queries."""
    from tttembed.core.errors import DataError
    from tttembed.ttt.sanity import check_judge, rank_agreement

    lists = {f"q{i}": ["a", "b", "c", "d"] for i in range(8)}
    falling = {q: {"a": 1.0, "b": 0.6, "c": 0.3, "d": 0.0} for q in lists}
    rising = {q: {"a": 0.0, "b": 0.3, "c": 0.6, "d": 1.0} for q in lists}
    assert list(rank_agreement(falling, lists).values()) == pytest.approx([1.0] * 8)
    assert list(rank_agreement(rising, lists).values()) == pytest.approx([-1.0] * 8)
    assert not check_judge(falling, lists).refused
    with pytest.raises(DataError, match="prefers the bottom"):
        check_judge(rising, lists)
    caplog.clear()
    assert not check_judge({"q0": rising["q0"]}, lists).refused
    assert "judge check: too few queries" in caplog.text


# -- threads, budgets, stores -----------------------------------------------------------------
@pytest.mark.parametrize("how", ["option", "env"])
def test_an_absurd_thread_count_is_capped_with_a_note(demo, how):
    """`--threads 99999` / TTTEMBED_THREADS=99999: capped at the CPUs the process may use,
    with a note; the command succeeds (never a segmentation fault, exit 139)."""
    args = ["search", str(demo["data"]), "--index", str(demo["idx"]), "--quiet"]
    extra = {"TTTEMBED_THREADS": "99999"} if how == "env" else {}
    proc = run_cli(*(["--threads", "99999"] if how == "option" else []), *args, **extra)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "99999 is more than the" in proc.stderr and "CPUs" in proc.stderr, proc.stderr


def test_a_budget_of_zero_says_so(demo, tmp_path):
    """`learn --budget 0`: one line saying the budget plans no pair (never "every one of
    the 0 pairs is missing ... check the scorer's URL")."""
    proc = run_cli("learn", str(demo["data"]), "--index", str(demo["idx"]), "--scorer",
                   "qrels", "--budget", "0", "--out", str(tmp_path / "s.npz"))
    line = one_line_error(proc)
    assert "plans no pair" in line and "URL" not in line and "missing" not in line, line


@pytest.mark.parametrize("kind", ["folder", "unopenable"])
def test_a_store_or_ledger_that_cannot_be_opened_says_why(tmp_path, kind):
    """A feedback store or reward ledger at a folder, or at a path SQLite cannot open,
    says which (never "unreadable ... move it aside", advice that would move an index
    folder away)."""
    from tttembed.core.errors import ConfigError
    from tttembed.loop.open import open_store
    from tttembed.score.ledger import Ledger

    if kind == "folder":
        target = tmp_path / "idx"
        target.mkdir()
    else:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        target = blocker / "loop.sqlite"  # its "folder" is a file
    for open_it in (lambda: open_store(str(target)), lambda: Ledger(target).count()):
        with pytest.raises((ConfigError, OSError)) as err:
            open_it()
        text = str(err.value)
        assert "move it aside" not in text, text
        if kind == "folder":
            assert "is a folder, not a SQLite file" in text, text


# -- judges ---------------------------------------------------------------------------------
def test_a_judge_answering_nan_is_refused_for_what_it_did():
    """A rerank judge that answers NaN for a document is refused naming the NaN (never
    "the server dropped results": it dropped nothing)."""
    body = '{"results": [{"index": 0, "relevance_score": NaN}, {"index": 1, "relevance_score": 0.2}]}'
    with LocalOpenAIServer() as srv:
        srv.script(Reply(body=body, headers={"Content-Type": "application/json"}))
        scorer = get_scorer(f"rerank:m@{srv.url}")
        with pytest.raises(BackendError) as err:
            scorer.score(Item("q", "plants"), [Item("d1", "light"), Item("d2", "sea")])
    assert "nan" in str(err.value).lower() and "dropped" not in str(err.value), err.value


def test_a_rerun_says_how_many_served_pairs_have_no_reward(demo, tmp_path):
    """A rerun whose pairs the ledger holds without a score (an earlier run got none)
    says how many served pairs have no reward (never `missing 0`)."""
    ledger = tmp_path / "ledger.sqlite"
    args = ["learn", str(demo["data"]), "--index", str(demo["idx"]), "--scorer", "bm25",
            "--budget", "5", "--ledger", str(ledger), "--overwrite",
            "--out", str(tmp_path / "s.npz")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    with sqlite3.connect(ledger) as conn:
        keys = conn.execute("SELECT spec_id, query_hash, doc_hash FROM rewards LIMIT 7")
        conn.executemany("UPDATE rewards SET reward = NULL WHERE spec_id = ? AND "
                         "query_hash = ? AND doc_hash = ?", keys.fetchall())
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "missing 7 (7 served from the ledger with no reward" in r.output, r.output


# -- inputs ---------------------------------------------------------------------------------
def test_a_qrels_link_loop_is_an_error(demo, tmp_path):
    """A BEIR folder whose qrels/ is a symlink loop: `search` exits 1 with one line naming
    it (never exit 0 with no metrics and no word)."""
    import shutil

    data = tmp_path / "loop"
    shutil.copytree(demo["data"], data, symlinks=True)
    shutil.rmtree(data / "qrels")
    os.symlink(data / "qrels", data / "qrels")
    line = one_line_error(run_cli("search", str(data), "--index", str(demo["idx"]),
                                  "--quiet"))
    assert "qrels" in line and "loop" in line, line


def test_a_corpus_without_line_ends_is_refused_at_the_line_limit(tmp_path):
    """A corpus.jsonl pointing at /dev/zero is refused at the per-line limit with one
    clear line (never read whole into memory)."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    data = tmp_path / "zero"
    data.mkdir()
    os.symlink("/dev/zero", data / "corpus.jsonl")
    proc = run_cli("index", str(data), "--out", str(tmp_path / "idx"),
                   TTTEMBED_MAX_LINE_BYTES=str(1 << 20), timeout=120)
    line = one_line_error(proc)
    assert "corpus.jsonl:1" in line and "longer than" in line, line


@pytest.mark.parametrize("scheme", ["milvus", "qdrant"])
def test_opening_a_database_that_does_not_exist_creates_nothing(tmp_path, scheme):
    """`index show milvus:PATH/x` and `search -i qdrant:PATH/x` for a database that does
    not exist: "does not exist", and no empty database folder is left behind."""
    where = tmp_path / "nowhere" / ("db.db" if scheme == "milvus" else "qd")
    spec = f"{scheme}:{where}/col"
    proc = run_cli("index", "show", spec) if scheme == "milvus" else run_cli(
        "search", str(tmp_path), "-i", spec, "--quiet")
    assert "does not exist" in one_line_error(proc)
    assert not (tmp_path / "nowhere").exists()
