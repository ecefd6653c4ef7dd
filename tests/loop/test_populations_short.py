"""A cycle short of ``--min-queries`` says that nothing was decided and why (trust round
6, issue 77, e): before, it read "better on neither population" beside an asked interval
of +0.2858 [+0.2231, +0.3528], as if the test had found no gain."""

from __future__ import annotations

import pytest

from tttembed.loop.populations import TwoChecks, decide
from tttembed.loop.promote import PromotionCheck


def _check(gain, lo, hi, p, queries, changed, min_queries=20) -> PromotionCheck:
    return PromotionCheck(gain, lo, hi, p, queries, changed, 30, 0, min_queries)


CANDIDATE = [object()]  # decide only asks whether there is one
SHORT = _check(0.2858, 0.2231, 0.3528, 0.0001, 12, 12)


@pytest.mark.parametrize("new", [_check(0.0, None, None, 1.0, 12, 0),
                                 _check(0.0, None, None, 1.0, 25, 0)])
def test_a_short_asked_check_says_nothing_was_decided_and_how_many_more(new):
    ok, why = decide(TwoChecks(SHORT, new), frozen=False, candidate=CANDIDATE)
    assert not ok and "better on neither" not in why, why
    assert why.startswith("refused: nothing decided: the asked check has 12 rewarded "
                          "queries and needs --min-queries 20 (8 more)"), why
    assert "+0.2858 [+0.2231, +0.3528]" in why  # the figures still shown


def test_short_beside_a_population_that_decided_says_both():
    new = _check(0.01, -0.01, 0.03, 0.3, 25, 5)
    ok, why = decide(TwoChecks(SHORT, new), frozen=False, candidate=CANDIDATE)
    assert not ok and why.startswith("refused: not better on the new questions at alpha "
                                     "0.025, and nothing decided on the asked: it has 12 "
                                     "rewarded queries and needs --min-queries 20 (8 more)"), why


def test_enough_queries_and_not_better_still_reads_better_on_neither():
    enough = _check(0.01, -0.01, 0.03, 0.3, 25, 5)
    ok, why = decide(TwoChecks(enough, enough), frozen=False, candidate=CANDIDATE)
    assert not ok and why.startswith("refused: better on neither population"), why
    assert "min-queries" not in why
