"""The shared set: the rewarded texts a learning cycle learns its shared part from, a set
larger than the window, bounded too.

The rule (fixed before the run that measures it): a cycle learns its candidate's query
part from the window (:mod:`tttembed.loop.window`, at most
:data:`~tttembed.loop.window.WINDOW` texts, as before) and its shared part (the
task-wise or global vector: what a question nobody asked gets) from the shared set: the
window's texts and the other rewarded texts whose rewards changed most recently, at most
:data:`SHARED_TEXTS` in all (:meth:`~tttembed.loop.window.RecentTexts.latest`), by method
auto restricted to the shared scopes the loop allows (``global``, ``task``), its guard
paid within what the window's learning left of the cycle's validation cap. The candidate
is the window's query part (and the served version's query vectors of the texts outside
the window) under the shared set's shared part (:func:`with_shared`); the new questions'
check runs held out by text on the shared set. The window's query part was chosen against
the shared part learned on the window: a query part serves its own text only, so the
swap changes no asked text's list.

Why: a task-wise vector's gain for questions nobody asked grows with the questions it is
learned from. On SciFact's train split (300 questions held out, the ``qrels`` judge, 10
pairs a question: ``benchmarks/shared_part_size.py``) one learned from 100 questions gave
them -0.0057 to +0.0055 nDCG@10, one learned from 509 +0.0162 (p 0.020); learned from
the 100-text window, a live hour's held-back questions went 0.6451 -> 0.6486 (p 0.25).
The cost stays small because the expensive half of method auto, the query part, stays
on the window: a shared-only method auto on 802 rewarded texts took 1.8 s and its
out-of-fold re-learning 0.2 s on one core (SciFact, ``benchmarks/bench_cycle_growth.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tttembed.adapt.state import AdaptState
from tttembed.loop.populations import is_query_key
from tttembed.ttt.selection import SHARED, Selection

#: Rewarded texts a cycle learns its shared part from (the window's and the most
#: recently changed others).
SHARED_TEXTS = 2_000


def shared_only(scopes: Sequence[str]) -> tuple[str, ...]:
    """The shared scopes among ``scopes`` (what the shared set is learned with)."""
    return tuple(s for s in scopes if s in SHARED)


def with_shared(candidate: AdaptState | None, shared: AdaptState | None, texts: int
                ) -> AdaptState | None:
    """``candidate``'s query part under ``shared``'s shared part, one mixed state: the
    shared rows and their choice, alphas and evidence from ``shared`` (learned from
    ``texts`` rewarded texts), the rest from ``candidate``. ``candidate`` unchanged when
    ``shared`` is None, of another dimension or either holds low-rank maps or neighbour
    rows; ``shared`` when there is no candidate."""
    if shared is None or candidate is None:
        return candidate if shared is None else shared
    if shared.dim != candidate.dim or any(
            len(s.parts.adapter_rows) or len(s.parts.neighbour_rows) for s in (candidate, shared)):
        return candidate
    mine = [g for g, k in enumerate(candidate.keys) if is_query_key(k)]
    theirs = [g for g, k in enumerate(shared.keys) if not is_query_key(k)]
    return replace(candidate, scope="mixed", query_ids=(),
                   keys=tuple(shared.keys[g] for g in theirs)
                   + tuple(candidate.keys[g] for g in mine),
                   vectors=np.concatenate([shared.vectors[theirs], candidate.vectors[mine]]),
                   alpha=np.concatenate([shared.alpha[theirs], candidate.alpha[mine]]),
                   n_g=np.concatenate([shared.n_g[theirs], candidate.n_g[mine]]),
                   selection=merged_selection(candidate.selection or {},
                                              shared.selection or {}, texts))


def merged_selection(mine: Mapping[str, Any], theirs: Mapping[str, Any], texts: int
                     ) -> dict[str, Any]:
    """A selection record with the shared choices, alphas, evidence and estimators of
    ``theirs`` (learned from ``texts`` texts) and the query part's of ``mine``; the
    validation pairs of both."""
    if not mine or not theirs:
        return dict(mine or theirs)
    tasks = list(dict.fromkeys([*mine.get("shared", {}), *theirs.get("shared", {})]))
    ev_m, ev_t = mine.get("evidence", {}), theirs.get("evidence", {})
    both = ("validation_pairs_needed", "validation_pairs_paid", "validation_cap")
    merged = {
        **mine, **{k: int(mine.get(k, 0)) + int(theirs.get(k, 0)) for k in both},
        "shared": {t: theirs.get("shared", {}).get(t, "raw") for t in tasks},
        "query": {t: mine.get("query", {}).get(t, "none") for t in tasks},
        "shared_alpha": dict(theirs.get("shared_alpha", {})),
        "evidence": {t: {**{m: e for m, e in ev_m.get(t, {}).items() if m not in SHARED},
                         **{m: e for m, e in ev_t.get(t, {}).items() if m in SHARED}}
                     for t in tasks},
        "estimators": {**{m: e for m, e in mine.get("estimators", {}).items()
                          if m not in SHARED}, **theirs.get("estimators", {})},
        "notes": [f"shared part: learned from the shared set ({texts} rewarded texts), "
                  "the query part from the window", *theirs.get("notes", ()),
                  *(n for n in mine.get("notes", ()) if n.split(":")[0] not in SHARED)]}
    return Selection.from_dict(merged).as_dict()


__all__ = ["SHARED_TEXTS", "merged_selection", "shared_only", "with_shared"]
