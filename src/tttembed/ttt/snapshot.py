"""A set of learned states in force: how serving and the in-process framework adapters
adapt query vectors (the same lookup and the same function as ``search``: query-wise
states match a request by its normalised text). Immutable once built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

import numpy as np

from tttembed.adapt.apply import apply_states, lookup_keys, state_owners
from tttembed.adapt.state import AdaptState
from tttembed.ttt.queries import QuerySet

#: The path task meaning "global states only".
GLOBAL_ONLY = "_"
#: The internal task of a request served raw (no state applies).
RAW_ONLY = "\x00raw"
#: Query id given to texts no query file knows (ids only name queries in reports).
UNKNOWN_QID = "\x00unknown"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Snapshot:
    """States in force (in ``--state`` order), their files' mtimes, and the exact-text ->
    query-id map per task of the query files served with them (ids for reports; the
    lookup is by text). Never mutated after it is built."""

    generation: int
    states: tuple[AdaptState, ...]
    mtimes: tuple[float, ...]
    qids: Mapping[str, Mapping[str, str]]
    loaded_at: str = field(default_factory=now_iso)
    #: the registry version these states are (None: ``--state`` files, or raw)
    version: str | None = None
    #: the registry's candidate under an interleaving test (``serve --interleave``), its
    #: states as a snapshot of their own (None: no candidate, or not interleaving)
    candidate: Snapshot | None = None

    def qid(self, task: str, text: str) -> str | None:
        return self.qids.get(task, {}).get(text)

    @cached_property
    def known_tasks(self) -> list[str]:
        """The tasks a state (task- or query-wise) or a query file names (once per
        snapshot: it never changes)."""
        return sorted(self.known_task_set)

    @cached_property
    def known_task_set(self) -> frozenset[str]:
        """:attr:`known_tasks` for membership tests."""
        named = {t for st in self.states if st.scope != "global" for t in st._tasks}
        return frozenset(named | set(self.qids))

    def for_task(self, task: str) -> tuple[AdaptState, ...]:
        if task == RAW_ONLY:
            return ()
        if task == GLOBAL_ONLY:
            return tuple(s for s in self.states if s.scope == "global")
        return self.states

    def query_set(self, texts: Sequence[str], task: str) -> QuerySet:
        """The request's queries as a QuerySet: task ``task``, id from the query files
        when the exact text is known there (query-wise states match by text either way)."""
        qids = tuple(self.qid(task, t) or UNKNOWN_QID for t in texts)
        return QuerySet((task,) * len(texts), qids, tuple(texts))

    def adapt(self, x: np.ndarray, texts: Sequence[str], task: str
              ) -> tuple[np.ndarray, dict[str, int]]:
        """``unit(x + alpha v)`` with the most specific state per text (the same function
        ``tttembed.ttt.search.search`` uses), and how many texts each state reached."""
        states = self.for_task(task)
        if not states or not len(texts):
            return x, {}
        # one pass: the texts' keys (digests) once, shared by the counts and the vectors
        keys = lookup_keys(states, texts, (task,) * len(texts))
        owner, _ = state_owners(keys, states, len(texts))
        counts = np.bincount(owner[owner >= 0], minlength=len(states)).tolist()
        hits = {st.label: n for st, n in zip(states, counts) if n}
        return apply_states(x, keys, states), hits

    def describe(self) -> list[dict[str, Any]]:
        return [_describe(st, m) for st, m in zip(self.states, self.mtimes)]


def _describe(st: AdaptState, mtime: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file": st.source, "scope": st.scope, "tasks": st.tasks, "groups": len(st.keys),
        "n": int(st.n_g.sum()), "alpha": [round(float(a), 6) for a in st.alpha[:50]],
        "alpha_mean": round(float(st.alpha.mean()), 6) if len(st.alpha) else 0.0,
        "fingerprint": st.corpus_fingerprint, "identity": st.identity,
        "scorer": st.scorer, "created": st.created,
        "mtime": datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds"),
    }
    if st.scope == "mixed":
        out["applies_to"] = ("requests of its tasks; a text it was learned on (normalised) "
                             "gets its own vector, any other text its task's, if any")
        out["choice"] = dict((st.selection or {}).get("choice", {}))
    if st.scope == "query":
        out["applies_to"] = (f"requests whose text (normalised: NFC, whitespace collapsed) "
                             f"is one of its {len(st.keys)} queries, under their task")
    return out


__all__ = ["GLOBAL_ONLY", "RAW_ONLY", "UNKNOWN_QID", "Snapshot", "now_iso"]
