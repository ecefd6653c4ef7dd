"""The entity state of ``bench_chain.py --json`` (``benchmarks/_chain_options.py``): each
picked passage reduced to its names and years, its own title's words left out, at most n."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _chain_options as options  # noqa: E402

FILM = ("Polish Wedding", "Polish Wedding is a 1998 American comedy film written and "
        "directed by Theresa Connelly. It stars Claire Danes and Gabriel Byrne. The film "
        "was shown at the 1998 Sundance Film Festival.")


def test_a_passage_keeps_its_names_and_years_in_order_without_its_title():
    got = options.entity_words(*FILM, n=16)
    # no "Polish"/"Wedding" (the title's words), no "It"/"The" (stop words), 1998 once
    assert got.split() == ["1998", "American", "Theresa", "Connelly", "Claire", "Danes",
                           "Gabriel", "Byrne", "Sundance", "Film", "Festival"]


def test_at_most_n_words_in_the_passage_s_order():
    assert options.entity_words(*FILM, n=3) == "1998 American Theresa"
    assert options.entity_words("A", "no capitals here at all.", 5) == ""


def test_stop_words_are_left_out_even_capitalised():
    got = options.entity_words("X", "The film. Who directed it? When was He born? Mary Poe.",
                               10).split()
    assert got == ["Mary", "Poe"]


def test_entity_passages_cut_every_row():
    docs = [FILM, ("Theresa Connelly", "Theresa Connelly is an American director born "
                                       "in Philadelphia in 1959.")]
    rows = options.entity_passages(docs, 3)
    assert rows == ["1998 American Theresa", "American Philadelphia 1959"]
