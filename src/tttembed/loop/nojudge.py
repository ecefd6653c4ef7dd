"""The loop without a judge (``--judge none``): it learns from clicks and people's labels
only, and pays nothing. A validation or promotion pair nobody clicked or labelled counts
as not relevant (reward 0): a list that brings up documents no user has seen is not
credited for them, so the check can only be conservative about a change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.score.base import Item
from tttembed.ttt.judged import Pair
from tttembed.types import Rewards

#: The ``--judge`` value of a loop with no judge.
NO_JUDGE = "none"
#: What an unjudged pair is worth without a judge.
UNSEEN_REWARD = 0.0


class NoScorer:
    """Stands where the judge's scorer would: never scores (the budget is 0)."""

    spec = NO_JUDGE
    identity = NO_JUDGE
    mapping = ""

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        raise ConfigError("--judge none: this loop has no judge to score pairs (learn from "
                          "clicks and labels, or name a judge)")


@dataclass
class UnseenAsZero:
    """A :data:`~tttembed.ttt.judged.Pay` that pays nothing: every pair it is asked for
    gets :data:`UNSEEN_REWARD` (``asked`` counts them; ``spent`` stays 0)."""

    asked: int = 0
    spent: int = 0
    bought: Rewards = field(default_factory=dict)

    def __call__(self, pairs: list[Pair]) -> Rewards:
        out: Rewards = {}
        for key, doc in pairs:
            out.setdefault(key, {})[doc] = UNSEEN_REWARD
            self.bought.setdefault(key, {})[doc] = UNSEEN_REWARD
        self.asked += len(pairs)
        return out


__all__ = ["NO_JUDGE", "NoScorer", "UNSEEN_REWARD", "UnseenAsZero"]
