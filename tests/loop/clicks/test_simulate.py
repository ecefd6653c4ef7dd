from __future__ import annotations

import numpy as np

from tttembed.loop.clicks import simulate as sim


def test_position_based_click_rates_follow_examination_times_attraction():
    rng = np.random.default_rng(0)
    user = sim.PositionBased(eta=1.0, noise=0.1, top=1.0)
    clicks = np.array([user.clicks([1.0, 1.0, 0.0, 1.0], rng) for _ in range(20000)])
    expect = sim.examination(4, 1.0) * np.array([0.9, 0.9, 0.1, 0.9])
    assert np.allclose(clicks.mean(0), expect, atol=0.015)


def test_cascade_stops_after_the_first_click():
    rng = np.random.default_rng(1)
    user = sim.Cascade(noise=0.1, top=1.0)
    clicks = np.array([user.clicks([1.0, 1.0, 1.0], rng) for _ in range(5000)])
    assert clicks.sum(1).max() == 1
    assert abs(clicks[:, 0].mean() - 0.9) < 0.02 and abs(clicks[:, 1].mean() - 0.09) < 0.02


def test_bots_ignore_the_documents():
    rng = np.random.default_rng(2)
    assert sim.AlwaysFirst().clicks([0, 0, 1], rng).tolist() == [True, False, False]
    ranks = [int(np.argmax(sim.UniformRandom().clicks([0] * 5, rng))) for _ in range(5000)]
    assert np.allclose(np.bincount(ranks) / 5000, 0.2, atol=0.03)


def test_zipf_queries_repeat_the_head():
    rng = np.random.default_rng(3)
    ids = [f"q{i}" for i in range(100)]
    drawn = sim.zipf_queries(ids, 5000, rng)
    counts = sorted((drawn.count(q) for q in set(drawn)), reverse=True)
    assert counts[0] > 10 * counts[len(counts) // 2]


def test_simulate_logs_every_shown_document_with_its_search(tiny):
    users = sim.Population({"u": sim.PositionBased()}, {"u": 1.0}, sessions=3)
    shown = sim.simulate(tiny.traffic({"a": tiny.ranker(1)}, explore=0.5), users, 200,
                         np.random.default_rng(4))
    assert len(shown) == 2000 and {s.rank for s in shown} == set(range(1, 11))
    assert 0.3 < np.mean([s.explored for s in shown]) < 0.7
    plain = sim.simulate(tiny.traffic({"a": tiny.ranker(1)}), users, 50,
                         np.random.default_rng(4))
    assert not any(s.explored for s in plain)
    lists = [[s.doc_id for s in shown if s.search_id == sid] for sid in ("s0", "s1", "s2")]
    for lst, s in zip(lists, ("s0", "s1", "s2"), strict=True):
        q = next(x.query for x in shown if x.search_id == s)
        served = tiny.ranker(1)(next(k for k, v in tiny.queries.items() if v == q))
        assert sorted(lst) == sorted(served)
        assert sum(a != b for a, b in zip(lst, served, strict=True)) in (0, 2)
    assert {s.session for s in shown} <= {"u-0", "u-1", "u-2"}
