"""Chain search for questions that arrive a batch at a time (``tttembed serve --chain``):
the greedy or beam search, state texts and final ranking of ``tttembed chain search``, for
any questions over a fixed passage index.

``chain_run`` is the one place both call: ``tttembed chain search`` with every question of
a split, the server with the questions of the requests it merged. The ranking of a
question does not depend on the other questions of its batch (each step searches every
state for ``depth`` plus its history's length, and the final ranking is per question), so
a served answer equals the offline one for the same question, index and encoder.
"""

from __future__ import annotations

from collections.abc import Sequence

from tttembed.chain.search import ChainRun, Encode, beam_chain, greedy_chain
from tttembed.chain.states import StateTexts, TokenBudget
from tttembed.core.progress import Advance
from tttembed.types import Search

#: Candidates each step looks at beyond the history (``tttembed chain search``'s depth).
DEPTH = 100
#: Chain steps T of an encoder that records none (the untrained model): two hops, the
#: length of most multi-hop questions (HotpotQA's, most of 2Wiki's).
DEFAULT_STEPS = 2
#: Texts whose token offsets a :class:`QuestionTexts` keeps before it starts again.
MAX_OFFSETS = 200_000


class QuestionTexts:
    """State texts of new questions over the index's passages (rows): each batch gets a
    :class:`StateTexts` of its own questions, and every batch shares the token offsets
    already computed (a passage is tokenised once, not once per request). Used from one
    thread (the server's chain thread)."""

    def __init__(self, passages: Sequence[str], budget: TokenBudget | None,
                 max_offsets: int = MAX_OFFSETS) -> None:
        self.passages = passages
        self.budget = budget
        self.max_offsets = int(max_offsets)
        self._offsets: dict[str, list[int]] = {}

    def of(self, questions: Sequence[str]) -> StateTexts:
        if len(self._offsets) > self.max_offsets:
            self._offsets.clear()
        return StateTexts(questions, self.passages, budget=self.budget,
                          offsets=self._offsets)


def chain_run(n_questions: int, texts: StateTexts, encode: Encode, search: Search, *,
              steps: int, beam: int = 1, depth: int = DEPTH, keep: int = DEPTH,
              progress: Advance | None = None) -> ChainRun:
    """Greedy (``beam`` 1) or beam chain search of ``n_questions`` questions, ``steps``
    steps, each final ranking cut to ``keep`` rows (at least the chain)."""
    if beam > 1:
        return beam_chain(n_questions, texts, encode, search, steps, width=beam,
                          depth=depth, keep=keep, progress=progress)
    return greedy_chain(n_questions, texts, encode, search, steps, depth=depth, keep=keep,
                        progress=progress)


__all__ = ["DEFAULT_STEPS", "DEPTH", "QuestionTexts", "chain_run"]
