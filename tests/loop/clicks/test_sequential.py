from __future__ import annotations

import numpy as np
import pytest

from tttembed.core.errors import ConfigError
from tttembed.loop.clicks.interleave import credit, team_draft
from tttembed.loop.clicks.sequential import DECISIONS, SequentialTest, first_decisions


def test_team_draft_alternates_fairly_and_skips_shared_ids():
    a, b = ["a1", "x", "a2", "a3"], ["x", "b1", "b2", "b3"]
    for seed in range(20):
        inter = team_draft(a, b, 6, np.random.default_rng(seed))
        assert len(set(inter.ids)) == len(inter.ids) == 6
        assert abs(inter.teams.count("A") - inter.teams.count("B")) <= 1
        # every team's picks keep its own order
        for team, lst in (("A", a), ("B", b)):
            mine = [d for d, t in zip(inter.ids, inter.teams, strict=True) if t == team]
            assert mine == sorted(mine, key=lst.index)
    firsts = {team_draft(a, b, 2, np.random.default_rng(s)).teams[0] for s in range(20)}
    assert firsts == {"A", "B"}


def test_team_draft_fills_from_the_longer_list():
    inter = team_draft(["a"], ["b1", "b2", "b3"], 4, np.random.default_rng(0))
    assert sorted(inter.ids) == ["a", "b1", "b2", "b3"]
    assert inter.team_of("b3") == "B" and inter.team_of("zzz") == ""


def test_credit_by_clicks_on_hand_built_lists():
    inter = team_draft(["a1", "a2"], ["b1", "b2"], 4, np.random.default_rng(1))
    assert credit(inter, {"b1"}) == 1
    assert credit(inter, {"a1", "a2", "b1"}) == -1
    assert credit(inter, {"a1", "b2"}) == 0
    assert credit(inter, set()) == 0


def test_an_unknown_outcome_or_method_is_refused():
    with pytest.raises(ConfigError, match="-1, 0 or 1"):
        SequentialTest().update(2)
    with pytest.raises(ConfigError, match="unknown sequential test"):
        SequentialTest(method="bayes")


def outcomes(p_win: float, ties: float, runs: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.random((runs, n))
    return np.where(u < ties, 0, np.where(rng.random((runs, n)) < p_win, 1, -1))


@pytest.mark.parametrize("method", ["sprt", "msprt"])
def test_a_clear_difference_stops_early_and_the_class_agrees_with_the_arrays(method):
    test = SequentialTest(method=method)
    runs = outcomes(0.7, 0.5, 20, 2000, seed=1)
    decision, used = first_decisions(runs, test)
    assert (decision == 0).mean() >= 0.9
    assert np.median(used) < 500
    for row, d, u in zip(runs[:5], decision[:5], used[:5], strict=True):
        t = SequentialTest(method=method)
        for x in row:
            if t.update(int(x)) != "undecided":
                break
        assert (t.decision, t.searches) == (DECISIONS[d], u)
    assert t.p_value <= 1.0


@pytest.mark.parametrize("method", ["sprt", "msprt"])
def test_the_false_positive_rate_under_the_null_stays_near_alpha(method):
    test = SequentialTest(method=method)
    decision, _ = first_decisions(outcomes(0.5, 0.3, 500, 4000, seed=2), test)
    fpr = (decision == 0).mean()
    assert fpr <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 500)
    # and B worse is never called better more often than the null
    worse, _ = first_decisions(outcomes(0.4, 0.3, 500, 4000, seed=3), test)
    assert (worse == 0).mean() <= fpr + 0.01


def test_max_n_ends_an_undecided_msprt_as_not_better():
    t = SequentialTest(max_n=10)
    for _ in range(10):
        t.update(1 if t.n % 2 else -1)
    assert t.decision == "A better or equal" and t.n == 10
