"""A question's own document (a corpus document whose text is the question's: ArguAna's
questions are arguments of its corpus) is not learned from. Shown first to its own
question, its click rate is the best measured and, the document irrelevant, the lowest of
the list; learned from, it taught the task part to move every question away from its own
text (a replay of a soak's ArguAna rewards: unseen questions 0.3750 -> 0.3076)."""

from __future__ import annotations

from pathlib import Path

from tttembed.loop.clicks.feed import ClickView
from tttembed.loop.clicks.propensity import flat
from tttembed.loop.open import open_store
from tttembed.loop.rewarded import collect, without_own
from tttembed.loop.store import Reward

QUESTION = "Being vegetarian helps the environment.  Becoming a vegetarian is good."
CORPUS = {
    "own": {"title": "animals environment", "text": QUESTION},
    # the same text, other whitespace: the question's digest still matches
    "own-copy": {"title": "", "text": " Being vegetarian helps the environment. Becoming "
                                      "a vegetarian is good. "},
    "counter": {"title": "", "text": "Vegetarian diets do not help the environment."},
    "other": {"title": "", "text": "Something else."},
}


def test_collect_leaves_each_questions_own_document_out(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "loop.sqlite"))
    try:
        store.add_rewards([Reward("args", QUESTION, "own", 0.02, 1.0),
                           Reward("args", QUESTION, "counter", 0.9, 1.0),
                           Reward("args", "another question", "own", 0.3, 1.0)])
        view = ClickView({("args", QUESTION): {"own": 0.01, "own-copy": 0.01,
                                               "other": 0.03}}, (), flat(10), ())
        judged, n_judge, _, _ = collect(store, view=view, corpus=CORPUS)
        assert judged[("args", QUESTION)] == {"counter": 0.9, "other": 0.03}
        # the same document is an answer like any other to a question it is not
        assert judged[("args", "another question")] == {"own": 0.3}
        assert n_judge == 3
        # without a corpus nothing is left out
        judged, *_ = collect(store, view=view)
        assert set(judged[("args", QUESTION)]) == {"own", "own-copy", "counter", "other"}
    finally:
        store.close()


def test_a_question_with_only_its_own_document_rewarded_is_dropped() -> None:
    judged = {("args", QUESTION): {"own": 0.0}, ("args", "q2"): {"other": 1.0}}
    assert without_own(judged, CORPUS) == {("args", "q2"): {"other": 1.0}}
    assert without_own(judged, {}) == judged  # a document not in the corpus is kept
