"""Faults of the HTTP backends and of bad input (issue 10, classes 1, 6, 7, 8, 11).

Every fault is served by a real HTTP server on 127.0.0.1 (``tests/servers.py``): zero
vectors, wrong dimension, NaN, fewer vectors, malformed JSON, 429 with Retry-After, 500,
a hung server, a redirect, a server echoing the API key. Corrupt caches and ledgers, and
inputs with a lone surrogate, are real files. Waits are injected (``Sleeps``): no test
sleeps through a backoff, and no assertion is timed. Each docstring's first line is the
expected behaviour (the fault matrix prints it).
"""

from __future__ import annotations

import errno
import json
import logging
import pickle
import re
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tests import servers
from tests.servers import LocalOpenAIServer, Reply, Sleeps
from tttembed.cli import app
from tttembed.cli._common import handle_errors
from tttembed.core.errors import BackendError, ConfigError, DataError
from tttembed.core.http import EXCERPT_CHARS, SLOW_HINT, JSONClient, RetryPolicy, excerpt
from tttembed.data.beir import load_corpus
from tttembed.data.queries import load_queries
from tttembed.embed.cache import load_embedder
from tttembed.embed.openai import from_spec
from tttembed.score.base import Item
from tttembed.score.ledger import Ledger, LedgerScorer
from tttembed.score.llm_judge import JudgeWarning
from tttembed.score.llm_judge import from_spec as judge_spec

runner = CliRunner()
hash_server = servers.hash_server  # local server, /v1/embeddings = hashing vectors
chat_server = servers.chat_server  # local server, /v1/chat/completions = a test function
DIM = 16
KEY = "sk-Q7vZ9wXk2LmN4pR8tY1u"  # 23 characters, no 4-character run found elsewhere
KEY_ENV = "TTTEMBED_TEST_FAULT_KEY"
TEXTS = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]


# -- helpers ---------------------------------------------------------------------------


def _map_rows(fn):
    def mutate(body):
        for item in body["data"]:
            item["embedding"] = fn(item["embedding"])
        return body
    return mutate


ZEROS = _map_rows(lambda v: [0.0] * len(v))
WRONG_DIM = _map_rows(lambda v: v[-8:])  # the last column is never 0
NAN = _map_rows(lambda v: [float("nan")] + v[1:])


def _fewer(body):
    body["data"] = body["data"][:-1]
    return body


def cached_embedder(server: LocalOpenAIServer, cache: Path, **options):
    options.setdefault("sleep", Sleeps())
    options.setdefault("max_retries", 0)
    return load_embedder(f"openai:m@{server.url}", cache_dir=cache, **options)


def shards(cache: Path) -> list[Path]:
    return sorted((cache / "embeddings").rglob("*.npy"))


def leaked(message: str, key: str = KEY, run: int = 4) -> list[str]:
    """Every ``run``-character piece of ``key`` that appears in ``message``."""
    return [key[i:i + run] for i in range(len(key) - run + 1) if key[i:i + run] in message]


def beir_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    docs = {f"d{i}": f"document {i} about {w}" for i, w in
            enumerate(["cats", "dogs", "fish", "birds", "trees", "rivers", "stars", "rocks"])}
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"about {w}"}) + "\n"
        for i, w in enumerate(["cats", "fish", "stars"])))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td2\t1\nq2\td6\t1\n")
    return root


def one_error_line(result) -> str:
    text = result.output.strip()
    assert result.exit_code == 1, (result.exit_code, text)
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


# -- class 1: bad vectors are rejected before the cache --------------------------------


@pytest.mark.parametrize("fault, match", [
    (ZEROS, r"all-zero vectors"),
    (WRONG_DIM, r"8-dimensional vectors, expected 16"),
    (NAN, r"non-finite values"),
    (_fewer, r"returned 3 embeddings for 4 inputs"),
], ids=["zero-vectors", "wrong-dimension", "nan", "fewer-vectors"])
def test_bad_vectors_are_a_backend_error_and_never_cached(hash_server, tmp_path, fault, match):
    """A bad embedding answer is a BackendError naming the endpoint; nothing is cached; the fixed server is used next."""
    emb = cached_embedder(hash_server, tmp_path, expected_dim=DIM)
    hash_server.script(Reply(mutate=fault))
    with pytest.raises(BackendError, match=match) as info:
        emb.encode(TEXTS)
    assert hash_server.url in str(info.value)
    assert shards(tmp_path) == []
    again = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    assert again.shape == (4, DIM) and np.allclose(np.linalg.norm(again, axis=1), 1.0)
    assert hash_server.count("/embeddings") == 2


