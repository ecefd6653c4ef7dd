"""The feedback store on both backends: SQLite (a file) and PostgreSQL (a real server from
``tests/pg.py``, one fresh database per test): the traffic log, idempotent feedback, the
judge's rewards, the counts, and two processes writing at once."""

from __future__ import annotations

import math
import multiprocessing
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.pg import free_port, new_database
from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.loop.open import open_store
from tttembed.loop.sqlite import SQLiteStore
from tttembed.loop.store import Feedback, Reward, SearchLog, Store


def _search(sid: str, created: float, version: str | None = "v1", **kw: object) -> SearchLog:
    fields: dict = {"task": "pets", "query": f"query {sid}", "ids": ("d1", "d2", "d3")}
    fields.update(kw)
    return SearchLog(sid, created=created, version=version, **fields)


# -- traffic ------------------------------------------------------------------------------
def test_log_and_read_searches(store: Store) -> None:
    rows = [_search("s1", 10.5, query="café ☕ 'quoted' ? %s"),
            _search("s2", 20.25, None, kind="embeddings", replica="r2", ids=()),
            _search("s3", 30.0, "v2", ids=("d9",))]
    store.log_searches(rows)
    assert store.get_search("s1") == rows[0]
    assert store.get_search("s2") == rows[1]
    assert store.get_search("nope") is None
    assert store.searches() == rows
    assert store.searches(since=20.25) == rows[1:]
    assert store.searches(since=31) == []
    # a search id logged again is ignored: the first row stays
    store.log_searches([_search("s1", 99.0, "v9", query="other")])
    store.log_searches([])
    assert store.get_search("s1") == rows[0]
    assert len(store.searches()) == 3


def test_store_url(spec: str, store: Store) -> None:
    if spec.startswith("postgresql:"):
        assert store.url == spec
    else:
        assert isinstance(store, SQLiteStore) and store.url == f"sqlite:{spec}"


def test_nul_in_text(spec: str, store: Store) -> None:
    """PostgreSQL text holds no NUL: it is stored as U+FFFD there, and lookups match."""
    store.log_searches([_search("a\x00b", 1.0, query="x\x00y")])
    got = store.get_search("a\x00b")
    assert got is not None
    want = "x\x00y" if not spec.startswith("postgresql:") else "x\ufffdy"
    assert got.query == want


# -- feedback -----------------------------------------------------------------------------
def test_feedback_is_stored_once(store: Store) -> None:
    f1 = Feedback("pets", "q one", "d1", 1.0, search_id="s1", created=5.0)
    f2 = Feedback("pets", "q one", "d2", 0.0, search_id="s1", created=6.0)
    assert store.add_feedback([f1, f2]) == 2
    assert store.add_feedback([f1]) == 0
    assert store.add_feedback([Feedback("pets", "q one", "d1", 0.25, "s1", 7.0)]) == 0
    # by query (no search id) is keyed apart from the search id, per task and query
    q1 = Feedback("pets", "q one", "d1", 0.5, created=8.0)
    assert store.add_feedback([q1, q1]) == 1
    assert store.add_feedback([q1]) == 0
    assert store.add_feedback([Feedback("cars", "q one", "d1", 0.5, created=9.0),
                               Feedback("pets", "q two", "d1", 0.5, created=9.5),
                               f2]) == 2
    got = store.feedback()
    assert [(f.task, f.query, f.doc_id, f.label, f.search_id, f.created) for f in got] == [
        ("pets", "q one", "d1", 1.0, "s1", 5.0), ("pets", "q one", "d2", 0.0, "s1", 6.0),
        ("pets", "q one", "d1", 0.5, "", 8.0), ("cars", "q one", "d1", 0.5, "", 9.0),
        ("pets", "q two", "d1", 0.5, "", 9.5)]


def test_feedback_without_time_gets_now(store: Store) -> None:
    before = time.time()
    assert store.add_feedback([Feedback("pets", "q", "d1", 1.0, "s1")]) == 1
    (got,) = store.feedback()
    assert before - 1 <= got.created <= time.time() + 1


# -- rewards ------------------------------------------------------------------------------
def _fields(r: Reward) -> tuple:
    return (r.task, r.query, r.doc_id, "nan" if math.isnan(r.reward) else r.reward,
            r.created, r.source, r.paid, r.trusted)


