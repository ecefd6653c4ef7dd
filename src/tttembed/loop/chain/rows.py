"""What the chain learner reads and decides with (:mod:`tttembed.loop.chain.learn`): the
stored chain searches read back (:func:`read_traffic`), the questions held out by text
(:func:`held_out`), the pairs to judge next (:func:`pending`), each question's relevant
passages (:func:`relevant_rows`) and a cycle's record (:class:`ChainCycle`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tttembed.chain.forms import TEXT
from tttembed.chain.traffic import hop_rows, logged_chain
from tttembed.core.errors import DataError
from tttembed.loop.judge import Triple
from tttembed.loop.rows import CHAIN_TASK
from tttembed.loop.store import Store

V = TypeVar("V", int, str)

#: One question text in this many is held out of training (by the digest of its text).
HOLD_OUT = 5
#: The judge's reward (in [0, 1]) from which a passage counts as relevant.
RELEVANT = 0.5


def held_out(question: str) -> bool:
    """Whether ``question`` (its text) is held out of training for the promotion check."""
    return int(hashlib.sha256(question.encode("utf-8")).hexdigest()[:8], 16) % HOLD_OUT == 0


def held_out_questions(searches: Sequence[Served]) -> list[str]:
    """The held-out question texts among ``searches``, each once, in the order asked."""
    return list(dict.fromkeys(s.question for s in searches if held_out(s.question)))


@dataclass(frozen=True)
class Served:
    """One stored chain search: its question, the version that served it, its chain (index
    rows, hop order), its stored list (ids) and the states it was served with (token
    limit and form)."""

    search_id: str
    question: str
    version: str | None
    rows: list[int]
    ids: tuple[str, ...]
    max_seq_length: int
    form: str = TEXT


@dataclass
class ChainTraffic:
    """The stored chain searches that can be read back, and what was skipped, by reason."""

    searches: list[Served] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def read_traffic(store: Store, row_of: dict[str, int]) -> ChainTraffic:
    """Every stored chain search whose states can be rebuilt (module docstring)."""
    out = ChainTraffic()
    for s in store.searches():
        if s.task != CHAIN_TASK:
            continue
        logged = logged_chain(s.kind)
        if logged is None:
            out.skipped["no hop count (logged before it was recorded)"] += 1
            continue
        if len(s.ids) < logged.hops:
            out.skipped["list shorter than its chain"] += 1
            continue
        try:
            rows = hop_rows(s.ids[:logged.hops], row_of, s.search_id)
        except DataError:
            out.skipped["a chain passage left the index"] += 1
            continue
        out.searches.append(Served(s.search_id, s.query, s.version, rows, s.ids,
                                   logged.max_seq_length, logged.form))
    return out


def judged_pairs(store: Store, *, trusted_only: bool = True) -> dict[Triple, float]:
    """The trusted judge rewards of chain questions, by ``(/chain, question, doc)``
    (``trusted_only=False``: those a drift audit distrusted too, which are never judged
    again)."""
    return {(r.task, r.query, r.doc_id): float(r.reward)
            for r in store.rewards(trusted_only=trusted_only) if r.task == CHAIN_TASK}


def labels(store: Store) -> dict[tuple[str, str], float]:
    """People's labels on chain searches, by (question, doc)."""
    return {(f.query, f.doc_id): float(f.label) for f in store.feedback()
            if f.task == CHAIN_TASK}


def pending(searches: Sequence[Served], judged: dict[Triple, float] | set[Triple],
            depth: int) -> list[Triple]:
    """The unjudged pairs of the training questions' stored lists (top ``depth``), each
    once, by their best served rank (then in stored order); held-out questions are not
    judged here."""
    best: dict[Triple, int] = {}
    for s in searches:
        if held_out(s.question):
            continue
        for rank, doc in enumerate(s.ids[:depth]):
            t = (CHAIN_TASK, s.question, doc)
            if t not in judged:
                best[t] = min(best.get(t, rank), rank)
    return sorted(best, key=lambda t: best[t])


def relevant_rows(questions: Sequence[str], searches: Sequence[Served],
                  judged: dict[Triple, float], people: dict[tuple[str, str], float],
                  row_of: dict[str, int]) -> dict[str, list[int]]:
    """Each question's relevant passages (rows), best served rank first: judged relevant
    or labelled relevant by people (a label wins over the judge)."""
    best: dict[tuple[str, str], int] = {}
    for s in searches:
        for rank, doc in enumerate(s.ids):
            key = (s.question, doc)
            best[key] = min(best.get(key, rank), rank)
    grades: dict[tuple[str, str], float] = {(q, d): r for (_, q, d), r in judged.items()}
    grades.update(people)
    found: dict[str, list[str]] = {}
    wanted = set(questions)
    for (q, d), r in grades.items():
        if q in wanted and r >= RELEVANT and d in row_of:
            found.setdefault(q, []).append(d)
    out: dict[str, list[int]] = {}
    for q, docs in found.items():
        docs.sort(key=lambda d: (best.get((q, d), 10**6), d))
        out[q] = [row_of[d] for d in docs]
    return out


def majority(values: Sequence[V], default: V) -> V:
    """The most common of ``values`` (``default`` when none)."""
    return Counter(values).most_common(1)[0][0] if values else default


@dataclass(frozen=True)
class ChainCycle:
    """What a chain learning cycle did: the version it registered (None: nothing), whether
    it was promoted, the reason, the validation pairs it paid, the check's record, and
    whether a step failed (the judge down, a version that cannot be loaded)."""

    version: str | None
    promoted: bool
    reason: str
    validation_pairs: int = 0
    check: dict[str, Any] = field(default_factory=dict)
    failed: bool = False


__all__ = ["HOLD_OUT", "RELEVANT", "ChainCycle", "ChainTraffic", "Served", "held_out",
           "held_out_questions", "judged_pairs", "labels", "majority", "pending",
           "read_traffic", "relevant_rows"]