def test_expected_dimension_is_known_before_the_first_call(hash_server, tmp_path):
    """With the index's dimension, no probe request is sent and a wrong-size answer is refused."""
    emb = cached_embedder(hash_server, tmp_path, expected_dim=32)
    assert emb.dim == 32 and hash_server.count() == 0
    with pytest.raises(BackendError, match=r"16-dimensional vectors, expected 32"):
        emb.encode(TEXTS[:2])
    assert shards(tmp_path) == []


def test_search_against_a_zero_vector_server_fails_then_recovers(hash_server, tmp_path):
    """`search` against a server sending zero vectors exits 1 with one line naming the endpoint; once fixed it exits 0."""
    data = beir_folder(tmp_path / "data")
    cache, idx = tmp_path / "cache", tmp_path / "idx"
    r = runner.invoke(app, ["index", str(data), "--out", str(idx), "-e",
                            f"openai:m@{hash_server.url}", "--cache-dir", str(cache), "--quiet"])
    assert r.exit_code == 0, r.output
    hash_server.script(Reply(mutate=ZEROS))
    args = ["search", str(data), "--index", str(idx), "--cache-dir", str(cache), "--quiet",
            "--max-retries", "0"]
    line = one_error_line(runner.invoke(app, args))
    assert "all-zero vectors" in line and hash_server.url in line
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "ndcg@10" in r.output


# -- class 1/8: corrupt cache files are rebuilt, never trusted -------------------------


def _corrupt_cases():
    def zero_byte_vecs(d):
        next(d.glob("*.vecs.npy")).write_bytes(b"")

    def truncated_keys(d):
        path = next(d.glob("*.keys.npy"))
        path.write_bytes(path.read_bytes()[:90])

    def length_mismatch(d):
        path = next(d.glob("*.keys.npy"))
        np.save(path, np.load(path)[:2])

    def bad_namespace(d):
        (d / "namespace.json").write_text('{"identity": ')

    def nan_row(d):
        path = next(d.glob("*.vecs.npy"))
        vecs = np.load(path)
        vecs[1] = np.nan
        np.save(path, vecs)

    return [zero_byte_vecs, truncated_keys, length_mismatch, bad_namespace, nan_row]


@pytest.mark.parametrize("corrupt", _corrupt_cases(), ids=lambda f: f.__name__)
def test_corrupt_embedding_cache_is_rebuilt_with_a_warning(hash_server, tmp_path, caplog,
                                                            corrupt):
    """A corrupt embedding-cache file is detected, logged and re-embedded: same vectors, no error."""
    first = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    (ns,) = (tmp_path / "embeddings").iterdir()
    corrupt(ns)
    with caplog.at_level(logging.WARNING, logger="tttembed.embed.cache"):
        again = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    np.testing.assert_allclose(again, first, atol=1e-6)
    assert hash_server.count("/embeddings") == 2  # re-embedded once
    assert any("embedding cache" in r.getMessage() for r in caplog.records)
    third = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    np.testing.assert_allclose(third, first, atol=1e-6)


def test_cache_of_another_dimension_is_rebuilt_for_the_index(hash_server, tmp_path, caplog):
    """A cache poisoned with another dimension is ignored and rebuilt when the index's dimension is known."""
    hash_server.script(Reply(mutate=WRONG_DIM))
    cached_embedder(hash_server, tmp_path).encode(TEXTS)  # no manifest yet: dim 8 cached
    with caplog.at_level(logging.WARNING, logger="tttembed.embed.cache"):
        out = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    assert out.shape == (4, DIM)
    assert any("rebuilding" in r.getMessage() for r in caplog.records)


# -- transport faults, class 11: timeouts and a total deadline --------------------------


def test_malformed_json_is_one_clear_error(hash_server):
    """Malformed JSON is a BackendError naming the endpoint; not retried."""
    hash_server.script(Reply(body=b'{"data": [1, 2'))
    with pytest.raises(BackendError, match="malformed JSON") as info:
        from_spec(f"m@{hash_server.url}", sleep=Sleeps()).encode(TEXTS)
    assert hash_server.url in str(info.value) and hash_server.count() == 1


