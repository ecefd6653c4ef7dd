"""The pure core of the export: judged pairs become triplets by the threshold, each
query's judged negatives taken in turn, a positive without a negative counted and left
out, the same rows whatever the input order; rows read back as written."""

from __future__ import annotations

import json
import random
import re

import pytest

from tttembed.core.errors import DataError
from tttembed.tune.pairs import (
    PAIR_KEYS,
    JudgedPair,
    Triplet,
    by_query,
    check_threshold,
    pair_from_row,
    triplet_from_row,
    triplets,
)


def jp(qid: str, did: str, reward: float, source: str = "judge",
       trusted: bool | None = None) -> JudgedPair:
    return JudgedPair(qid, f"query {qid}", did, f"text of {did}", reward, source, trusted)


def test_the_threshold_splits_positives_from_negatives() -> None:
    pairs = [jp("q1", "a", 0.5), jp("q1", "b", 0.49), jp("q1", "c", 0.7)]
    got = triplets(pairs)  # 0.5: reward >= 0.5 is a positive
    assert got.threshold == 0.5 and got.positives == 2 and got.without_negative == 0
    assert got.rows == (Triplet("query q1", "text of a", "text of b"),
                        Triplet("query q1", "text of c", "text of b"))
    higher = triplets(pairs, threshold=0.6)  # now a (0.5) is a negative too
    assert higher.positives == 1
    assert higher.rows == (Triplet("query q1", "text of c", "text of a"),)
    assert triplets(pairs, threshold=1.0).positives == 0


def test_negatives_are_taken_in_turn_before_one_is_used_twice() -> None:
    pos = [jp("q", f"p{i}", 0.9) for i in range(5)]
    neg = [jp("q", "n1", 0.1), jp("q", "n2", 0.0)]
    got = triplets(pos + neg)
    assert [t.positive for t in got.rows] == [f"text of p{i}" for i in range(5)]
    assert [t.negative for t in got.rows] == ["text of n1", "text of n2", "text of n1",
                                              "text of n2", "text of n1"]
    many = triplets([jp("q", "p", 1.0), *(jp("q", f"n{i}", 0.0) for i in range(4))])
    assert [t.negative for t in many.rows] == ["text of n0"]  # one row per positive


def test_a_positive_without_a_judged_negative_is_counted_and_left_out() -> None:
    pairs = [jp("q1", "a", 1.0), jp("q1", "b", 0.8),   # q1: positives only
             jp("q2", "c", 1.0), jp("q2", "d", 0.2),   # q2: one of each
             jp("q3", "e", 0.1)]                        # q3: a negative only
    got = triplets(pairs)
    assert got.positives == 3 and got.without_negative == 2
    assert got.rows == (Triplet("query q2", "text of c", "text of d"),)


def test_a_document_positive_by_one_source_is_no_negative_of_its_query() -> None:
    pairs = [jp("q", "a", 1.0, "label", True), jp("q", "a", 0.1, "judge"),
             jp("q", "b", 0.9, "judge")]
    got = triplets(pairs)
    assert got.positives == 2 and got.without_negative == 2 and got.rows == ()
    # a document judged twice as a positive is one positive
    twice = triplets([jp("q", "a", 1.0, "label"), jp("q", "a", 0.8, "judge"),
                      jp("q", "z", 0.0)])
    assert twice.positives == 1 and len(twice.rows) == 1


def test_a_positive_text_under_another_id_is_no_negative() -> None:
    same = JudgedPair("q", "query q", "copy", "text of a", 0.0, "judge")
    got = triplets([jp("q", "a", 1.0), same, jp("q", "b", 0.2)])
    assert got.rows == (Triplet("query q", "text of a", "text of b"),)
    assert triplets([jp("q", "a", 1.0), same]).without_negative == 1


def test_the_rows_do_not_depend_on_the_input_order() -> None:
    rng = random.Random(7)
    pairs = [jp(f"q{q}", f"d{d}", round(rng.random(), 3)) for q in range(6) for d in range(7)]
    first = triplets(pairs)
    for _ in range(5):
        shuffled = pairs[:]
        rng.shuffle(shuffled)
        assert triplets(shuffled) == first
    assert len(first.rows) > 0
    anchors = [t.anchor for t in first.rows]
    assert anchors == sorted(anchors)  # queries by id
    assert list(by_query(reversed(pairs))) == [f"q{q}" for q in range(6)]


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.01, float("nan"), float("inf")])
def test_a_threshold_outside_0_1_is_refused(bad: float) -> None:
    with pytest.raises(DataError, match=re.escape("reward threshold must be in (0, 1]")):
        triplets([jp("q", "a", 1.0)], threshold=bad)
    with pytest.raises(DataError, match="rewards are on"):
        check_threshold(bad)


def test_rows_read_back_as_written() -> None:
    pair = jp("q", "a", 0.25, "bm25", None)
    row = json.loads(json.dumps(pair.row()))
    assert tuple(row) == PAIR_KEYS
    assert pair_from_row(row) == pair
    assert pair_from_row({**row, "trusted": 1}).trusted is True
    with pytest.raises(DataError, match=r"a pair row lacks doc_text, reward"):
        pair_from_row({k: v for k, v in row.items() if k not in ("doc_text", "reward")})
    t = Triplet("a", "p", "n")
    assert t.row() == {"anchor": "a", "positive": "p", "negative": "n"}
    assert triplet_from_row(t.row()) == t
    with pytest.raises(DataError, match="lacks the text of negative"):
        triplet_from_row({"anchor": "a", "positive": "p", "negative": None})
