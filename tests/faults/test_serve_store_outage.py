"""A replica's traffic log across a PostgreSQL outage (a real server process, a real
PostgreSQL stopped and started): searches held in memory while the database is down are
written by a timer once it answers (not only when the next search arrives), and what is
still held at SIGTERM is written on the way out; the count dropped past the in-memory
cap stays in the status after the database is back. A replica whose feedback store
cannot be reached at start says so: ``/healthz`` is ``degraded`` with ``store_error``."""

from __future__ import annotations

import logging
import signal
import time
from contextlib import ExitStack
from typing import Any

import pytest

from tests.loop.test_loop import QUERIES, TASK, world  # noqa: F401  (fixture)
from tests.loop.test_replicas import _env, _get, _port, _post, _process, _wait
from tests.pg import database_fixtures

pytest.importorskip("uvicorn")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")

pg_cluster, url = database_fixtures("o_")


def _searches(url: str) -> int:
    from tttembed.loop.postgres import PostgresStore

    store = PostgresStore(url)
    try:
        return int(store.counts()["searches"])
    finally:
        store.close()


def _serve(stack: ExitStack, w: dict[str, Any], tmp, store: str) -> tuple[str, Any, Any]:
    port, log = _port(), tmp / "replica.log"
    proc = stack.enter_context(_process(
        ["serve", "--index", str(w["root"] / "index"), "--port", str(port),
         "--registry", str(tmp / "reg"), "--store", store], _env(tmp), log))
    base = f"http://127.0.0.1:{port}"
    _wait("the replica", lambda: _get(f"{base}/healthz"), [proc], [log])
    return base, proc, log


def _search(base: str, i: int) -> None:
    status, body = _post(f"{base}/v1/search", {"query": QUERIES[i % len(QUERIES)],
                                               "task": TASK, "k": 3})
    assert status == 200, body


def test_searches_held_during_an_outage_are_written_by_a_timer_and_at_sigterm(
        world, url, pg_cluster, tmp_path):  # noqa: F811
    """Searches answered while PostgreSQL is down are in the store within seconds of its
    return with no further search; those still held when the replica gets SIGTERM (the
    database back a moment before) are written before it exits."""
    with ExitStack() as stack:
        base, proc, log = _serve(stack, world, tmp_path, url)
        _search(base, 0)
        assert _searches(url) == 1
        pg_cluster.stop()
        for i in range(4):
            _search(base, i)
        assert _get(f"{base}/v1/loop")["serving"]["unlogged"] == 4
        pg_cluster.start()
        # no search from here on: the timer writes the four
        _wait("the held searches written", lambda: _searches(url) == 5, [proc], [log],
              limit=15)
        assert "unlogged" not in _get(f"{base}/v1/loop")["serving"]

        pg_cluster.stop()
        for i in range(3):
            _search(base, i)
        pg_cluster.start()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert _searches(url) == 8, log.read_text()[-3000:]


def _search_id(base: str, i: int) -> tuple[str, str]:
    status, body = _post(f"{base}/v1/search", {"query": QUERIES[i % len(QUERIES)],
                                               "task": TASK, "k": 3})
    assert status == 200, body
    hit = body["data"][0]
    return hit["search_id"], hit["ids"][0]


def test_clicks_and_labels_during_an_outage_are_a_503_to_retry_and_then_kept(
        world, url, pg_cluster, tmp_path):  # noqa: F811
    """While PostgreSQL is down, /v1/events and /v1/feedback answer 503 (Retry-After, one
    line saying why; no traceback in the log), not a 500; a click on a search answered
    during the outage is not "unknown" (404) once the database is back and the search
    still waits in memory: the replica writes it first and the click is kept (found by
    the soak run, benchmarks/bench_soak.py: 634 500s and 163 404s across one restart)."""
    with ExitStack() as stack:
        base, proc, log = _serve(stack, world, tmp_path, url)
        before, doc0 = _search_id(base, 0)
        pg_cluster.stop()
        during, doc1 = _search_id(base, 1)
        click = {"search_id": during, "doc_id": doc1, "type": "click", "session_id": "s1"}
        status, body = _post(f"{base}/v1/events", [click])
        assert status == 503, body
        assert body["error"]["code"] == "store_unavailable", body
        assert "retry" in body["error"]["message"], body
        status, body = _post(f"{base}/v1/feedback",
                             {"search_id": before, "doc_id": doc0, "label": 1})
        assert status == 503, body
        pg_cluster.start()
        status, body = _post(f"{base}/v1/events", [click])  # before the timer's write
        assert (status, body.get("stored")) == (202, 1), body
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]


def test_an_unreachable_store_at_start_is_reported_degraded(world, tmp_path):  # noqa: F811
    """``serve --store postgresql://...:1/db`` (nothing listens) starts serving searches
    but says ``/healthz`` ``degraded`` with ``store_error`` naming the store (masked),
    never a plain ok."""
    with ExitStack() as stack:
        base, proc, log = _serve(stack, world, tmp_path,
                                 "postgresql://u:secret@127.0.0.1:1/db")
        health = _get(f"{base}/healthz")
        _search(base, 0)
    assert health["status"] == "degraded", health
    assert "127.0.0.1:1" in health["store_error"] and "secret" not in health["store_error"]


class _Flaky:
    """A store whose writes fail until ``up``."""

    def __init__(self) -> None:
        self.up, self.rows = False, []

    def log_searches(self, rows: list[Any]) -> None:
        if not self.up:
            raise OSError("connection refused")
        self.rows.extend(rows)

    def get_search(self, sid: str) -> None:
        if not self.up:
            raise OSError("connection refused")


def test_the_dropped_count_stays_after_the_store_is_back(caplog) -> None:
    """Past the in-memory cap the oldest held searches are dropped and counted; the count
    stays in the status once the store answers again (it vanished before)."""
    from tttembed.serve.traffic import TrafficLog

    store = _Flaky()
    traffic = TrafficLog(store, cap=3, retry_s=0.05)
    with caplog.at_level(logging.ERROR, logger="tttembed.serve"):
        for i in range(5):
            traffic.log([f"row{i}"])
    assert traffic.status() == {"log_error": "OSError: connection refused", "unlogged": 3,
                                "unlogged_dropped": 2}
    assert sum("cannot log searches" in r.message for r in caplog.records) == 1
    store.up = True
    deadline = time.monotonic() + 5
    while traffic.status()["unlogged"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.rows == ["row2", "row3", "row4"]
    assert traffic.status() == {"log_error": None, "unlogged": 0, "unlogged_dropped": 2}
    traffic.close()
