"""A clicks-fed learner's first cycles (trust round 6): 379 clicks turned into no usable
rewards and the cycle said only "the guard kept raw everywhere (no part helps)". Now the
refusal says the clicks could not be used yet, and how many more pairs seen at two ranks
the position-bias harvest needs."""

from __future__ import annotations

from tttembed.loop.clicks.feed import ClickView, clicks_note
from tttembed.loop.clicks.propensity import MIN_INTERVENTIONS, Propensities, flat
from tttembed.loop.clicks.rewards import ClickStat
from tttembed.loop.populations import TwoChecks, decide
from tttembed.loop.promote import PromotionCheck


def _view(method: str, interventions: int) -> ClickView:
    ones = (1.0,) * 10
    stats = tuple(ClickStat("t", f"q{i}", "d", 0.5, 10, 3, 10.0, 0.1, 0.3)
                  for i in range(7))
    return ClickView({("t", "q0"): {"d": 0.5}}, stats,
                     Propensities(ones, ones, ones, interventions, method), ())


def test_unharvested_clicks_say_how_many_pairs_at_two_ranks_are_missing():
    note = clicks_note(_view("em", 12))
    assert "the clicks could not be used yet: 21 click(s) in the window gave 1 click " \
        "reward(s)" in note
    assert f"from 12 of the {MIN_INTERVENTIONS}" in note
    assert f"({MIN_INTERVENTIONS - 12} more" in note


def test_harvested_clicks_or_none_read_add_nothing():
    assert clicks_note(_view("harvest", 400)) == ""
    assert clicks_note(None) == ""
    assert clicks_note(ClickView({}, (), flat(10), (), mode="off")) == ""


def test_a_refusal_with_no_candidate_carries_the_note():
    check = PromotionCheck(0.0, None, None, 1.0, 0, 0, 0)
    ok, why = decide(TwoChecks(check, check), frozen=False, candidate=[],
                     clicks=_view("em", 40))
    assert not ok and why.startswith("refused: the guard kept raw everywhere")
    assert "the clicks could not be used yet" in why and "60 more" in why
    # a judge-fed learner (no click view) says what it said before
    assert decide(TwoChecks(check, check), frozen=False, candidate=[])[1] == \
        "refused: the guard kept raw everywhere (no part helps)"