def test_429_honours_retry_after_then_succeeds(hash_server):
    """HTTP 429 with Retry-After waits the given seconds (capped), then succeeds."""
    hash_server.script(Reply(429, headers={"Retry-After": "3"}))
    sleeps = Sleeps()
    out = from_spec(f"m@{hash_server.url}", sleep=sleeps).encode(TEXTS)
    assert out.shape == (4, DIM) and sleeps == [3.0] and hash_server.count() == 2


def test_repeated_500_fails_after_max_retries_with_the_flags_in_the_hint(hash_server):
    """Repeated HTTP 500 fails after max_retries + 1 attempts; the hint names --timeout/--max-retries."""
    hash_server.script(*[Reply(500)] * 5)
    with pytest.raises(BackendError, match=r"after 3 attempts.*HTTP 500") as info:
        from_spec(f"m@{hash_server.url}", sleep=Sleeps(), max_retries=2).encode(TEXTS)
    assert "--max-retries" in str(info.value) and hash_server.count() == 3


def test_hung_server_fails_after_the_short_timeout(hash_server):
    """A hung server fails after (max_retries + 1) x --timeout with a 'timed out' error."""
    hash_server.script(Reply(delay=30), Reply(delay=30))
    with pytest.raises(BackendError, match=r"after 2 attempts.*timed out after 0.2 s") as info:
        from_spec(f"m@{hash_server.url}", sleep=Sleeps(), timeout=0.2,
                  max_retries=1).encode(TEXTS)
    assert "--timeout" in str(info.value)


def test_total_deadline_bounds_retries_and_waits(hash_server):
    """Waits that would pass the total deadline are not taken: the request fails at once."""
    hash_server.script(*[Reply(429, headers={"Retry-After": "30"})] * 5)
    sleeps = Sleeps()
    policy = RetryPolicy(max_retries=5, max_delay=60, timeout=5, deadline=20)
    with pytest.raises(BackendError, match=r"after 1 attempt;.*deadline of 20 s"):
        from_spec(f"m@{hash_server.url}", sleep=sleeps, retry=policy).encode(TEXTS)
    assert sleeps == [] and hash_server.count() == 1
    assert RetryPolicy(timeout=60).total_deadline == 210.0  # 3 x timeout + max_delay
    emb = from_spec(f"m@{hash_server.url}", timeout=2, deadline=5)
    assert emb.client.policy.total_deadline == 5.0
    assert from_spec(f"m@{hash_server.url}", timeout=2).client.policy.total_deadline == 36.0


