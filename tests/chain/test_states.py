from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tttembed.chain.states import (
    SEP,
    StateTexts,
    TokenBudget,
    format_state,
    gold_states,
    missing_gold,
    n_wrong,
    reached_states,
    share_budget,
)


def wcount(text: str) -> int:
    return len(text.split())


def wcut(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def test_format_without_budget_is_question_then_passages_in_order():
    assert format_state("Q?", ["A a", "B b"]) == "Q? [SEP] A a [SEP] B b"
    assert format_state("Q?", []) == "Q?"
    assert SEP == " [SEP] "


def test_budget_cuts_passages_before_the_question():
    q = "one two three"
    out = format_state(q, ["a " * 20, "b b"], budget=12, count=wcount, cut=wcut)
    # 12 - 3 question - 2 separators = 7 tokens: "b b" keeps 2, the long one gets 5
    assert out == "one two three [SEP] a a a a a [SEP] b b"
    # a question longer than the budget is cut and passages are dropped
    assert format_state("w " * 10, ["p"], budget=4, count=wcount, cut=wcut) == "w w w w"
    # room for fewer passages than the history holds: the latest are dropped
    assert format_state(q, ["x y", "z w"], budget=6, count=wcount, cut=wcut) == \
        "one two three [SEP] x y"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(0, 200))
def test_share_budget_is_feasible_and_fair(lengths, budget):
    alloc = share_budget(lengths, budget)
    assert sum(alloc) <= budget
    assert all(0 <= a <= n for a, n in zip(alloc, lengths))
    if sum(lengths) <= budget:
        assert alloc == lengths
    else:
        assert sum(alloc) == budget
        cut = [a for a, n in zip(alloc, lengths) if a < n]
        assert max(cut) - min(cut) <= 1          # the cut ones share equally


def test_token_budget_with_the_real_tokenizer(minilm):
    budget = TokenBudget.for_model(minilm.model, 32)
    assert budget.budget == 30
    text = "Kestrel Bay is a fishing town on the coast of Norland, far from Velmar."
    head = budget.cut(text, 5)
    assert text.startswith(head) and budget.count(head) == 5
    states = StateTexts(["Where was Ada Marlow born?"], [text, text.upper()], budget=budget)
    s = states.text(0, [0, 1])
    assert s.startswith("Where was Ada Marlow born? [SEP] ")
    assert budget.count(s) <= 30 and s.count("[SEP]") == 2
    # the encoder adds [CLS] and [SEP]: the whole state fits max_seq_length
    ids = minilm.model.tokenizer(s)["input_ids"]
    assert len(ids) <= 32


def test_gold_and_reached_states():
    golds = [[1, 2, 3], [4, 5]]
    assert gold_states(golds) == [(0, ()), (0, (1,)), (0, (1, 2)), (1, ()), (1, (4,))]
    assert missing_gold((2, 9), [1, 2, 3]) == [1, 3]
    assert n_wrong((2, 9, 8), [1, 2, 3]) == 2
    picked = np.array([[1, 9, 2], [4, 5, 7]])
    # q0: (1,), (1, 9) both miss gold; q1: (4,) misses 5, (4, 5) is complete
    assert reached_states(picked, golds) == [(0, (1,)), (0, (1, 9)), (1, (4,))]
    # duplicates removed
    assert reached_states(np.array([[1, 9, 2], [1, 9, 2]]), [[1, 2, 3], [1, 2, 3]]) == \
        [(0, (1,)), (0, (1, 9)), (1, (1,)), (1, (1, 9))]


def test_format_state_needs_both_callables():
    with pytest.raises(ValueError):
        format_state("q", ["p"], budget=3)
