"""``/v1/search``'s ``session_id`` and ``client_id`` (issue 76): stored with the search, so
``tttembed store forget`` finds a user who clicked nothing; a bad id is a 400; the
replica's retention shows on ``/v1/loop``. A real server on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loop.conftest import pg_url  # noqa: F401 (the PostgreSQL fixture)
from tests.serve.conftest import QUERIES, TASK
from tests.serve.test_events import _serve, index_dir, store_spec  # noqa: F401 (fixtures)


@pytest.fixture
def served(index_dir, minilm, tmp_path, store_spec):  # noqa: ANN001, ANN201, F811
    yield from _serve(index_dir, minilm, tmp_path, store=store_spec)


def _search(client: Any, body: dict[str, Any]) -> Any:
    return client.post("/v1/search", json={"task": TASK, "k": 3, **body})


def test_a_users_searches_are_found_and_forgotten_by_their_ids(served) -> None:
    client, store = served["client"], served["store"]
    mine = _search(client, {"queries": [QUERIES["q1"], QUERIES["q2"]],
                            "session_id": "alice-1", "client_id": "app-a"})
    theirs = _search(client, {"query": QUERIES["q1"], "session_id": "bob-1"})
    anon = _search(client, {"query": QUERIES["q2"]})
    for r in (mine, theirs, anon):
        assert r.status_code == 200, r.text
    mine_ids = {d["search_id"] for d in mine.json()["data"]}
    kept = {theirs.json()["data"][0]["search_id"], anon.json()["data"][0]["search_id"]}
    wait_logged(store, mine_ids | kept)
    assert store.forget(client="app-a", dry_run=True).searches == 2
    report = store.forget(session="alice-1")
    assert report.searches == 2 and report.deleted["searches"] == 2
    assert {s.search_id for s in store.searches()} == kept


def wait_logged(store: Any, ids: set[str], timeout: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while {s.search_id for s in store.searches()} < ids:
        assert time.monotonic() < deadline, "searches not logged"
        time.sleep(0.05)


@pytest.mark.parametrize("body,word", [({"session_id": ""}, "session_id"),
                                       ({"session_id": 7}, "session_id"),
                                       ({"client_id": "x" * 257}, "client_id"),
                                       ({"client_id": ["a"]}, "client_id")])
def test_a_bad_user_id_is_a_400_naming_it(served, body: dict[str, Any], word: str) -> None:
    r = _search(served["client"], {"query": QUERIES["q1"], **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == word and "at most 256 characters" in err["message"]


def test_the_loop_status_shows_what_the_replica_keeps(served) -> None:
    got = served["client"].get("/v1/loop").json()
    kept = got["serving"]["retention"]
    assert kept["retain"] == "7d" and kept["keep_versions"] == 20
    assert got["retention"]["store_pruned"] == {}


def test_admin_forget_needs_a_keyed_server(served) -> None:
    r = served["client"].post("/admin/forget", json={"session_id": "alice-1"})
    assert r.status_code == 403 and "--api-key-env" in r.json()["error"]["message"], r.text


def test_admin_forget_on_a_keyed_server(index_dir, minilm, tmp_path,  # noqa: F811
                                        monkeypatch) -> None:
    monkeypatch.setenv("TTT_FORGET_KEY", "k-123")
    for got in _serve(index_dir, minilm, tmp_path, api_key_env="TTT_FORGET_KEY"):
        client, store = got["client"], got["store"]
        client.headers["authorization"] = "Bearer k-123"
        r = _search(client, {"query": QUERIES["q1"], "session_id": "carol"})
        wait_logged(store, {r.json()["data"][0]["search_id"]})
        for body, status in (({"session_id": "carol", "client_id": "x"}, 400),
                             ({"session_id": "carol", "dry_run": "yes"}, 400),
                             ({"session_id": "nobody"}, 404)):
            bad = client.post("/admin/forget", json=body)
            assert bad.status_code == status, bad.text
        ok = client.post("/admin/forget", json={"session_id": "carol"})
        assert ok.status_code == 200 and ok.json()["searches"] == 1, ok.text
        assert store.searches() == []
        unkeyed = client.post("/admin/forget", json={"session_id": "carol"},
                              headers={"authorization": ""})
        assert unkeyed.status_code == 401, unkeyed.text
