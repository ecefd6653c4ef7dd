"""Interleaving as the online promotion test, through a real store and registry: the
served list and the candidate's team-drafted (what is returned is what is logged), clicks
credited to the team that contributed the document, the sequential test promoting a
candidate users prefer, dropping one they don't, and dropping a stale one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.coordination.folder import read_candidate
from tttembed.loop.online import OnlineTest
from tttembed.loop.open import open_store
from tttembed.loop.rows import Event, SearchLog
from tttembed.registry.versions import Registry
from tttembed.serve.explore import interleave_item

SERVED = [f"a{i}" for i in range(10)]
CANDIDATE = [f"b{i}" for i in range(10)]


def _interleaved_searches(store: object, n: int, prefer: str, rng: np.random.Generator,
                          start: float = 1000.0) -> int:
    """``n`` searches interleaved at fraction 1; users click the first shown doc of
    team ``prefer`` 80% of the time, the other team's first doc otherwise."""
    rows, events = [], []
    for i in range(n):
        sid = f"{prefer}{start}-{i}"
        item = {"ids": list(SERVED), "scores": [1.0 - 0.01 * j for j in range(10)]}
        other = {"ids": list(CANDIDATE), "scores": [0.9 - 0.01 * j for j in range(10)]}
        mark = interleave_item(sid, item, other, 1.0, "v2")
        assert mark.startswith("interleave:v2:") and len(mark.split(":")[2]) == 10
        rows.append(SearchLog(sid, "t", f"q{i % 7}", start + i, "v1", tuple(item["ids"]),
                              intervention=mark))
        team = prefer if rng.random() < 0.8 else ("B" if prefer == "A" else "A")
        teams = mark.split(":")[2]
        rank = teams.index(team)
        events.append(Event(sid, item["ids"][rank], "click", f"u{i}", task="t",
                            query=f"q{i % 7}", rank=rank + 1))
    store.log_searches(rows)  # type: ignore[attr-defined]
    store.add_events(events)  # type: ignore[attr-defined]
    return n


def _registry(tmp_path: Path) -> Registry:
    reg = Registry(tmp_path / "reg", create=True, index={"corpus": "c"})
    reg.register(None, reason="first")
    reg.register(None, reason="second")
    reg.promote("v1", by="learner")
    return reg


def test_interleaving_keeps_every_document_once_and_logs_the_teams() -> None:
    item = {"ids": list(SERVED), "scores": list(range(10))}
    other = {"ids": ["a0", "b1", "a2", "b3", "b4", "b5", "b6", "b7", "b8", "b9"],
             "scores": list(range(10))}
    mark = interleave_item("s-1", item, other, 1.0, "v2")
    teams = mark.split(":")[2]
    assert len(set(item["ids"])) == 10 and item["ids"][0] == "a0"
    assert set(teams) <= {"A", "B"} and abs(teams.count("A") - teams.count("B")) <= 1
    untouched = {"ids": list(SERVED), "scores": list(range(10))}
    assert interleave_item("s-1", untouched, other, 0.0, "v2") == ""
    assert untouched["ids"] == SERVED


def test_a_preferred_candidate_is_promoted_and_a_worse_one_dropped(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    store = open_store(str(tmp_path / "loop.sqlite"))
    feed = ClickFeed(store, settle_s=0.0)
    online = OnlineTest(reg, feed)
    online.propose("v2")
    assert online.step() is not None and online.last is not None
    assert online.last.decision == "undecided" and online.last.searches == 0

    _interleaved_searches(store, 400, "B", np.random.default_rng(0))
    feed.refresh()
    verdict = online.step()
    assert verdict is not None and verdict.decision == "B better"
    assert verdict.wins > verdict.losses and verdict.p <= 0.05
    assert reg.served() == "v2" and read_candidate(reg.root) is None
    assert "interleaving" in reg.served_record()["history"][-1]["by"]

    reg.register(None, reason="third")
    online.propose("v3")
    _interleaved_searches(store, 400, "A", np.random.default_rng(1), start=5000.0)
    feed.refresh()
    # the outcomes credit v2 (those searches named v2): v3 has none yet
    assert online.step() is not None and online.last is not None
    assert online.last.decision == "undecided"
    store.close()


def test_a_candidate_users_do_not_prefer_is_dropped(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    store = open_store(str(tmp_path / "loop.sqlite"))
    feed = ClickFeed(store, settle_s=0.0)
    online = OnlineTest(reg, feed)
    online.propose("v2")
    _interleaved_searches(store, 400, "A", np.random.default_rng(2))
    feed.refresh()
    verdict = online.step()
    assert verdict is not None and verdict.decision == "A better or equal"
    assert reg.served() == "v1" and read_candidate(reg.root) is None
    store.close()


def test_a_candidate_whose_served_version_changed_is_dropped(tmp_path: Path) -> None:
    reg = _registry(tmp_path)
    store = open_store(str(tmp_path / "loop.sqlite"))
    online = OnlineTest(reg, ClickFeed(store, settle_s=0.0))
    online.propose("v2")
    reg.rollback(None, by="user")
    verdict = online.step()
    assert verdict is not None and verdict.decision == "stale"
    assert read_candidate(reg.root) is None and reg.served() is None
    store.close()
