"""Retention (issue 76): durations and their checks, pruning in batches with its
tallies, forgetting a user, what the store holds; on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest

from tttembed.core.errors import ConfigError, StoreRefused
from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.config import LoopConfig
from tttembed.loop.open import open_store
from tttembed.loop.pending import PendingQueue, Traffic
from tttembed.loop.retention import Retention, format_duration, parse_duration
from tttembed.loop.rows import START, Event, Feedback, Reward, SearchLog, Store


def _searches(store: Store, n: int, *, start: float, session: str = "",
              client: str = "", task: str = "t", prefix: str = "s") -> list[SearchLog]:
    rows = [SearchLog(f"{prefix}{i:04d}", task, f"question {prefix} {i % 7}", start + i,
                      None, ("d1", "d2", "d3"), session=session, client=client,
                      intervention="randpair:1" if i % 2 else "")
            for i in range(n)]
    store.log_searches(rows)
    return rows


def _click(s: SearchLog, session: str, *, at: float, client: str = "c") -> Event:
    return Event(s.search_id, "d2", "click", session, client, s.task, s.query, 2, 1, 0.0,
                 at, at)


# -- durations and checks --------------------------------------------------------------
@pytest.mark.parametrize("text,seconds", [("30s", 30.0), ("5m", 300.0), ("2h", 7200.0),
                                          ("7d", 604800.0), ("1w", 604800.0), ("90", 90.0),
                                          ("1.5h", 5400.0)])
def test_a_duration_reads_as_seconds_and_back(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-3d", "0", "7x", "d"])
def test_a_malformed_duration_is_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--retain") as err:
        parse_duration(text)
    assert "\n" not in str(err.value)


def test_forever_turns_retention_off() -> None:
    kept = Retention.parse("forever")
    assert math.isinf(kept.retain_s) and not kept.enabled
    assert kept.to_dict()["retain"] == "forever"


def test_a_window_below_what_the_learner_needs_is_refused() -> None:
    with pytest.raises(ConfigError, match="--click-settle-s"):
        LoopConfig(registry="r", index="i", judge="bm25",
                   retention=Retention.parse("5m"), click_settle_s=300.0)
    # the same window with a short settle time is fine, and travels on the command line
    config = LoopConfig(registry="r", index="i", judge="bm25",
                        retention=Retention.parse("5m", 7), click_settle_s=60.0)
    argv = config.argv()
    assert argv[argv.index("--retain") + 1] == "5m"
    assert argv[argv.index("--keep-versions") + 1] == "7"


def test_keep_versions_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="--keep-versions"):
        Retention.parse("7d", 0)


# -- pruning ---------------------------------------------------------------------------
def test_prune_deletes_old_traffic_in_batches_and_tallies_it(store: Store) -> None:
    now = time.time()
    old = _searches(store, 25, start=now - 5000, prefix="o")
    new = _searches(store, 5, start=now - 10, prefix="n")
    store.add_events([_click(s, s.search_id, at=s.created) for s in old + new])
    store.add_rewards([Reward("t", old[0].query, "d1", 1.0, now - 5000, "judge", True,
                              True)])
    store.add_feedback([Feedback("t", old[1].query, "d2", 1.0, old[1].search_id,
                                 now - 5000)])
    dry = store.prune(now - 100, batch=4, dry_run=True)
    assert dry.rows == {"events": 25, "impressions": 0, "interventions": 12, "searches": 25}
    assert store.stats().tables["searches"].rows == 30  # a dry run deletes nothing
    report = store.prune(now - 100, batch=4)
    assert report.rows == dry.rows
    kept = store.stats()
    assert kept.tables["searches"].rows == 5 and kept.tables["events"].rows == 5
    assert kept.tables["interventions"].rows == 2
    # what learning needs stays: the paid judgment and people's label
    assert kept.tables["rewards"].rows == 1 and kept.tables["feedback"].rows == 1
    # every row ever logged is still counted: kept + pruned
    assert store.counts()["searches"] == 30
    assert store.pruned() == {"events": 25, "interventions": 12, "searches": 25}
    assert store.prune(now - 100, batch=4).total == 0  # nothing left to prune


def test_stats_say_rows_bytes_and_the_last_hour(store: Store) -> None:
    now = time.time()
    _searches(store, 10, start=now - 7200, prefix="o")
    _searches(store, 4, start=now - 60, prefix="n")
    st = store.stats(now).to_dict()
    searches = st["tables"]["searches"]
    assert searches["rows"] == 14 and searches["rows_last_hour"] == 4
    assert searches["oldest"] == pytest.approx(now - 7200)
    assert searches["bytes"] and searches["bytes"] > 0
    assert st["bytes"] >= searches["bytes"]


# -- forgetting ------------------------------------------------------------------------
def test_forget_a_session_deletes_its_rows_and_blanks_paid_texts(store: Store) -> None:
    now = time.time()
    mine = _searches(store, 4, start=now - 50, session="alice", prefix="a")
    theirs = _searches(store, 3, start=now - 40, session="bob", prefix="b")
    # a search logged without the session, that alice clicked: hers too
    loose = _searches(store, 1, start=now - 30, prefix="l")[0]
    store.add_events([_click(mine[0], "alice", at=now), _click(loose, "alice", at=now),
                      _click(theirs[0], "bob", at=now)])
    store.add_rewards([Reward("t", mine[1].query, "d1", 0.9, now, "judge", True, True),
                       Reward("t", theirs[1].query, "d1", 0.2, now, "judge", True, True)])
    store.add_feedback([Feedback("t", mine[2].query, "d3", 1.0, mine[2].search_id, now)])
    dry = store.forget(session="alice", dry_run=True)
    assert dry.searches == 5 and store.stats().tables["searches"].rows == 8
    report = store.forget(session="alice")
    assert report.searches == 5
    assert report.deleted["searches"] == 5 and report.deleted["feedback"] == 1
    assert report.deleted["events"] == 2
    assert report.blanked["rewards"] == 1
    left = store.searches()
    assert {s.search_id for s in left} == {s.search_id for s in theirs}
    # the paid judgment stays (the budget bought it), without its text; not learnable
    st = store.stats()
    assert st.tables["rewards"].rows == 2
    assert [r.query for r in store.rewards()] == [theirs[1].query]
    assert [r.query for r in store.rewards_after(START)] == [theirs[1].query]
    assert store.counts()["paid"] == 2
    # the accounting still reconciles: logged = kept + forgotten
    assert store.counts()["searches"] == 8
    assert st.forgotten["searches"] == 5
    gone = store.forgotten_after(START)
    assert {f.search_id for f in gone} == {s.search_id for s in mine} | {loose.search_id}


def test_forget_a_client_and_an_unknown_id(store: Store) -> None:
    now = time.time()
    _searches(store, 2, start=now - 5, client="app-7", prefix="c")
    assert store.forget(client="app-7").searches == 2
    assert not store.forget(client="nobody").found
    with pytest.raises(ConfigError, match="exactly one"):
        store.forget()


def test_a_running_learner_drops_what_was_forgotten(store: Store) -> None:
    now = time.time()
    mine = _searches(store, 3, start=now - 50, session="alice", prefix="a")
    theirs = _searches(store, 3, start=now - 40, session="bob", prefix="b")
    store.add_events([_click(s, s.search_id[0], at=now) for s in mine + theirs])
    feed = ClickFeed(store, settle_s=0.0)
    feed.refresh()
    queue = PendingQueue(depth=3)
    traffic = Traffic(store, queue, lambda s: s.ids)
    traffic.update()
    assert {s.search_id for s in feed.window} >= {s.search_id for s in mine}
    before = queue.total
    store.forget(session="alice")
    feed.refresh()
    traffic.update()
    assert not {s.search_id for s in feed.window} & {s.search_id for s in mine}
    assert {s.search_id for s in feed.window} == {s.search_id for s in theirs}
    mine_texts = {s.query for s in mine} - {s.query for s in theirs}
    assert queue.total < before
    assert not any(q in mine_texts for _, q, _ in queue.top(100))


# -- schema ----------------------------------------------------------------------------
def test_a_store_of_the_earlier_schema_gains_the_user_columns(tmp_path: Path) -> None:
    path = tmp_path / "loop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE searches (search_id TEXT PRIMARY KEY, task TEXT NOT NULL, "
                     "query TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, version TEXT, "
                     "ids TEXT NOT NULL, kind TEXT NOT NULL, replica TEXT NOT NULL)")
        conn.execute("INSERT INTO searches VALUES ('s1', 't', 'q', 1.0, NULL, '[]', "
                     "'search', 'r')")
    store = open_store(str(path))
    try:
        assert [s.search_id for s in store.searches()] == ["s1"]
        _searches(store, 1, start=time.time(), session="alice", prefix="n")
        assert store.forget(session="alice").searches == 1
    finally:
        store.close()


def test_a_store_a_later_release_made_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "loop.sqlite"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tallies SET n = 99 WHERE kind = 'schema'")
    with pytest.raises(StoreRefused, match="later tttembed"):
        open_store(str(path))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT n FROM tallies WHERE kind = 'schema'").fetchone()[0] == 99
