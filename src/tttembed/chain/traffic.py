"""Chain searches read back as training states: the states a served greedy chain search
encoded, rebuilt from what a search returns (its question and its chain's passages in hop
order), text for text as the server built them.

A served greedy chain search of T hops encodes T states: step t's is the question plus the
passages of hops 1..t, in hop order, cut to the server's state token limit
(:class:`~tttembed.chain.states.StateTexts`, the same class the server's
:class:`~tttembed.chain.online.QuestionTexts` hands out). These are the states the served
encoder reached, the on-policy training states of a later learning from traffic; this
module only rebuilds them (no learning here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tttembed.chain.forms import FORMS, TEXT
from tttembed.chain.states import StateTexts, TokenBudget
from tttembed.core.errors import DataError

#: The kind a chain search is logged under: ``chain:HOPS:MAX_SEQ_LENGTH`` (the hops its
#: chain ran, the server's state token limit), what rebuilding its states needs, and
#: ``:FORM`` after them for a state form other than text (``chain:2:128:entities``). A
#: search logged before these were recorded has the kind ``chain`` alone
#: (:func:`logged_chain`: None; it stays readable, its states cannot be rebuilt).
KIND = "chain"


def chain_kind(hops: int, max_seq_length: int, form: str = TEXT) -> str:
    """The kind a chain search of ``hops`` hops at the state token limit is logged under."""
    kind = f"{KIND}:{int(hops)}:{int(max_seq_length)}"
    return kind if form == TEXT else f"{kind}:{form}"


@dataclass(frozen=True)
class Logged:
    """What a logged chain search's kind records: its hops, state token limit and form."""

    hops: int
    max_seq_length: int
    form: str = TEXT


def logged_chain(kind: str) -> Logged | None:
    """The hops, token limit and form a chain search's kind records (None: a search
    logged before they were, or not a chain search)."""
    parts = kind.split(":")
    if len(parts) == 4 and parts[3] in FORMS:
        parts, form = parts[:3], parts[3]
    else:
        form = TEXT
    if len(parts) != 3 or parts[0] != KIND or not all(p.isdigit() for p in parts[1:]):
        return None
    return Logged(int(parts[1]), int(parts[2]), form)


def served_states(question: str, hops: Sequence[int], passages: Sequence[str],
                  budget: TokenBudget | None) -> list[str]:
    """The state texts a served greedy chain search encoded for ``question`` whose chain
    is ``hops`` (index rows, hop order), with the server's token ``budget``."""
    texts = StateTexts([question], passages, budget=budget)
    rows = [int(r) for r in hops]
    return [texts.text(0, rows[:t]) for t in range(len(rows))]


def hop_rows(hop_ids: Sequence[str], row_of: Mapping[str, int], search_id: str) -> list[int]:
    """The index rows of a chain's passages (by document id); a passage that left the
    index since the search is a DataError naming the search, the document and the fix."""
    missing = [d for d in hop_ids if d not in row_of]
    if missing:
        raise DataError(f"chain search {search_id}: passage {missing[0]!r} is no longer in "
                        "the index, so its states cannot be rebuilt", fix="skip this search "
                        "(its clicks and labels stay stored), or serve the index it ran on")
    return [int(row_of[d]) for d in hop_ids]


__all__ = ["KIND", "Logged", "chain_kind", "hop_rows", "logged_chain", "served_states"]
