"""The loop's coordination in a PostgreSQL registry's database (a real server): the
learner's record, heartbeat, candidate and lock as rows, the lock taken again after a
restart."""

from __future__ import annotations

import time

import pytest

from tests.pg import database_fixtures
from tttembed.core.errors import ConfigError
from tttembed.loop.coordination import LockLost, open_coordination
from tttembed.registry.postgres import PostgresRegistry

pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")


pg_cluster, url = database_fixtures("c_")


def test_the_learners_record_heartbeat_candidate_and_lock_are_rows(url, tmp_path):
    registry = PostgresRegistry(url, create=True, cache=tmp_path / "c")
    reg = open_coordination(registry)
    assert reg.read_status() == (None, "")
    reg.write_status({"cycles": 3, "frozen": True, "reason": "drift"})
    reg.beat({"pid": 12345, "host": "elsewhere", "time": time.time()})
    other = open_coordination(PostgresRegistry(url, cache=tmp_path / "o"))
    assert other.read_status()[0] == {"cycles": 3, "frozen": True, "reason": "drift"}
    assert other.heartbeat()["pid"] == 12345
    before = (registry.mark(), reg.candidate_mark())
    other.set_candidate("v2", "v1")
    assert reg.candidate()["version"] == "v2"
    assert registry.mark() == before[0] and reg.candidate_mark() != before[1]
    reg.clear_candidate()
    assert other.candidate() is None
    with reg.learner_lock():
        with pytest.raises(ConfigError, match="another learner runs on registry .*pid 12345 "
                                              "on elsewhere"):
            with other.learner_lock():
                pass
    with other.learner_lock():  # released with its holder
        pass


def test_the_learner_lock_is_taken_again_after_a_restart(pg_cluster, url, tmp_path):
    """A restart ends the learner's session and its lock: the next heartbeat takes it
    again; when another learner took it first, the heartbeat raises LockLost."""
    reg = open_coordination(PostgresRegistry(url, create=True, cache=tmp_path / "c"))
    other = open_coordination(PostgresRegistry(url, cache=tmp_path / "o"))
    with reg.learner_lock():
        pg_cluster.restart()
        reg.beat({"pid": 1, "host": "h", "time": time.time()})  # taken again
        with pytest.raises(ConfigError, match="another learner"):
            with other.learner_lock():
                pass
        pg_cluster.restart()
        with other.learner_lock():  # the other learner is first this time
            with pytest.raises(LockLost, match="took registry"):
                reg.beat({"pid": 1, "host": "h", "time": time.time()})
