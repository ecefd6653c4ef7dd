"""Several queries in flight at once for an HTTP scorer (``ttt.rewards.score_plan_pairs``),
against the loopback rerank server with latency: overlap is seen by the server, the bound
is kept, every pair is paid and committed exactly once, and the rewards are those of
scoring one query after another."""

from __future__ import annotations

import threading

import pytest

from tests.servers import LocalOpenAIServer, Reply, overlap_scores
from tttembed.core.errors import BackendError
from tttembed.score.ledger import Ledger, LedgerScorer
from tttembed.ttt.queries import QuerySet
from tttembed.ttt.rewards import build_scorer, query_lanes, score_plan_pairs

WORDS = ["tide", "moon", "gene", "cell", "star", "rust", "bread", "salt"]
CORPUS = {f"d{i}": {"title": "", "text": f"{WORDS[i % 8]} and {WORDS[(i * 3) % 8]} {i}"}
          for i in range(24)}
QUERIES = {f"q{j}": f"{WORDS[j % 8]} {WORDS[(j + 2) % 8]}" for j in range(12)}
QUERIES["q11"] = QUERIES["q0"]  # a repeated query text: its pairs are paid once


def _plan() -> tuple[QuerySet, list[tuple[str, str]]]:
    qs = QuerySet.from_tasks({"t": QUERIES})
    docs = list(CORPUS)
    start = [0 if k.endswith("/q11") else 2 * j for j, k in enumerate(qs.keys)]  # as q0
    return qs, [(k, docs[(start[j] + i) % 24]) for j, k in enumerate(qs.keys) for i in range(4)]


def _scorer(srv: LocalOpenAIServer, ledger, concurrency: int) -> LedgerScorer:
    sc = build_scorer(f"rerank:m@{srv.url}", ledger_path=ledger, api="cohere",
                      max_concurrency=concurrency)
    assert isinstance(sc, LedgerScorer)
    return sc


def test_queries_overlap_within_the_bound_and_each_pair_is_paid_once(tmp_path):
    qs, pairs = _plan()
    unique = len({(QUERIES[k.split("/")[1]], CORPUS[d]["text"]) for k, d in pairs})
    with LocalOpenAIServer(latency=0.05) as srv:
        sc = _scorer(srv, tmp_path / "l.sqlite", 4)
        assert query_lanes(sc, [(None, [0] * 4)] * 12) == 4
        seen: list[int] = []
        lock = threading.Lock()

        def progress(n: int) -> None:
            with lock:
                seen.append(n)

        got = score_plan_pairs(pairs, qs, CORPUS, sc, progress=progress)
        assert 1 < srv.max_in_flight <= 4
        assert srv.count("/rerank") == 11  # q11 repeats q0: served from the ledger
        c = sc.counts()
        assert (c.requested, c.paid, c.cached) == (48, unique, 48 - unique)
        assert Ledger(tmp_path / "l.sqlite").count() == unique == 44
        assert sum(seen) == 48
        for key, rewards in got.items():
            text = QUERIES[key.split("/")[1]]
            assert list(rewards.values()) == pytest.approx(
                overlap_scores(text, [CORPUS[d]["text"] for d in rewards]))
        again = _scorer(srv, tmp_path / "l.sqlite", 4)
        assert score_plan_pairs(pairs, qs, CORPUS, again) == got
        assert srv.count("/rerank") == 11 and again.counts().paid == 0
        with LocalOpenAIServer(latency=0.05) as one:
            serial = score_plan_pairs(pairs, qs, CORPUS, _scorer(one, tmp_path / "s.sqlite", 1))
            assert one.max_in_flight == 1 and serial == got


def test_a_failed_query_keeps_the_others_answers(tmp_path):
    qs, pairs = _plan()
    with LocalOpenAIServer() as srv:
        srv.script(Reply(), Reply(status=400))  # the second request fails (not retried)
        sc = _scorer(srv, tmp_path / "l.sqlite", 4)
        with pytest.raises(BackendError, match="HTTP 400"):
            score_plan_pairs(pairs, qs, CORPUS, sc)
        kept = Ledger(tmp_path / "l.sqlite").count()
        assert kept == sc.counts().paid and kept >= 4
        before = srv.count("/rerank")
        score_plan_pairs(pairs, qs, CORPUS, _scorer(srv, tmp_path / "l.sqlite", 4))
        assert srv.count("/rerank") - before == 11 - kept // 4  # only the unpaid queries


def test_local_models_and_the_judge_keep_their_bounds():
    class Local:
        spec = "x"

    class Judge:
        max_concurrency = 4  # one request per pair: 10 pairs fill the 4 slots alone

    class Rerank:
        max_concurrency, max_documents = 8, 32

    class Ledgered:  # the ledger wrapper pays 4 documents at a time
        inner, chunk_size = Judge(), 4

    groups = [(None, [0] * 10)] * 5
    assert query_lanes(Local(), groups) == 1  # type: ignore[arg-type]
    assert query_lanes(Judge(), groups) == 1  # type: ignore[arg-type]
    assert query_lanes(Ledgered(), groups) == 1  # type: ignore[arg-type]
    assert query_lanes(Ledgered(), [(None, [0] * 2)] * 5) == 2  # type: ignore[arg-type]
    assert query_lanes(Rerank(), groups) == 5  # type: ignore[arg-type]
    assert query_lanes(Rerank(), groups * 4) == 8  # type: ignore[arg-type]
