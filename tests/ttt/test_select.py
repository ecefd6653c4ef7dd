"""Method auto (``learn --method auto``): per task the deployable state the judged diff
says helps, as one mixed state that search and the framework adapters apply unchanged.

The tasks of ``test_guard`` (exact vectors, a qrels judge) make the answer known: on the
*helpful* task a re-search brings in relevant documents (raw 0.39 -> 1.00 with the
task-wise state); on the *harmful* one the learned direction floods the top 10 with
irrelevant documents.
"""

from __future__ import annotations

import numpy as np
import pytest

import tttembed.api as tt
from tests.ttt.test_guard import _learn, _ndcg, _task
from tttembed.adapt.state import load_state
from tttembed.ttt.select import METHODS


def test_a_helpful_task_gets_a_method_that_gains_and_the_file_replays_it(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "helpful")
    raw = _ndcg(index, emb, queries, qrels)
    auto = _learn(index, emb, docs, queries, qrels, budget=3, method="auto",
                  validate_budget=3)
    sel = auto.selection
    assert auto.scope == "mixed" and auto.method == "auto"
    assert set(sel["evidence"]["t"]) == set(METHODS) - {"raw", "global"}  # one task
    assert sel["choice"]["t"] != "raw"
    assert sel["shared"]["t"] == "task"  # the re-search gain is seen, so the task part is kept
    chosen = sel["evidence"]["t"]["task"]
    assert chosen["ci_low"] > 0 and chosen["p"] < 0.05
    assert 0 < sel["validation_pairs_paid"] <= sel["validation_cap"]
    assert auto.pairs["validation"] == sel["validation_pairs_paid"]
    adapted = _ndcg(index, emb, queries, qrels, [auto])
    assert adapted > raw + 0.5
    path = auto.save(tmp_path / "auto.npz")
    back = load_state(path)
    assert back.selection == auto.selection and back.method == "auto"
    assert _ndcg(index, emb, queries, qrels, [path]) == pytest.approx(adapted)
    # an unseen question of the task gets the task part (its text has no query key)
    unseen = {"new": "question 0 asked differently"}
    emb.table["question 0 asked differently"] = emb.table["question 0"]
    moved = tt.search(index, unseen, task="t", embedder=emb, states=[path], k=10)
    plain = tt.search(index, unseen, task="t", embedder=emb, k=10)
    assert list(moved.rows[0]) != list(plain.rows[0])


def test_a_harmful_task_keeps_raw_for_its_shared_part(tmp_path):
    """The shared direction floods the top 10 (a measured loss: raw for every query of
    the task), but each rewarded query's own vector, checked on the query it serves,
    gains: the query part is kept for those texts, and only for them."""
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    raw = _ndcg(index, emb, queries, qrels)
    auto = _learn(index, emb, docs, queries, qrels, budget=10, method="auto",
                  validate_budget=10)
    sel = auto.selection
    assert sel["shared"]["t"] == "raw" and sel["query"]["t"] != "none"
    assert sel["evidence"]["t"]["task"]["ci_high"] < 0  # measured as a loss
    assert "t" not in auto.keys and len(auto.keys) == len(queries)  # query keys only
    assert _ndcg(index, emb, queries, qrels, [auto]) > raw


class Coin:
    """A judge with no signal: seeded random rewards."""

    spec = identity = "test:coin"
    mapping = "uniform [0, 1]"

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def score(self, pairs, progress=None):
        return self.rng.random(len(pairs))


def test_a_state_that_keeps_raw_everywhere_is_saved_and_changes_nothing(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    auto = tt.learn(index, queries, scorer=Coin(), scope="task", task="t", embedder=emb,
                    corpus=docs, budget=3, method="auto", validate_budget=0)
    assert auto.selection["choice"] == {"t": "raw"} and not len(auto.keys)
    path = auto.save(tmp_path / "raw.npz")
    back = load_state(path)
    assert back.method == "auto" and not len(back.keys)
    assert _ndcg(index, emb, queries, qrels, [path]) == pytest.approx(
        _ndcg(index, emb, queries, qrels))
