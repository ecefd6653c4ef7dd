"""The label-free judge check says what it measured, in the sign's own words, and what it
cannot see: an inverted judge on a weak base ranking agrees with that ranking and passes."""

from __future__ import annotations

import logging

import pytest

from tttembed.core.notes import NOTES
from tttembed.ttt.sanity import check_judge


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _line(rewards, lists) -> str:
    """The check's note (one line, ``judge check: ...``)."""
    caught = _Lines()
    logging.getLogger(NOTES).addHandler(caught)
    try:
        check_judge(rewards, lists)
    finally:
        logging.getLogger(NOTES).removeHandler(caught)
    assert caught.lines[-1].startswith("judge check: ") and "\n" not in caught.lines[-1]
    return caught.lines[-1]


def test_the_check_sentence_agrees_with_its_sign():
    """A positive mean Spearman (rewards higher at the top of the base lists) is said as
    such; the old line said "rewards do not fall with the base ranking's rank" at +0.296."""
    lists = {f"q{i}": ["a", "b", "c", "d"] for i in range(8)}
    falling = {q: {"a": 1.0, "b": 0.6, "c": 0.3, "d": 0.0} for q in lists}
    line = _line(falling, lists)
    assert "mean Spearman +1.000" in line
    assert "higher near the top of the base lists" in line
    assert "do not fall" not in line
    flat = {q: ({"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0} if i % 2 else
                {"a": 0.0, "b": 1.0, "c": 1.0, "d": 0.0}) for i, q in enumerate(lists)}
    assert "no trend along the base lists" in _line(flat, lists)


def test_an_inverted_judge_on_a_weak_base_ranking_passes_and_the_line_says_so():
    """Qrels inverted (relevant documents rewarded 0, the others 1) on a base ranking that
    puts the relevant documents last: the rewards fall down the lists (Spearman +1.000), so
    the check passes; its line states its power: the queries and pairs it used, the mean it
    can refuse at this size, and that a judge agreeing with the base ranking passes however
    wrong (only --audit compares with people)."""
    lists = {f"q{i}": ["n1", "n2", "n3", "rel"] for i in range(12)}
    inverted = {q: {"n1": 1.0, "n2": 1.0, "n3": 1.0, "rel": 0.0} for q in lists}
    line = _line(inverted, lists)
    assert "mean Spearman +0.775" in line and "12 queries (48 pairs)" in line
    assert "cannot see a wrong judge that agrees with the base ranking" in line
    assert "--audit qrels:PATH" in line
    assert "refuses a mean below" in line


def test_too_few_queries_says_nothing_was_checked():
    lists = {"q0": ["a", "b"]}
    line = _line({"q0": {"a": 0.0, "b": 1.0}}, lists)
    assert "not checked" in line and "--audit qrels:PATH" in line
    with pytest.raises(AssertionError):
        assert "higher near the top" in line


def test_a_script_sees_the_check_as_one_plain_line():
    """As the README's Python example shows it: one plain line on stderr, no source path,
    no ``JudgeCheck:`` category (before: ``.../ttt/learn.py:110: JudgeCheck: reward vs
    base rank ...`` and the source line under it)."""
    import subprocess
    import sys

    script = ("from tttembed.ttt.sanity import check_judge\n"
              "lists = {f'q{i}': ['a', 'b', 'c', 'd'] for i in range(8)}\n"
              "check_judge({q: {'a': 1.0, 'b': 0.6, 'c': 0.3, 'd': 0.0} for q in lists}, "
              "lists)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("judge check: reward vs base rank"), lines
    assert "JudgeCheck" not in r.stderr and ".py:" not in r.stderr
