"""The one owner of the intervention strings: what serve writes, the click store reads back."""

from __future__ import annotations

import pytest

from tttembed.loop.clicks.intervention import INTERLEAVE, RANDPAIR, Intervention


@pytest.mark.parametrize("done, text", [
    (Intervention.randpair(3), "randpair:3"),
    (Intervention.interleave("v2", "ABBA"), "interleave:v2:ABBA"),
    (Intervention.interleave("", "AB"), "interleave::AB"),
])
def test_an_intervention_is_written_and_read_back_as_the_search_log_stores_it(done, text):
    assert str(done) == text
    assert Intervention.parse(text) == done


def test_only_the_two_forms_parse():
    for text in ["", "randpair", "randpair:x", "randpair:1:2", "interleave:v2",
                 "interleave:a:b:c", "swap:1"]:
        assert Intervention.parse(text) is None, text
    assert Intervention.parse("randpair:7") == Intervention(RANDPAIR, rank=7)
    assert Intervention.parse("interleave:v9:BA") == Intervention(INTERLEAVE, candidate="v9",
                                                                  teams="BA")


def test_the_served_interleaving_logs_what_the_store_parses():
    from tttembed.serve.explore import interleave_item

    item = {"ids": ["a", "b", "c"], "scores": [3.0, 2.0, 1.0]}
    other = {"ids": ["c", "d", "a"], "scores": [9.0, 8.0, 7.0]}
    mark = interleave_item("s-1", item, other, 1.0, "v2")
    done = Intervention.parse(mark)
    assert done is not None and done.kind == INTERLEAVE and done.candidate == "v2"
    assert len(done.teams) == len(item["ids"]) == 3 and str(done) == mark