def test_rewards_and_distrust(store: Store) -> None:
    rows = [Reward("pets", "q1", "d1", 0.75, 1.0),
            Reward("pets", "q1", "d2", float("nan"), 2.0, source="llm"),
            Reward("pets", "q2", "d1", 0.0, 3.0, paid=False, trusted=False),
            Reward("pets", "q3", "d1", 1.0, 4.0)]
    store.add_rewards(rows)
    store.add_rewards([Reward("pets", "q1", "d1", 0.1, 9.0)])  # the pair again: ignored
    store.add_rewards([])
    assert [_fields(r) for r in store.rewards(trusted_only=False)] == [_fields(r) for r in rows]
    trusted = store.rewards()
    assert [_fields(r) for r in trusted] == [_fields(rows[i]) for i in (0, 1, 3)]
    assert math.isnan(trusted[1].reward)
    assert store.distrust(since=2.0) == 2  # q1/d2 and q3/d1; q2/d1 was already untrusted
    assert store.distrust(since=2.0) == 0
    assert [_fields(r) for r in store.rewards()] == [_fields(rows[0])]
    assert [r.trusted for r in store.rewards(trusted_only=False)] == [True, False, False, False]


def test_counts(store: Store) -> None:
    assert store.counts() == {"searches": 0, "feedback": 0, "rewards": 0, "paid": 0,
                              "untrusted": 0, "reasked": 0, "by_version": {}}
    store.log_searches([_search("s1", 1.0, "v1"), _search("s2", 2.0, "v1"),
                        _search("s3", 3.0, None), _search("s4", 4.0, "v2")])
    store.add_feedback([Feedback("pets", "q", "d1", 1.0, "s1"),
                        Feedback("pets", "q", "d1", 1.0)])
    store.add_rewards([Reward("pets", "q", "d1", 1.0, 1.0),
                       Reward("pets", "q", "d2", 0.5, 2.0, paid=False),
                       Reward("pets", "q", "d3", 0.0, 3.0, trusted=False)])
    assert store.counts() == {"searches": 4, "feedback": 2, "rewards": 3, "paid": 2,
                              "untrusted": 1, "reasked": 0,
                              "by_version": {"v1": 2, "v2": 1, "raw": 1}}


def test_reopened_store_keeps_its_rows(spec: str) -> None:
    first = open_store(spec)
    first.log_searches([_search("s1", 1.0)])
    first.add_feedback([Feedback("pets", "q", "d1", 1.0, "s1")])
    first.close()
    again = open_store(spec)
    try:
        assert again.counts()["searches"] == 1 and again.counts()["feedback"] == 1
        assert again.get_search("s1") == _search("s1", 1.0)
    finally:
        again.close()


# -- two processes at once ----------------------------------------------------------------
PER_PROCESS = 200


def _log_many(spec: str, barrier: Any, who: str) -> None:
    """In a spawned process: open the store when the other does, log one search a call."""
    import tttembed.core.backends  # noqa: F401 - open_store's lazy import, done before the
    # barrier so that both processes really open (and set up) the new store at once
    barrier.wait(120)
    store = open_store(spec)
    for i in range(PER_PROCESS):
        store.log_searches([SearchLog(f"{who}-{i}", "pets", f"q {who} {i}", time.time(),
                                      "v1", ("d1", "d2"), replica=who)])
    store.close()