def test_redirect_is_not_followed(hash_server, monkeypatch):
    """A redirect is a BackendError naming the target; it is not followed (the key stays home)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    hash_server.script(Reply(307, body=b"", headers={"Location": "http://127.0.0.2:9/v1/x"}))
    with pytest.raises(BackendError, match=r"redirect \(HTTP 307\) to http://127.0.0.2:9") as info:
        from_spec(f"m@{hash_server.url}", sleep=Sleeps(), api_key_env=KEY_ENV).encode(TEXTS)
    assert hash_server.count() == 1 and not leaked(str(info.value))


def test_cli_http_flags_exist_and_the_hint_names_only_real_flags():
    """--timeout and --max-retries exist on index/search/learn/rerank, and every flag the hint names exists."""
    named = set(re.findall(r"--[a-z][a-z-]*", SLOW_HINT))
    assert named == {"--timeout", "--max-retries"}
    for command in ("index", "search", "learn", "rerank"):
        r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0
        for flag in named:
            assert flag in r.output, (command, flag)
    for command in ("learn", "rerank"):
        r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--retry-missing" in r.output


# -- class 7: secrets are redacted before truncation -----------------------------------


def test_redaction_happens_before_truncation_at_every_offset():
    """No 4-character piece of the key survives in an excerpt, wherever the key sits around the cut-off."""
    for offset in range(0, EXCERPT_CHARS + 40):
        text = "e" * offset + f"Bearer {KEY} " + "tail " * 60
        for limit in (EXCERPT_CHARS, 120):
            shown = excerpt(text, [KEY], limit)
            assert not leaked(shown), (offset, limit, shown)


@pytest.mark.parametrize("status", [400, 500, 200], ids=["http-400", "http-500", "bad-json"])
def test_server_echoing_the_key_never_leaks_it(hash_server, monkeypatch, status):
    """An error body echoing the Authorization header shows no piece of the key, at any offset."""
    monkeypatch.setenv(KEY_ENV, KEY)
    offsets = range(100, EXCERPT_CHARS + 20)

    def echo(offset):
        return lambda req: "e" * offset + req.headers["authorization"] + " tail" * 40

    hash_server.script(*[Reply(status, body=echo(o)) for o in offsets])
    client = JSONClient(hash_server.url, api_key_env=KEY_ENV, sleep=Sleeps(),
                        policy=RetryPolicy(max_retries=0))
    for offset in offsets:
        with pytest.raises(BackendError) as info:
            client.post("/embeddings", {"model": "m", "input": ["x"]})
        assert not leaked(str(info.value)), (offset, str(info.value))
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in hash_server.requests)


# -- class 6: answered pairs are committed as they arrive ------------------------------


def _judge_server(server: LocalOpenAIServer, failing: set[str], missing: set[str]) -> None:
    def chat(payload):
        text = payload["messages"][1]["content"]
        doc = re.search(r"Document:\n(\S+)", text).group(1)
        if doc in failing:
            return 400
        return "no verdict" if doc in missing else "Relevant. Score: 4"
    server.chat = chat


def _asked(server: LocalOpenAIServer) -> list[str]:
    return [re.search(r"Document:\n(\S+)", r.json["messages"][1]["content"]).group(1)
            for r in server.requests]


DOCS = [Item(f"d{i}", f"doc{i}") for i in range(6)]
QUERY = Item("q1", "a question")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_failed_pair_keeps_the_answered_ones_and_the_rerun_pays_only_the_rest(
        chat_server, tmp_path, concurrency):
    """When one pair of a judge chunk fails, every answered pair is in the ledger; the rerun pays only the others."""
    _judge_server(chat_server, failing={"doc2"}, missing=set())
    ledger = Ledger(tmp_path / "ledger.sqlite")
    judge = judge_spec(f"m@{chat_server.url}", max_retries=0, sleep=Sleeps(),
                       max_concurrency=concurrency)
    with pytest.raises(BackendError, match="HTTP 400"):
        LedgerScorer(judge, ledger, chunk_size=16).score(QUERY, DOCS)
    answered = {d for d in _asked(chat_server) if d != "doc2"}
    assert answered >= ({"doc0", "doc1"} if concurrency == 1 else set())
    assert ledger.count() == len(answered)
    first_round = len(chat_server.requests)
    _judge_server(chat_server, failing=set(), missing=set())
    scorer = LedgerScorer(judge, ledger, chunk_size=16)
    out = scorer.score(QUERY, DOCS)
    assert np.allclose(out, 0.8)
    paid_again = _asked(chat_server)[first_round:]
    assert sorted(paid_again) == sorted({d.text for d in DOCS} - answered)
    assert scorer.paid == len(DOCS) - len(answered)


def test_retry_missing_asks_again_for_missing_rewards_only(chat_server, tmp_path):
    """A pair recorded missing (no score) is not paid again, unless retry_missing asks for it."""
    _judge_server(chat_server, failing=set(), missing={"doc1"})
    ledger = Ledger(tmp_path / "ledger.sqlite")
    judge = judge_spec(f"m@{chat_server.url}", max_retries=0, sleep=Sleeps())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JudgeWarning)
        out = LedgerScorer(judge, ledger).score(QUERY, DOCS[:3])
    assert np.isnan(out[1]) and len(chat_server.requests) == 4  # doc1 asked twice
    again = LedgerScorer(judge, ledger).score(QUERY, DOCS[:3])
    assert np.isnan(again[1]) and len(chat_server.requests) == 4
    _judge_server(chat_server, failing=set(), missing=set())
    retried = LedgerScorer(judge, ledger, retry_missing=True).score(QUERY, DOCS[:3])
    assert np.allclose(retried, 0.8) and _asked(chat_server)[4:] == ["doc1"]


# -- class 8: every error is one line with the path and a fix --------------------------


def _run_wrapped(fn) -> str:
    cli = typer.Typer()
    cli.command()(handle_errors(fn))
    return one_error_line(runner.invoke(cli, []))


def _broken_files(tmp: Path):
    def corrupt_ledger():
        path = tmp / "ledger.sqlite"
        path.write_bytes(b"this is not an SQLite database" * 200)
        Ledger(path).count()

    def raw_sqlite():
        path = tmp / "cells.sqlite"
        path.write_bytes(b"garbage" * 1000)
        sqlite3.connect(path).execute("SELECT * FROM cells").fetchall()

    def truncated_json():
        path = tmp / "manifest.json"
        path.write_text('{"format": "tttembed-index", "dim": 3')
        json.loads(path.read_text())

    def truncated_faiss():
        import faiss

        path = tmp / "index.faiss"
        index = faiss.IndexFlatIP(4)
        index.add(np.eye(4, dtype=np.float32))
        faiss.write_index(index, str(path))
        path.write_bytes(path.read_bytes()[:30])
        faiss.read_index(str(path))

    def truncated_safetensors():
        from safetensors.numpy import load_file, save_file

        path = tmp / "adapter.safetensors"
        save_file({"w": np.ones((8, 8), dtype=np.float32)}, str(path))
        path.write_bytes(path.read_bytes()[:40])
        load_file(str(path))

    def pickle_in_checkpoint():
        path = tmp / "adapter.bin"
        path.write_bytes(b"\x80\x04\x95garbage that is no pickle")
        pickle.loads(path.read_bytes())

    def zero_byte_npy():
        path = tmp / "v.npy"
        path.write_bytes(b"")
        np.load(path)

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "v.npz"))

    return [corrupt_ledger, raw_sqlite, truncated_json, truncated_faiss,
            truncated_safetensors, pickle_in_checkpoint, zero_byte_npy, disk_full]


@pytest.mark.parametrize("case", range(8), ids=[f.__name__ for f in _broken_files(Path())])
def test_broken_files_are_one_line_errors_with_the_path(tmp_path, case):
    """A corrupt ledger/JSON/FAISS/safetensors file, a pickle, a zero-byte .npy or a full disk is one line with the path, exit 1."""
    fn = _broken_files(tmp_path)[case]
    line = _run_wrapped(fn)
    assert str(tmp_path) in line, line
    assert "(" in line and ")" in line  # a fix in parentheses


def test_corrupt_ledger_is_reported_by_learn_with_its_path(tmp_path):
    """A corrupt ledger is a ConfigError naming the file and how to recover."""
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"\x00" * 4096)
    with pytest.raises(ConfigError, match=re.escape(str(path)) + r".*recover"):
        Ledger(path).count()


# -- class 8: lone surrogates are rejected at load with file:line ----------------------


def test_lone_surrogate_in_corpus_is_rejected_with_file_and_line(tmp_path):
    """A lone surrogate (\\ud800) in corpus.jsonl is a DataError naming file:line."""
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d1", "text": "fine"}\n\n{"_id": "d2", "text": "bad \\ud800 x"}\n')
    with pytest.raises(DataError, match=re.escape(f"{path}:3: ") + "'text' holds a lone surrogate"):
        load_corpus(path)


@pytest.mark.parametrize("field", ["_id", "text"])
def test_lone_surrogate_in_query_file_is_rejected_with_file_and_line(tmp_path, field):
    """A lone surrogate in a query file's id or text is a DataError naming file:line."""
    path = tmp_path / "q.jsonl"
    record = {"_id": "q2", "text": "ok"}
    record[field] = "x\ud800"
    path.write_text('{"_id": "q1", "text": "fine"}\n' + json.dumps(record) + "\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: ")):
        load_queries(path)


