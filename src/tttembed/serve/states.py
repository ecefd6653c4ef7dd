"""The loaded states as one immutable snapshot, swapped whole on reload.

A request reads ``registry.current`` once and uses that :class:`Snapshot` to the end, so
it sees the old states or the new ones, never a mix. :meth:`StateRegistry.reload` builds
a complete new snapshot first (every state file read and checked against the index, the
query files re-read); only then is the reference replaced. A file that fails leaves the
current snapshot in place and the error is kept in ``last_reload``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from tttembed.adapt.state import AdaptState, load_state
from tttembed.core.errors import TTTEmbedError
from tttembed.index.store import IndexHandle
from tttembed.serve.config import ServeConfig
from tttembed.ttt.queries import QuerySet, query_sources
from tttembed.ttt.search import adapt_queries, applied_counts, check_states

log = logging.getLogger("tttembed.serve")

#: The path task meaning "global states only".
GLOBAL_ONLY = "_"
#: Query id given to texts no query file knows: no query-wise key can match it.
UNKNOWN_QID = "\x00unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Snapshot:
    """States in force (in ``--state`` order), their files' mtimes, and the exact-text ->
    query-id map per task for query-wise states. Never mutated after it is built."""

    generation: int
    states: tuple[AdaptState, ...]
    mtimes: tuple[float, ...]
    qids: Mapping[str, Mapping[str, str]]
    loaded_at: str = field(default_factory=_now)

    def qid(self, task: str, text: str) -> str | None:
        return self.qids.get(task, {}).get(text)

    def for_task(self, task: str) -> tuple[AdaptState, ...]:
        if task == GLOBAL_ONLY:
            return tuple(s for s in self.states if s.scope == "global")
        return self.states

    def query_set(self, texts: Sequence[str], task: str) -> QuerySet:
        """The request's queries as a QuerySet: task ``task``, id from the query files
        when the exact text is known there (else one no query-wise key matches)."""
        qids = tuple(self.qid(task, t) or UNKNOWN_QID for t in texts)
        return QuerySet((task,) * len(texts), qids, tuple(texts))

    def adapt(self, x: np.ndarray, texts: Sequence[str], task: str
              ) -> tuple[np.ndarray, dict[str, int]]:
        """``unit(x + alpha v)`` with the most specific state per text (the same function
        ``tttembed.api.search`` uses), and how many texts each state reached."""
        states = self.for_task(task)
        if not states or not len(texts):
            return x, {}
        qs = self.query_set(texts, task)
        counts = applied_counts(qs, states)
        hits = {st.label: n for st, n in zip(states, counts) if n}
        return adapt_queries(x, qs, states), hits

    def describe(self) -> list[dict[str, Any]]:
        return [_describe(st, m, self.qids) for st, m in zip(self.states, self.mtimes)]


def _describe(st: AdaptState, mtime: float, qids: Mapping[str, Mapping[str, str]]
              ) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file": st.source, "scope": st.scope, "tasks": st.tasks, "groups": len(st.keys),
        "n": int(st.n_g.sum()), "alpha": [round(float(a), 6) for a in st.alpha[:50]],
        "alpha_mean": round(float(st.alpha.mean()), 6) if len(st.alpha) else 0.0,
        "fingerprint": st.corpus_fingerprint, "identity": st.identity,
        "scorer": st.scorer, "created": st.created,
        "mtime": datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds"),
    }
    if st.scope == "query":
        known = {f"{t}/{q}" for t, m in qids.items() for q in m.values()}
        mapped = sum(1 for k in st.keys if k in known)
        out["mapped_queries"] = mapped
        out["applies_to"] = (
            f"requests whose exact text is one of {mapped} of its {len(st.keys)} queries "
            "(texts from --queries)" if mapped else
            "no request: its queries' texts are unknown (serve with --queries DATA to map "
            "exact query texts to their ids)")
    return out


def _text_map(config: ServeConfig) -> dict[str, dict[str, str]]:
    if not config.queries:
        return {}
    qs = query_sources(list(config.queries), task=list(config.tasks) or None,
                       split=config.split)
    out: dict[str, dict[str, str]] = {}
    for task, qid, text in zip(qs.tasks, qs.qids, qs.texts):
        out.setdefault(task, {}).setdefault(text, qid)
    return out


class StateRegistry:
    """Holds the current :class:`Snapshot`; ``reload()`` swaps it atomically."""

    def __init__(self, config: ServeConfig, index: IndexHandle) -> None:
        self.config = config
        self.index = index
        self._lock = threading.Lock()
        self._current = self._build(1)
        self.last_reload: dict[str, Any] = {"ok": True, "at": self._current.loaded_at,
                                            "generation": 1, "error": None}

    @property
    def current(self) -> Snapshot:
        return self._current

    def _build(self, generation: int) -> Snapshot:
        states, mtimes = [], []
        for path in self.config.states:
            mtime = os.stat(path).st_mtime if os.path.exists(path) else 0.0
            states.append(load_state(path))
            mtimes.append(mtime)
        check_states(states, self.index, allow_foreign=self.config.allow_foreign_state)
        return Snapshot(generation, tuple(states), tuple(mtimes), _text_map(self.config))

    def reload(self) -> tuple[bool, Snapshot, str | None]:
        """Re-read every state and query file; swap only if all of them load.
        Returns (swapped, the snapshot now in force, the error if refused)."""
        with self._lock:
            t0 = time.perf_counter()
            try:
                new = self._build(self._current.generation + 1)
            except (TTTEmbedError, OSError, ValueError) as exc:
                error = str(exc)
                self.last_reload = {"ok": False, "at": _now(), "error": error,
                                    "generation": self._current.generation}
                log.error("reload refused, keeping generation %d: %s",
                          self._current.generation, error)
                return False, self._current, error
            self._current = new
            self.last_reload = {"ok": True, "at": new.loaded_at, "error": None,
                                "generation": new.generation}
            log.info("reloaded %d state file(s): generation %d (%.0f ms)", len(new.states),
                     new.generation, 1000 * (time.perf_counter() - t0))
            return True, new, None
