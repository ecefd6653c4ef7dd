"""Judge-click disagreement feeds the drift audit: users click by the simulator's
position-based model (examination 1/rank, clicks following the qrels grade); a judge that
scores by the grade agrees with them, one that scores the grade upside down
systematically disagrees. Through a real store (SQLite and PostgreSQL) the disagreeing
judge freezes promotions with a reason naming the judge and the clicks, the number and
the pair count, recorded as the audit entry's ``click_disagreement``; an agreeing judge
does not; once the drifted rewards are distrusted and the judge agrees again, promotions
resume."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.loop.clicks.conftest import Tiny
from tests.loop.test_click_feed import _log
from tests.pg import new_database
from tttembed.loop.auditor import Auditor
from tttembed.loop.clicks import simulate as sim
from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.clicks.propensity import estimate
from tttembed.loop.clicks.rewards import GAP_IMPRESSIONS, GAP_PAIRS, click_rewards, judge_gap
from tttembed.loop.config import LoopConfig
from tttembed.loop.freeze import apply_audit
from tttembed.loop.learner import Learner
from tttembed.loop.open import open_store
from tttembed.loop.rows import Shown
from tttembed.loop.status import LoopState
from tttembed.loop.store import Reward, Store

TOP = 2.0
#: the judges: reward from the qrels grade g in {0, 1, 2}
AGREES: Callable[[float], float] = lambda g: g / TOP  # noqa: E731
INVERTED: Callable[[float], float] = lambda g: 1.0 - g / TOP  # noqa: E731


def _shown(tiny: Tiny, n: int, seed: int = 0) -> list[Shown]:
    traffic = tiny.traffic({"v1": tiny.ranker(1), "v2": tiny.ranker(2), "v3": tiny.ranker(3)})
    users = sim.Population({"pbm": sim.PositionBased(eta=1.0, noise=0.05, top=TOP)},
                           {"pbm": 1.0}, sessions=5000)
    return sim.simulate(traffic, users, n, np.random.default_rng(seed))


def _judge(tiny: Tiny, shown: list[Shown], score: Callable[[float], float]
           ) -> dict[tuple[str, str, str], float]:
    grade = {(tiny.queries[q], d): g for q, docs in tiny.qrels.items() for d, g in docs.items()}
    return {(s.task, s.query, s.doc_id): score(grade[(s.query, s.doc_id)]) for s in shown}


def test_the_gap_separates_an_agreeing_judge_from_a_systematically_wrong_one() -> None:
    tiny = Tiny(queries=20)
    shown = _shown(tiny, 3000)
    prop = estimate(shown, 10)
    stats = click_rewards(shown, prop).stats
    agrees = judge_gap(stats, _judge(tiny, shown, AGREES))
    wrong = judge_gap(stats, _judge(tiny, shown, INVERTED))
    assert agrees is not None and wrong is not None
    assert agrees.pairs == wrong.pairs >= GAP_PAIRS
    assert agrees.gap < 0.15 < 0.5 < wrong.gap
    # a judge that is right about the order but scores 0.5 higher (capped at 1): biased
    high = judge_gap(stats, _judge(tiny, shown, lambda g: min(g / TOP + 0.5, 1.0)))
    assert high is not None and high.bias < -0.25 and high.gap > 0.3
    # too few pairs shown often enough: not measured
    few = {k: v for k, v in list(_judge(tiny, shown, INVERTED).items())[:GAP_PAIRS - 1]}
    assert judge_gap(stats, few) is None
    assert judge_gap(stats, _judge(tiny, shown, INVERTED),
                     min_impressions=10**6) is None
    # only pairs shown often enough count
    assert wrong.pairs == sum(1 for s in stats if s.impressions >= GAP_IMPRESSIONS)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        spec = str(tmp_path / "loop.sqlite")
    else:
        spec = new_database(request.getfixturevalue("pg_url"), "d" + uuid.uuid4().hex[:16])
    opened = open_store(spec)
    yield opened
    opened.close()


class _Cycle:
    """What ``Loop.run_cycle`` does up to the learning: the click view over the trusted
    judge rewards, the audit (no re-scored sample: only the clicks can decide), the
    freeze, the cycle's click rewards recorded."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.state = LoopState()
        self.feed = ClickFeed(store, settle_s=0.0)
        self.feed.refresh()
        config = LoopConfig(registry="r", index="i", judge="test:judge", drift_sample=0)
        self.auditor = Auditor(config, None, {}, store, None, None)  # type: ignore[arg-type]
        self.learner = Learner(config, None, store, None, None, None,  # type: ignore[arg-type]
                               clicks=self.feed)

    def audit(self) -> dict:
        view = self.learner.click_view()
        apply_audit(self.state, self.auditor.run(len(self.state.audits), 10_000, view),
                    self.store)
        self.learner.record_clicks(view, trusted=not self.state.frozen)
        return self.state.audits[-1]


