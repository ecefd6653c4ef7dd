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
