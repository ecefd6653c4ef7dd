"""Pair scoring on Ray: the local executor's rewards, committed to the same ledger."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tttembed.execute import score_pairs
from tttembed.score.base import Item
from tttembed.score.ledger import Ledger

pytestmark = pytest.mark.skipif(importlib.util.find_spec("bm25s") is None,
                                reason="bm25s is not installed")
CORPUS = {f"d{i}": {"title": "", "text": f"cells {'gene ' * (i % 4)}protein {i} trial"}
          for i in range(12)}


def _groups() -> list[tuple[Item, list[Item]]]:
    docs = [Item(k, v["text"]) for k, v in CORPUS.items()]
    return [(Item("q1", "gene protein"), docs[:7]), (Item("q2", "cells trial 3"), docs[4:]),
            (Item("q3", "gene gene"), docs[:3] + docs[:1])]


def test_ray_scoring_matches_local_and_fills_the_ledger(ray_local, tmp_path):
    local = score_pairs("bm25", _groups(), corpus=CORPUS, ledger_path=tmp_path / "l.sqlite")
    stats: dict[str, int] = {}
    got = score_pairs("bm25", _groups(), executor="ray", corpus=CORPUS, batch_size=5,
                      ledger_path=tmp_path / "r.sqlite", stats=stats)
    for a, b in zip(got, local):
        np.testing.assert_array_equal(a, b)
    assert stats == {"committed": 18, "paid_here": 0}
    assert Ledger(tmp_path / "r.sqlite").count() == 18
    again: dict[str, int] = {}
    score_pairs("bm25", _groups(), executor="ray", corpus=CORPUS,
                ledger_path=tmp_path / "r.sqlite", stats=again)
    assert again == {"committed": 0, "paid_here": 0}
