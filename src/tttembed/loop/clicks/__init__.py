"""Clicks as rewards (METHOD.md Part 4): the shown-document record the store hands out,
position-bias propensities, debiased click rewards, team-draft interleaving with its
sequential test, and the click models the simulator and the tests share."""

from tttembed.loop.clicks.interleave import Interleaving, credit, team_draft
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
from tttembed.loop.clicks.shown import Shown

__all__ = ["ClickRewards", "ClickStat", "DRStat", "Interleaving", "JudgeGap", "Propensities",
           "SequentialTest", "Shown", "click_rewards", "click_stats", "credit",
           "doubly_robust", "estimate", "first_decisions", "flat", "judge_gap",
           "team_draft"]