def _world(store: Store, queries: int = 30) -> tuple[Tiny, list[Shown]]:
    """Searches and clicks logged: 30 queries, enough pairs at two ranks to harvest the
    propensities (10 queries are too few: the EM fallback)."""
    tiny = Tiny(queries=queries)
    shown = _shown(tiny, 1500, seed=1)
    _log(store, shown, 1000.0)
    return tiny, shown


def _pay(store: Store, judge: dict[tuple[str, str, str], float]) -> None:
    now = time.time()
    store.add_rewards([Reward(t, q, d, r, now) for (t, q, d), r in judge.items()])


def test_a_judge_the_clicks_contradict_freezes_promotions(store: Store) -> None:
    tiny, shown = _world(store)
    _pay(store, _judge(tiny, shown, INVERTED))
    cycle = _Cycle(store)
    entry = cycle.audit()
    assert cycle.state.frozen and entry["passed"] is False
    assert entry["click_disagreement"] > 0.3 and entry["click_pairs"] >= GAP_PAIRS
    reason = cycle.state.reason
    assert reason.startswith("the judge and the clicks disagree: gap ")
    assert f"{entry['click_disagreement']:.3f}" in reason
    assert f"on {entry['click_pairs']} pairs with both > 0.3" in reason
    # the judge rewards since the last passing audit are distrusted, and the cycle's
    # click rewards (doubly robust on that judge) are written distrusted
    assert store.rewards(trusted_only=True) == []
    rows = store.click_rewards()
    assert rows and all(not r.trusted for r in rows)
    assert any(r.judge is not None for r in rows)


def test_an_agreeing_judge_does_not_freeze(store: Store) -> None:
    tiny, shown = _world(store)
    _pay(store, _judge(tiny, shown, AGREES))
    cycle = _Cycle(store)
    entry = cycle.audit()
    assert not cycle.state.frozen and entry["passed"] is True and cycle.state.reason == ""
    assert entry["click_disagreement"] < 0.2 and entry["click_pairs"] >= GAP_PAIRS
    assert store.click_reward_counts()["click_untrusted"] == 0
    assert any(r.judge is not None for r in store.click_rewards())


def test_promotions_resume_when_the_judge_agrees_again(tmp_path: Path) -> None:
    """The judge drifts after a passing audit: its new rewards contradict the clicks and
    freeze; they are distrusted, the audit that follows sees only the rewards from
    before the drift, which agree, and promotions resume."""
    store = open_store(str(tmp_path / "loop.sqlite"))
    tiny, shown = _world(store)
    agrees = _judge(tiny, shown, AGREES)
    keys = sorted(agrees)
    _pay(store, {k: agrees[k] for k in keys[::2]})
    cycle = _Cycle(store)
    assert cycle.audit()["passed"] is True
    time.sleep(0.01)
    wrong = _judge(tiny, shown, INVERTED)
    _pay(store, {k: wrong[k] for k in keys[1::2]})
    assert cycle.audit()["passed"] is False and cycle.state.frozen
    assert "the judge and the clicks disagree" in cycle.state.reason
    entry = cycle.audit()
    assert entry["passed"] is True and entry["click_disagreement"] < 0.2
    assert not cycle.state.frozen and cycle.state.reason == ""
    store.close()


def test_without_a_judge_or_without_enough_pairs_nothing_is_decided(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "loop.sqlite"))
    tiny, shown = _world(store)
    cycle = _Cycle(store)  # clicks, but no judge reward: the audit measures nothing
    entry = cycle.audit()
    assert entry["passed"] is None and entry["click_disagreement"] is None
    assert not cycle.state.frozen
    few = dict(list(_judge(tiny, shown, INVERTED).items())[:5])
    _pay(store, few)
    entry = cycle.audit()
    assert entry["passed"] is None and not cycle.state.frozen
    store.close()


def test_propensities_from_the_em_fallback_decide_nothing(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "loop.sqlite"))
    tiny, shown = _world(store, queries=10)
    _pay(store, _judge(tiny, shown, INVERTED))
    cycle = _Cycle(store)
    entry = cycle.audit()
    view = cycle.learner.last_clicks
    assert view is not None and view.propensities.method == "em"
    assert entry["click_disagreement"] is None and not cycle.state.frozen
    store.close()
