"""The state registry in PostgreSQL (a real server): versions content-addressed and
immutable, the pointer and its history in one transaction, bytes verified against the
id, LISTEN/NOTIFY, the local cache a replica serves from while the database is down."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.pg import database_fixtures
from tttembed.adapt.state import AdaptState
from tttembed.core.errors import ConfigError, DataError
from tttembed.registry.cache import content_id
from tttembed.registry.open import open_registry
from tttembed.registry.postgres import PostgresRegistry, RegistryUnavailable

pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")


def _state(keys: tuple[str, ...], seed: int = 0) -> AdaptState:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(len(keys), 4)).astype(np.float32)
    return AdaptState("task", keys, v, np.full(len(keys), 0.5), np.ones(len(keys), np.int64),
                      identity="st:test", dim=4)


pg_cluster, url = database_fixtures("r_")


def test_versions_promote_roll_back_and_diff_in_the_database(url, tmp_path):
    reg = open_registry(url, create=True, index={"identity": "st:test"},
                        cache=tmp_path / "c")
    assert isinstance(reg, PostgresRegistry) and reg.served() is None
    names = [reg.register(_state(("a", "b"), i), parent=None, reason=f"r{i}").name
             for i in range(3)]
    assert names == ["v1", "v2", "v3"]
    for n in names:
        reg.promote(n, by="learner")
    assert reg.served() == "v3"
    assert reg.rollback()["served"] == "v2"
    v3 = reg.get("v3")
    assert v3.id.startswith("sha256:") and v3.manifest["reason"] == "r2"
    assert np.allclose(v3.load().vectors, _state(("a", "b"), 2).vectors)
    assert reg.diff("v1", "v2")["changed"] == ["a", "b"]
    # another process (a fresh object, its own cache) sees the same registry
    other = PostgresRegistry(url, cache=tmp_path / "c2")
    assert other.served() == "v2" and [v.name for v in other.versions()] == names
    assert [h["action"] for h in other.served_record()["history"]] == \
        ["promote"] * 3 + ["rollback"]
    with pytest.raises(ConfigError, match="no version 'v9'"):
        other.get("v9")


def test_a_retried_write_stores_nothing_twice(url, tmp_path):
    reg = PostgresRegistry(url, create=True, cache=tmp_path / "c")
    st = _state(("a",), 1)
    first = reg.register(st, parent=None, reason="same", evidence={"gain": 0.1})
    again = reg.register(st, parent=None, reason="same", evidence={"gain": 0.1})
    assert again.name == first.name == "v1" and again.id == first.id
    assert len(reg.versions()) == 1
    other = reg.register(st, parent=None, reason="different evidence")
    assert other.name == "v2"


def test_bytes_that_do_not_match_the_id_are_refused(url, tmp_path):
    import psycopg

    reg = PostgresRegistry(url, create=True, cache=tmp_path / "c")
    v = reg.register(_state(("a",), 1))
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="immutable"):
            conn.execute("UPDATE registry_versions SET parent = 'v0'")
        # the row damaged behind the database's back (its guard switched off)
        conn.execute("ALTER TABLE registry_versions DISABLE TRIGGER registry_versions_immutable")
        conn.execute("UPDATE registry_versions SET state = state || '\\x00'::bytea")
    fresh = PostgresRegistry(url, cache=tmp_path / "fresh")
    with pytest.raises(DataError, match="do not match its id"):
        fresh.get(v.name)
    # a cached copy damaged on disk is not trusted either: it is fetched again (and refused)
    (tmp_path / "c" / "versions" / v.id.removeprefix("sha256:") / "vectors.npz").write_bytes(b"x")
    with pytest.raises(DataError, match="do not match its id"):
        reg.get(v.name)
    assert content_id({"a": 1}, b"x", None) != content_id({"a": 2}, b"x", None)


def test_a_promotion_is_notified_to_a_listener(url, tmp_path):
    reg = PostgresRegistry(url, create=True, cache=tmp_path / "c")
    v = reg.register(_state(("a",), 1))
    listener = PostgresRegistry(url, cache=tmp_path / "l")
    listener.wait_change(0.05)  # starts listening
    before = listener.mark()
    threading.Timer(0.3, reg.promote, args=(v.name,)).start()
    t0 = time.monotonic()
    listener.wait_change(10.0)
    waited = time.monotonic() - t0
    assert listener.mark() != before
    assert waited < 5.0, waited  # woken by NOTIFY, not by the 10 s timeout


def test_a_replica_serves_its_cached_version_while_the_database_is_down(pg_cluster, url,
                                                                        tmp_path):
    reg = PostgresRegistry(url, create=True, cache=tmp_path / "c")
    v = reg.promote(reg.register(_state(("a",), 1)).name)["served"]
    reg.remember_served(reg.get(v))
    reg.close()
    pg_cluster.stop()
    try:
        with pytest.raises(RegistryUnavailable, match="cannot reach the registry"):
            PostgresRegistry(url, cache=tmp_path / "empty", offline_ok=True)
        offline = PostgresRegistry(url, cache=tmp_path / "c", offline_ok=True)
        assert offline.offline
        cached = offline.cached_served()
        assert cached is not None and cached.name == v
        assert np.allclose(cached.load().vectors, _state(("a",), 1).vectors)
        with pytest.raises(RegistryUnavailable):
            offline.served()
        assert offline.get(v).id == cached.id  # from the cache while the database is down
    finally:
        pg_cluster.start()
    assert offline.served() == v  # reconnected
    assert not offline.offline


def test_the_pg_variables_fill_what_the_url_leaves_out(url, tmp_path, monkeypatch):
    """``postgresql://`` alone, the server, user and database from PGHOST, PGPORT, PGUSER
    and PGDATABASE (as psycopg reads them); a scheme no backend serves is refused."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    monkeypatch.setenv("PGHOST", parts.hostname or "")
    monkeypatch.setenv("PGPORT", str(parts.port))
    monkeypatch.setenv("PGUSER", parts.username or "")
    monkeypatch.setenv("PGDATABASE", parts.path.lstrip("/"))
    PostgresRegistry(url, create=True, cache=tmp_path / "a").register(None, reason="raw")
    reg = open_registry("postgresql://", cache=tmp_path / "b")
    assert [v.name for v in reg.versions()] == ["v1"]
    with pytest.raises(ConfigError, match="unknown registry scheme 'mysql'"):
        open_registry("mysql://x/y")
