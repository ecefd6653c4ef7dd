from __future__ import annotations

import numpy as np
import pytest

from tttembed.core.errors import ConfigError
from tttembed.loop.clicks import robust
from tttembed.loop.clicks import simulate as sim
from tttembed.loop.clicks.propensity import Propensities, flat
from tttembed.loop.clicks.rewards import click_rewards, click_stats, doubly_robust
from tttembed.loop.rows import Shown

TRUE = Propensities((1.0, 0.5, 0.25), (1.0,) * 3, (1.0,) * 3, 0, "harvest")


def shown_at(rank: int, clicks: int, n: int, doc: str = "d", session: str = "") -> list[Shown]:
    return [Shown(f"{doc}{rank}-{i}", "t", "q", doc, rank, i < clicks, session=session,
                  created=float(i)) for i in range(n)]


def test_ips_divides_clicks_by_the_clipped_examination():
    items = shown_at(3, 20, 100)  # 20 clicks at θ = 0.25: γ = 0.8
    (s,) = click_stats(items, TRUE, prior=0.0)
    assert s.raw == pytest.approx(0.8) and s.reward == pytest.approx(0.8)
    assert (s.impressions, s.clicks, s.exposure) == (100, 20, pytest.approx(25.0))
    (clipped,) = click_stats(items, TRUE, prior=0.0, clip=0.5)
    assert clipped.raw == pytest.approx(0.4)
    (naive,) = click_stats(items, flat(3), prior=0.0)
    assert naive.raw == pytest.approx(0.2)
    assert s.variance > 0


def test_few_impressions_are_shrunk_toward_the_task_mean():
    items = shown_at(1, 1, 1, "rare") + shown_at(1, 10, 100, "common")
    stats = {s.doc_id: s for s in click_stats(items, TRUE)}
    mean = 11 / 101
    assert stats["rare"].raw == 1.0
    assert mean < stats["rare"].reward < 0.5
    assert abs(stats["common"].reward - 0.1) < abs(stats["rare"].reward - 1.0)


def test_rewards_rows_are_unpaid_click_rewards_in_the_unit_interval():
    out = click_rewards(shown_at(2, 90, 100) + shown_at(1, 5, 100, "x"), TRUE)
    assert {r.source for r in out.rows} == {"clicks"}
    assert not any(r.paid for r in out.rows) and all(r.trusted for r in out.rows)
    assert all(0.0 <= r.reward <= 1.0 for r in out.rows)
    by = {r.doc_id: r.reward for r in out.rows}
    assert by["d"] == 1.0 and by["x"] < 0.1
    naive = click_rewards(shown_at(2, 90, 100), TRUE, naive=True)
    assert naive.rows[0].reward < 0.95


def test_bad_clip_is_a_config_error():
    with pytest.raises(ConfigError, match="clip"):
        click_stats(shown_at(1, 1, 2), TRUE, clip=0.0)


def test_doubly_robust_keeps_an_unbiased_judge_and_corrects_a_biased_one():
    items = shown_at(2, 30, 100)  # γ = 0.3 / 0.5 = 0.6
    (right,) = doubly_robust(items, TRUE, {("t", "q", "d"): 0.6})
    assert right.reward == pytest.approx(0.6) and right.disagreement == pytest.approx(0.0)
    (wrong,) = doubly_robust(items, TRUE, {("t", "q", "d"): 0.1})
    assert wrong.reward == pytest.approx(0.6) and wrong.disagreement == pytest.approx(0.5)
    assert doubly_robust(items, TRUE, {}) == []


def test_one_click_per_search_doc_and_session_and_a_cap_per_query():
    a = Shown("s1", "t", "q", "d", 1, True, session="u")
    assert len(robust.dedupe([a, a, a])) == 1
    flood = [Shown(f"s{i}", "t", "q", "d", 1, True, session="u", created=float(i))
             for i in range(50)]
    kept = robust.capped(flood, 10)
    assert len(kept) == 10 and [s.search_id for s in kept] == [f"s{i}" for i in range(10)]
    other = [Shown(f"o{i}", "t", "q", "d", 1, True, session="", created=float(i))
             for i in range(50)]
    assert len(robust.capped(other, 10)) == 50  # no session: one per search


@pytest.mark.parametrize("bot", [sim.AlwaysFirst(), sim.UniformRandom()])
def test_bot_sessions_are_dropped_and_real_users_kept(tiny, bot):
    users = sim.Population({"user": sim.PositionBased(eta=1.0, top=2.0), "bot": bot},
                           {"user": 0.9, "bot": 0.1}, sessions=10)
    traffic = tiny.traffic({"a": tiny.ranker(1), "b": tiny.ranker(2)})
    shown = sim.simulate(traffic, users, 6000, np.random.default_rng(7))
    prop = Propensities(tuple(sim.examination(10, 1.0)), (0.0,) * 10, (1.0,) * 10, 0, "harvest")
    out = click_rewards(shown, prop)
    bots = {s.session for s in shown if s.session.startswith("bot")}
    assert set(out.dropped_sessions) == bots
    # the rewards without the bots follow the grades better than with them
    clean = {(r.query, r.doc_id): r.reward for r in out.rows}
    grade = {(tiny.queries[q], d): g for q in tiny.qrels for d, g in tiny.qrels[q].items()}
    keys = sorted(clean)
    assert np.corrcoef([clean[k] for k in keys], [grade[k] for k in keys])[0, 1] > 0.5