def test_lone_surrogate_through_the_cli_is_one_line(tmp_path):
    """`index` on a corpus with a lone surrogate exits 1 with one line naming file:line."""
    data = beir_folder(tmp_path / "data")
    with (data / "corpus.jsonl").open("a") as fh:
        fh.write('{"_id": "d9", "text": "\\udfff"}\n')
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx"), "-e",
                            "openai:m@http://127.0.0.1:9/v1", "--quiet"])
    assert "corpus.jsonl:9: 'text' holds a lone surrogate" in one_error_line(r)


def test_learn_retry_missing_from_the_cli(hash_server, chat_server, tmp_path):
    """`learn --retry-missing` pays again only for the pairs the ledger holds as missing;
    without it nothing is paid twice. Unscored judge answers are one summary line (count,
    first example, --retry-missing), not a Python warning per pair; the rerun that finds
    them missing says --retry-missing too."""
    data = beir_folder(tmp_path / "data")
    cache, idx = tmp_path / "cache", tmp_path / "idx"
    r = runner.invoke(app, ["index", str(data), "--out", str(idx), "-e",
                            f"openai:m@{hash_server.url}", "--cache-dir", str(cache), "--quiet"])
    assert r.exit_code == 0, r.output
    chat_server.chat = lambda payload: "I cannot tell."
    args = ["learn", str(data), "--index", str(idx), "--scorer", f"llm:m@{chat_server.url}",
            "--budget", "2", "--depth", "2", "--ledger", str(tmp_path / "ledger.sqlite"),
            "--cache-dir", str(cache), "--out", str(tmp_path / "v.npz"), "--quiet",
            "--timeout", "5", "--max-retries", "0"]
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and "every one of the 6 pairs is missing" in r.output, r.output
    assert "--retry-missing" in r.output
    summary = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(summary) == 1 and "6 judge answer(s) held no valid score" in summary[0], r.output
    assert "JudgeWarning" not in r.output and "llm_judge.py" not in r.output
    asked = len(chat_server.requests)
    assert asked == 12  # 6 pairs, each asked twice for a score
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and len(chat_server.requests) == asked  # nothing paid twice
    assert "rerun with --retry-missing" in r.output and "warning:" not in r.output, r.output

    def by_document(payload):  # a judge whose grade differs between documents
        number = int(re.search(r"document (\d+) about", json.dumps(payload)).group(1))
        return f"Score: {5 if number % 2 else 1}"

    chat_server.chat = by_document
    r = runner.invoke(app, [*args, "--retry-missing"])
    assert r.exit_code == 0, r.output
    assert len(chat_server.requests) == asked + 6 and "paid 6" in r.output


