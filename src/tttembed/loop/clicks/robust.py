"""What click rewards are computed from (METHOD.md Part 4, "Robustness"): one record per
(search, doc, session), at most ``cap`` clicks per session and query (later searches of
that session and query are left out), and no weight for a session whose clicks do not
depend on the document.

A session is document-blind when, rank by rank, the documents it clicked are no better
by the other sessions' debiased click rate than those it skipped at the same rank: the
stratified difference's z-score is below :data:`BOT_Z` (a bot that always clicks rank 1,
or one rank at random, scores about 0; a user whose clicks follow relevance scores far
above). Sessions with fewer than :data:`MIN_SESSION_CLICKS` clicks are too short to tell
and are kept. Records without a session ("") count as one session per search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.loop.clicks.propensity import Propensities
from tttembed.loop.rows import Shown

#: clicks per session and query kept (later searches of the pair are left out)
CAP = 10
#: clicks a session needs before it can be judged document-blind
MIN_SESSION_CLICKS = 20
#: a session whose click-vs-skip relevance z-score is below this gets no weight
BOT_Z = 3.0


@dataclass(frozen=True)
class Cleaned:
    """``shown`` after deduplication, the cap and the dropped sessions; ``scores`` the
    document-dependence z-score of each session long enough to test."""

    shown: tuple[Shown, ...]
    dropped_sessions: tuple[str, ...]
    scores: dict[str, float]


def session_of(s: Shown) -> str:
    """The session a record counts under ("" becomes one per search)."""
    return s.session or f"\x1f{s.search_id}"


def dedupe(shown: Sequence[Shown]) -> list[Shown]:
    """One record per (search, doc, session), clicked when any copy is."""
    out: dict[tuple[str, str, str], Shown] = {}
    for s in shown:
        key = (s.search_id, s.doc_id, s.session)
        if key not in out or (s.clicked and not out[key].clicked):
            out[key] = s
    return list(out.values())


def capped(shown: Sequence[Shown], cap: int) -> list[Shown]:
    """The searches of each (session, task, query), oldest first, while their clicks
    together stay within ``cap``; the rest left out."""
    searches: dict[str, list[Shown]] = {}
    for s in shown:
        searches.setdefault(s.search_id, []).append(s)
    order = sorted(searches, key=lambda sid: min(x.created for x in searches[sid]))
    used: dict[tuple[str, str, str], int] = {}
    out: list[Shown] = []
    for sid in order:
        first = searches[sid][0]
        key = (session_of(first), first.task, first.query)
        n = used.get(key, 0) + sum(x.clicked for x in searches[sid])
        if n > cap:
            used[key] = cap + 1  # nothing later of this session and query either
            continue
        used[key] = n
        out.extend(searches[sid])
    return out


def blindness(shown: Sequence[Shown], prop: Propensities,
              skip: frozenset[str] = frozenset()) -> dict[str, float]:
    """The document-dependence z-score of each session with enough clicks (the other
    sessions', minus ``skip``, debiased click rate of each pair as the relevance), over
    arrays: each sum runs in the records' order, as one record at a time would."""
    n = len(shown)
    sessions: dict[str, int] = {}
    pairs: dict[tuple[str, str, str], int] = {}
    sess = np.fromiter((sessions.setdefault(session_of(s), len(sessions)) for s in shown),
                       np.int64, n)
    clicked = np.fromiter((1.0 if s.clicked else 0.0 for s in shown), np.float64, n)
    live = np.bincount(sess, clicked, minlength=len(sessions)) >= MIN_SESSION_CLICKS
    if not n or not live.any():
        return {}
    pair = np.fromiter((pairs.setdefault((s.task, s.query, s.doc_id), len(pairs))
                        for s in shown), np.int64, n)
    rank = np.fromiter((s.rank for s in shown), np.int64, n)
    table = np.maximum(np.asarray(prop.theta, np.float64), 0.1)
    e = table[np.clip(rank, 1, len(table)) - 1]
    out = np.array([name in skip for name in sessions], dtype=bool)[sess]
    pair_c = np.bincount(pair, np.where(out, 0.0, clicked), minlength=len(pairs))
    pair_e = np.bincount(pair, np.where(out, 0.0, e), minlength=len(pairs))
    mean = sum(pair_c.tolist()) / max(sum(pair_e.tolist()), 1e-12)  # a skipped pair adds 0
    _, own = np.unique(sess * len(pairs) + pair, return_inverse=True)
    mc = np.where(out, 0.0, np.bincount(own, clicked)[own])
    me = np.where(out, 0.0, np.bincount(own, e)[own])
    others = (pair_c[pair] - mc + mean) / (pair_e[pair] - me + 1.0)
    names, order = list(sessions), np.argsort(sess, kind="stable")  # each in record order
    sizes = np.bincount(sess, minlength=len(sessions))
    ends = np.cumsum(sizes)
    rows = np.column_stack([rank, others, clicked])[order]
    return {names[i]: _z(rows[ends[i] - sizes[i]:ends[i]]) for i in np.flatnonzero(live)}


def _z(r: np.ndarray) -> float:
    """Stratified (by rank) difference of relevance between clicked and skipped, as z."""
    num, info = 0.0, 0.0
    for rank in np.unique(r[:, 0]):
        at = r[r[:, 0] == rank]
        hit, miss = at[at[:, 2] > 0, 1], at[at[:, 2] == 0, 1]
        if not len(hit) or not len(miss):
            continue
        var = max(float(np.var(at[:, 1])), 1e-9) * (1 / len(hit) + 1 / len(miss))
        num += (float(hit.mean()) - float(miss.mean())) / var
        info += 1.0 / var
    return num / np.sqrt(info) if info > 0 else 0.0


def clean_clicks(shown: Sequence[Shown], prop: Propensities, *, cap: int = CAP) -> Cleaned:
    """Deduplicated, capped, and without document-blind sessions (two passes: the second
    scores every session against the sessions the first kept)."""
    kept = capped(dedupe(shown), cap)
    scores = blindness(kept, prop)
    dropped = frozenset(s for s, z in scores.items() if z < BOT_Z)
    scores = blindness(kept, prop, dropped)
    dropped = frozenset(s for s, z in scores.items() if z < BOT_Z)
    return Cleaned(tuple(s for s in kept if session_of(s) not in dropped),
                   tuple(sorted(dropped)), scores)
