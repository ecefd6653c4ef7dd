"""Clicks as rewards (METHOD.md Part 4): the interventions (RandPair swaps, interleaving)
and the string the search log stores for each, position-bias propensities, debiased click
rewards, team-draft interleaving with its sequential test, and the click models the
simulator and the tests share. The shown-document record the store hands out,
:class:`~tttembed.loop.rows.Shown`, lives beside the other rows."""

from tttembed.loop.clicks.interleave import Interleaving, credit, team_draft
from tttembed.loop.clicks.intervention import Intervention
from tttembed.loop.clicks.propensity import Propensities, estimate, flat
from tttembed.loop.clicks.rewards import (
    ClickRewards,
    ClickStat,
    DRStat,
    JudgeGap,
    click_rewards,
    click_stats,
    doubly_robust,
    judge_gap,
)
from tttembed.loop.clicks.sequential import SequentialTest, first_decisions
from tttembed.loop.rows import Shown

__all__ = ["ClickRewards", "ClickStat", "DRStat", "Interleaving", "Intervention", "JudgeGap",
           "Propensities", "SequentialTest", "Shown", "click_rewards", "click_stats", "credit",
           "doubly_robust", "estimate", "first_decisions", "flat", "judge_gap",
           "team_draft"]
