"""Learning chain versions from traffic (``tttembed loop --chain CHAIN_REGISTRY``): the
stored chain searches (``POST /v1/chain/search``, task ``/chain``) read back as the
states the served encoder reached, their lists judged through the loop's judge, ledger and
budget, a LoRA candidate trained on them warm-started from the served version, checked on
questions held out by text (:mod:`tttembed.loop.chain.promote`) and registered, promoted
only when that check says better.

* **States**: a search's kind records its hops and the server's state token limit
  (:func:`tttembed.chain.traffic.logged_chain`); its chain is the first ``hops`` passages
  of its stored list, and its states are rebuilt text for text as served
  (:func:`tttembed.chain.traffic.served_states`). A search logged before the hops were
  recorded, whose list is shorter than its chain, or whose chain passage left the index is
  skipped and counted, never a failure.
* **Held out by text**: one question text in :data:`HOLD_OUT` (by its digest) is never
  judged for training nor trained on: the promotion check judges the candidate on them.
* **Positives**: the passages of a question the judge grades relevant (reward at least
  :data:`RELEVANT`) or people labelled relevant (``/v1/feedback`` on the chain search; a
  label wins over the judge), ordered by their best rank in the question's served lists;
  a state's positive is the earliest one it does not hold yet. Negatives: the write-up's
  rule (:mod:`tttembed.chain.traffic_train`).
* **Paying**: :class:`~tttembed.loop.judge.BackgroundJudge`, the state loop's: the same
  ledger (a pair it holds costs nothing), the store's spend account and budget, reserved
  before asking; the pairs are ``(/chain, question, passage)``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tttembed.chain.forms import DEFAULT_MAX_SEQ_LENGTH, TEXT
from tttembed.core.errors import TTTEmbedError
from tttembed.loop.chain.rows import (
    ChainCycle,
    ChainTraffic,
    held_out,
    judged_pairs,
    labels,
    majority,
    pending,
    read_traffic,
    relevant_rows,
)
from tttembed.loop.judge import BackgroundJudge, Triple
from tttembed.loop.store import Store


class ChainLearner:
    """Judges chain traffic and runs chain learning cycles over one index, judge, store
    and chain registry (module docstring)."""

    def __init__(self, config: Any, registry: Any, store: Store, index: Any,
                 judge: BackgroundJudge, frozen: Callable[[list[str]], Any],
                 passages: list[str], work: Path | None = None,
                 titles: Sequence[str] = ()) -> None:
        self.config, self.registry, self.store = config, registry, store
        self.index, self.judge, self.frozen, self.passages = index, judge, frozen, passages
        self.titles = titles  # each passage's title: what the entity state leaves out
        self.row_of = {d: i for i, d in enumerate(index.doc_ids)}
        self.work = Path(work) if work is not None else Path(tempfile.mkdtemp(
            prefix="tttembed-chain-"))
        self.last: ChainTraffic = ChainTraffic()

    def traffic(self) -> ChainTraffic:
        self.last = read_traffic(self.store, self.row_of)
        return self.last

    def pending(self) -> list[Triple]:
        """The pairs to judge next (module docstring): a pair judged before is never
        asked again, a distrusted one neither."""
        return pending(self.traffic().searches,
                       judged_pairs(self.store, trusted_only=False),
                       self.config.judge_depth)

    def cycle(self, audit: Callable[[], str] = lambda: "") -> ChainCycle:
        """Train a candidate on the training questions' served states, check it on the
        held-out ones, register it (promoted only when the check says better). Once
        there is something to learn and the served version loads, ``audit`` (the drift
        audit) is asked first: when it gives a reason (promotions frozen), nothing is
        learned."""
        from tttembed.loop.chain.promote import served_checkpoint, train_and_check

        traffic = self.traffic()
        train = [s for s in traffic.searches if not held_out(s.question)]
        limit = majority([s.max_seq_length for s in train], DEFAULT_MAX_SEQ_LENGTH)
        train = [s for s in train if s.max_seq_length == limit]
        # the form the served version answered with (its states are compared as served);
        # the candidate learns text states of the chains it reached (what it records)
        form = majority([s.form for s in train], TEXT)
        questions = list(dict.fromkeys(s.question for s in train))
        relevant = relevant_rows(questions, train, judged_pairs(self.store),
                                 labels(self.store), self.row_of)
        if not relevant:
            return ChainCycle(None, False, "no chain question judged relevant yet")
        try:
            served_checkpoint(self.registry)  # a version that cannot load: nothing paid
            why = audit()
            if why:
                return ChainCycle(None, False, why)
            return train_and_check(self, train, relevant, limit, form)
        except TTTEmbedError as exc:
            # said once, by the loop (``chain cycle: ...``)
            return ChainCycle(None, False, " ".join(str(exc).split()), failed=True)


__all__ = ["ChainLearner"]
