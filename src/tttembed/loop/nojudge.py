"""The loop without a judge (``--judge none``): it learns from clicks and people's labels
only, and pays nothing.

A validation or promotion pair nobody clicked, labelled or was shown is worth the task's
*unseen floor* (:class:`UnseenAtFloor`): the mean click reward of the documents users were
shown only at the tail of the list (:func:`tttembed.loop.clicks.feed.unseen_floors`),
in the same units as every shown pair's click reward (debiased or naive). A document a
candidate brings up from below the served list is assumed no better than what it
displaces at the bottom. Scoring it 0 instead would weigh two candidates unequally: under
debiased rewards a shown irrelevant document keeps the users' noise click rate (about
0.1 in our simulations), under naive ones about a tenth of that, so a 0 for unseen
documents penalised every change ten times more under the debiased rewards (the
SciFact miss of the first server runs, docs/results.md). Without clicks the floor is 0
(nothing is known about any document)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.score.base import Item
from tttembed.ttt.judged import Pair
from tttembed.types import Rewards

#: The ``--judge`` value of a loop with no judge.
NO_JUDGE = "none"
#: What an unjudged pair is worth without a judge when its task has no unseen floor.
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
class UnseenAtFloor:
    """A :data:`~tttembed.ttt.judged.Pay` that pays nothing: every pair it is asked for
    gets its query's floor, ``floors`` by query key (:data:`UNSEEN_REWARD` for a key not
    in it); ``asked`` counts the pairs, ``spent`` stays 0."""

    floors: Mapping[str, float] = field(default_factory=dict)
    asked: int = 0
    spent: int = 0
    bought: Rewards = field(default_factory=dict)

    def __call__(self, pairs: list[Pair]) -> Rewards:
        out: Rewards = {}
        for key, doc in pairs:
            value = float(self.floors.get(key, UNSEEN_REWARD))
            out.setdefault(key, {})[doc] = value
            self.bought.setdefault(key, {})[doc] = value
        self.asked += len(pairs)
        return out


@dataclass
class FloorOrPay:
    """With a judge and click rewards: a :data:`~tttembed.ttt.judged.Pay` whose pairs of
    a query with an unseen floor (``floors`` by query key) get that floor and are not
    paid, the others go to ``pay``. A comparison of lists whose documents are click-rated
    must value the documents it brings in on the clicks' scale too (module docstring): a
    judge's score for them sits on another scale (measured on a SciFact replay of a
    5-minute soak's rewards: the judge's 0 for every new document against the click
    rewards of the displaced ones turned a task part that lifts held-out questions
    0.6451 -> 0.6584 into a judged loss of -0.097 [-0.104, -0.090])."""

    floors: Mapping[str, float]
    pay: Callable[[list[Pair]], Rewards]
    asked: int = 0

    def covers(self, keys: Sequence[str]) -> bool:
        """Every query of ``keys`` has a floor: nothing of theirs is paid."""
        return all(k in self.floors for k in keys)

    def __call__(self, pairs: list[Pair]) -> Rewards:
        at = [(k, d) for k, d in pairs if k in self.floors]
        out: Rewards = {}
        for key, doc in at:
            out.setdefault(key, {})[doc] = float(self.floors[key])
        self.asked += len(at)
        rest = [(k, d) for k, d in pairs if k not in self.floors]
        for key, got in (self.pay(rest) if rest else {}).items():
            out.setdefault(key, {}).update(got)
        return out


def key_floors(keys: Sequence[str], tasks: Sequence[str],
               floors: Mapping[str, float]) -> dict[str, float]:
    """Per query key, its task's unseen floor (keys of tasks without one are left out)."""
    return {k: float(floors[t]) for k, t in zip(keys, tasks, strict=True) if t in floors}


__all__ = ["NO_JUDGE", "FloorOrPay", "NoScorer", "UNSEEN_REWARD", "UnseenAtFloor", "key_floors"]
