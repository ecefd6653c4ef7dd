"""The bounded learning window (:mod:`tttembed.loop.window`): which rewarded texts a cycle
learns from."""

from __future__ import annotations

import pytest

from tttembed.core.errors import ConfigError
from tttembed.loop.window import RecentTexts


def test_the_window_holds_the_texts_whose_rewards_changed_most_recently():
    recent: RecentTexts[str] = RecentTexts(window=3, remembered=10)
    rewards = {f"t{i}": {"d": 0.5} for i in range(5)}
    assert recent.pick(rewards) == ["t0", "t1", "t2"]  # all new: the first 3 by key
    rewards["t0"] = {"d": 1.0}  # changed
    rewards["t5"] = {"d": 0.0}  # new
    # the two changed now, then of the rest the one never learned first
    assert recent.pick(rewards) == ["t0", "t3", "t5"]
    assert recent.pick(rewards) == ["t0", "t4", "t5"]  # then the next one never learned
    assert recent.pick(rewards) == ["t0", "t1", "t5"]  # then the least recently learned


def test_under_the_window_every_text_is_learned_and_the_memory_is_capped():
    recent: RecentTexts[str] = RecentTexts(window=4, remembered=5)
    assert recent.pick({"a": {}, "b": {"d": 1.0}}) == ["a", "b"]
    recent.pick({f"t{i}": {"d": float(i)} for i in range(9)})
    assert len(recent) == 5
    with pytest.raises(ConfigError):
        RecentTexts(window=0)
