"""``serve --interleave``: while the registry names a candidate, searches are served as a
team-draft interleaving of the served version and the candidate, exactly as logged (the
click feed reads each document's team), and searches go back to the served list when the
candidate is cleared."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.loop.test_loop import QUERIES
from tests.loop.test_serve_loop import _client, _search, served  # noqa: F401  (fixture)

pytest.importorskip("starlette")
pytest.importorskip("sentence_transformers")


def _wait(client: Any, pred: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("the server did not follow the registry in time")


def test_a_candidate_is_interleaved_and_logged_with_its_teams(served, minilm,  # noqa: F811
                                                             tmp_path) -> None:
    from tttembed.loop.clicks.feed import ClickFeed
    from tttembed.loop.coordination.folder import clear_candidate, set_candidate
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import START
    from tttembed.registry.versions import Registry, index_record

    reg_dir = tmp_path / "reg"
    with _client(served, minilm, reg_dir, interleave=1.0) as client:
        raw = _search(client, QUERIES[:6])
        reg = Registry(reg_dir, index=index_record(served["index"]))
        cand = reg.register(served["state"], reason="test")
        set_candidate(reg_dir, cand.name, reg.served())
        _wait(client, lambda: client.get("/v1/states").json()["generation"] > 1)
        mixed = _search(client, QUERIES[:6])
        clear_candidate(reg_dir)
        _wait(client, lambda: client.get("/v1/states").json()["generation"] > 2)
        back = _search(client, QUERIES[:6])
    assert [d["ids"] for d in back["data"]] == [d["ids"] for d in raw["data"]]
    assert mixed["version"] is None  # the served version stays raw
    store = open_store(None, reg_dir)
    logged = {s.search_id: s for s in store.searches()}
    changed = 0
    for d in mixed["data"]:
        row = logged[d["search_id"]]
        assert list(row.ids) == d["ids"]  # returned exactly as logged
        kind, name, teams = row.intervention.split(":")
        assert (kind, name) == ("interleave", cand.name) and len(teams) == len(d["ids"])
        changed += d["ids"] != raw["data"][d["index"]]["ids"]
    assert changed > 0  # the learned state moves some lists
    shown = store.shown_after(START, 100)
    assert {s.test for s in shown if s.search_id in {d["search_id"] for d in mixed["data"]}} \
        == {cand.name}
    feed = ClickFeed(store, settle_s=0.0)
    feed.refresh()
    assert len(feed.outcomes(cand.name)) == len(mixed["data"])  # no clicks: ties
    assert set(feed.outcomes(cand.name)) == {0}
    store.close()