def _cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from tttembed.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})


def test_real_processes_zero_byte_cache_and_corrupt_ledger(hash_server, tmp_path):
    """In a real process: a zero-byte cache shard is rebuilt (exit 0, no 'Aborted'); a corrupt ledger is one line naming it (exit 1)."""
    data = beir_folder(tmp_path / "data")
    cache, idx = tmp_path / "cache", tmp_path / "idx"
    r = runner.invoke(app, ["index", str(data), "--out", str(idx), "-e",
                            f"openai:m@{hash_server.url}", "--cache-dir", str(cache), "--quiet"])
    assert r.exit_code == 0, r.output
    search = ["search", str(data), "--index", str(idx), "--cache-dir", str(cache), "--quiet"]
    assert runner.invoke(app, search).exit_code == 0  # query vectors cached too
    for path in (cache / "embeddings").rglob("*.vecs.npy"):
        path.write_bytes(b"")
    proc = _cli_process(*search)
    assert proc.returncode == 0 and "Aborted" not in proc.stderr, proc.stderr
    assert "corrupt shard" in proc.stderr  # the logged warning
    ledger = tmp_path / "ledger.sqlite"
    ledger.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    proc = _cli_process("learn", str(data), "--index", str(idx), "--scorer", "bm25",
                        "--ledger", str(ledger), "--cache-dir", str(cache), "--quiet",
                        "--out", str(tmp_path / "v.npz"))
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr and str(ledger) in lines[0]


def test_corrupt_row_requested_twice_is_embedded_once(hash_server, tmp_path):
    """A stored NaN row asked for twice in one call is re-embedded once and served to both positions."""
    first = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS)
    (ns,) = (tmp_path / "embeddings").iterdir()
    path = next(ns.glob("*.vecs.npy"))
    vecs = np.load(path)
    vecs[:] = np.nan
    np.save(path, vecs)
    out = cached_embedder(hash_server, tmp_path, expected_dim=DIM).encode(TEXTS + TEXTS[:1])
    np.testing.assert_allclose(out, np.vstack([first, first[:1]]), atol=1e-6)
    assert hash_server.count("/embeddings") == 2