def test_two_processes_log_at_once(spec: str) -> None:
    """Two real processes open the same fresh store at once (both create the schema) and
    each logs 200 searches, one transaction each: all 400 are there."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_log_many, args=(spec, barrier, who)) for who in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    store = open_store(spec)
    try:
        rows = store.searches()
        assert len(rows) == 2 * PER_PROCESS
        assert {r.search_id for r in rows} == {f"{w}-{i}" for w in "ab"
                                                for i in range(PER_PROCESS)}
        assert store.counts()["by_version"] == {"v1": 2 * PER_PROCESS}
        # both wrote while the other did: their rows interleave in time
        replicas = [r.replica for r in rows]
        assert replicas.count("a") == replicas.count("b") == PER_PROCESS
    finally:
        store.close()


def _open_each(paths: list[str], barrier: Any) -> None:
    """In a spawned process: open each new SQLite store at the moment the other does."""
    try:
        for path in paths:
            barrier.wait(60)
            SQLiteStore(path).close()
    except BaseException:
        barrier.abort()  # the other stops waiting too
        raise


def test_sqlite_new_file_opened_by_two_processes_at_once(tmp_path: Path) -> None:
    """Two processes set up the same new SQLite file at once, 50 times over: neither
    fails (switching to WAL meets "database is locked" that the busy timeout misses)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    paths = [str(tmp_path / f"loop{i}.sqlite") for i in range(50)]
    procs = [ctx.Process(target=_open_each, args=(paths, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    for path in paths:
        assert SQLiteStore(path).counts()["searches"] == 0


# -- PostgreSQL only ----------------------------------------------------------------------
def test_postgres_schema_created_by_many_at_once(pg_url: str) -> None:
    """Eight connections create the schema of one fresh database at the same moment
    (without the advisory lock PostgreSQL fails some with a unique violation)."""
    from tttembed.loop.postgres import PostgresStore

    url = new_database(pg_url, "t" + uuid.uuid4().hex[:16])
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []

    def open_one() -> None:
        barrier.wait(30)
        try:
            stores.append(PostgresStore(url))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(stores) == 8
    stores[0].log_searches([_search("s1", 1.0)])
    assert all(s.get_search("s1") == _search("s1", 1.0) for s in stores)
    for s in stores:
        s.close()


def test_postgres_url_masks_the_password(pg_url: str) -> None:
    """A password in the URL is used (trust auth ignores it) and never shown."""
    with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@")
    for spec in (with_password, with_password.replace("postgresql:", "postgres:", 1),
                 with_password + "?application_name=x&password=other"):
        store = open_store(spec)
        try:
            assert "s3cret" not in store.url and "other" not in store.url
            assert store.url.startswith("postgresql://postgres:***@127.0.0.1:")
            assert store.counts()["searches"] == 0
        finally:
            store.close()


def test_postgres_reconnects_after_the_server_drops_it(pg_url: str) -> None:
    import psycopg

    from tttembed.loop.postgres import PostgresStore

    store = PostgresStore(new_database(pg_url, "t" + uuid.uuid4().hex[:16]))
    store.log_searches([_search("s1", 1.0)])
    pid = store._conn.info.backend_pid
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(ConfigError, match="lost the feedback store postgresql://") as info:
        store.get_search("s1")  # the call that finds it dropped fails, one line...
    assert "\n" not in str(info.value) and "PostgreSQL runs there" in str(info.value)
    assert store.get_search("s1") == _search("s1", 1.0)  # ...the next reconnects
    assert store._conn.info.backend_pid != pid
    store.close()


def _closed_port() -> int:
    port = free_port()
    with socket.socket() as sock:  # nothing listens there now
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    return port


def test_bad_postgres_url_is_a_config_error() -> None:
    pytest.importorskip("psycopg")
    port = _closed_port()
    url = f"postgresql://bob:s3cret@127.0.0.1:{port}/loop"
    with pytest.raises(ConfigError) as info:
        open_store(url)
    message = str(info.value)
    assert f"postgresql://bob:***@127.0.0.1:{port}/loop" in message
    assert "s3cret" not in message and "\n" not in message
    assert "cannot connect" in message and "PostgreSQL runs there" in message


def test_postgres_spec_without_url() -> None:
    from tttembed.loop.postgres import from_spec

    for rest in ("", "localhost/db"):
        with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
            from_spec(rest)
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigError, match="not a valid PostgreSQL URL") as info:
        open_store("postgresql://bob:s3cret@127.0.0.1:5432/db?nosuchoption=1")
    assert "s3cret" not in str(info.value)


def test_postgres_without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    from tttembed.loop.postgres import PostgresStore

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingDependency, match=r"tttembed\[loop\]"):
        PostgresStore("postgresql://bob@127.0.0.1:1/db")


def test_a_reservation_left_open_by_a_kill_is_recovered(store: Store) -> None:
    """issue 59 (both stores): what a kill left reserved is closed at the next start:
    never sent -> given back, stored or in the ledger -> spent, sent and lost -> kept as
    paid (not charged again when re-asked)."""
    from tttembed.loop.store import Reward

    pairs = [("t", "q", f"d{i}") for i in range(4)]
    assert store.reserve("judge", 4, 100, partial=False, pairs=pairs) == 4
    store.mark_sent(pairs[:3])  # d0-d2 sent; d3 never
    store.add_rewards([Reward("t", "q", "d0", 1.0, 1.0, "judge", paid=1)])  # answered
    got = store.recover(lambda t: t[2] == "d1")  # d1's answer is in the ledger
    assert got == {"given_back": 1, "spent": 2, "lost": 1}
    assert sum(store.spent().values()) == 3
    assert store.prepaid(pairs) == {("t", "q", "d2")}
    store.mark_sent([("t", "q", "d2")])  # asked again: still paid, not re-charged
    assert store.prepaid(pairs) == {("t", "q", "d2")}
    store.settle([("t", "q", "d2")])
    assert store.prepaid(pairs) == set() and store.recover(lambda t: False) == {
        "given_back": 0, "spent": 0, "lost": 0}
    # the lost pair was asked again: counted where the operator reads the spend (once)
    assert store.counts()["reasked"] == 1
