"""Click rewards as rows of the feedback store (``click_rewards``, ``source`` "clicks") on
both backends, SQLite and a real PostgreSQL server: written, upserted each cycle and read
back, never touching the judge's reward for the same pair; trusted and distrusted like
judge rewards; and a distrusted click reward is not learned from."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.loop.clicks.conftest import Tiny
from tests.loop.test_click_feed import _log, _traffic
from tests.pg import new_database
from tttembed.loop.clicks.feed import ClickFeed, ClickView
from tttembed.loop.clicks.propensity import flat
from tttembed.loop.clicks.rewards import ClickStat
from tttembed.loop.learner import Learner
from tttembed.loop.open import open_store
from tttembed.loop.rewarded import collect
from tttembed.loop.store import ClickReward, Reward, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh store: a SQLite file or a new PostgreSQL database."""
    if request.param == "sqlite":
        spec = str(tmp_path / "loop.sqlite")
    else:
        spec = new_database(request.getfixturevalue("pg_url"), "c" + uuid.uuid4().hex[:16])
    opened = open_store(spec)
    yield opened
    opened.close()


def _row(doc: str, reward: float, impressions: int, created: float, *, trusted: bool = True,
         judge: float | None = None, query: str = "café ☕ 'q' ? %s") -> ClickReward:
    return ClickReward("pets", query, doc, reward, clicks=impressions // 4,
                       impressions=impressions, exposure=impressions * 0.6, variance=0.01,
                       raw=reward + 0.05, mode="ips", basis="harvest", interventions=120,
                       judge=judge, created=created, trusted=trusted)


def test_rows_are_written_upserted_and_read_back(store: Store) -> None:
    judge = Reward("pets", "café ☕ 'q' ? %s", "d1", 0.25, 1.0)
    store.add_rewards([judge])
    rows = [_row("d1", 0.75, 40, 10.0, judge=0.25), _row("d2", 0.1, 12, 10.0)]
    assert store.add_click_rewards(rows) == 2
    assert store.add_click_rewards([]) == 0
    assert store.click_rewards() == sorted(rows, key=lambda r: r.doc_id)
    assert {r.source for r in store.click_rewards()} == {"clicks"}
    # the next cycle's estimate replaces the row: one row per (task, query, doc)
    again = _row("d1", 0.6, 80, 20.0)
    store.add_click_rewards([again])
    got = {r.doc_id: r for r in store.click_rewards()}
    assert got["d1"] == again and got["d2"] == rows[1]
    assert store.click_reward_counts() == {"click_rewards": 2, "click_untrusted": 0}
    # the judge's reward for the same pair is its own row, untouched
    assert store.rewards(trusted_only=False) == [judge]
    # NaN statistics are stored as unknown, never refused
    store.add_click_rewards([ClickReward("pets", "q2", "d3", 0.5, 0, 3, variance=float("nan"))])
    assert np.isnan({r.doc_id: r for r in store.click_rewards()}["d3"].variance)


def test_click_rewards_are_trusted_and_distrusted_like_judge_rewards(store: Store) -> None:
    store.add_rewards([Reward("pets", "q", "j1", 0.5, 5.0)])
    store.add_click_rewards([_row("d1", 0.7, 40, 1.0), _row("d2", 0.7, 40, 5.0)])
    # a failed audit distrusts what was estimated since the last passing one
    assert store.distrust(since=4.0) == 2  # the judge reward and the click reward d2
    assert [r.doc_id for r in store.click_rewards(trusted=False)] == ["d2"]
    assert [r.doc_id for r in store.click_rewards(trusted=True)] == ["d1"]
    # written while frozen: distrusted, and the same evidence re-estimated later stays so
    store.add_click_rewards([_row("d3", 0.4, 30, 6.0, trusted=False)])
    store.add_click_rewards([_row("d2", 0.7, 40, 7.0), _row("d3", 0.4, 30, 7.0)])
    assert {r.doc_id for r in store.click_rewards(trusted=False)} == {"d2", "d3"}
    assert store.click_reward_counts() == {"click_rewards": 3, "click_untrusted": 2}
    # a trusted estimate from more impressions (new clicks) is trusted again; a frozen
    # write keeps a trusted row's successor distrusted
    store.add_click_rewards([_row("d2", 0.65, 41, 8.0), _row("d1", 0.7, 50, 8.0,
                                                             trusted=False)])
    assert {r.doc_id for r in store.click_rewards(trusted=False)} == {"d1", "d3"}


def _view(rewards: dict[str, float]) -> ClickView:
    stats = tuple(ClickStat("pets", "q", d, r, 30, 10, 18.0, 0.01, r) for d, r in
                  rewards.items())
    return ClickView({("pets", "q"): dict(rewards)}, stats, flat(10), ())


def test_a_distrusted_click_reward_is_not_learned_from(store: Store) -> None:
    store.add_rewards([Reward("pets", "q", "d1", 0.0, 1.0)])  # the judge: d1 irrelevant
    view = _view({"d1": 0.9, "d2": 0.8})
    store.add_click_rewards(view.rows(10.0, trusted=True))
    judged, n_judge, _, _ = collect(store, view=view)
    assert judged[("pets", "q")] == {"d1": 0.9, "d2": 0.8} and n_judge == 1
    store.distrust(since=10.0)  # the clicks' estimate of that cycle is not trusted
    judged, *_ = collect(store, view=view)
    assert judged[("pets", "q")] == {"d1": 0.0}  # the trusted judge reward, no clicks
    # a pair with neither a trusted click reward nor a judge reward is not learned at all
    store.add_click_rewards([ClickReward("pets", "q2", "d5", 1.0, 5, 20, trusted=False)])
    judged, *_ = collect(store, view=ClickView({("pets", "q2"): {"d5": 1.0}}, (), flat(10), ()))
    assert ("pets", "q2") not in judged


def test_a_cycle_records_its_click_rewards_with_their_basis(store: Store,
                                                            tmp_path: Path) -> None:
    """The learner's feed over logged searches and clicks: the view's pairs become rows,
    ``mode`` ips, the propensities' basis and interventions, trusted unless frozen."""
    tiny = Tiny(queries=8)
    _log(store, _traffic(tiny, 600, 4), 1000.0)
    feed = ClickFeed(store, settle_s=0.0)
    feed.refresh()
    # with a judge, no click session is held out of learning (the learner's hold_out)
    judged = SimpleNamespace(has_judge=True)
    learner = Learner(judged, None, store, None, None, None, clicks=feed)  # type: ignore[arg-type]
    view = learner.click_view()
    assert view is not None and view.pairs > 0
    assert learner.record_clicks(view, trusted=True) == len(view.stats)
    rows = store.click_rewards()
    assert len(rows) == view.pairs and all(0.0 <= r.reward <= 1.0 for r in rows)
    assert {(r.mode, r.basis, r.interventions) for r in rows} == {
        ("ips", view.propensities.method, view.propensities.interventions)}
    by_pair = {(r.query, r.doc_id): r for r in rows}
    for s in view.stats:
        row = by_pair[(s.query, s.doc_id)]
        assert (row.clicks, row.impressions) == (s.clicks, s.impressions)
        assert row.variance == pytest.approx(s.variance) and row.judge is None
    assert learner.click_rows == {"written": len(rows), "click_rewards": len(rows),
                                  "click_untrusted": 0}
    learner.record_clicks(learner.click_view(), trusted=False)  # a frozen cycle's
    assert store.click_reward_counts()["click_untrusted"] == len(rows)
